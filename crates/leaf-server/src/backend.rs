//! The one place where the configuration chooses the backends: a `match` on the configured kind
//! whose arms are compiled per cargo feature. Asking for a kind that was not compiled in fails
//! start-up with a message naming the feature to enable.

use std::sync::Arc;
use std::time::Duration;

use leaf_core::{Error, Result, SegmentStore, SnowflakeLayout, WorkerIdRegistry};

use crate::config::{Config, SegmentSection, SnowflakeMode, SnowflakeSection, StoreKind};

/// The error for a backend whose cargo feature is not compiled in.
fn missing_feature(key: &str, value: &str, feature: &str) -> Error {
    Error::Config(format!(
        "{key} = \"{value}\" needs leaf-server built with the cargo feature `{feature}` \
         (cargo build -p leaf-server --release --features {feature})"
    ))
}

/// Connects the segment store named by `segment.store`.
pub async fn segment_store(config: &SegmentSection) -> Result<Arc<dyn SegmentStore>> {
    match config.store {
        #[cfg(feature = "sqlite")]
        StoreKind::Sqlite => {
            let store = leaf_registry_local::SqliteStore::connect(
                &leaf_registry_local::SqliteStoreConfig {
                    url: config.url.clone(),
                    max_connections: config.max_connections,
                    busy_timeout_ms: config.busy_timeout_ms,
                },
            )
            .await?;
            Ok(Arc::new(store))
        }
        #[cfg(not(feature = "sqlite"))]
        StoreKind::Sqlite => Err(missing_feature("segment.store", "sqlite", "sqlite")),
        #[cfg(feature = "mysql")]
        StoreKind::Mysql => {
            let mysql = mysql_store_config(config);
            match leaf_registry_mysql::MysqlStore::connect(&mysql).await {
                Ok(store) => Ok(Arc::new(store)),
                // The server is down or slow: segment mode starts not ready and its start-up
                // retries connect through the wrapper; refused credentials still stop start-up.
                Err(e) if e.is_retryable() => {
                    tracing::warn!(error = %e, "the mysql segment store cannot be reached yet; retrying");
                    let connect: crate::deferred::Connect = Box::new(move || {
                        let mysql = mysql.clone();
                        Box::pin(async move {
                            let store = leaf_registry_mysql::MysqlStore::connect(&mysql).await?;
                            Ok(Arc::new(store) as Arc<dyn SegmentStore>)
                        })
                    });
                    Ok(Arc::new(crate::deferred::DeferredStore::new(
                        "mysql",
                        // `MysqlStore`'s: durable, shared by any number of servers.
                        leaf_core::StoreCapabilities::new(true, true),
                        connect,
                    )))
                }
                Err(e) => Err(e),
            }
        }
        #[cfg(not(feature = "mysql"))]
        StoreKind::Mysql => Err(missing_feature("segment.store", "mysql", "mysql")),
        StoreKind::Etcd => Err(missing_feature("segment.store", "etcd", "etcd")),
    }
}

/// The MySQL store's settings from `[segment]`; credentials and TLS (`ssl-mode`, `ssl-ca`)
/// come in the URL.
#[cfg(feature = "mysql")]
pub fn mysql_store_config(config: &SegmentSection) -> leaf_registry_mysql::MysqlStoreConfig {
    leaf_registry_mysql::MysqlStoreConfig {
        max_connections: config.max_connections,
        connect_timeout_ms: config.connect_timeout_ms,
        timeout_ms: config.timeout_ms,
        lock_wait_timeout_s: config.lock_wait_timeout_s,
        ..leaf_registry_mysql::MysqlStoreConfig::with_url(&config.url)
    }
}

/// The `mysql` workerId mode's settings from `[snowflake.mysql]`: its URL, and the mysql
/// crate's defaults otherwise. Two connections suffice: one start-up or release call and one
/// background mark write at a time.
#[cfg(feature = "mysql")]
pub fn mysql_registry_config(
    config: &crate::config::MysqlSection,
) -> leaf_registry_mysql::MysqlRegistryConfig {
    leaf_registry_mysql::MysqlRegistryConfig {
        max_connections: 2,
        ..leaf_registry_mysql::MysqlRegistryConfig::with_url(&config.url)
    }
}

/// The worker-id registry named by `snowflake.mode`.
pub async fn worker_registry(config: &Config) -> Result<Arc<dyn WorkerIdRegistry>> {
    let sf = &config.snowflake;
    match sf.mode {
        #[cfg(feature = "local")]
        SnowflakeMode::Local => Ok(Arc::new(leaf_registry_local::LocalRegistry::new(
            leaf_registry_local::LocalRegistryConfig {
                worker_id: sf.local.worker_id,
                work_id_map: sf.local.work_id_map.clone(),
            },
            sf.cache_dir.clone(),
            &config.name,
        ))),
        #[cfg(not(feature = "local"))]
        SnowflakeMode::Local => Err(missing_feature("snowflake.mode", "local", "local")),
        SnowflakeMode::ZkNormal => Err(missing_feature("snowflake.mode", "zk_normal", "zk-normal")),
        SnowflakeMode::ZkRecycle => Err(missing_feature(
            "snowflake.mode",
            "zk_recycle",
            "zk-recycle",
        )),
        #[cfg(feature = "mysql")]
        SnowflakeMode::Mysql => Ok(Arc::new(
            leaf_registry_mysql::MysqlRegistry::connect(
                &mysql_registry_config(&sf.mysql),
                sf.cache_dir.clone(),
                &config.name,
            )
            .await?,
        )),
        #[cfg(not(feature = "mysql"))]
        SnowflakeMode::Mysql => Err(missing_feature("snowflake.mode", "mysql", "mysql")),
        SnowflakeMode::Etcd => Err(missing_feature("snowflake.mode", "etcd", "etcd")),
    }
}

/// The allocator's configuration from `[segment]`.
pub fn allocator_config(config: &SegmentSection) -> leaf_segment::SegmentConfig {
    leaf_segment::SegmentConfig {
        preload_threshold: config.preload_threshold,
        switch_wait: Duration::from_millis(config.switch_wait_ms),
        step_double_below: Duration::from_secs(config.step_double_below_s),
        step_halve_above: Duration::from_secs(config.step_halve_above_s),
        max_step: config.max_step,
        refresh_interval: Duration::from_secs(config.refresh_s),
        miss_ttl: Duration::from_millis(config.miss_ttl_ms),
        retry_backoff_max: Duration::from_millis(config.retry_backoff_max_ms),
    }
}

/// The generator's configuration from `[snowflake]`.
pub fn generator_config(
    config: &SnowflakeSection,
    layout: SnowflakeLayout,
) -> leaf_snowflake::SnowflakeConfig {
    leaf_snowflake::SnowflakeConfig {
        layout,
        random_start: config.random_start,
        max_backwards: Duration::from_millis(config.max_backwards_ms),
        mark_window: Duration::from_millis(config.mark_window_ms),
        mark_renew: Duration::from_millis(config.mark_renew_ms),
        max_startup_wait: Duration::from_millis(config.max_startup_wait_ms),
        fencing_margin: Duration::from_millis(config.fencing_margin_ms),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn backends_not_compiled_in_name_their_feature() {
        let mut c = Config::default();
        let mut modes = vec![
            (SnowflakeMode::ZkNormal, "`zk-normal`"),
            (SnowflakeMode::ZkRecycle, "`zk-recycle`"),
            (SnowflakeMode::Etcd, "`etcd`"),
        ];
        let mut stores = vec![(StoreKind::Etcd, "`etcd`")];
        if cfg!(not(feature = "mysql")) {
            modes.push((SnowflakeMode::Mysql, "`mysql`"));
            stores.push((StoreKind::Mysql, "`mysql`"));
        }
        for (mode, feature) in modes {
            c.snowflake.mode = mode;
            let e = worker_registry(&c).await.unwrap_err();
            assert!(matches!(e, Error::Config(_)), "{e}");
            assert!(e.to_string().contains(feature), "{e}");
            assert!(e.to_string().contains("snowflake.mode"), "{e}");
        }
        for (store, feature) in stores {
            c.segment.store = store;
            let e = segment_store(&c.segment).await.unwrap_err();
            assert!(e.to_string().contains(feature), "{e}");
            assert!(e.to_string().contains("segment.store"), "{e}");
        }
    }

    #[cfg(not(feature = "local"))]
    #[tokio::test]
    async fn local_mode_without_its_feature_names_it() {
        let e = worker_registry(&Config::default()).await.unwrap_err();
        assert!(e.to_string().contains("`local`"), "{e}");
    }

    #[cfg(not(feature = "sqlite"))]
    #[tokio::test]
    async fn sqlite_store_without_its_feature_names_it() {
        let e = segment_store(&Config::default().segment).await.unwrap_err();
        assert!(e.to_string().contains("`sqlite`"), "{e}");
    }

    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn sqlite_store_opens_and_creates_its_directory() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = Config::default();
        c.segment.url = format!("sqlite://{}/sub/leaf.db", dir.path().display());
        let store = segment_store(&c.segment).await.unwrap();
        assert_eq!(store.kind(), "sqlite");
        assert!(dir.path().join("sub/leaf.db").exists());
    }

    #[cfg(feature = "mysql")]
    #[test]
    fn mysql_settings_come_from_the_server_configuration() {
        let mut c = Config::default();
        c.segment.url = "mysql://leaf:hunter2@db:3306/leaf?ssl-mode=required".into();
        c.segment.max_connections = 6;
        c.segment.connect_timeout_ms = 1500;
        c.segment.timeout_ms = 2500;
        c.segment.lock_wait_timeout_s = 7;
        let m = mysql_store_config(&c.segment);
        assert_eq!(m.url, c.segment.url);
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
        c.snowflake.mysql.url = "mysql://w:s3cret@db/leaf".into();
        let r = mysql_registry_config(&c.snowflake.mysql);
        assert_eq!(r.url, c.snowflake.mysql.url);
        assert!(!format!("{r:?}").contains("s3cret"));
    }

    #[cfg(feature = "mysql")]
    #[tokio::test]
    async fn a_mysql_registry_is_made_without_contacting_the_server() {
        // Nothing listens on port 1: the registry still builds, and fails only when used.
        let dir = tempfile::tempdir().unwrap();
        let mut c = Config::default();
        c.snowflake.mode = SnowflakeMode::Mysql;
        c.snowflake.mysql.url = "mysql://leaf:pw@127.0.0.1:1/leaf".into();
        c.snowflake.cache_dir = dir.path().to_path_buf();
        let r = worker_registry(&c).await.unwrap();
        assert_eq!(r.mode(), "mysql");
    }
}
