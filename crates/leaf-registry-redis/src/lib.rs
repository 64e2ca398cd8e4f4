#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod config;
mod connection;
mod error;
mod registry;
mod store;

pub use config::{RedisConfig, RedisRegistryConfig, RedisStoreConfig};
pub use registry::{RedisClaims, RedisRegistry};
pub use store::RedisStore;

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use leaf_core::backend::{Descriptor, Registry};
use leaf_core::{Result, SegmentStore, StoreCapabilities};

/// Redis's store and workerId mode (`segment.store = "redis"`, `snowflake.mode = "redis"`,
/// tables `[segment.redis]` and `[snowflake.redis]`), for `leaf-server`'s composition.
#[derive(Debug)]
pub struct Redis;

#[async_trait]
impl Descriptor for Redis {
    type Config = RedisConfig;
    const TABLE: &'static str = "redis";
    const STORE: Option<&'static str> = Some("redis");
    const MODE: Option<&'static str> = Some("redis");

    fn validate(config: &RedisConfig) -> Result<()> {
        config.validate()
    }

    /// Durable (the guard refuses a weak server), shared by any number of servers.
    fn store_capabilities(config: &RedisConfig) -> StoreCapabilities {
        let _ = config;
        StoreCapabilities::new(true, true)
    }

    /// The store; it connects (and runs the durability guard) now. `name` (the leaf name) is
    /// not used: `key_prefix` is the namespace.
    async fn open_store(config: &RedisConfig, name: &str) -> Result<Arc<dyn SegmentStore>> {
        let _ = name;
        Ok(Arc::new(RedisStore::connect(config).await?))
    }

    /// The registry on the server of `config`, its cache file in `cache_dir`. Nothing is
    /// contacted before its first `acquire`.
    fn open_registry(config: &RedisConfig, cache_dir: &Path, name: &str) -> Result<Registry> {
        let registry = RedisClaims::new(config, name)?.registry(cache_dir);
        Ok(Registry::without_peers(Arc::new(registry)))
    }
}
