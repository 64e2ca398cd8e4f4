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

#[cfg(test)]
mod tests {
    use super::*;

    /// The statements of the workspace README's "Running on MySQL" that create `table`.
    fn shown_ddl(table: &str) -> Vec<String> {
        let readme = include_str!("../../../README.md");
        let start = readme.find("## Running on MySQL").expect("the section");
        let end = readme[start + 1..]
            .find("\n## ")
            .map_or(readme.len(), |e| start + 1 + e);
        let head = format!("CREATE TABLE {table} (");
        readme[start..end]
            .split("```sql")
            .skip(1)
            .filter_map(|b| b.split("```").next())
            .flat_map(|b| b.split_inclusive(';'))
            .map(|s| {
                s.lines()
                    .filter(|l| !l.trim_start().starts_with("--"))
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .filter(|s| s.trim_start().starts_with(&head))
            .collect()
    }

    /// Whitespace carries no meaning in these statements; the docs spread them over lines.
    fn squeezed(sql: &str) -> String {
        sql.split_whitespace().collect()
    }

    #[test]
    fn the_readme_shows_the_ddl_the_server_runs() {
        for (table, ddl) in [
            ("leaf_alloc", LEAF_ALLOC_DDL),
            ("leaf_workerid_alloc", LEAF_WORKERID_ALLOC_DDL),
        ] {
            let shown = shown_ddl(table);
            assert_eq!(shown.len(), 1, "{table}: {shown:?}");
            assert_eq!(squeezed(&shown[0]), squeezed(ddl), "{table}");
        }
    }
}
