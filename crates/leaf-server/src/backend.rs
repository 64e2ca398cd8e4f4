//! The one place where the configuration chooses the backends: a `match` on the configured kind
//! whose arms are compiled per cargo feature. Asking for a kind that was not compiled in fails
//! start-up with a message naming the feature to enable.

use std::sync::Arc;

use async_trait::async_trait;
use leaf_core::{
    AcquireRequest, Error, Lease, NodeIdentity, RegistryCapabilities, Renewal, Result,
    SegmentStore, SnowflakeLayout, WorkerIdRegistry,
};

use crate::config::{
    Config, SegmentSection, SnowflakeMode, SnowflakeSection, StoreKind, key_leading_field,
};

/// The error for a backend whose cargo feature is not compiled in.
fn missing_feature(key: &str, value: &str, feature: &str) -> Error {
    Error::Config(format!(
        "{key} = \"{value}\" needs leaf-server built with the cargo feature `{feature}` \
         (cargo build -p leaf-server --release --features {feature})"
    ))
}

/// The fields of the stores' configurations, which their errors name (`url: ...`).
const STORE_FIELDS: &[&str] = &[
    "url",
    "max_connections",
    "busy_timeout_ms",
    "connect_timeout_ms",
    "timeout_ms",
    "lock_wait_timeout_s",
];

/// Connects the segment store named by `segment.store`. A store that cannot be opened for a
/// reason that may pass (a server down, a file locked by another program) is returned behind a
/// [`DeferredStore`](crate::deferred::DeferredStore): segment mode starts not ready and its
/// start-up retries reach the store through it. Refused credentials, a corrupt file and the
/// like still stop start-up.
pub async fn segment_store(config: &SegmentSection) -> Result<Arc<dyn SegmentStore>> {
    open_segment_store(config)
        .await
        .map_err(|e| key_leading_field(e, "segment", STORE_FIELDS))
}

async fn open_segment_store(config: &SegmentSection) -> Result<Arc<dyn SegmentStore>> {
    match config.store {
        #[cfg(feature = "sqlite")]
        StoreKind::Sqlite => {
            let sqlite = leaf_registry_local::SqliteStoreConfig {
                url: config.url.clone(),
                max_connections: config.max_connections,
                busy_timeout_ms: config.busy_timeout_ms,
            };
            let capabilities = leaf_registry_local::SqliteStore::capabilities_of(&sqlite);
            connect_or_defer("sqlite", capabilities, move || {
                let sqlite = sqlite.clone();
                async move {
                    let store = leaf_registry_local::SqliteStore::connect(&sqlite).await?;
                    Ok(Arc::new(store) as Arc<dyn SegmentStore>)
                }
            })
            .await
        }
        #[cfg(not(feature = "sqlite"))]
        StoreKind::Sqlite => Err(missing_feature("segment.store", "sqlite", "sqlite")),
        #[cfg(feature = "mysql")]
        StoreKind::Mysql => {
            let mysql = mysql_store_config(config);
            // `MysqlStore`'s: durable, shared by any number of servers.
            let capabilities = leaf_core::StoreCapabilities::new(true, true);
            connect_or_defer("mysql", capabilities, move || {
                let mysql = mysql.clone();
                async move {
                    let store = leaf_registry_mysql::MysqlStore::connect(&mysql).await?;
                    Ok(Arc::new(store) as Arc<dyn SegmentStore>)
                }
            })
            .await
        }
        #[cfg(not(feature = "mysql"))]
        StoreKind::Mysql => Err(missing_feature("segment.store", "mysql", "mysql")),
        StoreKind::Etcd => Err(missing_feature("segment.store", "etcd", "etcd")),
    }
}

/// `connect()`'s store; on a retryable failure, a [`DeferredStore`](crate::deferred::DeferredStore)
/// of `kind` with `capabilities` that calls `connect` again on use.
#[cfg(any(feature = "sqlite", feature = "mysql"))]
async fn connect_or_defer<F, Fut>(
    kind: &'static str,
    capabilities: leaf_core::StoreCapabilities,
    connect: F,
) -> Result<Arc<dyn SegmentStore>>
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<Arc<dyn SegmentStore>>> + Send + 'static,
{
    match connect().await {
        Ok(store) => Ok(store),
        Err(e) if e.is_retryable() => {
            tracing::warn!(store = kind, error = %e, "the segment store cannot be opened yet; retrying");
            let connect: crate::deferred::Connect = Box::new(move || Box::pin(connect()));
            Ok(Arc::new(crate::deferred::DeferredStore::new(
                kind,
                capabilities,
                connect,
            )))
        }
        Err(e) => Err(e),
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

/// A registry that lists the running nodes of its leaf name, for the start-up peer clock check
/// (`crate::peer_clock`): the ZooKeeper modes, with Leaf's `temporary` nodes.
#[async_trait]
pub trait PeerDirectory: Send + Sync {
    /// The `ip:port` of every other running node.
    async fn peers(&self) -> Result<Vec<String>>;
    /// Lists this node for the others (once its clock passed the check).
    async fn register(&self, identity: &NodeIdentity) -> Result<()>;
}

/// The worker-id registry of the configured mode, and its peer directory when it keeps one.
pub struct Registry {
    /// Where the worker id comes from.
    pub worker: Arc<dyn WorkerIdRegistry>,
    /// The running peers, in the modes that list them.
    pub peers: Option<Arc<dyn PeerDirectory>>,
}

impl Registry {
    /// A registry without a peer directory.
    pub fn without_peers(worker: Arc<dyn WorkerIdRegistry>) -> Self {
        Registry {
            worker,
            peers: None,
        }
    }
}

/// The worker-id registry named by `snowflake.mode`.
pub async fn worker_registry(config: &Config) -> Result<Arc<dyn WorkerIdRegistry>> {
    Ok(registry(config).await?.worker)
}

/// A registry whose `Config` errors name the server's keys: a backend crate names its own
/// fields (`work_id_map`), an operator needs `snowflake.local.work_id_map`.
#[derive(Debug)]
struct Keyed {
    inner: Arc<dyn WorkerIdRegistry>,
    section: &'static str,
    fields: &'static [&'static str],
}

impl Keyed {
    fn wrap(
        inner: Arc<dyn WorkerIdRegistry>,
        section: &'static str,
        fields: &'static [&'static str],
    ) -> Arc<dyn WorkerIdRegistry> {
        Arc::new(Keyed {
            inner,
            section,
            fields,
        })
    }

    fn key(&self, e: Error) -> Error {
        key_leading_field(e, self.section, self.fields)
    }
}

#[async_trait]
impl WorkerIdRegistry for Keyed {
    fn mode(&self) -> &'static str {
        self.inner.mode()
    }
    fn capabilities(&self) -> RegistryCapabilities {
        self.inner.capabilities()
    }
    async fn acquire(&self, req: &AcquireRequest) -> Result<Lease> {
        self.inner.acquire(req).await.map_err(|e| self.key(e))
    }
    async fn renew(&self, lease: &Lease, mark_ms: u64) -> Result<Renewal> {
        self.inner
            .renew(lease, mark_ms)
            .await
            .map_err(|e| self.key(e))
    }
    async fn release(&self, lease: &Lease, final_mark_ms: u64) -> Result<()> {
        self.inner
            .release(lease, final_mark_ms)
            .await
            .map_err(|e| self.key(e))
    }
    fn confirmed_mark_ms(&self) -> Option<u64> {
        self.inner.confirmed_mark_ms()
    }
    async fn abandon(&self, lease: &Lease) {
        self.inner.abandon(lease).await;
    }
}

/// The worker-id registry named by `snowflake.mode`, with its peer directory.
pub async fn registry(config: &Config) -> Result<Registry> {
    let sf = &config.snowflake;
    match sf.mode {
        #[cfg(feature = "local")]
        SnowflakeMode::Local => Ok(Registry::without_peers(Keyed::wrap(
            Arc::new(leaf_registry_local::LocalRegistry::new(
                leaf_registry_local::LocalRegistryConfig {
                    worker_id: sf.local.worker_id,
                    work_id_map: sf.local.work_id_map.clone(),
                },
                sf.cache_dir.clone(),
                &config.name,
            )),
            "snowflake.local",
            &["worker_id", "work_id_map"],
        ))),
        #[cfg(not(feature = "local"))]
        SnowflakeMode::Local => Err(missing_feature("snowflake.mode", "local", "local")),
        #[cfg(feature = "zk-normal")]
        SnowflakeMode::ZkNormal => zk_registry(config, leaf_registry_zk::ZkMode::Normal),
        #[cfg(not(feature = "zk-normal"))]
        SnowflakeMode::ZkNormal => Err(missing_feature("snowflake.mode", "zk_normal", "zk-normal")),
        #[cfg(feature = "zk-recycle")]
        SnowflakeMode::ZkRecycle => zk_registry(config, leaf_registry_zk::ZkMode::Recycle),
        #[cfg(not(feature = "zk-recycle"))]
        SnowflakeMode::ZkRecycle => Err(missing_feature(
            "snowflake.mode",
            "zk_recycle",
            "zk-recycle",
        )),
        #[cfg(feature = "mysql")]
        SnowflakeMode::Mysql => {
            let registry = leaf_registry_mysql::MysqlRegistry::connect(
                &mysql_registry_config(&sf.mysql),
                sf.cache_dir.clone(),
                &config.name,
            )
            .await
            .map_err(|e| key_leading_field(e, "snowflake.mysql", &["url"]))?;
            Ok(Registry::without_peers(Keyed::wrap(
                Arc::new(registry),
                "snowflake.mysql",
                &["url"],
            )))
        }
        #[cfg(not(feature = "mysql"))]
        SnowflakeMode::Mysql => Err(missing_feature("snowflake.mode", "mysql", "mysql")),
        SnowflakeMode::Etcd => Err(missing_feature("snowflake.mode", "etcd", "etcd")),
    }
}

/// The ZooKeeper modes' settings from `[snowflake.zk]`.
#[cfg(any(feature = "zk-normal", feature = "zk-recycle"))]
pub fn zk_config(section: &crate::config::ZkSection) -> leaf_registry_zk::ZkConfig {
    leaf_registry_zk::ZkConfig {
        address: section.address.clone(),
        session_timeout_ms: section.session_timeout_ms,
        recycle_idle_timeout_ms: section.recycle_idle_timeout_ms,
        root: section.root.clone(),
        max_peer_skew_ms: section.max_peer_skew_ms,
    }
}

/// A ZooKeeper registry of `mode`; it contacts ZooKeeper only when asked for a worker id, so
/// that start-up from the cache file works while ZooKeeper is down. It lists the peers too.
#[cfg(any(feature = "zk-normal", feature = "zk-recycle"))]
fn zk_registry(config: &Config, mode: leaf_registry_zk::ZkMode) -> Result<Registry> {
    const FIELDS: &[&str] = &[
        "address",
        "session_timeout_ms",
        "recycle_idle_timeout_ms",
        "root",
        "max_peer_skew_ms",
    ];
    let key = |e| key_leading_field(e, "snowflake.zk", FIELDS);
    let zk = zk_config(&config.snowflake.zk);
    // The crate names its fields; the server's keys add the section.
    zk.validate().map_err(key)?;
    let registry = Arc::new(
        leaf_registry_zk::ZkRegistry::connect(
            &zk,
            mode,
            config.snowflake.cache_dir.clone(),
            &config.name,
        )
        .map_err(key)?,
    );
    Ok(Registry {
        worker: Keyed::wrap(registry.clone(), "snowflake.zk", FIELDS),
        peers: Some(registry),
    })
}

#[cfg(any(feature = "zk-normal", feature = "zk-recycle"))]
#[async_trait]
impl PeerDirectory for leaf_registry_zk::ZkRegistry {
    async fn peers(&self) -> Result<Vec<String>> {
        leaf_registry_zk::ZkRegistry::peers(self).await
    }
    async fn register(&self, identity: &NodeIdentity) -> Result<()> {
        self.register_temporary(identity).await
    }
}

/// The generator's configuration from `[snowflake]`.
pub fn generator_config(
    config: &SnowflakeSection,
    layout: SnowflakeLayout,
) -> leaf_snowflake::SnowflakeConfig {
    config.generator_config(layout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn backends_not_compiled_in_name_their_feature() {
        let mut c = Config::default();
        let mut modes = vec![(SnowflakeMode::Etcd, "`etcd`")];
        if cfg!(not(feature = "zk-normal")) {
            modes.push((SnowflakeMode::ZkNormal, "`zk-normal`"));
        }
        if cfg!(not(feature = "zk-recycle")) {
            modes.push((SnowflakeMode::ZkRecycle, "`zk-recycle`"));
        }
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

    #[cfg(all(feature = "zk-normal", feature = "zk-recycle"))]
    #[tokio::test]
    async fn zk_registries_are_made_without_contacting_zookeeper_and_list_peers() {
        // Nothing listens on port 1: the registries still build, and fail only when used.
        let dir = tempfile::tempdir().unwrap();
        let mut c = Config::default();
        c.snowflake.zk.address = "127.0.0.1:1".into();
        c.snowflake.cache_dir = dir.path().to_path_buf();
        for (mode, name) in [
            (SnowflakeMode::ZkNormal, "zk_normal"),
            (SnowflakeMode::ZkRecycle, "zk_recycle"),
        ] {
            c.snowflake.mode = mode;
            let r = registry(&c).await.unwrap();
            assert_eq!(r.worker.mode(), name);
            assert!(r.peers.is_some(), "{name} lists its peers");
        }
    }

    #[cfg(feature = "zk-normal")]
    #[test]
    fn zk_settings_come_from_the_server_configuration_and_bad_ones_name_their_key() {
        let mut c = Config::default();
        c.snowflake.zk.address = "zk1:2181,zk2:2181".into();
        c.snowflake.zk.session_timeout_ms = 6000;
        c.snowflake.zk.recycle_idle_timeout_ms = 20_000;
        c.snowflake.zk.root = "/leaf".into();
        c.snowflake.zk.max_peer_skew_ms = 800;
        let z = zk_config(&c.snowflake.zk);
        assert_eq!(
            z,
            leaf_registry_zk::ZkConfig {
                address: "zk1:2181,zk2:2181".into(),
                session_timeout_ms: 6000,
                recycle_idle_timeout_ms: 20_000,
                root: "/leaf".into(),
                max_peer_skew_ms: 800,
            }
        );
        c.snowflake.mode = SnowflakeMode::ZkNormal;
        c.snowflake.zk.address = " ".into();
        let e = zk_registry(&c, leaf_registry_zk::ZkMode::Normal)
            .err()
            .expect("an empty address is refused");
        assert!(matches!(e, Error::Config(_)), "{e}");
        assert!(e.to_string().contains("snowflake.zk.address"), "{e}");
    }
}
