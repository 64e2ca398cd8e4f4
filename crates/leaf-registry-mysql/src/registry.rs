//! MySQL's part of the `mysql` workerId mode (`leaf_sql::SqlClaims`): the fork's
//! `leaf_workerid_alloc` table and its statements, and the identity held with `GET_LOCK`.

use std::time::Duration;

use async_trait::async_trait;
use leaf_core::{Error, NodeIdentity, Result};
use leaf_sql::{
    Arg, KEY, Locking, RegistryDialect, ServerError, Transport, inline, map_sqlx, map_sqlx_at_start,
};
use sqlx::mysql::{MySqlConnectOptions, MySqlConnection, MySqlPool, MySqlQueryResult};
use sqlx::{AssertSqlSafe, Row};

use crate::MysqlDialect;
use crate::error::classify;

/// The fork's DDL for `leaf_workerid_alloc`, exactly. It runs only when the table is missing;
/// an existing table is never altered.
pub const LEAF_WORKERID_ALLOC_DDL: &str = "CREATE TABLE leaf_workerid_alloc (id int(10) unsigned NOT NULL AUTO_INCREMENT, ip_port varchar(128) NOT NULL DEFAULT '', ip varchar(64) NOT NULL DEFAULT '', port varchar(64) NOT NULL DEFAULT '', max_timestamp bigint(20) DEFAULT NULL, create_time timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP, update_time timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP, PRIMARY KEY (id), UNIQUE KEY ip_port (ip_port)) ENGINE=InnoDB;";

/// `leaf_workerid_lease`: the leased pool the monotonic mode's leader holds
/// (`leaf_sql::SqlLeases`). It runs only when the table is missing. `name` compares bytes, so
/// that leaf names differing in case are two pools.
pub const LEAF_WORKERID_LEASE_DDL: &str = "CREATE TABLE leaf_workerid_lease (name varchar(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, id bigint NOT NULL, token bigint NOT NULL DEFAULT 0, owner varchar(128) NOT NULL DEFAULT '', ttl_ms bigint NOT NULL DEFAULT 0, lease_until bigint NOT NULL DEFAULT 0, max_timestamp bigint DEFAULT NULL, update_time timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP, PRIMARY KEY (name, id)) ENGINE=InnoDB;";

#[async_trait]
impl RegistryDialect for MysqlDialect {
    const LEAF_WORKERID_ALLOC_DDL: &'static str = LEAF_WORKERID_ALLOC_DDL;
    const SELECT_WORKER: &'static str = "SELECT CAST(id AS SIGNED) AS id, max_timestamp \
         FROM leaf_workerid_alloc WHERE ip_port = ?";
    const READ_MARK: &'static str = "SELECT max_timestamp FROM leaf_workerid_alloc \
         WHERE id = ? AND ip_port = ? AND IS_USED_LOCK(?) = CONNECTION_ID() \
         AND CONNECTION_ID() = ?";
    const RAISE_MARK: &'static str = "UPDATE leaf_workerid_alloc \
         SET max_timestamp = GREATEST(COALESCE(max_timestamp, 0), ?) \
         WHERE id = ? AND ip_port = ? AND IS_USED_LOCK(?) = CONNECTION_ID() \
         AND CONNECTION_ID() = ?";
    const FINAL_MARK: &'static str = "UPDATE leaf_workerid_alloc SET max_timestamp = ? \
         WHERE id = ? AND ip_port = ? AND IS_USED_LOCK(?) = CONNECTION_ID() \
         AND CONNECTION_ID() = ?";
    const LEAF_WORKERID_LEASE_DDL: &'static str = LEAF_WORKERID_LEASE_DDL;
    /// UTC, whatever the session's time zone.
    const NOW_MS: &'static str = "CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000 AS SIGNED)";
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
                .persistent(false)
                .execute(pool)
                .await;
        match inserted {
            Ok(done) => Ok(Some(done.last_insert_id())),
            Err(e) if classify(&e) == Some(ServerError::Duplicate) => Ok(None),
            Err(e) => Err(map_sqlx_at_start::<MysqlDialect>(e, &ip_port, KEY)),
        }
    }

    /// The bytes as a utf8mb4 string (`_utf8mb4 X'..'`): a literal with a character set
    /// introducer is coercible, as a bound parameter is, so that it compares with a column of
    /// any utf8mb4 collation (`CONVERT(.. USING utf8mb4)` would carry the character set's
    /// default collation, and clash with a column of another: 1267).
    fn text_literal(hex: &str) -> String {
        format!("_utf8mb4 X'{hex}'")
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
        let secs = i64::try_from(idle_limit.as_secs().max(1)).unwrap_or(i64::MAX);
        let sql = inline::<Self>("SET SESSION wait_timeout = ?", &[Arg::Int(secs)]);
        sqlx::raw_sql(AssertSqlSafe(sql))
            .execute(conn)
            .await
            .map(drop)
    }

    /// `GET_LOCK`, which waits on the server (in whole seconds), unless the session holds the
    /// lock already (`GET_LOCK` would answer 1 again: user locks are re-entrant).
    async fn try_lock(
        conn: &mut MySqlConnection,
        name: &str,
        wait: Duration,
    ) -> Result<Locking, sqlx::Error> {
        let wait_s = i64::try_from(wait.as_secs()).unwrap_or(i64::MAX);
        let sql = inline::<Self>(
            "SELECT CASE WHEN IS_USED_LOCK(?) = CONNECTION_ID() THEN 2 ELSE GET_LOCK(?, ?) END, \
             CAST(CONNECTION_ID() AS SIGNED)",
            &[Arg::Text(name), Arg::Text(name), Arg::Int(wait_s)],
        );
        let row = sqlx::raw_sql(AssertSqlSafe(sql)).fetch_one(conn).await?;
        let got: Option<i64> = row.try_get(0)?;
        let session: i64 = row.try_get(1)?;
        Ok(match got {
            Some(2) => Locking::Shared,
            Some(1) => Locking::Taken(session),
            _ => Locking::Busy,
        })
    }

    async fn holds(
        conn: &mut MySqlConnection,
        name: &str,
        server_session: i64,
    ) -> Result<bool, sqlx::Error> {
        let sql = inline::<Self>(
            "SELECT IS_USED_LOCK(?) = CONNECTION_ID() AND CONNECTION_ID() = ?",
            &[Arg::Text(name), Arg::Int(server_session)],
        );
        let row = sqlx::raw_sql(AssertSqlSafe(sql)).fetch_one(conn).await?;
        let held: Option<i64> = row.try_get(0)?;
        Ok(held == Some(1))
    }

    /// Refuses the deployments in which `GET_LOCK` guards nothing: Galera (`wsrep_on`) and
    /// Group Replication in multi-primary mode, where each node grants its own locks; and
    /// statement-based binary logging, whose replicas would run the mark's update without its
    /// lock and skip it. Warns when commits are not flushed at once.
    async fn check_deployment(conn: &mut MySqlConnection) -> Result<Vec<String>> {
        let rows = sqlx::raw_sql(
            "SHOW VARIABLES WHERE Variable_name IN ('wsrep_on', \
             'group_replication_single_primary_mode', 'log_bin', 'binlog_format', \
             'innodb_flush_log_at_trx_commit')",
        )
        .fetch_all(conn)
        .await
        .map_err(|e| map_sqlx::<MysqlDialect>(e, "the server's variables", KEY))?;
        let mut vars = Vec::with_capacity(rows.len());
        for row in &rows {
            let name: String = row
                .try_get(0)
                .map_err(|e| map_sqlx::<MysqlDialect>(e, "a variable", KEY))?;
            let value: String = row
                .try_get(1)
                .map_err(|e| map_sqlx::<MysqlDialect>(e, "a variable", KEY))?;
            vars.push((name.to_ascii_lowercase(), value.to_ascii_uppercase()));
        }
        deployment(&vars)
    }

    fn transport(options: &MySqlConnectOptions) -> Transport {
        match options.get_socket() {
            Some(path) => Transport::Unix(path.clone()),
            None => Transport::Tcp(options.get_host().to_owned(), options.get_port()),
        }
    }
}

/// What the server's variables (`name`, `VALUE`) say of the deployment: an error for one in
/// which the identity lock guards nothing, else the warnings to log.
fn deployment(vars: &[(String, String)]) -> Result<Vec<String>> {
    let var = |name: &str| {
        vars.iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    let refuse = |what: &str| {
        Err(Error::Config(format!(
            "the mysql workerId mode cannot hold a node identity on this server: {what}; point \
             [snowflake.mysql] at a single primary server, or use a workerId mode whose lock \
             the whole cluster keeps (etcd, zk_recycle, zk_normal, redis)"
        )))
    };
    if var("wsrep_on") == Some("ON") {
        return refuse(
            "it is a Galera cluster node (wsrep_on = ON), whose GET_LOCK locks are its own, so \
             two nodes of the cluster could each grant one identity",
        );
    }
    if var("group_replication_single_primary_mode") == Some("OFF") {
        return refuse(
            "Group Replication runs in multi-primary mode, whose GET_LOCK locks are each \
             member's own, so two members could each grant one identity",
        );
    }
    if var("log_bin") == Some("ON") && var("binlog_format") == Some("STATEMENT") {
        return refuse(
            "its binary log is statement-based (binlog_format = STATEMENT): a replica would run \
             the mark's update without the identity lock, skip it, and hold an older mark after \
             a fail-over; set binlog_format to ROW or MIXED",
        );
    }
    let lax = var("innodb_flush_log_at_trx_commit").filter(|v| *v != "1");
    Ok(lax
        .map(|v| {
            format!(
                "innodb_flush_log_at_trx_commit = {v}: a crash of the MySQL server may lose its \
                 last committed worker-id marks and segment allocations, and IDs issued under \
                 them may repeat; with 1 it loses none"
            )
        })
        .into_iter()
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn deployments_whose_locks_guard_nothing_are_refused_by_name() {
        let check = |pairs: &[(&str, &str)], refused: Option<&str>| {
            let r = deployment(&vars(pairs));
            match refused {
                None => assert!(r.is_ok(), "{pairs:?}: {r:?}"),
                Some(word) => {
                    let e = r.expect_err(word).to_string();
                    assert!(e.contains(word), "{pairs:?}: {e}");
                }
            }
        };
        check(&[], None);
        check(&[("wsrep_on", "OFF"), ("log_bin", "OFF")], None);
        check(&[("wsrep_on", "ON")], Some("Galera"));
        check(&[("group_replication_single_primary_mode", "ON")], None);
        check(
            &[("group_replication_single_primary_mode", "OFF")],
            Some("multi-primary"),
        );
        check(&[("log_bin", "ON"), ("binlog_format", "MIXED")], None);
        check(&[("log_bin", "OFF"), ("binlog_format", "STATEMENT")], None);
        check(
            &[("log_bin", "ON"), ("binlog_format", "STATEMENT")],
            Some("statement-based"),
        );
        check(&[("innodb_flush_log_at_trx_commit", "2")], None);
        let warned = deployment(&vars(&[("innodb_flush_log_at_trx_commit", "2")])).unwrap();
        assert!(warned[0].contains("may repeat"), "{warned:?}");
        assert!(
            deployment(&vars(&[("innodb_flush_log_at_trx_commit", "1")]))
                .unwrap()
                .is_empty()
        );
    }
}
