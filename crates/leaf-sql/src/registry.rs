//! [`SqlClaims`]: the fork's database workerId mode on `leaf_workerid_alloc`, in any dialect,
//! its identity held by [`HeldIdentity`] on a lock of the dialect's;
//! [`SqlRegistry`] is it with the worker-id cache file.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use async_trait::async_trait;
use leaf_core::{
    AcquireRequest, CachedRegistry, ClaimError, Error, Lease, NodeIdentity, RegistryCapabilities,
    Renewal, Result, WorkerIdClaims, bounded,
};
use sqlx::{ConnectOptions, Connection, Database, Pool};

use crate::config::{Rotation, pool};
use crate::error::{map_sqlx, map_sqlx_at_start};
use crate::session_lock::{
    ConnectError, HeldIdentity, IdentitySettings, Locking, MarkRow, MarkWrite, Proof, SessionLock,
    session_idle_limit,
};
use crate::store::{ensure_table, type_name};
use crate::{Conn, Dialect, KEY, Options, Queries, SqlConfig};

/// A dialect's part of the workerId mode: `leaf_workerid_alloc`'s DDL and statements, and its
/// identity lock. `?n` below is the dialect's n-th placeholder. "The lock `?n` is the server
/// session `?m`'s, which runs the statement" is a condition in the statement itself
/// (`IS_USED_LOCK(?n) = CONNECTION_ID() AND CONNECTION_ID() = ?m`), so that a pooler that runs
/// it on another server session than the one that took the lock for this client makes it find
/// nothing. The lock's session runs its statements as
/// simple queries with their values inlined ([`inline`](crate::inline)).
#[async_trait]
pub trait RegistryDialect: Dialect {
    /// `leaf_workerid_alloc`'s DDL, run only when the table is missing.
    const LEAF_WORKERID_ALLOC_DDL: &'static str;
    /// `id` (a `bigint`) and `max_timestamp` of the row of `ip_port` `?1`.
    const SELECT_WORKER: &'static str;
    /// `max_timestamp` of worker id `?1` whose `ip_port` is `?2`, if the lock `?3` is the
    /// server session `?4`'s, which runs it: no row otherwise.
    const READ_MARK: &'static str;
    /// Raises `max_timestamp` of worker id `?2` whose `ip_port` is `?3` to `?1` (`GREATEST`),
    /// if the lock `?4` is the server session `?5`'s, which runs it.
    const RAISE_MARK: &'static str;
    /// Sets `max_timestamp` of worker id `?2` whose `ip_port` is `?3` to `?1`, if the lock `?4`
    /// is the server session `?5`'s, which runs it.
    const FINAL_MARK: &'static str;
    /// `leaf_workerid_lease`'s DDL (the leased pool of [`SqlLeases`](crate::SqlLeases)), run
    /// only when the table is missing: `name` (text), `id`, `token`, `owner` (text), `ttl_ms`,
    /// `lease_until` (bigints), `max_timestamp` (a nullable bigint), keyed by `(name, id)`.
    const LEAF_WORKERID_LEASE_DDL: &'static str;
    /// An expression of the server's clock in Unix milliseconds, as a bigint: what leases are
    /// counted by.
    const NOW_MS: &'static str;
    /// The identity lock as messages name it (`mysql lock`).
    const LOCK_KIND: &'static str;
    /// How an operator brings the ids back into the layout, after removing unused rows.
    const RESET_IDS: &'static str;

    /// Inserts the `leaf_workerid_alloc` row of `identity`: its id, or `None` if another
    /// process inserted it first. Errors are Leaf's, as at start-up.
    async fn insert_worker(pool: &Pool<Self::Db>, identity: &NodeIdentity) -> Result<Option<u64>>;
    /// The literal of a text given as the hex of its bytes (MySQL's `X'..'` converted to a
    /// string), for [`inline`](crate::inline).
    fn text_literal(hex: &str) -> String;
    /// The rows a statement changed (or matched: an unchanged value counts).
    fn rows_affected(done: &<Self::Db as Database>::QueryResult) -> u64;
    /// The name of the identity lock of `identity` on the server of `options`.
    fn lock_name(options: &Options<Self>, identity: &NodeIdentity) -> String;
    /// The cache file an earlier build kept for the leaf name `name`, whose mark still counts.
    fn legacy_cache_file_name(name: &str) -> Option<String> {
        let _ = name;
        None
    }
    /// Sets what an identity lock's session needs: the server ends it after `idle_limit`
    /// without a statement. Like every statement of the lock's session, a simple query
    /// ([`inline`](crate::inline)).
    async fn prepare_session(
        conn: &mut Conn<Self>,
        idle_limit: Duration,
    ) -> Result<(), sqlx::Error>;
    /// Takes the lock `name` on `conn`, a session just opened, waiting up to `wait`; in the
    /// same statement, finds a lock the session held before it asked
    /// ([`Locking::Shared`]) and the server's id of the session.
    async fn try_lock(
        conn: &mut Conn<Self>,
        name: &str,
        wait: Duration,
    ) -> Result<Locking, sqlx::Error>;
    /// Whether the lock `name` is held by the server session `server_session`, and `conn`'s
    /// statement runs on it.
    async fn holds(
        conn: &mut Conn<Self>,
        name: &str,
        server_session: i64,
    ) -> Result<bool, sqlx::Error>;
    /// Refuses a deployment of the server in which the identity lock guards nothing, else
    /// says what to warn of (a setting that loses committed marks in a crash); the default
    /// accepts every one.
    async fn check_deployment(conn: &mut Conn<Self>) -> Result<Vec<String>> {
        let _ = conn;
        Ok(Vec::new())
    }
    /// Where the server of `options` listens.
    fn transport(options: &Options<Self>) -> Transport;
}

/// Where a server listens: what [`reachable`] tries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transport {
    /// A host name or address, and a port.
    Tcp(String, u16),
    /// A Unix socket's path.
    Unix(PathBuf),
}

/// Whether a connection to `transport` can be opened within `timeout`; it is closed at once,
/// without a word of the server's protocol.
pub async fn reachable(transport: &Transport, timeout: Duration) -> bool {
    let opened = async {
        match transport {
            Transport::Tcp(host, port) => tokio::net::TcpStream::connect((host.as_str(), *port))
                .await
                .map(drop),
            #[cfg(unix)]
            Transport::Unix(path) => tokio::net::UnixStream::connect(path).await.map(drop),
            #[cfg(not(unix))]
            Transport::Unix(_) => Err(std::io::ErrorKind::Unsupported.into()),
        }
    };
    matches!(tokio::time::timeout(timeout, opened).await, Ok(Ok(())))
}

/// The workerId mode of dialect `D` with the worker-id cache file: what the server runs.
pub type SqlRegistry<D> = CachedRegistry<SqlClaims<D>>;

/// The fork's database workerId mode: each node (`ip:port`) owns one row of
/// `leaf_workerid_alloc`, and the row's id **is** its worker id, for ever (never recycled); ids
/// start at 1, as the fork's. The row is looked up before any insert, so that a restart uses
/// up no id. An id above the layout's largest worker id fails start-up.
///
/// `max_timestamp` holds the node's time mark; renewals only ever raise it (`GREATEST`), and
/// only the graceful release may lower it to the last timestamp issued. The cache file
/// (`{cache_dir}/worker-{NAME}-{name}`) holds the worker id and the mark too, written and
/// fsynced on every renewal: it is what makes a mark durable, and when the server cannot be
/// reached at start-up the node starts from it, with its mark, so the start-up time check is
/// never skipped.
///
/// **Exclusivity.** While it holds its worker id the node holds the dialect's identity lock on
/// a dedicated connection, so a second live process with the same `ip:port` fails to start with
/// an error naming the identity instead of issuing the same IDs. A start waits up to 2 s for
/// the lock (a crashed predecessor's session ends when the server notices its closed
/// connection). The connection's idle limit is set ([`session_idle_limit`]), so the
/// lock never outlives a vanished process by long. If the connection drops, the lock is taken
/// again on the next write; if another process took it meanwhile, or wrote the row's mark, the
/// lease is lost. A start falls back to the cache file only when no connection to the server
/// can be made at all.
///
/// **`fence_on_disconnect`** (off by default, Leaf's availability): every renewal writes the
/// mark on the lock's connection before it counts, so the generator never issues past a mark
/// the row holds under this node's lock; cut off from its server, the node stops within its
/// mark window, and whoever takes the identity next starts above everything it issued. There
/// is then no start from the cache file.
pub struct SqlClaims<D: Queries> {
    pool: Pool<D::Db>,
    config: D::Config,
    rotation: Rotation,
    file_name: String,
    legacy_file_name: Option<String>,
    /// The identity lock and the mark's background writes ([`HeldIdentity`]).
    held: HeldIdentity<SqlLock<D>>,
}

/// The dialect's part of the identity lock: a dedicated connection per session, the lock on
/// it, and the mark written there.
pub(crate) struct SqlLock<D: RegistryDialect> {
    /// The options as they were at start (its host and database name the lock); each
    /// connection is made with the configuration's read again (a `password_file` rotates).
    options: Options<D>,
    config: D::Config,
}

impl<D: Queries> fmt::Debug for SqlClaims<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(&type_name(D::NAME, "Claims"))
            .field("url", &self.config.settings().redacted_url())
            .finish_non_exhaustive()
    }
}

impl<D: Queries> SqlClaims<D> {
    /// The backend on the server of `config`; its cache file is named `worker-{NAME}-{name}`,
    /// the mode's own, so that a worker id another mode cached never serves a start here.
    /// Nothing is contacted or locked before the first claim, so this succeeds while the server
    /// is down.
    pub fn connect(config: &D::Config, name: &str) -> Result<Self> {
        let settings = config.settings();
        let lock = SqlLock {
            options: config.connect_options(KEY)?,
            config: config.clone(),
        };
        let identity = IdentitySettings {
            connect_timeout: settings.connect_timeout(),
            timeout: settings.timeout(),
            fence_on_disconnect: settings.fence_on_disconnect,
        };
        Ok(SqlClaims {
            pool: pool::<D>(config, KEY)?,
            config: config.clone(),
            rotation: Rotation::new(&config.settings()),
            file_name: format!("worker-{}-{name}", D::NAME),
            legacy_file_name: D::legacy_cache_file_name(name),
            held: HeldIdentity::new(lock, identity, D::NAME),
        })
    }

    /// This backend with its cache file in `cache_dir`: the registry the server runs.
    pub fn registry(self, cache_dir: impl Into<PathBuf>) -> SqlRegistry<D> {
        CachedRegistry::new(self, cache_dir)
    }

    fn lock_name(&self, identity: &NodeIdentity) -> String {
        D::lock_name(&self.held.backend().options, identity)
    }

    /// The row of `identity`, inserted when missing: `(id, max_timestamp)`.
    async fn row_for(&self, identity: &NodeIdentity) -> Result<(u64, Option<i64>)> {
        let table = "leaf_workerid_alloc";
        self.rotation.refresh::<D>(&self.config, &self.pool);
        ensure_table::<D>(&self.pool, table, D::LEAF_WORKERID_ALLOC_DDL).await?;
        let ip_port = identity.to_string();
        // Look up first: an insert that fails on the unique key still uses up an id (an
        // auto-increment value, a value of a sequence), so a restart never tries one for a node
        // that has its row.
        if let Some(row) = D::select_worker(&self.pool, &ip_port).await? {
            return Ok(row);
        }
        match D::insert_worker(&self.pool, identity).await? {
            Some(id) => Ok((id, None)),
            // Another process with this identity inserted it between our lookup and insert.
            None => D::select_worker(&self.pool, &ip_port)
                .await?
                .ok_or_else(|| {
                    Error::backend(
                        D::NAME,
                        format!(
                            "the leaf_workerid_alloc row of {ip_port} vanished after a duplicate"
                        ),
                    )
                }),
        }
    }

    fn too_large(&self, worker_id: u64, req: &AcquireRequest) -> Error {
        Error::Config(format!(
            "{} workerId mode: worker id {worker_id} of node {} (leaf_workerid_alloc) does not \
             fit the layout, whose largest worker id is {}; widen the layout's worker bits or \
             remove unused rows from leaf_workerid_alloc and {}",
            D::NAME,
            req.identity,
            req.max_worker_id,
            D::RESET_IDS
        ))
    }
}

/// How long a start waits for the identity lock: a crashed predecessor's session (and its
/// lock) ends when the server notices the closed connection, which may be a moment after the
/// crash, so an immediate restart waits for it rather than refusing.
const START_LOCK_WAIT: Duration = Duration::from_secs(2);

#[async_trait]
impl<D: Queries> SessionLock for SqlLock<D> {
    type Session = Conn<D>;

    async fn connect(
        &self,
        at_start: bool,
        idle_limit: Duration,
    ) -> std::result::Result<Conn<D>, ConnectError> {
        let map = |e: sqlx::Error| {
            // An error the server sent: it was reached.
            let answered = matches!(e, sqlx::Error::Database(_));
            let error = match at_start {
                true => map_sqlx_at_start::<D>(e, "the identity lock", KEY),
                false => map_sqlx::<D>(e, "the identity lock", KEY),
            };
            ConnectError { error, answered }
        };
        // The configuration read again: a rotated `password_file` is used from here on.
        let options = self
            .config
            .connect_options(KEY)
            .map_err(|error| ConnectError {
                error,
                answered: false,
            })?;
        let mut conn = options.connect().await.map_err(map)?;
        // The server ends the session (and frees the lock) this long after its last statement.
        D::prepare_session(&mut conn, idle_limit)
            .await
            .map_err(map)?;
        Ok(conn)
    }

    async fn reachable(&self, timeout: Duration) -> bool {
        reachable(&D::transport(&self.options), timeout).await
    }

    async fn try_lock(&self, conn: &mut Conn<D>, name: &str, wait: Duration) -> Result<Locking> {
        D::try_lock(conn, name, wait)
            .await
            .map_err(|e| map_sqlx::<D>(e, "the identity lock", KEY))
    }

    async fn holds(&self, conn: &mut Conn<D>, name: &str, server_session: i64) -> Result<bool> {
        D::holds(conn, name, server_session)
            .await
            .map_err(|e| map_sqlx::<D>(e, "the identity lock", KEY))
    }

    async fn check_deployment(&self, conn: &mut Conn<D>) -> Result<()> {
        for warning in D::check_deployment(conn).await? {
            tracing::warn!(backend = D::NAME, "{warning}");
        }
        Ok(())
    }

    async fn read_mark(&self, conn: &mut Conn<D>, row: MarkRow<'_>) -> Result<Proof<Option<u64>>> {
        D::read_mark(conn, row).await
    }

    async fn write_mark(
        &self,
        conn: &mut Conn<D>,
        row: MarkRow<'_>,
        mark_ms: u64,
        how: MarkWrite,
    ) -> Result<Proof<()>> {
        D::write_mark(conn, row, mark_ms, how).await
    }

    async fn close(&self, conn: Conn<D>) {
        // A goodbye, so that the server ends the session (and frees the lock) at once.
        let _ = conn.close().await;
    }
}

#[async_trait]
impl<D: Queries> WorkerIdClaims for SqlClaims<D> {
    fn mode(&self) -> &'static str {
        D::NAME
    }

    fn capabilities(&self) -> RegistryCapabilities {
        RegistryCapabilities::new(false, true)
            .with_exclusive_identity(true)
            .with_confirmed_marks(self.held.fences())
    }

    fn cache_file_name(&self) -> &str {
        &self.file_name
    }

    fn legacy_cache_file_name(&self) -> Option<&str> {
        self.legacy_file_name.as_deref()
    }

    async fn claim(&self, req: &AcquireRequest) -> Result<Lease, ClaimError> {
        let name = self.lock_name(&req.identity);
        let idle_limit = session_idle_limit(req.renew_period);
        // The identity lock before the row: two processes with one identity must not both
        // start, whoever inserts the row.
        let lock = self
            .held
            .lock_for_claim(
                &req.identity.to_string(),
                &name,
                START_LOCK_WAIT,
                idle_limit,
            )
            .await?
            .ok_or_else(|| {
                Error::AlreadyExists(format!(
                    "node identity {} is in use by another live process ({} {name:?}); two \
                     processes with one ip:port would issue the same ids: give each its own ip \
                     and port",
                    req.identity,
                    D::LOCK_KIND
                ))
            })?;
        let settings = self.config.settings();
        let limit = settings.timeout() + settings.connect_timeout();
        let lookup = bounded(
            D::NAME,
            limit,
            "the worker id lookup",
            self.row_for(&req.identity),
        );
        let (worker_id, server_mark) = lookup.await?;
        if worker_id > req.max_worker_id {
            return Err(self.too_large(worker_id, req).into());
        }
        let server_mark = server_mark.and_then(|m| u64::try_from(m).ok());
        tracing::info!(worker_id, ?server_mark, identity = %req.identity, "{} worker id acquired", D::NAME);
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
            .hold_offline(
                &req.identity.to_string(),
                &name,
                lease.prev_mark_ms,
                idle_limit,
                cause,
            )
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
            tracing::warn!(worker_id = lease.worker_id, error = %e, "final mark not written to {}", D::NAME);
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
