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
    name_keys,
};

/// The error for a backend whose cargo feature is not compiled in.
#[cfg_attr(
    all(
        feature = "local",
        feature = "sqlite",
        feature = "mysql",
        feature = "zk-normal",
        feature = "zk-recycle",
        feature = "redis",
        feature = "etcd"
    ),
    expect(dead_code, reason = "every backend is compiled in")
)]
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
///
/// `name` is the leaf name (`name`), which namespaces the stores that keep a leaf name's keys
/// apart (etcd).
pub async fn segment_store(config: &SegmentSection, name: &str) -> Result<Arc<dyn SegmentStore>> {
    open_segment_store(config, name)
        .await
        .map_err(|e| key_leading_field(e, "segment", STORE_FIELDS))
}

async fn open_segment_store(
    config: &SegmentSection,
    #[cfg_attr(not(feature = "etcd"), allow(unused_variables))] config_name: &str,
) -> Result<Arc<dyn SegmentStore>> {
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
        #[cfg(feature = "etcd")]
        StoreKind::Etcd => {
            let etcd = etcd_store_config(config);
            let name = config_name.to_string();
            // `EtcdStore`'s: durable (raft), shared by any number of servers.
            let capabilities = leaf_core::StoreCapabilities::new(true, true);
            connect_or_defer("etcd", capabilities, move || {
                let (etcd, name) = (etcd.clone(), name.clone());
                async move {
                    let store = leaf_registry_etcd::EtcdStore::connect(&etcd, &name).await?;
                    Ok(Arc::new(store) as Arc<dyn SegmentStore>)
                }
            })
            .await
            .map_err(|e| name_keys(e, ETCD_STORE_WORDS))
        }
        #[cfg(not(feature = "etcd"))]
        StoreKind::Etcd => Err(missing_feature("segment.store", "etcd", "etcd")),
        #[cfg(feature = "redis")]
        StoreKind::Redis => {
            let redis = redis_store_config(config);
            // `RedisStore`'s: durable (the guard refuses a weak server), shared by any number
            // of servers.
            let capabilities = leaf_core::StoreCapabilities::new(true, true);
            connect_or_defer("redis", capabilities, move || {
                let redis = redis.clone();
                async move {
                    let store = leaf_registry_redis::RedisStore::connect(&redis).await?;
                    Ok(Arc::new(store) as Arc<dyn SegmentStore>)
                }
            })
            .await
            .map_err(|e| name_keys(e, REDIS_STORE_WORDS))
        }
        #[cfg(not(feature = "redis"))]
        StoreKind::Redis => Err(missing_feature("segment.store", "redis", "redis")),
    }
}

/// `connect()`'s store; on a retryable failure, a [`DeferredStore`](crate::deferred::DeferredStore)
/// of `kind` with `capabilities` that calls `connect` again on use.
#[cfg(any(
    feature = "sqlite",
    feature = "mysql",
    feature = "redis",
    feature = "etcd"
))]
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

/// The etcd store's field names in its errors and the keys they come from.
#[cfg(feature = "etcd")]
const ETCD_STORE_WORDS: &[(&str, &str)] = &[
    ("endpoints", "segment.url"),
    ("timeout_ms", "segment.timeout_ms"),
];

/// The etcd store's settings: the endpoints listed in `segment.url`, `segment.timeout_ms`.
#[cfg(feature = "etcd")]
pub fn etcd_store_config(config: &SegmentSection) -> leaf_registry_etcd::EtcdConfig {
    leaf_registry_etcd::EtcdConfig {
        timeout_ms: config.timeout_ms,
        ..leaf_registry_etcd::EtcdConfig::with_url(&config.url)
    }
}

/// The `etcd` mode's settings from `[snowflake.etcd]`.
#[cfg(feature = "etcd")]
pub fn etcd_registry_config(
    section: &crate::config::EtcdSection,
) -> leaf_registry_etcd::EtcdConfig {
    leaf_registry_etcd::EtcdConfig {
        endpoints: section.endpoints.clone(),
        timeout_ms: section.timeout_ms,
        lease_ttl_ms: section.lease_ttl_ms,
        prefix: section.prefix.clone(),
    }
}

/// The fields of `[segment.redis]` that the Redis store's errors name, anywhere in the
/// message (the durability guard's advice), and their keys.
#[cfg(feature = "redis")]
const REDIS_STORE_WORDS: &[(&str, &str)] = &[
    ("key_prefix", "segment.redis.key_prefix"),
    (
        "accept_weak_durability",
        "segment.redis.accept_weak_durability",
    ),
    ("assume_durable", "segment.redis.assume_durable"),
    ("wait_replicas", "segment.redis.wait_replicas"),
    ("wait_timeout_ms", "segment.redis.wait_timeout_ms"),
];

/// The Redis store's settings: `segment.url`, the timeouts of `[segment]`, and
/// `[segment.redis]`.
#[cfg(feature = "redis")]
pub fn redis_store_config(config: &SegmentSection) -> leaf_registry_redis::RedisStoreConfig {
    let r = &config.redis;
    leaf_registry_redis::RedisConfig {
        url: config.url.clone(),
        key_prefix: r.key_prefix.clone(),
        connect_timeout_ms: config.connect_timeout_ms,
        timeout_ms: config.timeout_ms,
        accept_weak_durability: r.accept_weak_durability,
        assume_durable: r.assume_durable,
        wait_replicas: r.wait_replicas,
        wait_timeout_ms: r.wait_timeout_ms,
        ..leaf_registry_redis::RedisConfig::default()
    }
}

/// The `redis` mode's settings from `[snowflake.redis]`.
#[cfg(feature = "redis")]
pub fn redis_registry_config(
    section: &crate::config::RedisSection,
) -> leaf_registry_redis::RedisRegistryConfig {
    leaf_registry_redis::RedisConfig {
        url: section.url.clone(),
        key_prefix: section.key_prefix.clone(),
        connect_timeout_ms: section.connect_timeout_ms,
        timeout_ms: section.timeout_ms,
        accept_weak_durability: section.accept_weak_durability,
        assume_durable: section.assume_durable,
        wait_replicas: section.wait_replicas,
        wait_timeout_ms: section.wait_timeout_ms,
        lease_ttl_ms: section.lease_ttl_ms,
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
    /// Field names that a message may name anywhere, not only first, and their keys.
    words: &'static [(&'static str, &'static str)],
}

impl Keyed {
    fn wrap(
        inner: Arc<dyn WorkerIdRegistry>,
        section: &'static str,
        fields: &'static [&'static str],
    ) -> Arc<dyn WorkerIdRegistry> {
        Self::wrap_naming(inner, section, fields, &[])
    }

    /// [`Keyed::wrap`], with field names a message may name anywhere (`words`).
    fn wrap_naming(
        inner: Arc<dyn WorkerIdRegistry>,
        section: &'static str,
        fields: &'static [&'static str],
        words: &'static [(&'static str, &'static str)],
    ) -> Arc<dyn WorkerIdRegistry> {
        Arc::new(Keyed {
            inner,
            section,
            fields,
            words,
        })
    }

    fn key(&self, e: Error) -> Error {
        name_keys(key_leading_field(e, self.section, self.fields), self.words)
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
            let registry = leaf_registry_mysql::MysqlBackend::connect(
                &mysql_registry_config(&sf.mysql),
                &config.name,
            )
            .map_err(|e| key_leading_field(e, "snowflake.mysql", &["url"]))?
            .registry(sf.cache_dir.clone());
            Ok(Registry::without_peers(Keyed::wrap(
                Arc::new(registry),
                "snowflake.mysql",
                &["url"],
            )))
        }
        #[cfg(not(feature = "mysql"))]
        SnowflakeMode::Mysql => Err(missing_feature("snowflake.mode", "mysql", "mysql")),
        #[cfg(feature = "etcd")]
        SnowflakeMode::Etcd => {
            const FIELDS: &[&str] = &["endpoints", "timeout_ms", "lease_ttl_ms", "prefix"];
            // Contacts nothing until the first `acquire`.
            let registry = leaf_registry_etcd::EtcdBackend::connect(
                &etcd_registry_config(&sf.etcd),
                &config.name,
            )
            .map_err(|e| key_leading_field(e, "snowflake.etcd", FIELDS))?
            .registry(sf.cache_dir.clone());
            Ok(Registry::without_peers(Keyed::wrap(
                Arc::new(registry),
                "snowflake.etcd",
                FIELDS,
            )))
        }
        #[cfg(not(feature = "etcd"))]
        SnowflakeMode::Etcd => Err(missing_feature("snowflake.mode", "etcd", "etcd")),
        #[cfg(feature = "redis")]
        SnowflakeMode::Redis => {
            const FIELDS: &[&str] = &[
                "url",
                "key_prefix",
                "lease_ttl_ms",
                "connect_timeout_ms",
                "timeout_ms",
                "accept_weak_durability",
                "assume_durable",
                "wait_replicas",
                "wait_timeout_ms",
            ];
            // Contacts nothing until the first `acquire`.
            let registry = leaf_registry_redis::RedisRegistry::new(
                &redis_registry_config(&sf.redis),
                sf.cache_dir.clone(),
                &config.name,
            )
            .map_err(|e| key_leading_field(e, "snowflake.redis", FIELDS))?;
            Ok(Registry::without_peers(Keyed::wrap_naming(
                Arc::new(registry),
                "snowflake.redis",
                FIELDS,
                &[
                    (
                        "accept_weak_durability",
                        "snowflake.redis.accept_weak_durability",
                    ),
                    ("assume_durable", "snowflake.redis.assume_durable"),
                ],
            )))
        }
        #[cfg(not(feature = "redis"))]
        SnowflakeMode::Redis => Err(missing_feature("snowflake.mode", "redis", "redis")),
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
        fence_on_disconnect: section.fence_on_disconnect,
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
        "fence_on_disconnect",
    ];
    let key = |e| key_leading_field(e, "snowflake.zk", FIELDS);
    let zk = zk_config(&config.snowflake.zk);
    // The crate names its fields; the server's keys add the section.
    zk.validate().map_err(key)?;
    let registry = Arc::new(
        leaf_registry_zk::ZkBackend::connect(&zk, mode, &config.name)
            .map_err(key)?
            .registry(config.snowflake.cache_dir.clone()),
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
        self.backend().peers().await
    }
    async fn register(&self, identity: &NodeIdentity) -> Result<()> {
        self.backend().register_temporary(identity).await
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
        let mut modes = Vec::new();
        let mut stores = Vec::new();
        if cfg!(not(feature = "etcd")) {
            modes.push((SnowflakeMode::Etcd, "`etcd`"));
            stores.push((StoreKind::Etcd, "`etcd`"));
        }
        if cfg!(not(feature = "zk-normal")) {
            modes.push((SnowflakeMode::ZkNormal, "`zk-normal`"));
        }
        if cfg!(not(feature = "zk-recycle")) {
            modes.push((SnowflakeMode::ZkRecycle, "`zk-recycle`"));
        }
        if cfg!(not(feature = "mysql")) {
            modes.push((SnowflakeMode::Mysql, "`mysql`"));
            stores.push((StoreKind::Mysql, "`mysql`"));
        }
        if cfg!(not(feature = "redis")) {
            modes.push((SnowflakeMode::Redis, "`redis`"));
            stores.push((StoreKind::Redis, "`redis`"));
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
            let e = segment_store(&c.segment, &c.name).await.unwrap_err();
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
        let e = segment_store(&Config::default().segment, "leaf")
            .await
            .unwrap_err();
        assert!(e.to_string().contains("`sqlite`"), "{e}");
    }

    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn sqlite_store_opens_and_creates_its_directory() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = Config::default();
        c.segment.url = format!("sqlite://{}/sub/leaf.db", dir.path().display());
        let store = segment_store(&c.segment, &c.name).await.unwrap();
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
        c.snowflake.zk.fence_on_disconnect = true;
        let z = zk_config(&c.snowflake.zk);
        assert_eq!(
            z,
            leaf_registry_zk::ZkConfig {
                address: "zk1:2181,zk2:2181".into(),
                session_timeout_ms: 6000,
                recycle_idle_timeout_ms: 20_000,
                root: "/leaf".into(),
                max_peer_skew_ms: 800,
                fence_on_disconnect: true,
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
