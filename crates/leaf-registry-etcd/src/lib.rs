#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod client;
mod config;
mod error;
mod registry;
mod store;

pub use config::EtcdConfig;
pub use registry::{EtcdClaims, EtcdRegistry};
pub use store::EtcdStore;

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use leaf_core::backend::{Descriptor, Registry};
use leaf_core::{Result, SegmentStore, StoreCapabilities};

/// etcd's store and workerId mode (`segment.store = "etcd"`, `snowflake.mode = "etcd"`,
/// tables `[segment.etcd]` and `[snowflake.etcd]`), for `leaf-server`'s composition.
#[derive(Debug)]
pub struct Etcd;

#[async_trait]
impl Descriptor for Etcd {
    type Config = EtcdConfig;
    const TABLE: &'static str = "etcd";
    const STORE: Option<&'static str> = Some("etcd");
    const MODE: Option<&'static str> = Some("etcd");

    fn validate(config: &EtcdConfig) -> Result<()> {
        config.validate()
    }

    /// Durable (raft), shared by any number of servers.
    fn store_capabilities(config: &EtcdConfig) -> StoreCapabilities {
        let _ = config;
        StoreCapabilities::new(true, true)
    }

    /// The store for the leaf name `name` (keys under `{prefix}/{name}/segments/`), after
    /// [`EtcdConfig::validate`].
    async fn open_store(config: &EtcdConfig, name: &str) -> Result<Arc<dyn SegmentStore>> {
        config.validate()?;
        Ok(Arc::new(EtcdStore::connect(config, name).await?))
    }

    /// The registry on the cluster of `config`, its cache file in `cache_dir`. Nothing is
    /// contacted before its first `acquire`.
    fn open_registry(config: &EtcdConfig, cache_dir: &Path, name: &str) -> Result<Registry> {
        let registry = EtcdClaims::connect(config, name)?.registry(cache_dir);
        Ok(Registry::without_peers(Arc::new(registry)))
    }
}
