//! `cargo xtask ci`'s tests, built once and run in groups.
//!
//! `cargo test -p CRATE --features F` resolves features for that crate's tree alone, so each
//! backend's run rebuilt leaf-server, its dependencies and their test binaries with other
//! features, and the workspace's run did so once more: most of CI's time was compiling the same
//! code again. Here one `cargo test --workspace --all-targets --all-features --no-run` builds
//! every test executable once; the executables are then run as `cargo test` runs them (from
//! their crate's directory, with its `CARGO_MANIFEST_DIR`), one group after the other: each
//! backend's crates on its servers, the server's tests on every backend, the cluster, then the
//! rest. `cargo xtask conformance` still runs `cargo test` per crate, for one backend alone.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::backends::{self, Run};

/// One test executable of the build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TestBinary {
    /// Its crate.
    pub(crate) package: String,
    /// Its target's name: the library's (`leaf_core`), a test file's (`blackbox`), a bench's.
    pub(crate) target: String,
    /// Its crate's directory, where `cargo test` runs it.
    pub(crate) dir: PathBuf,
    /// The executable.
    pub(crate) path: PathBuf,
}

/// What the build made: the test executables and the `leaf-server` binary (every feature).
pub(crate) struct Build {
    pub(crate) tests: Vec<TestBinary>,
    pub(crate) server: PathBuf,
}

/// The arguments of the one build (after `cargo`).
const BUILD: &[&str] = &[
    "test",
    "--workspace",
    "--all-targets",
    "--all-features",
    "--no-run",
    "--message-format=json-render-diagnostics",
];

/// Builds every test executable of the workspace with every feature, once.
pub(crate) fn build(root: &Path) -> Result<Build> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    eprintln!("xtask: == test build: cargo {}", BUILD.join(" "));
    let started = Instant::now();
    let mut child = Command::new(&cargo)
        .args(BUILD)
        .current_dir(root)
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run {cargo}"))?;
    let stdout = child.stdout.take().context("cargo's output")?;
    let mut tests = Vec::new();
    let mut server = None;
    for line in BufReader::new(stdout).lines() {
        let line = line.context("reading cargo's output")?;
        match artifact(&line) {
            Some(Artifact::Test(t)) => tests.push(t),
            Some(Artifact::Server(p)) => server = Some(p),
            None => {}
        }
    }
    let status = child.wait()?;
    eprintln!(
        "xtask: == test build: {} in {:.1} s ({} test executables; disk: {} free)",
        if status.success() { "ok" } else { "FAILED" },
        started.elapsed().as_secs_f64(),
        tests.len(),
        crate::disk::free(root).as_deref().unwrap_or("?"),
    );
    if !status.success() {
        bail!("the test build failed ({status})");
    }
    let server = server.context("the build made no leaf-server binary")?;
    Ok(Build { tests, server })
}

enum Artifact {
    Test(TestBinary),
    Server(PathBuf),
}

/// A test executable, or the leaf-server binary, from one line of cargo's JSON messages.
fn artifact(line: &str) -> Option<Artifact> {
    let v: Value = serde_json::from_str(line).ok()?;
    if v["reason"] != "compiler-artifact" {
        return None;
    }
    let path = PathBuf::from(v["executable"].as_str()?);
    let target = v["target"]["name"].as_str()?.to_string();
    let manifest = Path::new(v["manifest_path"].as_str()?);
    if v["profile"]["test"] != true {
        let is_bin = v["target"]["kind"]
            .as_array()
            .is_some_and(|k| k.iter().any(|k| k == "bin"));
        return (is_bin && target == "leaf-server").then_some(Artifact::Server(path));
    }
    Some(Artifact::Test(TestBinary {
        package: package_name(v["package_id"].as_str()?, manifest)?,
        target,
        dir: manifest.parent()?.to_path_buf(),
        path,
    }))
}

/// A package's name from its id: `path+file:///…/crates/leaf-server#0.1.0` (the directory is
/// the name) or `path+file:///…/dir#name@0.1.0`.
fn package_name(id: &str, manifest: &Path) -> Option<String> {
    let fragment = id.rsplit_once('#').map(|(_, f)| f)?;
    match fragment.split_once('@') {
        Some((name, _)) => Some(name.to_string()),
        None => Some(
            manifest
                .parent()?
                .file_name()?
                .to_string_lossy()
                .into_owned(),
        ),
    }
}

/// A group of executables run together, under a name for the log.
#[derive(Debug)]
pub(crate) struct Group {
    pub(crate) name: String,
    pub(crate) runs: Vec<Run>,
}

/// The groups, in order: each backend's runs that name a crate alone or one of its test
/// targets; leaf-server's tests (which hold every backend's, built with every feature); the
/// cluster; what is left takes the last group, "workspace".
pub(crate) fn groups() -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    let mut server = Vec::new();
    for b in backends::BACKENDS {
        let mut runs = Vec::new();
        for run in b.runs {
            let whole_crate_with_features = run.features.is_some() && run.test.is_none();
            let target = if whole_crate_with_features {
                &mut server
            } else {
                &mut runs
            };
            if !target.contains(run) {
                target.push(*run);
            }
        }
        // `local` and `sqlite` are one crate: its run goes with the first.
        runs.retain(|r| !groups.iter().any(|g| g.runs.contains(r)));
        if !runs.is_empty() {
            groups.push(Group {
                name: b.name.to_string(),
                runs,
            });
        }
    }
    groups.push(Group {
        name: "leaf-server on every backend".into(),
        runs: server,
    });
    groups.push(Group {
        name: "cluster".into(),
        runs: vec![backends::CLUSTER],
    });
    groups
}

/// Whether `run` takes the executable `t` (its crate, and its test target if it names one).
fn takes(run: &Run, t: &TestBinary) -> bool {
    run.package == t.package && run.test.is_none_or(|name| name == t.target)
}

/// The executables of each group in order, then those no group takes as "workspace"; a group
/// that takes none is an error (a renamed crate or test target must not pass unnoticed).
pub(crate) fn assign<'a>(
    groups: &[Group],
    tests: &'a [TestBinary],
) -> Result<Vec<(String, Vec<&'a TestBinary>)>> {
    let mut owner: BTreeMap<usize, usize> = BTreeMap::new();
    for (gi, g) in groups.iter().enumerate() {
        for run in &g.runs {
            let mut any = false;
            for (ti, t) in tests.iter().enumerate() {
                if takes(run, t) {
                    any = true;
                    owner.entry(ti).or_insert(gi);
                }
            }
            if !any {
                bail!(
                    "group {}: the build made no test executable of {}{}",
                    g.name,
                    run.package,
                    run.test.map(|t| format!(" --test {t}")).unwrap_or_default()
                );
            }
        }
    }
    let mut out: Vec<(String, Vec<&TestBinary>)> = groups
        .iter()
        .map(|g| (g.name.clone(), Vec::new()))
        .collect();
    let mut rest = Vec::new();
    for (ti, t) in tests.iter().enumerate() {
        match owner.get(&ti) {
            Some(&gi) => out[gi].1.push(t),
            None => rest.push(t),
        }
    }
    out.push(("workspace".into(), rest));
    Ok(out)
}

/// Runs every group's executables with `env`, each as `cargo test` would; every executable runs
/// even after one fails, and the failures are named at the end.
pub(crate) fn run(root: &Path, build: &Build, env: &[(String, String)]) -> Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let shown: String = env.iter().map(|(k, v)| format!("{k}={v} ")).collect();
    let mut failed = Vec::new();
    for (group, tests) in assign(&groups(), &build.tests)? {
        eprintln!(
            "xtask: == tests, {group}: {} executables {shown}",
            tests.len()
        );
        let started = Instant::now();
        let mut group_failed = 0;
        for t in tests {
            let one = Instant::now();
            let status = Command::new(&t.path)
                .current_dir(&t.dir)
                .envs(env.iter().map(|(k, v)| (k, v)))
                .env("CARGO", &cargo)
                .env("CARGO_MANIFEST_DIR", &t.dir)
                .env("CARGO_PKG_NAME", &t.package)
                .status()
                .with_context(|| format!("cannot run {}", t.path.display()))?;
            eprintln!(
                "xtask: {} {} ({}): {} in {:.1} s",
                t.package,
                t.target,
                group,
                if status.success() { "ok" } else { "FAILED" },
                one.elapsed().as_secs_f64()
            );
            if !status.success() {
                group_failed += 1;
                failed.push(format!("{} {}", t.package, t.target));
            }
            // No later step reads a test executable: in CI it goes at once.
            if crate::disk::pruning() {
                let _ = std::fs::remove_file(&t.path);
            }
        }
        crate::housekeeping::reap();
        eprintln!(
            "xtask: == tests, {group}: {} in {:.1} s (disk: {} free)",
            if group_failed == 0 { "ok" } else { "FAILED" },
            started.elapsed().as_secs_f64(),
            crate::disk::free(root).as_deref().unwrap_or("?"),
        );
    }
    if !failed.is_empty() {
        bail!("tests failed: {}", failed.join(", "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bin(package: &str, target: &str) -> TestBinary {
        TestBinary {
            package: package.into(),
            target: target.into(),
            dir: PathBuf::from("/w/crates").join(package),
            path: PathBuf::from("/w/target/debug/deps").join(format!("{target}-0")),
        }
    }

    #[test]
    fn cargo_messages_give_test_executables_and_the_server() {
        let test = r#"{"reason":"compiler-artifact","package_id":"path+file:///w/crates/leaf-server#0.1.0","manifest_path":"/w/crates/leaf-server/Cargo.toml","target":{"kind":["test"],"name":"blackbox"},"profile":{"test":true},"executable":"/w/target/debug/deps/blackbox-1"}"#;
        let Some(Artifact::Test(t)) = artifact(test) else {
            panic!("a test executable")
        };
        assert_eq!(t, {
            let mut b = bin("leaf-server", "blackbox");
            b.path = "/w/target/debug/deps/blackbox-1".into();
            b
        });
        let named = test.replace("leaf-server#0.1.0", "server#leaf-server@0.1.0");
        let Some(Artifact::Test(t)) = artifact(&named) else {
            panic!("a test executable")
        };
        assert_eq!(t.package, "leaf-server");
        let server = r#"{"reason":"compiler-artifact","package_id":"path+file:///w/crates/leaf-server#0.1.0","manifest_path":"/w/crates/leaf-server/Cargo.toml","target":{"kind":["bin"],"name":"leaf-server"},"profile":{"test":false},"executable":"/w/target/debug/leaf-server"}"#;
        assert!(
            matches!(artifact(server), Some(Artifact::Server(p)) if p == Path::new("/w/target/debug/leaf-server"))
        );
        let lib = r#"{"reason":"compiler-artifact","package_id":"x","manifest_path":"/w/crates/leaf-core/Cargo.toml","target":{"kind":["lib"],"name":"leaf_core"},"profile":{"test":false},"executable":null}"#;
        assert!(artifact(lib).is_none());
        assert!(artifact(r#"{"reason":"build-finished","success":true}"#).is_none());
    }

    #[test]
    fn every_executable_runs_once_in_the_first_group_that_takes_it() {
        let tests = [
            bin("leaf-registry-mysql", "leaf_registry_mysql"),
            bin("leaf-registry-mysql", "conformance"),
            bin("leaf-server", "blackbox"),
            bin("leaf-server", "mysql"),
            bin("leaf-client", "mariadb"),
            bin("leaf-client", "pool"),
            bin("leaf-testkit", "cluster"),
            bin("leaf-testkit", "provision_zk"),
            bin("leaf-core", "leaf_core"),
        ];
        let groups = vec![
            Group {
                name: "mysql".into(),
                runs: vec![backends::BACKENDS[2].runs[0], backends::BACKENDS[2].runs[2]],
            },
            Group {
                name: "zk".into(),
                runs: vec![Run {
                    package: "leaf-testkit",
                    features: Some("provision"),
                    test: Some("provision_zk"),
                }],
            },
            Group {
                name: "server".into(),
                runs: vec![Run {
                    package: "leaf-server",
                    features: Some("mysql"),
                    test: None,
                }],
            },
        ];
        let out = assign(&groups, &tests).unwrap();
        let names = |i: usize| -> Vec<String> {
            out[i]
                .1
                .iter()
                .map(|t| format!("{} {}", t.package, t.target))
                .collect()
        };
        assert_eq!(out[0].0, "mysql");
        assert_eq!(
            names(0),
            [
                "leaf-registry-mysql leaf_registry_mysql",
                "leaf-registry-mysql conformance",
                "leaf-client mariadb"
            ]
        );
        assert_eq!(names(1), ["leaf-testkit provision_zk"]);
        assert_eq!(names(2), ["leaf-server blackbox", "leaf-server mysql"]);
        assert_eq!(out[3].0, "workspace");
        assert_eq!(
            names(3),
            [
                "leaf-client pool",
                "leaf-testkit cluster",
                "leaf-core leaf_core"
            ]
        );
        let total: usize = out.iter().map(|(_, t)| t.len()).sum();
        assert_eq!(total, tests.len());
    }

    #[test]
    fn a_group_whose_crate_made_nothing_is_an_error() {
        let groups = vec![Group {
            name: "mysql".into(),
            runs: vec![backends::BACKENDS[2].runs[0]],
        }];
        let err = assign(&groups, &[bin("leaf-core", "leaf_core")]).unwrap_err();
        assert!(err.to_string().contains("leaf-registry-mysql"), "{err}");
    }

    #[test]
    fn the_real_groups_hold_every_backend_and_the_server_once() {
        let groups = groups();
        let names: Vec<&str> = groups.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "sqlite",
                "mysql",
                "postgres",
                "zk",
                "redis",
                "etcd",
                "leaf-server on every backend",
                "cluster"
            ]
        );
        let server = &groups[6].runs;
        assert!(
            server.iter().all(|r| r.package == "leaf-server"),
            "{server:?}"
        );
        assert_eq!(server.len(), 5, "{server:?}");
    }
}
