#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod config;
mod error;
mod registry;
mod store;

pub use config::MysqlConfig;
pub use leaf_sql::REGISTRY_ONLY_KEYS;
pub use registry::{LEAF_WORKERID_ALLOC_DDL, LEAF_WORKERID_LEASE_DDL};
pub use store::LEAF_ALLOC_DDL;

use async_trait::async_trait;
use leaf_sql::{Dialect, ServerError};
use sqlx::mysql::{MySql, MySqlPool};
use sqlx::pool::PoolOptions;

/// The segment store's settings (`[segment]` with `store = "mysql"`).
pub type MysqlStoreConfig = MysqlConfig;

/// The `mysql` workerId mode's settings (`[snowflake.mysql]`).
pub type MysqlRegistryConfig = MysqlConfig;

/// MySQL's store and workerId mode (`segment.store = "mysql"`, `snowflake.mode = "mysql"`,
/// tables `[segment.mysql]` and `[snowflake.mysql]`), for `leaf-server`'s composition.
pub type Mysql = leaf_sql::Sql<MysqlDialect>;

/// A segment store on Leaf's `leaf_alloc` table, safe for any number of servers at once.
///
/// An allocation is one transaction, as in Leaf: `UPDATE leaf_alloc SET max_id = max_id + step`
/// (or `+ ?`, the dynamic step) `WHERE biz_tag = ?`, then the `SELECT` of the row. The update
/// holds the row's lock until the commit, so two servers never read the same `max_id`. Near
/// `i64::MAX` the row is read under its lock first and the step cut to what is left. Every
/// call is bounded by `timeout_ms`, a row lock wait by `lock_wait_timeout_s`; both fail with
/// `Unavailable`, never hang.
pub type MysqlStore = leaf_sql::SqlStore<MysqlDialect>;

/// The `mysql` workerId mode, as in the fork (NotFound9/Leaf): each node (`ip:port`) owns one
/// row of `leaf_workerid_alloc`, and the row's auto-increment `id` **is** its worker id, for
/// ever. Keeping the fork's rule (rather than `id - 1`) means a fleet moving from the fork
/// keeps every node's worker id. The cache file is `{cache_dir}/worker-mysql-{name}`.
///
/// While it holds its worker id the node holds the MySQL user lock
/// `GET_LOCK('leaf_workerid:{db}/{ip:port}')` on a dedicated connection (the fork's table is
/// unchanged) whose `wait_timeout` is set; the rest is `leaf_sql::SqlClaims`'s.
pub type MysqlClaims = leaf_sql::SqlClaims<MysqlDialect>;

/// The `mysql` workerId mode with the worker-id cache file: what the server runs.
pub type MysqlRegistry = leaf_sql::SqlRegistry<MysqlDialect>;

/// MySQL's (and MariaDB's) dialect of `leaf_sql`: its statements, its `GET_LOCK` identity lock,
/// its error numbers.
#[derive(Debug)]
pub struct MysqlDialect;

#[async_trait]
impl Dialect for MysqlDialect {
    type Db = MySql;
    type Config = MysqlConfig;
    const NAME: &'static str = "mysql";

    fn pool_options(config: &MysqlConfig, pool: PoolOptions<MySql>) -> PoolOptions<MySql> {
        config.pool_options(pool)
    }

    /// Looked up in `information_schema` first; a table another process created between the
    /// look and the DDL is taken as it is.
    async fn create_table(
        pool: &MySqlPool,
        table: &str,
        ddl: &'static str,
    ) -> Result<bool, sqlx::Error> {
        let exists: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM information_schema.tables \
             WHERE table_schema = DATABASE() AND table_name = ?",
        )
        .bind(table)
        .persistent(false)
        .fetch_one(pool)
        .await?;
        if exists > 0 {
            return Ok(false);
        }
        match sqlx::query(ddl).execute(pool).await {
            Ok(_) => Ok(true),
            Err(e) if error::is_table_exists(&e) => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn classify(e: &sqlx::Error) -> Option<ServerError> {
        error::classify(e)
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
            ("leaf_workerid_lease", LEAF_WORKERID_LEASE_DDL),
        ] {
            let shown = shown_ddl(table);
            assert_eq!(shown.len(), 1, "{table}: {shown:?}");
            assert_eq!(squeezed(&shown[0]), squeezed(ddl), "{table}");
        }
    }
}
