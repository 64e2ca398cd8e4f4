#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod client;
mod config;
mod error;
mod registry;
mod store;

pub use config::EtcdConfig;
pub use registry::{EtcdBackend, EtcdRegistry};
pub use store::EtcdStore;

use std::path::Path;
use std::sync::Arc;

use leaf_core::{Result, SegmentStore, StoreCapabilities, WorkerIdRegistry};

/// The segment store of `config` (`segment.store = "etcd"`) for the leaf name `name` (keys
/// under `{prefix}/{name}/segments/`), after [`EtcdConfig::validate`].
pub async fn open_store(config: &EtcdConfig, name: &str) -> Result<Arc<dyn SegmentStore>> {
    config.validate()?;
    Ok(Arc::new(EtcdStore::connect(config, name).await?))
}

/// What the store of `config` can do: durable (raft), shared by any number of servers.
pub fn store_capabilities(config: &EtcdConfig) -> StoreCapabilities {
    let _ = config;
    StoreCapabilities::new(true, true)
}

/// The `etcd` workerId mode's registry on the cluster of `config`, its cache file in
/// `cache_dir`, for the leaf name `name`. Nothing is contacted before its first `acquire`.
pub fn open_registry(
    config: &EtcdConfig,
    cache_dir: &Path,
    name: &str,
) -> Result<Arc<dyn WorkerIdRegistry>> {
    Ok(Arc::new(
        EtcdBackend::connect(config, name)?.registry(cache_dir),
    ))
}
