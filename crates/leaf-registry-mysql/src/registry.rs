//! `MysqlBackend`: the `mysql` workerId mode on the fork's `leaf_workerid_alloc` table;
//! [`MysqlRegistry`] is it with the worker-id cache file, its fallback and its durable record
//! of the time mark.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use async_trait::async_trait;
use leaf_core::{
    AcquireRequest, CachedRegistry, ClaimError, Error, HeldIdentity, IdentitySettings, Lease,
    MarkWrite, NodeIdentity, RegistryCapabilities, Renewal, Result, SessionLock, WorkerIdBackend,
    session_idle_limit,
};
use sqlx::mysql::{MySqlConnectOptions, MySqlConnection, MySqlPool};
use sqlx::{ConnectOptions, Connection, Row};

use crate::config::{MysqlConfig, MysqlRegistryConfig};
use crate::error::{bounded, is_duplicate, map_sqlx, map_sqlx_at_start};
use crate::store::{ensure_table, pool};

/// The fork's DDL for `leaf_workerid_alloc`, exactly. It runs only when the table is missing;
/// an existing table is never altered.
pub const LEAF_WORKERID_ALLOC_DDL: &str = "CREATE TABLE leaf_workerid_alloc (id int(10) unsigned NOT NULL AUTO_INCREMENT, ip_port varchar(128) NOT NULL DEFAULT '', ip varchar(64) NOT NULL DEFAULT '', port varchar(64) NOT NULL DEFAULT '', max_timestamp bigint(20) DEFAULT NULL, create_time timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP, update_time timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP, PRIMARY KEY (id), UNIQUE KEY ip_port (ip_port)) ENGINE=InnoDB;";

/// The configuration key of the registry's URL, named in messages.
const KEY: &str = "url";

/// The `mysql` workerId mode with the worker-id cache file: what the server runs.
pub type MysqlRegistry = CachedRegistry<MysqlBackend>;

/// The `mysql` workerId mode, as in the fork (NotFound9/Leaf): each node (`ip:port`) owns one
/// row of `leaf_workerid_alloc`, and the row's auto-increment `id` **is** its worker id, for
/// ever (never recycled). Ids start at 1 as MySQL's auto-increment does, so worker id 0 is never
/// handed out; keeping the fork's rule (rather than `id - 1`) means a fleet moving from the fork
/// keeps every node's worker id. An id above the layout's largest worker id fails start-up.
///
/// `max_timestamp` holds the node's time mark; renewals only ever raise it
/// (`GREATEST(COALESCE(max_timestamp, 0), ?)`), and only the graceful release may lower it to the
/// last timestamp issued. The cache file (`{cache_dir}/worker-mysql-{name}`) holds the worker id
/// and the mark too, written and fsynced on every renewal: it is what makes a mark durable, and
/// when the server cannot be reached at start-up the node starts from it, with its mark, so the
/// start-up time check is never skipped.
///
/// **Exclusivity.** While it holds its worker id the node holds the MySQL user lock
/// `GET_LOCK('leaf_workerid:{db}/{ip:port}')` on a dedicated connection (the fork's table is
/// unchanged), so a second live process with the same `ip:port` (two containers that both see
/// `172.17.0.2`, say) fails to start with an error naming the identity instead of issuing the
/// same IDs. The connection's `wait_timeout` is set ([`leaf_core::session_idle_limit`]), so the
/// lock never outlives a vanished process by more than that. If the connection drops, the lock
/// is taken again on the next write; if another process took it meanwhile, or wrote the row's
/// mark, the lease is lost. A start falls back to the cache file only when no connection to the
/// server can be made at all.
///
/// **`fence_on_disconnect`** (off by default, Leaf's availability): every renewal writes the
/// mark on the lock's connection before it counts, so the generator never issues past a mark
/// the row holds under this node's lock; cut off from MySQL, the node stops within its mark
/// window, and whoever takes the identity next starts above everything it issued. There is
/// then no start from the cache file.
pub struct MysqlBackend {
    pool: MySqlPool,
    config: MysqlConfig,
    file_name: String,
    legacy_file_name: String,
    /// The identity lock and the mark's background writes (`leaf_core::HeldIdentity`).
    held: HeldIdentity<IdentityLock>,
}

/// The `mysql` mode's part of the identity lock: a dedicated connection per session, the user
/// lock on it, and the mark written there.
struct IdentityLock {
    opts: MySqlConnectOptions,
}

impl fmt::Debug for MysqlBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MysqlBackend")
            .field("url", &self.config.redacted_url())
            .finish_non_exhaustive()
    }
}

impl MysqlBackend {
    /// The backend on the server of `config`; its cache file is named `worker-mysql-{name}`, the
    /// mode's own, so that a worker id another mode cached (the `local` mode's `worker-{name}`)
    /// never serves a start here. Nothing is contacted or locked before the first claim, so
    /// this succeeds while the server is down.
    pub fn connect(config: &MysqlRegistryConfig, name: &str) -> Result<Self> {
        let (pool, _) = pool(config, KEY)?;
        let lock = IdentityLock {
            opts: config.connect_options(KEY)?,
        };
        let settings = IdentitySettings {
            connect_timeout: config.connect_timeout(),
            timeout: config.timeout(),
            fence_on_disconnect: config.fence_on_disconnect,
        };
        Ok(MysqlBackend {
            pool,
            config: config.clone(),
            file_name: format!("worker-mysql-{name}"),
            legacy_file_name: format!("worker-{name}"),
            held: HeldIdentity::new(lock, settings, crate::error::BACKEND),
        })
    }

    /// This backend with its cache file in `cache_dir`: the registry the server runs.
    pub fn registry(self, cache_dir: impl Into<PathBuf>) -> MysqlRegistry {
        CachedRegistry::new(self, cache_dir)
    }

    fn lock_name(&self, identity: &NodeIdentity) -> String {
        lock_name(
            self.held.backend().opts.get_database().unwrap_or_default(),
            identity,
        )
    }

    /// The row of `identity`, inserted when missing: `(id, max_timestamp)`.
    async fn row_for(&self, identity: &NodeIdentity) -> Result<(u64, Option<i64>)> {
        ensure_table(
            &self.pool,
            "leaf_workerid_alloc",
            LEAF_WORKERID_ALLOC_DDL,
            KEY,
        )
        .await?;
        let ip_port = identity.to_string();
        // Look up first: an INSERT that fails on the unique key still uses up an auto-increment
        // value in InnoDB, so a restart never tries one for a node that has its row.
        if let Some(row) = self.lookup(&ip_port).await? {
            return Ok(row);
        }
        let inserted =
            sqlx::query("INSERT INTO leaf_workerid_alloc (ip_port, ip, port) VALUES (?, ?, ?)")
                .bind(&ip_port)
                .bind(&identity.ip)
                .bind(identity.port.to_string())
                .execute(&self.pool)
                .await;
        match inserted {
            Ok(done) => Ok((done.last_insert_id(), None)),
            // Another process with this identity inserted it between our lookup and insert.
            Err(e) if is_duplicate(&e) => self.lookup(&ip_port).await?.ok_or_else(|| {
                Error::backend(
                    crate::error::BACKEND,
                    format!("the leaf_workerid_alloc row of {ip_port} vanished after a duplicate"),
                )
            }),
            Err(e) => Err(map_sqlx_at_start(e, &ip_port, KEY)),
        }
    }

    async fn lookup(&self, ip_port: &str) -> Result<Option<(u64, Option<i64>)>> {
        let row =
            sqlx::query("SELECT id, max_timestamp FROM leaf_workerid_alloc WHERE ip_port = ?")
                .bind(ip_port)
                .fetch_optional(&self.pool)
                .await
                .map_err(|e| map_sqlx_at_start(e, ip_port, KEY))?;
        row.map(|r| {
            let id: u32 = r
                .try_get("id")
                .map_err(|e| map_sqlx_at_start(e, ip_port, KEY))?;
            let mark: Option<i64> = r
                .try_get("max_timestamp")
                .map_err(|e| map_sqlx_at_start(e, ip_port, KEY))?;
            Ok((u64::from(id), mark))
        })
        .transpose()
    }
}

/// The name of the identity lock. User locks are server-wide, so the name carries the
/// database (two deployments on one server do not share identities); MySQL allows 64
/// characters, so a long name is hashed.
fn lock_name(database: &str, identity: &NodeIdentity) -> String {
    let id = format!("{database}/{identity}");
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

/// How long a start waits for the identity lock: a crashed predecessor's session (and its
/// lock) ends when the server notices the closed connection, which may be a moment after the
/// crash, so an immediate restart waits for it rather than refusing.
const START_LOCK_WAIT: Duration = Duration::from_secs(2);

#[async_trait]
impl SessionLock for IdentityLock {
    type Session = MySqlConnection;

    async fn connect(&self, at_start: bool, idle_limit: Duration) -> Result<MySqlConnection> {
        let map = |e| match at_start {
            true => map_sqlx_at_start(e, "the identity lock", KEY),
            false => map_sqlx(e, "the identity lock", KEY),
        };
        let mut conn = self.opts.connect().await.map_err(map)?;
        // The server ends the session (and frees the lock) this long after its last statement.
        sqlx::query("SET SESSION wait_timeout = ?")
            .bind(idle_limit.as_secs().max(1))
            .execute(&mut conn)
            .await
            .map_err(map)?;
        Ok(conn)
    }

    async fn try_lock(
        &self,
        conn: &mut MySqlConnection,
        name: &str,
        wait: Duration,
    ) -> Result<bool> {
        // GET_LOCK counts whole seconds.
        let wait_s = u32::try_from(wait.as_secs()).unwrap_or(u32::MAX);
        let got: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK(?, ?)")
            .bind(name)
            .bind(wait_s)
            .fetch_one(&mut *conn)
            .await
            .map_err(|e| map_sqlx(e, "the identity lock", KEY))?;
        Ok(got == Some(1))
    }

    async fn read_mark(&self, conn: &mut MySqlConnection, worker_id: u64) -> Result<Option<u64>> {
        let mark: Option<Option<i64>> =
            sqlx::query_scalar("SELECT max_timestamp FROM leaf_workerid_alloc WHERE id = ?")
                .bind(worker_id)
                .fetch_optional(&mut *conn)
                .await
                .map_err(|e| map_sqlx(e, "leaf_workerid_alloc", KEY))?;
        Ok(mark.flatten().and_then(|m| u64::try_from(m).ok()))
    }

    async fn write_mark(
        &self,
        conn: &mut MySqlConnection,
        worker_id: u64,
        mark_ms: u64,
        how: MarkWrite,
    ) -> Result<()> {
        let sql = match how {
            MarkWrite::Raise => {
                "UPDATE leaf_workerid_alloc \
                 SET max_timestamp = GREATEST(COALESCE(max_timestamp, 0), ?) WHERE id = ?"
            }
            MarkWrite::Final => "UPDATE leaf_workerid_alloc SET max_timestamp = ? WHERE id = ?",
        };
        let done = sqlx::query(sql)
            .bind(i64::try_from(mark_ms).unwrap_or(i64::MAX))
            .bind(worker_id)
            .execute(&mut *conn)
            .await
            .map_err(|e| map_sqlx(e, "leaf_workerid_alloc", KEY))?;
        // sqlx asks for found rows (CLIENT_FOUND_ROWS): a mark left as it was still counts 1,
        // and 0 means the row is gone.
        if done.rows_affected() == 0 {
            return Err(Error::backend(
                crate::error::BACKEND,
                format!("worker id {worker_id} has no leaf_workerid_alloc row"),
            ));
        }
        Ok(())
    }

    async fn close(&self, conn: MySqlConnection) {
        // A goodbye, so that the server ends the session (and frees the lock) at once.
        let _ = conn.close().await;
    }
}

fn too_large(worker_id: u64, identity: &NodeIdentity, max: u64, source: &str) -> Error {
    Error::Config(format!(
        "mysql workerId mode: worker id {worker_id} of node {identity} ({source}) does not fit \
         the layout, whose largest worker id is {max}; widen the layout's worker bits or remove \
         unused rows from leaf_workerid_alloc and reset its AUTO_INCREMENT"
    ))
}

#[async_trait]
impl WorkerIdBackend for MysqlBackend {
    fn mode(&self) -> &'static str {
        "mysql"
    }

    fn capabilities(&self) -> RegistryCapabilities {
        RegistryCapabilities::new(false, true)
            .with_exclusive_identity(true)
            .with_confirmed_marks(self.held.fences())
    }

    fn cache_file_name(&self) -> &str {
        &self.file_name
    }

    /// Builds before `worker-mysql-{name}` kept the mark in `worker-{name}` (the `local`
    /// mode's name too): read for the mark of the id MySQL assigns, never for the id.
    fn legacy_cache_file_name(&self) -> Option<&str> {
        Some(&self.legacy_file_name)
    }

    async fn claim(&self, req: &AcquireRequest) -> Result<Lease, ClaimError> {
        let name = self.lock_name(&req.identity);
        let idle_limit = session_idle_limit(req.renew_period);
        // The identity lock before the row: two processes with one identity must not both
        // start, whoever inserts the row.
        let lock = self
            .held
            .lock_for_claim(&name, START_LOCK_WAIT, idle_limit)
            .await?
            .ok_or_else(|| {
                Error::AlreadyExists(format!(
                    "node identity {} is in use by another live process (mysql lock {name:?}); \
                     two processes with one ip:port would issue the same ids: give each its own \
                     ip and port",
                    req.identity
                ))
            })?;
        let limit = self.config.timeout() + self.config.connect_timeout();
        let (worker_id, server_mark) =
            bounded(limit, "the worker id lookup", self.row_for(&req.identity)).await?;
        if worker_id > req.max_worker_id {
            return Err(too_large(
                worker_id,
                &req.identity,
                req.max_worker_id,
                "leaf_workerid_alloc",
            )
            .into());
        }
        let server_mark = server_mark.and_then(|m| u64::try_from(m).ok());
        tracing::info!(worker_id, ?server_mark, identity = %req.identity, "mysql worker id acquired");
        self.held.hold(lock, server_mark, idle_limit).await;
        Ok(Lease::new(worker_id, server_mark))
    }

    async fn resume_offline(
        &self,
        req: &AcquireRequest,
        lease: Lease,
        cause: Error,
    ) -> Result<Lease> {
        let name = self.lock_name(&req.identity);
        let idle_limit = session_idle_limit(req.renew_period);
        self.held
            .hold_offline(&name, lease.prev_mark_ms, idle_limit, cause)
            .await?;
        Ok(lease)
    }

    async fn renew(&self, lease: &Lease, mark_ms: u64) -> Result<Renewal> {
        // Without the fence the cache file is the durable record and the row follows in the
        // background; with it the row is written first.
        self.held.renew(lease.worker_id, mark_ms).await
    }

    async fn release(&self, lease: &Lease, final_mark_ms: u64) -> Result<()> {
        // Written on the lock's connection, then closed: the final mark never lands after
        // the lock is free (and after the next holder's first mark).
        if let Err(e) = self.held.release(lease.worker_id, final_mark_ms).await {
            // The cache file has the final mark; the server keeps a later one, which only
            // makes a start elsewhere wait a little.
            tracing::warn!(worker_id = lease.worker_id, error = %e, "final mark not written to mysql");
        }
        Ok(())
    }

    /// The last mark the server's `leaf_workerid_alloc` row confirmed; the cache file may be
    /// ahead of it while the server is unreachable.
    fn confirmed_mark_ms(&self) -> Option<u64> {
        self.held.confirmed_mark_ms()
    }

    async fn abandon(&self, _lease: &Lease) {
        // The identity lock stays: the node is still the one process with this identity.
    }
}
