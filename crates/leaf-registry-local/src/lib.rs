#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod config;
mod error;
mod registry;
mod store;

pub use config::{LocalRegistryConfig, SqliteStoreConfig, WorkerIdFrom, hostname_ordinal};
pub use registry::{LocalClaims, LocalRegistry};
pub use store::{LEAF_ALLOC_DDL, SqliteStore};

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use leaf_core::backend::{Descriptor, Registry};
use leaf_core::{Result, SegmentStore, StoreCapabilities};

/// The embedded SQLite segment store (`segment.store = "sqlite"`, `[segment.sqlite]`), for
/// `leaf-server`'s composition.
#[derive(Debug)]
pub struct Sqlite;

#[async_trait]
impl Descriptor for Sqlite {
    type Config = SqliteStoreConfig;
    const TABLE: &'static str = "sqlite";
    const STORE: Option<&'static str> = Some("sqlite");

    fn validate(config: &SqliteStoreConfig) -> Result<()> {
        config.validate()
    }

    /// A file is durable and shared by processes, an in-memory database neither.
    fn store_capabilities(config: &SqliteStoreConfig) -> StoreCapabilities {
        SqliteStore::capabilities_of(config)
    }

    /// The store of `config`, after [`SqliteStoreConfig::validate`]. `name` (the leaf name)
    /// is not used: the file is the namespace.
    async fn open_store(config: &SqliteStoreConfig, name: &str) -> Result<Arc<dyn SegmentStore>> {
        let _ = name;
        config.validate()?;
        Ok(Arc::new(SqliteStore::connect(config).await?))
    }
}

/// The `local` workerId mode (`snowflake.mode = "local"`, `[snowflake.local]`), for
/// `leaf-server`'s composition.
#[derive(Debug)]
pub struct Local;

#[async_trait]
impl Descriptor for Local {
    type Config = LocalRegistryConfig;
    const TABLE: &'static str = "local";
    const MODE: Option<&'static str> = Some("local");

    fn validate(config: &LocalRegistryConfig) -> Result<()> {
        config.validate()
    }

    /// The registry, its cache file in `cache_dir`, after [`LocalRegistryConfig::validate`].
    fn open_registry(
        config: &LocalRegistryConfig,
        cache_dir: &Path,
        name: &str,
    ) -> Result<Registry> {
        config.validate()?;
        let registry = LocalClaims::new(config.clone(), name).registry(cache_dir);
        Ok(Registry::without_peers(Arc::new(registry)))
    }
}
