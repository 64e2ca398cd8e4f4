#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod config;
mod error;
mod registry;
mod store;

pub use config::{MysqlConfig, MysqlRegistryConfig, MysqlStoreConfig, REGISTRY_ONLY_KEYS};
pub use registry::{LEAF_WORKERID_ALLOC_DDL, MysqlBackend, MysqlRegistry};
pub use store::{LEAF_ALLOC_DDL, MysqlStore};

use std::path::Path;
use std::sync::Arc;

use leaf_core::{Result, SegmentStore, StoreCapabilities, WorkerIdRegistry};

/// The segment store of `config` (`segment.store = "mysql"`), after [`MysqlConfig::validate`]:
/// `leaf_alloc` created when missing, checked when present. `name` (the leaf name) is not used:
/// the database is the namespace.
pub async fn open_store(config: &MysqlConfig, name: &str) -> Result<Arc<dyn SegmentStore>> {
    let _ = name;
    config.validate_store()?;
    Ok(Arc::new(MysqlStore::connect(config).await?))
}

/// What the store of `config` can do: durable, shared by any number of servers.
pub fn store_capabilities(config: &MysqlConfig) -> StoreCapabilities {
    let _ = config;
    StoreCapabilities::new(true, true)
}

/// The `mysql` workerId mode's registry on the server of `config`, its cache file in
/// `cache_dir`, for the leaf name `name`. Nothing is contacted before its first `acquire`.
pub fn open_registry(
    config: &MysqlConfig,
    cache_dir: &Path,
    name: &str,
) -> Result<Arc<dyn WorkerIdRegistry>> {
    config.validate()?;
    Ok(Arc::new(
        MysqlBackend::connect(config, name)?.registry(cache_dir),
    ))
}
