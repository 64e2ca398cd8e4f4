//! Fixtures of the real-Redis tests: a key prefix of one's own on the test server (the one
//! `LEAFTEST_REDIS_URL` names, or a container `leaf-testkit` provisions from
//! `LEAFTEST_REDIS_IMAGE`), and stores and registries on it.

#![allow(dead_code, unreachable_pub, unused_imports)]

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use leaf_core::{NodeIdentity, SegmentStore, WorkerIdRegistry};
use leaf_registry_redis::{RedisClaims, RedisConfig, RedisRegistry, RedisStore};
use leaf_testkit::fixture::NodeDirs;
pub use leaf_testkit::fixture::{now_ms, request};
use leaf_testkit::provision::{RedisNamespace, redis_namespace, redis_namespace_on};
use leaf_testkit::{RegistryFixture, StoreFixture};

/// The leaf name every registry uses (under its test's own prefix).
pub const NAME: &str = "leaf";

/// A key prefix of one's own on the shared test server; fails the test loudly when there is none.
pub async fn namespace() -> RedisNamespace {
    match redis_namespace().await {
        Ok(ns) => ns,
        Err(e) => panic!("no Redis for the tests: {e}"),
    }
}

/// The configuration of a namespace: its server and prefix, a lease TTL of 4 s (above the
/// generator's minimum of 3 s; expiries take seconds, not tens of them).
pub fn config_of(ns: &RedisNamespace) -> RedisConfig {
    RedisConfig {
        key_prefix: ns.prefix.clone(),
        lease_ttl_ms: 4000,
        timeout_ms: 2000,
        connect_timeout_ms: 1000,
        ..RedisConfig::with_url(ns.url.clone())
    }
}

/// A namespace on the server at `url` (a dedicated one).
pub fn namespace_on(url: &str) -> RedisNamespace {
    redis_namespace_on(url)
}

/// One store test's namespace.
pub struct StoreFix {
    pub config: RedisConfig,
    _ns: RedisNamespace,
}

impl StoreFix {
    pub async fn new() -> Self {
        let ns = namespace().await;
        StoreFix {
            config: config_of(&ns),
            _ns: ns,
        }
    }

    pub async fn connect(&self) -> RedisStore {
        RedisStore::connect(&self.config)
            .await
            .unwrap_or_else(|e| panic!("redis store: {e}"))
    }
}

#[async_trait]
impl StoreFixture for StoreFix {
    async fn store(&self) -> Arc<dyn SegmentStore> {
        Arc::new(self.connect().await)
    }

    async fn another_handle(&self) -> Arc<dyn SegmentStore> {
        Arc::new(self.connect().await)
    }
}

/// A restore of the tag hashes from an older copy, written straight into Redis as a restored
/// dump holds them: `{prefix}:tag:{tag}`'s `max_id` and `step`.
#[async_trait]
impl leaf_testkit::period_cases::RestoreFixture for StoreFix {
    async fn restore(&self, copy: &[leaf_core::TagRecord]) {
        let mut raw = redis::Client::open(self.config.url.as_str())
            .expect("a Redis URL")
            .get_multiplexed_async_connection()
            .await
            .expect("a raw Redis connection");
        for row in copy {
            let key = format!("{}:tag:{}", self.config.key_prefix, row.tag);
            let _: () = redis::cmd("HSET")
                .arg(&key)
                .arg("max_id")
                .arg(row.max_id)
                .arg("step")
                .arg(row.step)
                .query_async(&mut raw)
                .await
                .expect("write the row back");
        }
    }
}

/// One registry test's namespace, and nodes (registries) in it.
pub struct RegFix {
    pub config: RedisConfig,
    dirs: NodeDirs,
    _ns: Option<RedisNamespace>,
}

impl RegFix {
    pub async fn new() -> Self {
        Self::on(namespace().await)
    }

    pub fn on(ns: RedisNamespace) -> Self {
        RegFix {
            config: config_of(&ns),
            dirs: NodeDirs::default(),
            _ns: Some(ns),
        }
    }

    /// A fixture whose registries run on `config` (a server and prefix of the caller's).
    pub fn with_config(config: RedisConfig) -> Self {
        RegFix {
            config,
            dirs: NodeDirs::default(),
            _ns: None,
        }
    }

    pub fn new_dir(&self) -> PathBuf {
        self.dirs.new_dir()
    }

    pub fn registry_in(&self, dir: PathBuf) -> Arc<RedisRegistry> {
        Arc::new(
            RedisClaims::new(&self.config, NAME)
                .map(|b| b.registry(dir))
                .expect("registry"),
        )
    }

    /// A registry with a new cache directory.
    pub fn registry(&self) -> Arc<RedisRegistry> {
        self.registry_in(self.new_dir())
    }
}

#[async_trait]
impl RegistryFixture for RegFix {
    async fn node(&self) -> Arc<dyn WorkerIdRegistry> {
        self.dirs.node(|dir| self.registry_in(dir))
    }

    async fn restarted(&self, previous: Arc<dyn WorkerIdRegistry>) -> Arc<dyn WorkerIdRegistry> {
        self.dirs.restart(previous, |dir| self.registry_in(dir))
    }

    fn identity(&self, i: u16) -> NodeIdentity {
        NodeIdentity::new("10.0.0.1", 8000 + i)
    }
}
