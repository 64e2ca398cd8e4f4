#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod config;
mod connection;
mod error;
mod registry;
mod store;

pub use config::{RedisConfig, RedisRegistryConfig, RedisStoreConfig};
pub use registry::{RedisBackend, RedisRegistry};
pub use store::RedisStore;

use std::path::Path;
use std::sync::Arc;

use leaf_core::{Result, SegmentStore, StoreCapabilities, WorkerIdRegistry};

/// The segment store of `config` (`segment.store = "redis"`), after
/// [`RedisConfig::validate`]; it connects (and runs the durability guard) now. `name` (the
/// leaf name) is not used: `key_prefix` is the namespace.
pub async fn open_store(config: &RedisConfig, name: &str) -> Result<Arc<dyn SegmentStore>> {
    let _ = name;
    Ok(Arc::new(RedisStore::connect(config).await?))
}

/// What the store of `config` can do: durable (the guard refuses a weak server), shared by any
/// number of servers.
pub fn store_capabilities(config: &RedisConfig) -> StoreCapabilities {
    let _ = config;
    StoreCapabilities::new(true, true)
}

/// The `redis` workerId mode's registry on the server of `config`, its cache file in
/// `cache_dir`, for the leaf name `name`. Nothing is contacted before its first `acquire`.
pub fn open_registry(
    config: &RedisConfig,
    cache_dir: &Path,
    name: &str,
) -> Result<Arc<dyn WorkerIdRegistry>> {
    Ok(Arc::new(
        RedisBackend::new(config, name)?.registry(cache_dir),
    ))
}
