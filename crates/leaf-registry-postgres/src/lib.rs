#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod config;
mod error;
mod registry;
mod store;

pub use config::PostgresConfig;
pub use leaf_sql::REGISTRY_ONLY_KEYS;
pub use registry::{LEAF_WORKERID_ALLOC_DDL, LEAF_WORKERID_LEASE_DDL};
pub use store::LEAF_ALLOC_DDL;

use async_trait::async_trait;
use leaf_sql::{Dialect, ServerError};
use sqlx::postgres::{PgPool, Postgres as Pg};

/// The segment store's settings (`[segment]` with `store = "postgres"`).
pub type PostgresStoreConfig = PostgresConfig;

/// The `postgres` workerId mode's settings (`[snowflake.postgres]`).
pub type PostgresRegistryConfig = PostgresConfig;

/// PostgreSQL's store and workerId mode (`segment.store = "postgres"`, `snowflake.mode =
/// "postgres"`, tables `[segment.postgres]` and `[snowflake.postgres]`), for `leaf-server`'s
/// composition.
pub type Postgres = leaf_sql::Sql<PostgresDialect>;

/// A segment store on Leaf's `leaf_alloc` table, safe for any number of servers at once.
///
/// An allocation is one statement, `UPDATE leaf_alloc SET max_id = max_id + step ... RETURNING
/// max_id, step`: the update holds the row's lock until it commits, so two servers never get
/// the same range, and no transaction costs extra round trips. The statement checks in SQL that
/// the sum stays within the bigint column; near `i64::MAX` the row is read under its lock
/// instead and the step cut to what is left. Every call is bounded by `timeout_ms` (also the
/// sessions' `statement_timeout`), a row lock wait by `lock_timeout_ms` (`lock_timeout`); both
/// fail with `Unavailable`, never hang. A database whose default isolation is `repeatable read`
/// or `serializable` rolls concurrent allocations back with serialization failures; those are
/// run again.
pub type PostgresStore = leaf_sql::SqlStore<PostgresDialect>;

/// The `postgres` workerId mode: the fork's `mysql` mode on PostgreSQL. Each node (`ip:port`)
/// owns one row of `leaf_workerid_alloc`, and the row's `id` (an identity column, so ids start
/// at 1) **is** its worker id, for ever. The cache file is
/// `{cache_dir}/worker-postgres-{name}`.
///
/// While it holds its worker id the node holds the session advisory lock
/// `pg_try_advisory_lock(hashtextextended('leaf_workerid:{ip:port}', 0))` on a dedicated
/// connection whose `idle_session_timeout` (PostgreSQL 14 and later) and TCP keepalives are
/// set; the rest is `leaf_sql::SqlClaims`'s.
pub type PostgresClaims = leaf_sql::SqlClaims<PostgresDialect>;

/// The `postgres` workerId mode with the worker-id cache file: what the server runs.
pub type PostgresRegistry = leaf_sql::SqlRegistry<PostgresDialect>;

/// PostgreSQL's dialect of `leaf_sql`: its statements, its advisory-lock identity lock, its
/// SQLSTATE codes.
#[derive(Debug)]
pub struct PostgresDialect;

#[async_trait]
impl Dialect for PostgresDialect {
    type Db = Pg;
    type Config = PostgresConfig;
    const NAME: &'static str = "postgres";

    /// Looked up in the search path first. Concurrent `CREATE TABLE`s of one name fail in more
    /// ways than one (the relation, its row type or a catalog index already taken), so the
    /// servers' creators take turns under a transaction-scoped advisory lock and look again
    /// once they hold it; a table someone else creates at that moment is taken as it is.
    async fn create_table(
        pool: &PgPool,
        table: &str,
        ddl: &'static str,
    ) -> Result<bool, sqlx::Error> {
        if table_exists(pool, table).await? {
            return Ok(false);
        }
        let created = async {
            let mut tx = pool.begin().await?;
            sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
                .bind(format!("leaf_create_table:{table}"))
                .persistent(false)
                .execute(&mut *tx)
                .await?;
            let found = table_exists(&mut *tx, table).await?;
            if !found {
                sqlx::query(ddl).execute(&mut *tx).await?;
            }
            tx.commit().await?;
            Ok::<_, sqlx::Error>(!found)
        };
        match created.await {
            Err(e) if error::is_duplicate_object(&e) && table_exists(pool, table).await? => {
                Ok(false)
            }
            other => other,
        }
    }

    fn classify(e: &sqlx::Error) -> Option<ServerError> {
        error::classify(e)
    }
}

async fn table_exists<'c>(
    conn: impl sqlx::PgExecutor<'c>,
    table: &str,
) -> std::result::Result<bool, sqlx::Error> {
    // Start-up statements are not kept prepared: nothing is saved, and no name of them clashes
    // with another client's behind a pooler.
    sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL")
        .bind(table)
        .persistent(false)
        .fetch_one(conn)
        .await
}
