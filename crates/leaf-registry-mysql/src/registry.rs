//! MySQL's part of the `mysql` workerId mode (`leaf_sql::SqlBackend`): the fork's
//! `leaf_workerid_alloc` table and its statements, and the identity held with `GET_LOCK`.

use std::time::Duration;

use async_trait::async_trait;
use leaf_core::{NodeIdentity, Result};
use leaf_sql::{KEY, RegistryDialect, ServerError, map_sqlx_at_start};
use sqlx::mysql::{MySqlConnectOptions, MySqlConnection, MySqlPool, MySqlQueryResult};

use crate::MysqlDialect;
use crate::error::classify;

/// The fork's DDL for `leaf_workerid_alloc`, exactly. It runs only when the table is missing;
/// an existing table is never altered.
pub const LEAF_WORKERID_ALLOC_DDL: &str = "CREATE TABLE leaf_workerid_alloc (id int(10) unsigned NOT NULL AUTO_INCREMENT, ip_port varchar(128) NOT NULL DEFAULT '', ip varchar(64) NOT NULL DEFAULT '', port varchar(64) NOT NULL DEFAULT '', max_timestamp bigint(20) DEFAULT NULL, create_time timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP, update_time timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP, PRIMARY KEY (id), UNIQUE KEY ip_port (ip_port)) ENGINE=InnoDB;";

#[async_trait]
impl RegistryDialect for MysqlDialect {
    const LEAF_WORKERID_ALLOC_DDL: &'static str = LEAF_WORKERID_ALLOC_DDL;
    const SELECT_WORKER: &'static str = "SELECT CAST(id AS SIGNED) AS id, max_timestamp \
         FROM leaf_workerid_alloc WHERE ip_port = ?";
    const READ_MARK: &'static str = "SELECT max_timestamp FROM leaf_workerid_alloc WHERE id = ?";
    const RAISE_MARK: &'static str = "UPDATE leaf_workerid_alloc \
         SET max_timestamp = GREATEST(COALESCE(max_timestamp, 0), ?) WHERE id = ?";
    const FINAL_MARK: &'static str =
        "UPDATE leaf_workerid_alloc SET max_timestamp = ? WHERE id = ?";
    const LOCK_KIND: &'static str = "mysql lock";
    const RESET_IDS: &'static str = "reset its AUTO_INCREMENT";

    /// The auto-increment `id` is the worker id.
    async fn insert_worker(pool: &MySqlPool, identity: &NodeIdentity) -> Result<Option<u64>> {
        let ip_port = identity.to_string();
        let inserted =
            sqlx::query("INSERT INTO leaf_workerid_alloc (ip_port, ip, port) VALUES (?, ?, ?)")
                .bind(&ip_port)
                .bind(&identity.ip)
                .bind(identity.port.to_string())
                .execute(pool)
                .await;
        match inserted {
            Ok(done) => Ok(Some(done.last_insert_id())),
            Err(e) if classify(&e) == Some(ServerError::Duplicate) => Ok(None),
            Err(e) => Err(map_sqlx_at_start::<MysqlDialect>(e, &ip_port, KEY)),
        }
    }

    /// sqlx asks for found rows (`CLIENT_FOUND_ROWS`): a mark left as it was still counts.
    fn rows_affected(done: &MySqlQueryResult) -> u64 {
        done.rows_affected()
    }

    /// User locks are server-wide, so the name carries the database (two deployments on one
    /// server do not share identities); MySQL allows 64 characters, so a long name is hashed.
    fn lock_name(options: &MySqlConnectOptions, identity: &NodeIdentity) -> String {
        let id = format!("{}/{identity}", options.get_database().unwrap_or_default());
        let name = format!("leaf_workerid:{id}");
        if name.len() <= 64 {
            return name;
        }
        // FNV-1a: stable across processes and versions (unlike std's hasher).
        let hash = id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
        format!("leaf_workerid:{hash:016x}")
    }

    /// Builds before `worker-mysql-{name}` kept the mark in `worker-{name}` (the `local` mode's
    /// name too): read for the mark of the id MySQL assigns, never for the id.
    fn legacy_cache_file_name(name: &str) -> Option<String> {
        Some(format!("worker-{name}"))
    }

    async fn prepare_session(
        conn: &mut MySqlConnection,
        idle_limit: Duration,
    ) -> Result<(), sqlx::Error> {
        sqlx::query("SET SESSION wait_timeout = ?")
            .bind(idle_limit.as_secs().max(1))
            .execute(conn)
            .await
            .map(drop)
    }

    /// `GET_LOCK`, which waits on the server (in whole seconds).
    async fn try_lock(
        conn: &mut MySqlConnection,
        name: &str,
        wait: Duration,
    ) -> Result<bool, sqlx::Error> {
        let wait_s = u32::try_from(wait.as_secs()).unwrap_or(u32::MAX);
        let got: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK(?, ?)")
            .bind(name)
            .bind(wait_s)
            .fetch_one(conn)
            .await?;
        Ok(got == Some(1))
    }
}
