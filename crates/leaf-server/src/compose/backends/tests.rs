//! The table of backends held to its descriptors, and the opening of what a configuration
//! chooses.

use std::path::Path;

#[cfg(feature = "zk-normal")]
use figment::value::Value;

use super::*;

/// The chosen store's configuration, as its type `C`.
#[allow(dead_code, reason = "used by the stores compiled in")]
fn store_as<C: Clone + 'static>(c: &Config) -> Result<C> {
    let (_, typed) = store_config(c)?;
    Ok(typed.downcast_ref::<C>().expect("the store's type").clone())
}

/// The chosen mode's configuration, as its type `C`.
#[allow(dead_code, reason = "used by the modes compiled in")]
fn mode_as<C: Clone + 'static>(c: &Config) -> Result<C> {
    let (_, typed) = mode_config(c)?;
    Ok(typed.downcast_ref::<C>().expect("the mode's type").clone())
}

#[tokio::test]
async fn backends_not_compiled_in_name_their_feature() {
    for b in choices().filter(|b| !b.compiled()) {
        let mut c = Config::default();
        let e = match b.key {
            "segment.store" => {
                c.segment.store = b.name.into();
                segment_store(&c).await.err()
            }
            _ => {
                c.snowflake.mode = b.name.into();
                worker_registry(&c).await.err()
            }
        };
        let e = e.unwrap_or_else(|| panic!("{} = {:?} is not compiled in", b.key, b.name));
        assert!(matches!(e, Error::Config(_)), "{e}");
        let feature = format!("`{}`", b.feature());
        assert!(e.to_string().contains(&feature), "{e}");
        assert!(e.to_string().contains(b.key), "{e}");
    }
}

#[tokio::test]
async fn unknown_backends_are_refused_listing_the_known_ones() {
    let mut c = Config::default();
    c.segment.store = "postgress".into();
    let e = segment_store(&c).await.unwrap_err().to_string();
    assert!(
        e.contains("segment.store = \"postgress\"") && e.contains("mysql"),
        "{e}"
    );
    c.snowflake.mode = "zk".into();
    let e = worker_registry(&c).await.unwrap_err().to_string();
    assert!(
        e.contains("snowflake.mode = \"zk\"") && e.contains("zk_recycle"),
        "{e}"
    );
}

#[test]
fn every_backend_feature_of_the_server_has_its_tables_and_crate() {
    // The server's features (Cargo.toml) against the backends it composes: each backend
    // feature names one leaf-registry-* crate of the workspace and has a table here.
    let manifest = include_str!("../../../Cargo.toml");
    let features = &manifest[manifest.find("[features]").unwrap()..];
    let features = &features[..features.find("\n[").unwrap()];
    let mut backends = Vec::new();
    for line in features
        .lines()
        .filter(|l| l.contains("dep:leaf-registry-"))
    {
        let (feature, deps) = line.split_once(" = ").unwrap();
        let krate = deps
            .split("dep:")
            .nth(1)
            .and_then(|d| d.split('"').next())
            .unwrap();
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(krate);
        assert!(
            dir.join("Cargo.toml").is_file(),
            "{feature}: no crate {krate}"
        );
        backends.push(feature.trim());
    }
    for feature in &backends {
        assert!(
            BACKENDS.iter().any(|b| b.feature == *feature),
            "feature {feature} chooses no backend in BACKENDS"
        );
    }
    for b in BACKENDS {
        assert!(
            backends.contains(&b.feature),
            "{} names {}, not a backend feature of leaf-server",
            b.table,
            b.feature
        );
    }
    let crates = std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("leaf-registry-"));
    for krate in crates {
        assert!(
            features.contains(&format!("dep:{krate}")),
            "{krate} is composed by no feature of leaf-server"
        );
    }
}

/// Each alias of `[segment]`, written as a `LEAF_` variable as earlier versions documented
/// it, reaches the chosen store's key; `C` is the store's type.
#[allow(dead_code, reason = "used by the stores compiled in")]
fn aliases_reach<C: Clone + serde::Serialize + 'static>(store: &str, cases: &[(&str, &str, &str)]) {
    for (alias, value, target) in cases {
        let var = format!("LEAF_SEGMENT__{}", alias.to_ascii_uppercase());
        let env = [
            ("LEAF_SEGMENT__STORE".to_owned(), store.to_owned()),
            (var.clone(), (*value).to_owned()),
        ];
        let config = crate::compose::config::load(None, env)
            .unwrap_or_else(|e| panic!("{var}: {e}"))
            .config;
        let c: C = store_as(&config).unwrap();
        let json = serde_json::to_value(&c).unwrap();
        let got = json[target].to_string();
        assert!(
            got.trim_matches('"') == *value || got.contains(value),
            "{var} = {value}: {store}'s {target} is {got}"
        );
    }
}

#[cfg(feature = "sqlite")]
#[test]
fn the_sqlite_store_takes_the_aliases() {
    aliases_reach::<leaf_registry_local::SqliteStoreConfig>(
        "sqlite",
        &[
            ("url", "sqlite://elsewhere/leaf.db", "url"),
            ("max_connections", "7", "max_connections"),
            ("busy_timeout_ms", "1234", "busy_timeout_ms"),
        ],
    );
}

#[cfg(feature = "mysql")]
#[test]
fn the_mysql_store_takes_the_aliases() {
    aliases_reach::<leaf_registry_mysql::MysqlConfig>(
        "mysql",
        &[
            ("url", "mysql://u@db:3306/leaf", "url"),
            ("max_connections", "7", "max_connections"),
            ("connect_timeout_ms", "1234", "connect_timeout_ms"),
            ("timeout_ms", "2345", "timeout_ms"),
            ("lock_wait_timeout_s", "9", "lock_wait_timeout_s"),
        ],
    );
}

#[cfg(feature = "postgres")]
#[test]
fn the_postgres_store_takes_the_aliases() {
    // `lock_wait_timeout_s` is MySQL's (whole seconds); PostgreSQL's own key is
    // `lock_timeout_ms`, which no alias names.
    aliases_reach::<leaf_registry_postgres::PostgresConfig>(
        "postgres",
        &[
            ("url", "postgres://u@db:5432/leaf", "url"),
            ("max_connections", "7", "max_connections"),
            ("connect_timeout_ms", "1234", "connect_timeout_ms"),
            ("timeout_ms", "2345", "timeout_ms"),
        ],
    );
}

#[cfg(feature = "etcd")]
#[test]
fn the_etcd_store_takes_the_aliases() {
    aliases_reach::<leaf_registry_etcd::EtcdConfig>(
        "etcd",
        &[
            ("url", "http://e1:2379", "endpoints"),
            ("timeout_ms", "2345", "timeout_ms"),
        ],
    );
}

#[cfg(feature = "redis")]
#[test]
fn the_redis_store_takes_the_aliases() {
    aliases_reach::<leaf_registry_redis::RedisConfig>(
        "redis",
        &[
            ("url", "redis://r:6379", "url"),
            ("connect_timeout_ms", "1234", "connect_timeout_ms"),
            ("timeout_ms", "2345", "timeout_ms"),
        ],
    );
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn sqlite_store_opens_and_creates_its_directory() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Config::default();
    c.segment.stores.insert(
        "url",
        format!("sqlite://{}/sub/leaf.db", dir.path().display()),
    );
    let store = segment_store(&c).await.unwrap();
    assert_eq!(store.kind(), "sqlite");
    assert!(dir.path().join("sub/leaf.db").exists());
    // The table's own key, without the alias.
    c.segment.stores.remove("url");
    c.segment.stores.set(
        "sqlite",
        "url",
        format!("sqlite://{}/other.db", dir.path().display()),
    );
    segment_store(&c).await.unwrap();
    assert!(dir.path().join("other.db").exists());
}

#[cfg(feature = "mysql")]
#[test]
fn mysql_settings_come_from_the_server_configuration() {
    let mut c = Config::default();
    c.segment.store = "mysql".into();
    let url = "mysql://leaf:hunter2@db:3306/leaf?ssl-mode=required";
    c.segment.stores.insert("url", url);
    c.segment.stores.insert("max_connections", 6);
    c.segment.stores.insert("connect_timeout_ms", 1500);
    c.segment.stores.insert("timeout_ms", 2500);
    c.segment.stores.insert("lock_wait_timeout_s", 7);
    let m = store_as::<leaf_registry_mysql::MysqlConfig>(&c).unwrap();
    assert_eq!(m.url, url);
    assert_eq!(
        (
            m.max_connections,
            m.connect_timeout_ms,
            m.timeout_ms,
            m.lock_wait_timeout_s
        ),
        (6, 1500, 2500, 7)
    );
    assert!(!format!("{m:?}").contains("hunter2"));
    // An alias and the table disagreeing is refused; agreeing is fine.
    c.segment.stores.set("mysql", "timeout_ms", 2500);
    store_as::<leaf_registry_mysql::MysqlConfig>(&c).unwrap();
    c.segment.stores.set("mysql", "timeout_ms", 99);
    let e = store_as::<leaf_registry_mysql::MysqlConfig>(&c).unwrap_err();
    assert!(
        e.to_string()
            .contains("segment.timeout_ms and segment.mysql.timeout_ms"),
        "{e}"
    );
    c.snowflake.mode = "mysql".into();
    c.snowflake
        .backends
        .set("mysql", "url", "mysql://w:s3cret@db/leaf");
    let r = mode_as::<leaf_registry_mysql::MysqlConfig>(&c).unwrap();
    assert_eq!(r.url, "mysql://w:s3cret@db/leaf");
    assert!(!format!("{r:?}").contains("s3cret"));
}

/// `fence_on_disconnect` belongs to the SQL workerId modes: their tables take it, a SQL
/// store's table refuses it naming the section, and a `LEAF_` variable names it only for
/// the mode.
#[cfg(all(feature = "mysql", feature = "postgres"))]
#[test]
fn a_workerid_mode_key_is_refused_in_the_stores_table() {
    let dir = tempfile::tempdir().unwrap();
    let load_toml = |text: &str| {
        let path = dir.path().join("leaf.toml");
        std::fs::write(&path, text).unwrap();
        crate::compose::config::load(Some(&path), Vec::new())
    };
    for db in ["mysql", "postgres"] {
        let file =
            format!("[segment]\nstore = \"{db}\"\n[segment.{db}]\nfence_on_disconnect = true\n");
        let Err(e) = load_toml(&file) else {
            panic!("[segment.{db}] took fence_on_disconnect");
        };
        assert!(
            e.to_string().contains(&format!(
                "key segment.{db}.fence_on_disconnect: fence_on_disconnect is a key of \
                 [snowflake.{db}]"
            )),
            "{e}"
        );
        let file =
            format!("[snowflake]\nmode = \"{db}\"\n[snowflake.{db}]\nfence_on_disconnect = true\n");
        load_toml(&file).expect(db);
        let var = format!("LEAF_SNOWFLAKE__{}__FENCE_ON_DISCONNECT", db.to_uppercase());
        let mode = "LEAF_SNOWFLAKE__MODE".to_owned();
        let loaded =
            crate::compose::config::load(None, [(mode, db.to_owned()), (var, "true".into())])
                .unwrap();
        assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
        let unknown = format!("LEAF_SEGMENT__{}__FENCE_ON_DISCONNECT", db.to_uppercase());
        let loaded = crate::compose::config::load(None, [(unknown, "true".to_owned())]).unwrap();
        assert_eq!(loaded.warnings.len(), 1, "{:?}", loaded.warnings);
    }
    let mut c = Config::default();
    c.snowflake.mode = "mysql".into();
    c.snowflake
        .backends
        .set("mysql", "fence_on_disconnect", true);
    let r = mode_as::<leaf_registry_mysql::MysqlConfig>(&c).unwrap();
    assert!(r.fence_on_disconnect);
}

/// The registry of `mode` on `url`, where nothing listens (port 1): it still builds, and
/// fails only when used.
#[allow(dead_code, reason = "used by the SQL modes compiled in")]
async fn made_without_contacting(mode: &str, url: &str) {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Config::default();
    c.snowflake.mode = mode.into();
    c.snowflake.backends.set(mode, "url", url);
    c.snowflake.cache_dir = dir.path().to_path_buf();
    let r = worker_registry(&c).await.unwrap();
    assert_eq!(r.mode(), mode);
}

#[cfg(feature = "mysql")]
#[tokio::test]
async fn a_mysql_registry_is_made_without_contacting_the_server() {
    made_without_contacting("mysql", "mysql://leaf:pw@127.0.0.1:1/leaf").await;
}

#[cfg(feature = "postgres")]
#[test]
fn postgres_settings_come_from_the_server_configuration() {
    let mut c = Config::default();
    c.segment.store = "postgres".into();
    let url = "postgres://leaf:hunter2@db:5432/leaf?sslmode=require";
    c.segment.stores.set("postgres", "url", url);
    c.segment.stores.set("postgres", "max_connections", 6);
    c.segment.stores.set("postgres", "lock_timeout_ms", 1500);
    c.segment.stores.insert("timeout_ms", 2500);
    let p = store_as::<leaf_registry_postgres::PostgresConfig>(&c).unwrap();
    assert_eq!(p.url, url);
    assert_eq!(
        (p.max_connections, p.timeout_ms, p.lock_timeout_ms),
        (6, 2500, 1500)
    );
    assert!(!format!("{p:?}").contains("hunter2"));
    // A bad value names the server's key.
    c.segment.stores.set("postgres", "lock_timeout_ms", 0);
    let e = store_as::<leaf_registry_postgres::PostgresConfig>(&c).unwrap_err();
    assert!(
        e.to_string().contains("segment.postgres.lock_timeout_ms"),
        "{e}"
    );
    c.snowflake.mode = "postgres".into();
    c.snowflake
        .backends
        .set("postgres", "url", "postgresql://w:s3cret@db/leaf");
    let r = mode_as::<leaf_registry_postgres::PostgresConfig>(&c).unwrap();
    assert_eq!(r.url, "postgresql://w:s3cret@db/leaf");
    assert!(!format!("{r:?}").contains("s3cret"));
    c.snowflake
        .backends
        .set("postgres", "url", "mysql://w:s3cret@db/leaf");
    let e = mode_as::<leaf_registry_postgres::PostgresConfig>(&c).unwrap_err();
    assert!(e.to_string().contains("snowflake.postgres.url"), "{e}");
    assert!(!e.to_string().contains("s3cret"), "{e}");
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn a_postgres_registry_is_made_without_contacting_the_server() {
    made_without_contacting("postgres", "postgres://leaf:pw@127.0.0.1:1/leaf").await;
}

#[cfg(all(feature = "zk-normal", feature = "zk-recycle"))]
#[tokio::test]
async fn zk_registries_are_made_without_contacting_zookeeper_and_list_peers() {
    // Nothing listens on port 1: the registries still build, and fail only when used.
    let dir = tempfile::tempdir().unwrap();
    let mut c = Config::default();
    c.snowflake.backends.set("zk", "address", "127.0.0.1:1");
    c.snowflake.backends.set("zk", "max_peer_skew_ms", 800);
    c.snowflake.cache_dir = dir.path().to_path_buf();
    for mode in ["zk_normal", "zk_recycle"] {
        c.snowflake.mode = mode.into();
        let r = registry(&c).await.unwrap();
        assert_eq!(r.worker.mode(), mode);
        let peers = r.peers.expect("zookeeper modes list their peers");
        assert_eq!(peers.max_skew_ms(), 800);
    }
}

#[cfg(feature = "zk-normal")]
#[tokio::test]
async fn zk_settings_come_from_the_server_configuration_and_bad_ones_name_their_key() {
    let mut c = Config::default();
    c.snowflake.mode = "zk_normal".into();
    for (key, value) in [
        ("address", Value::from("zk1:2181,zk2:2181")),
        ("session_timeout_ms", Value::from(6000u64)),
        ("recycle_idle_timeout_ms", Value::from(20_000u64)),
        ("root", Value::from("/leaf")),
        ("max_peer_skew_ms", Value::from(800u64)),
        ("fence_on_disconnect", Value::from(true)),
    ] {
        c.snowflake.backends.set("zk", key, value);
    }
    let z = mode_as::<leaf_registry_zk::ZkConfig>(&c).unwrap();
    assert_eq!(
        z,
        leaf_registry_zk::ZkConfig {
            address: "zk1:2181,zk2:2181".into(),
            session_timeout_ms: 6000,
            recycle_idle_timeout_ms: 20_000,
            root: "/leaf".into(),
            max_peer_skew_ms: 800,
            fence_on_disconnect: true,
            ..leaf_registry_zk::ZkConfig::default()
        }
    );
    c.snowflake.backends.set("zk", "address", " ");
    let e = registry(&c)
        .await
        .err()
        .expect("an empty address is refused");
    assert!(matches!(e, Error::Config(_)), "{e}");
    assert!(e.to_string().contains("snowflake.zk.address"), "{e}");
}

/// A line's names are its descriptor's: the stub of a backend not compiled in says what
/// the crate would.
#[test]
fn each_lines_names_are_its_descriptors() {
    for e in BACKENDS {
        if let Some(imp) = e.imp {
            assert_eq!(imp.names(), (e.store, e.mode, e.table), "{}", e.feature);
        }
    }
}
