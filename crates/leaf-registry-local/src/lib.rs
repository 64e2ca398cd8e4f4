#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod config;
mod error;
mod registry;
mod store;

pub use config::{LocalRegistryConfig, SqliteStoreConfig, WorkerIdFrom, hostname_ordinal};
pub use registry::{LocalBackend, LocalRegistry};
pub use store::{LEAF_ALLOC_DDL, SqliteStore};

use std::path::Path;
use std::sync::Arc;

use leaf_core::{Result, SegmentStore, StoreCapabilities, WorkerIdRegistry};

/// The SQLite segment store of `config` (`segment.store = "sqlite"`), after
/// [`SqliteStoreConfig::validate`]. `name` (the leaf name) is not used: the file is the
/// namespace.
pub async fn open_store(config: &SqliteStoreConfig, name: &str) -> Result<Arc<dyn SegmentStore>> {
    let _ = name;
    config.validate()?;
    Ok(Arc::new(SqliteStore::connect(config).await?))
}

/// What the store of `config` can do: a file is durable and shared by processes, an in-memory
/// database neither.
pub fn store_capabilities(config: &SqliteStoreConfig) -> StoreCapabilities {
    SqliteStore::capabilities_of(config)
}

/// The `local` workerId mode's registry, its cache file in `cache_dir`, for the leaf name
/// `name`, after [`LocalRegistryConfig::validate`].
pub fn open_registry(
    config: &LocalRegistryConfig,
    cache_dir: &Path,
    name: &str,
) -> Result<Arc<dyn WorkerIdRegistry>> {
    config.validate()?;
    Ok(Arc::new(
        LocalBackend::new(config.clone(), name).registry(cache_dir),
    ))
}
