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
