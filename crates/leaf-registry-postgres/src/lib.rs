#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod config;
mod error;
mod registry;
mod store;

pub use config::{PostgresConfig, PostgresRegistryConfig, PostgresStoreConfig, REGISTRY_ONLY_KEYS};
pub use registry::{LEAF_WORKERID_ALLOC_DDL, PostgresBackend, PostgresRegistry};
pub use store::{LEAF_ALLOC_DDL, PostgresStore};

use std::path::Path;
use std::sync::Arc;

use leaf_core::{Result, SegmentStore, StoreCapabilities, WorkerIdRegistry};

/// The segment store of `config` (`segment.store = "postgres"`), after
/// [`PostgresConfig::validate`]: `leaf_alloc` created when missing, checked when present.
/// `name` (the leaf name) is not used: the database is the namespace.
pub async fn open_store(config: &PostgresConfig, name: &str) -> Result<Arc<dyn SegmentStore>> {
    let _ = name;
    config.validate_store()?;
    // Boxed: the server's start-up future holds this one, and with sqlx's futures nested in
    // it unboxed, computing its layout passes the compiler's query depth limit (release builds
    // of leaf-server failed so).
    Ok(Arc::new(Box::pin(PostgresStore::connect(config)).await?))
}

/// What the store of `config` can do: durable, shared by any number of servers.
pub fn store_capabilities(config: &PostgresConfig) -> StoreCapabilities {
    let _ = config;
    StoreCapabilities::new(true, true)
}

/// The `postgres` workerId mode's registry on the server of `config`, its cache file in
/// `cache_dir`, for the leaf name `name`. Nothing is contacted before its first `acquire`.
pub fn open_registry(
    config: &PostgresConfig,
    cache_dir: &Path,
    name: &str,
) -> Result<Arc<dyn WorkerIdRegistry>> {
    config.validate()?;
    Ok(Arc::new(
        PostgresBackend::connect(config, name)?.registry(cache_dir),
    ))
}
