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

use async_trait::async_trait;
use leaf_core::backend::{Backend, Registry};
use leaf_core::{Result, SegmentStore, StoreCapabilities};

/// MySQL's store and workerId mode (`segment.store = "mysql"`, `snowflake.mode = "mysql"`,
/// tables `[segment.mysql]` and `[snowflake.mysql]`), for `leaf-server`'s composition.
#[derive(Debug)]
pub struct Mysql;

#[async_trait]
impl Backend for Mysql {
    type Config = MysqlConfig;
    const TABLE: &'static str = "mysql";
    const STORE: Option<&'static str> = Some("mysql");
    const MODE: Option<&'static str> = Some("mysql");
    const MODE_ONLY_KEYS: &'static [&'static str] = REGISTRY_ONLY_KEYS;

    fn validate(config: &MysqlConfig) -> Result<()> {
        config.validate()
    }

    /// Durable, shared by any number of servers.
    fn store_capabilities(config: &MysqlConfig) -> StoreCapabilities {
        let _ = config;
        StoreCapabilities::new(true, true)
    }

    /// `leaf_alloc` created when missing, checked when present, after
    /// [`MysqlConfig::validate_store`]. `name` (the leaf name) is not used: the database is
    /// the namespace.
    async fn open_store(config: &MysqlConfig, name: &str) -> Result<Arc<dyn SegmentStore>> {
        let _ = name;
        config.validate_store()?;
        Ok(Arc::new(MysqlStore::connect(config).await?))
    }

    /// The registry on the server of `config`, its cache file in `cache_dir`. Nothing is
    /// contacted before its first `acquire`.
    fn open_registry(config: &MysqlConfig, cache_dir: &Path, name: &str) -> Result<Registry> {
        config.validate()?;
        let registry = MysqlBackend::connect(config, name)?.registry(cache_dir);
        Ok(Registry::without_peers(Arc::new(registry)))
    }
}
