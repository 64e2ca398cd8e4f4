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

use async_trait::async_trait;
use leaf_core::backend::{Backend, Registry};
use leaf_core::{Result, SegmentStore, StoreCapabilities};

/// PostgreSQL's store and workerId mode (`segment.store = "postgres"`, `snowflake.mode =
/// "postgres"`, tables `[segment.postgres]` and `[snowflake.postgres]`), for `leaf-server`'s
/// composition.
#[derive(Debug)]
pub struct Postgres;

#[async_trait]
impl Backend for Postgres {
    type Config = PostgresConfig;
    const TABLE: &'static str = "postgres";
    const STORE: Option<&'static str> = Some("postgres");
    const MODE: Option<&'static str> = Some("postgres");
    const MODE_ONLY_KEYS: &'static [&'static str] = REGISTRY_ONLY_KEYS;

    fn validate(config: &PostgresConfig) -> Result<()> {
        config.validate()
    }

    /// Durable, shared by any number of servers.
    fn store_capabilities(config: &PostgresConfig) -> StoreCapabilities {
        let _ = config;
        StoreCapabilities::new(true, true)
    }

    /// `leaf_alloc` created when missing, checked when present, after
    /// [`PostgresConfig::validate_store`]. `name` (the leaf name) is not used: the database is
    /// the namespace.
    async fn open_store(config: &PostgresConfig, name: &str) -> Result<Arc<dyn SegmentStore>> {
        let _ = name;
        config.validate_store()?;
        // Boxed: the server's start-up future holds this one, and with sqlx's futures nested
        // in it unboxed, computing its layout passes the compiler's query depth limit (release
        // builds of leaf-server failed so).
        Ok(Arc::new(Box::pin(PostgresStore::connect(config)).await?))
    }

    /// The registry on the server of `config`, its cache file in `cache_dir`. Nothing is
    /// contacted before its first `acquire`.
    fn open_registry(config: &PostgresConfig, cache_dir: &Path, name: &str) -> Result<Registry> {
        config.validate()?;
        let registry = PostgresBackend::connect(config, name)?.registry(cache_dir);
        Ok(Registry::without_peers(Arc::new(registry)))
    }
}
