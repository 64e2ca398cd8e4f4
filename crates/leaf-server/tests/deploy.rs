//! The deployment files (`deploy/k8s/*.yaml`, `deploy/compose.yaml`) held to the server: their
//! configuration loads without a warning, their ports are the server's, their probe paths
//! answer 200 on a real server, their volume is where the server keeps its state, and the
//! Kubernetes objects select each other. No cluster is needed.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{Server, free_port};
use serde_yaml_ng::Value;

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

/// Every document of `deploy/{file}`.
fn docs(file: &str) -> Vec<Value> {
    let path = deploy_dir().join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| {
            let mut v: Value =
                serde::Deserialize::deserialize(d).unwrap_or_else(|e| panic!("{file}: {e}"));
            // Compose's `<<: *anchor` merge keys, as Compose reads them.
            v.apply_merge().unwrap_or_else(|e| panic!("{file}: {e}"));
            v
        })
        .collect()
}

fn at<'a>(v: &'a Value, path: &str) -> &'a Value {
    path.split('.')
        .fold(v, |v, key| match key.parse::<usize>() {
            Ok(i) => &v[i],
            Err(_) => &v[key],
        })
}

fn str_at<'a>(v: &'a Value, path: &str) -> &'a str {
    at(v, path)
        .as_str()
        .unwrap_or_else(|| panic!("{path}: not a string: {:?}", at(v, path)))
}

fn u64_at(v: &Value, path: &str) -> u64 {
    at(v, path)
        .as_u64()
        .unwrap_or_else(|| panic!("{path}: not a number: {:?}", at(v, path)))
}

fn one(file: &str, kind: &str) -> Value {
    docs(file)
        .into_iter()
        .find(|d| d["kind"].as_str() == Some(kind))
        .unwrap_or_else(|| panic!("{file} has no {kind}"))
}

/// Loads `toml` (if any) with `env` as the server would, failing on any warning but those
/// about the variables `uncompiled` (whose backend this build leaves out).
fn load(
    toml: Option<&str>,
    env: &[(String, String)],
    uncompiled: &[&str],
) -> leaf_server::config::Loaded {
    let dir = tempfile::tempdir().unwrap();
    let file = toml.map(|t| {
        let f = dir.path().join("leaf.toml");
        std::fs::write(&f, t).unwrap();
        f
    });
    let loaded = leaf_server::config::load(file.as_deref(), env.iter().cloned())
        .unwrap_or_else(|e| panic!("the configuration does not load: {e}"));
    let warnings: Vec<&String> = loaded
        .warnings
        .iter()
        .filter(|w| {
            !uncompiled
                .iter()
                .any(|v| w.contains(&format!("variable {v}:")))
        })
        .collect();
    assert!(warnings.is_empty(), "{warnings:?}");
    loaded
}

/// The probe paths answer 200 on a real server (the embedded default).
fn assert_paths_answer(paths: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Server::spawn(dir.path(), free_port(), 0, &[] as &[(&str, &str)]);
    s.wait_for("/readyz", Duration::from_secs(30));
    for p in paths {
        assert_eq!(s.get(p).status, 200, "{p}");
    }
}

#[test]
fn the_statefulset_configmap_service_and_pdb_fit_the_server_and_each_other() {
    let sts = one("k8s/statefulset.yaml", "StatefulSet");
    let cm = one("k8s/configmap.yaml", "ConfigMap");
    let spec = at(&sts, "spec.template.spec");
    let container = at(spec, "containers.0");
    assert_eq!(u64_at(&sts, "spec.replicas"), 3);

    // The configuration: the ConfigMap's leaf.toml where --config says, the Secret's URL as a
    // LEAF_ variable the server knows.
    let args: Vec<&str> = at(container, "args")
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(args[0], "--config");
    let config_path = Path::new(args[1]);
    let config_mount = at(container, "volumeMounts")
        .as_sequence()
        .unwrap()
        .iter()
        .find(|m| config_path.starts_with(str_at(m, "mountPath")))
        .expect("--config is on a mounted volume");
    let volume = at(spec, "volumes")
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| v["name"] == config_mount["name"])
        .expect("the config volume");
    assert_eq!(
        str_at(volume, "configMap.name"),
        str_at(&cm, "metadata.name")
    );
    let file_name = config_path.file_name().unwrap().to_str().unwrap();
    let toml = cm["data"][file_name]
        .as_str()
        .expect("the ConfigMap holds --config's file");
    let env: Vec<(String, String)> = at(container, "env")
        .as_sequence()
        .unwrap()
        .iter()
        .map(|e| {
            let name = str_at(e, "name").to_owned();
            assert!(name.starts_with("LEAF_"), "{name}");
            (name, "mysql://leaf:secret@mysql:3306/leaf".to_owned())
        })
        .collect();
    let loaded = load(Some(toml), &env, &[]);
    let config = &loaded.config;
    assert_eq!(config.segment.store, "mysql");
    assert_eq!(config.snowflake.mode, "local");

    // Ports and probes.
    let port = at(container, "ports.0");
    assert_eq!(
        u64_at(port, "containerPort"),
        u64::from(config.server.listen.port())
    );
    let port_name = str_at(port, "name");
    let readiness = at(container, "readinessProbe.httpGet");
    let liveness = at(container, "livenessProbe.httpGet");
    assert_eq!(str_at(readiness, "path"), "/readyz");
    assert_eq!(str_at(liveness, "path"), "/healthz");
    assert_eq!(str_at(readiness, "port"), port_name);
    assert_eq!(str_at(liveness, "port"), port_name);
    assert_paths_answer(&["/readyz", "/healthz"]);

    // A stop always has time for the graceful release.
    assert!(u64_at(spec, "terminationGracePeriodSeconds") > config.server.shutdown_timeout_s);

    // The state lives on each pod's own claim, where the server keeps it.
    let claim = str_at(&sts, "spec.volumeClaimTemplates.0.metadata.name");
    let data_mount = at(container, "volumeMounts")
        .as_sequence()
        .unwrap()
        .iter()
        .find(|m| m["name"].as_str() == Some(claim))
        .expect("the claim is mounted");
    assert_eq!(str_at(data_mount, "mountPath"), "/var/lib/leaf");
    assert!(config.snowflake.cache_dir.starts_with("/var/lib/leaf"));
    assert_eq!(u64_at(spec, "securityContext.runAsUser"), 10001);

    // Worker ids from the ordinals: pod names are {statefulset}-{ordinal}.
    assert!(
        toml.contains("worker_id_from = \"hostname_ordinal\""),
        "{toml}"
    );
    let name = str_at(&sts, "metadata.name");
    for ordinal in 0..u64_at(&sts, "spec.replicas") {
        let id = leaf_registry_local::hostname_ordinal(&format!("{name}-{ordinal}")).unwrap();
        assert_eq!(id, ordinal);
        assert!(id <= config.snowflake.layout().unwrap().max_worker_id());
    }

    // The objects select each other.
    let labels = at(&sts, "spec.template.metadata.labels");
    assert_eq!(at(&sts, "spec.selector.matchLabels"), labels);
    let services: Vec<Value> = docs("k8s/service.yaml");
    assert_eq!(services.len(), 2);
    for svc in &services {
        assert_eq!(at(svc, "spec.selector"), labels);
        assert_eq!(str_at(svc, "spec.ports.0.targetPort"), port_name);
    }
    assert!(
        services
            .iter()
            .any(|s| s["metadata"]["name"] == sts["spec"]["serviceName"]
                && s["spec"]["clusterIP"].as_str() == Some("None")),
        "the governing Service is headless"
    );
    let pdb = one("k8s/pdb.yaml", "PodDisruptionBudget");
    assert_eq!(at(&pdb, "spec.selector.matchLabels"), labels);
}

#[test]
fn the_compose_recipe_fits_the_server() {
    let compose = &docs("compose.yaml")[0];
    let services = at(compose, "services").as_mapping().unwrap();
    let nodes: Vec<&Value> = services
        .iter()
        .filter(|(_, s)| {
            s["image"]
                .as_str()
                .is_some_and(|i| i.contains("SERVER_IMAGE"))
        })
        .map(|(_, s)| s)
        .collect();
    assert_eq!(nodes.len(), 3, "three leaf-server nodes");
    let mut host_ports = Vec::new();
    let mut volumes = Vec::new();
    for node in nodes {
        let env: Vec<(String, String)> = at(node, "environment")
            .as_mapping()
            .unwrap()
            .iter()
            .map(|(k, v)| {
                let v = v
                    .as_str()
                    .unwrap()
                    .replace("${MARIADB_ROOT_PASSWORD:-leaf}", "leaf")
                    .replace("${ADMIN_TOKEN:-}", "t0ken-of-the-operator");
                (k.as_str().unwrap().to_owned(), v)
            })
            .collect();
        // The ZooKeeper keys are known to a build with a ZooKeeper mode (the conformance run
        // of `--features zk-normal,zk-recycle` checks them).
        let zk = ["LEAF_SNOWFLAKE__ZK__ADDRESS"];
        let uncompiled: &[&str] = if cfg!(feature = "zk-recycle") {
            &[]
        } else {
            &zk
        };
        let config = load(None, &env, uncompiled).config;
        assert_eq!(config.snowflake.mode, "zk_recycle");
        assert_eq!(config.segment.store, "mysql");
        // The README's ADMIN_TOKEN opens the admin routes through the published ports.
        assert_eq!(
            config.server.admin_token.as_slice(),
            ["t0ken-of-the-operator"]
        );
        assert!(
            config.snowflake.ip.is_empty(),
            "each node finds its address"
        );
        let port = str_at(node, "ports.0");
        let (host, container) = port.rsplit_once(':').unwrap();
        assert_eq!(
            container.parse::<u16>().unwrap(),
            config.server.listen.port()
        );
        host_ports.push(host.to_owned());
        let volume = str_at(node, "volumes.0");
        assert!(volume.ends_with(":/var/lib/leaf"), "{volume}");
        volumes.push(volume.to_owned());
        let test: Vec<&str> = at(node, "healthcheck.test")
            .as_sequence()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap())
            .collect();
        assert_eq!(test, ["CMD", "/usr/local/bin/leaf-server", "probe"]);
    }
    host_ports.dedup();
    volumes.dedup();
    assert_eq!(
        (host_ports.len(), volumes.len()),
        (3, 3),
        "a port and a volume each"
    );
    let zk: Vec<_> = services
        .iter()
        .filter(|(_, s)| s["environment"]["ZOO_MY_ID"].is_string())
        .collect();
    assert_eq!(zk.len(), 3, "a three-member ensemble");
}
