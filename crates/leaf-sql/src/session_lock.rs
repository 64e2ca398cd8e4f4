//! [`HeldIdentity`]: how a non-recycling workerId mode on a database (`mysql`, `postgres`) holds
//! its node identity while it runs, written once: a lock that lives as long as one server
//! session (a dedicated connection), and the database's copy of the time mark written on that
//! session. The backend says how to open a session, take the lock and read and write the mark
//! ([`SessionLock`]); the order of things lives here.
//!
//! - At a claim the lock is taken before the identity's row is read or inserted, so that two
//!   processes with one identity never both start; a start waits a moment for a crashed
//!   predecessor's session to end. Only a server to which no connection could be opened at all
//!   (refused, no answer to the connection attempt, a name that does not resolve) is
//!   [`ClaimError::Unreachable`], the one case a start from the cache file is allowed, and only
//!   without the fence: once a connection opened, any outcome (an error the server sent, a
//!   session setup that failed, a server that accepted the connection and never answered, a
//!   lock another session holds, a wait that ran out) is never that. Each step is bounded: the
//!   connection by `connect_timeout`, the lock by its wait plus `timeout`. An abandoned lease
//!   keeps its lock, and the next claim of the same identity reuses it once the kept session
//!   proves it still holds the lock.
//! - Holding the lock is proved, never assumed from the session: a new session that already
//!   holds the lock before it asks (a pooler handing one server session to two clients), or a
//!   lock that the next statement does not hold (a pooler running each transaction on another
//!   server session), refuses the claim; every mark written or read names the identity and
//!   proves the lock in the same statement ([`SessionLock::write_mark`]), and one that proves
//!   nothing loses the lease. The backend refuses at the claim a deployment in which its lock
//!   guards nothing ([`SessionLock::check_deployment`]: a multi-primary cluster).
//! - The session's idle limit is set on the server ([`session_idle_limit`]), so that a lock
//!   never outlives its process by more than that, whatever became of the process.
//! - Without `fence_on_disconnect` a renewal answers at once (the cache file is the durable
//!   record) and writes the mark on the lock's session in the background, at most one write at
//!   a time. With it, a renewal writes the mark on the lock's session before it answers, and
//!   counts only once the write committed there: the generator never issues past a mark the
//!   database holds under this node's lock, so a node cut off from its database stops within
//!   its mark window, and a later holder (which reads the row after taking the lock) starts
//!   above everything this one issued.
//! - If the lock's session is gone, the next write opens another and takes the lock again
//!   without waiting, then reads the stored mark: if another process took the lock meanwhile,
//!   or wrote a mark this node never sent (it held the identity while this node's lock was
//!   gone, and released it), the lease is lost and every later renewal says so. A node that
//!   learned so never starts from its cache file again until a claim succeeds.
//! - A start from the cache file (the server unreachable, the fence off) holds the lock's name
//!   only: the first write that reaches the server takes it.
//! - The release waits for a write in flight, stops later ones, writes the final mark (which may
//!   be below the last renewal's) on the lock's session, and ends the session, which frees the
//!   lock: the final mark never lands after the lock is free.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Mutex;

use leaf_core::{ClaimError, Error, Renewal, Result, bounded};

/// How a mark write treats the stored mark.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkWrite {
    /// Renewals: the stored mark never goes backwards (`GREATEST`).
    Raise,
    /// The graceful release: the last timestamp issued, which may be below the last renewal's.
    Final,
}

/// What taking the lock on a new session found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Locking {
    /// The session holds the lock now; the server's id of the session that took it (MySQL's
    /// `CONNECTION_ID()`, PostgreSQL's `pg_backend_pid()`), which every later proof names, so
    /// that a pooler's other server session that took the lock for another client never
    /// proves it for this one.
    Taken(i64),
    /// Another session holds it (still, after the wait).
    Busy,
    /// The session held the lock before it asked: a session that was just opened holds no
    /// lock on a direct connection, so the server session is shared with another client (a
    /// pooler in transaction mode handing one server session to several clients).
    Shared,
}

/// What a statement that proves the lock found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proof<T> {
    /// The session held the lock, and the row was the identity's: the statement's answer.
    Held(T),
    /// Nothing was read or written: the session does not hold the lock, or the worker id's row
    /// is not the identity's (deleted, or given to another identity).
    NotHeld,
}

/// The row a mark is read from and written to, and what proves it is this node's: its worker
/// id, the identity that owns it, and the lock that this node's server session must hold.
#[derive(Clone, Copy, Debug)]
pub struct MarkRow<'a> {
    /// The worker id (the row's key).
    pub worker_id: u64,
    /// The identity (`ip:port`) the row belongs to.
    pub identity: &'a str,
    /// The identity lock's name.
    pub lock: &'a str,
    /// The server's id of the session that took the lock ([`Locking::Taken`]): the statement
    /// must run on it.
    pub server_session: i64,
}

/// Why a session could not be opened.
#[derive(Debug)]
pub struct ConnectError {
    /// The error.
    pub error: Error,
    /// Whether the server answered (an error it sent): it was reached, whatever else holds.
    pub answered: bool,
}

impl ConnectError {
    /// `error`, which the server sent.
    pub fn answered(error: Error) -> Self {
        ConnectError {
            error,
            answered: true,
        }
    }

    /// `error`, which came from the client or the network.
    pub fn unanswered(error: Error) -> Self {
        ConnectError {
            error,
            answered: false,
        }
    }
}

/// A backend's identity lock: sessions, the lock on one, and the mark read and written on it,
/// each read and write proving the lock in the same statement.
#[async_trait]
pub trait SessionLock: Send + Sync + 'static {
    /// A server session (a dedicated connection) that may hold the lock.
    type Session: Send + 'static;

    /// Opens a session whose server ends it after `idle_limit` without a statement.
    /// `at_start`: errors are start-up errors (refused credentials are a configuration
    /// mistake); otherwise outages. A failure says whether the server answered it.
    async fn connect(
        &self,
        at_start: bool,
        idle_limit: Duration,
    ) -> std::result::Result<Self::Session, ConnectError>;

    /// Whether a transport connection (TCP, a Unix socket) to the server can be opened now,
    /// within `timeout`, without speaking its protocol: asked after [`connect`](Self::connect)
    /// failed, to tell a server that could not be reached at all from one that was reached.
    async fn reachable(&self, timeout: Duration) -> bool;

    /// Takes the lock `name` on a session that was just opened, waiting up to `wait` (zero:
    /// not at all) for another session to free it.
    async fn try_lock(
        &self,
        session: &mut Self::Session,
        name: &str,
        wait: Duration,
    ) -> Result<Locking>;

    /// Whether `session` holds the lock `name` and is the server session `server_session`
    /// ([`Locking::Taken`]), asked in a statement of its own.
    async fn holds(
        &self,
        session: &mut Self::Session,
        name: &str,
        server_session: i64,
    ) -> Result<bool>;

    /// Refuses, with a message naming it, a deployment of the server in which the lock guards
    /// nothing (a multi-primary cluster, whose locks are each node's own). Asked on every new
    /// session of a claim, before the lock. Default: none.
    async fn check_deployment(&self, session: &mut Self::Session) -> Result<()> {
        let _ = session;
        Ok(())
    }

    /// The stored mark of `row`, read on `session` in one statement that proves the lock.
    async fn read_mark(
        &self,
        session: &mut Self::Session,
        row: MarkRow<'_>,
    ) -> Result<Proof<Option<u64>>>;

    /// Writes the mark of `row` on `session` as `how` says, in one statement that proves the
    /// lock, committed when it returns (an unchanged value is written).
    async fn write_mark(
        &self,
        session: &mut Self::Session,
        row: MarkRow<'_>,
        mark_ms: u64,
        how: MarkWrite,
    ) -> Result<Proof<()>>;

    /// Ends `session`, which frees the lock. Default: dropped.
    async fn close(&self, session: Self::Session) {
        drop(session);
    }
}

/// The idle limit of a lock's session for a node that renews every `renew_period`: a minute,
/// or ten renew periods if that is longer. Renewals write on the session, so a live node never
/// comes near it; a process that vanished without closing its connection (a host gone, a
/// partition) loses the lock that long after, instead of after hours of TCP timeouts.
pub fn session_idle_limit(renew_period: Duration) -> Duration {
    Duration::from_secs(60).max(renew_period.saturating_mul(10))
}

/// What [`HeldIdentity`] is told by its backend's configuration.
#[derive(Clone, Copy, Debug)]
pub struct IdentitySettings {
    /// The bound of opening a session.
    pub connect_timeout: Duration,
    /// The bound of one statement (and of the session's end at the release).
    pub timeout: Duration,
    /// `fence_on_disconnect`: a renewal counts only once the mark committed on the lock's
    /// session, and there is no start from the cache file.
    pub fence_on_disconnect: bool,
}

/// A non-recycling mode's hold on its identity; see the module docs. Cloning shares it.
pub struct HeldIdentity<L: SessionLock> {
    inner: Arc<Inner<L>>,
}

impl<L: SessionLock> Clone for HeldIdentity<L> {
    fn clone(&self) -> Self {
        HeldIdentity {
            inner: Arc::clone(&self.inner),
        }
    }
}

struct Inner<L: SessionLock> {
    lock: L,
    settings: IdentitySettings,
    /// The backend, for messages (`mysql`).
    backend: &'static str,
    state: Mutex<State<L::Session>>,
    in_flight: AtomicBool,
    /// Another process holds the identity (it took the lock, wrote the row's mark, or the row
    /// or the lock proved not to be this node's): the lease is lost, and no start from the
    /// cache file is allowed until a claim succeeds.
    lost: AtomicBool,
    /// The last mark the server confirmed (Unix ms), 0 before the first.
    confirmed_mark_ms: AtomicU64,
}

struct State<S> {
    released: bool,
    /// The lock's name and, while connected, its session.
    held: Option<Held<S>>,
    /// A stored mark at or below this is this node's own: the claim's (or the cache file's, at
    /// a start from it), then every mark a write of this node confirmed.
    own_up_to: u64,
    /// Marks sent since the last confirmed write whose answer never came: one may be stored.
    tried: Vec<u64>,
    /// The idle limit of the sessions this hold opens.
    idle_limit: Duration,
}

/// How many unconfirmed marks a hold remembers (writes are serialised; a mark forgotten here
/// only makes its row look foreign, which stops, never duplicates).
const MAX_TRIED: usize = 64;

/// The lock a claim took: the identity, the lock's name and its session. Dropping it ends the
/// session.
pub struct Held<S> {
    identity: String,
    name: String,
    session: Option<S>,
    /// The server's id of the session that took the lock (0 before one did).
    server_session: i64,
}

impl<S> Held<S> {
    fn row(&self, worker_id: u64) -> MarkRow<'_> {
        MarkRow {
            worker_id,
            identity: &self.identity,
            lock: &self.name,
            server_session: self.server_session,
        }
    }
}

impl<L: SessionLock> HeldIdentity<L> {
    /// Holds nothing yet; `lock` does the backend's part, `backend` names it in the log.
    pub fn new(lock: L, settings: IdentitySettings, backend: &'static str) -> Self {
        HeldIdentity {
            inner: Arc::new(Inner {
                lock,
                settings,
                backend,
                state: Mutex::new(State {
                    released: false,
                    held: None,
                    own_up_to: 0,
                    tried: Vec::new(),
                    idle_limit: session_idle_limit(Duration::ZERO),
                }),
                in_flight: AtomicBool::new(false),
                lost: AtomicBool::new(false),
                confirmed_mark_ms: AtomicU64::new(0),
            }),
        }
    }

    /// The backend's part.
    pub fn backend(&self) -> &L {
        &self.inner.lock
    }

    /// Whether `fence_on_disconnect` is on.
    pub fn fences(&self) -> bool {
        self.inner.settings.fence_on_disconnect
    }

    /// The lock `name` of `identity` for a claim: the session this node still holds it on (an
    /// abandoned lease keeps it), once that session proves it still does; else a new
    /// session's (its idle limit `idle_limit`), on a deployment the backend accepts, waiting up
    /// to `wait` for another session to free it, proved by a statement of its own. `None`
    /// if another live session holds it. Until [`hold`](Self::hold), nothing is held. Only a
    /// session to whose server no connection could be opened at all is
    /// [`ClaimError::Unreachable`]; everything else is [`ClaimError::Failed`].
    pub async fn lock_for_claim(
        &self,
        identity: &str,
        name: &str,
        wait: Duration,
        idle_limit: Duration,
    ) -> Result<Option<Held<L::Session>>, ClaimError> {
        let inner = &self.inner;
        let kept = inner.state.lock().await.held.take();
        if let Some(held) = kept.filter(|h| h.name == name && h.session.is_some())
            && let Some(held) = self.still_held(held).await
        {
            return Ok(Some(held));
        }
        let session = bounded(
            inner.backend,
            inner.settings.connect_timeout,
            "connecting for the identity lock",
            async { Ok(inner.lock.connect(true, idle_limit).await) },
        )
        .await;
        let mut session = match session {
            Ok(Ok(session)) => session,
            Ok(Err(e)) => return Err(self.unopened_or_failed(e).await),
            Err(e) => return Err(self.unopened_or_failed(ConnectError::unanswered(e)).await),
        };
        match self.take_new(&mut session, name, wait).await {
            Ok(Some(server_session)) => Ok(Some(Held {
                identity: identity.to_owned(),
                name: name.to_owned(),
                session: Some(session),
                server_session,
            })),
            Ok(None) => {
                self.close(session).await;
                Ok(None)
            }
            Err(e) => {
                self.close(session).await;
                Err(ClaimError::Failed(e))
            }
        }
    }

    /// `held`, kept from an abandoned claim, if its session still holds the lock; else its
    /// session ended (it died, or the server ended it), and `None`.
    async fn still_held(&self, mut held: Held<L::Session>) -> Option<Held<L::Session>> {
        let inner = &self.inner;
        let session = held.session.as_mut()?;
        let proved = bounded(
            inner.backend,
            inner.settings.timeout,
            "checking the kept identity lock",
            inner.lock.holds(session, &held.name, held.server_session),
        )
        .await;
        if matches!(proved, Ok(true)) {
            return Some(held);
        }
        tracing::info!(
            lock = %held.name,
            backend = inner.backend,
            answer = ?proved,
            "the identity lock kept from an earlier claim is not held any more; claiming anew"
        );
        if let Some(session) = held.session.take() {
            self.close(session).await;
        }
        None
    }

    /// On a new `session`, checks the deployment, then takes the lock `name` and proves it:
    /// the server's id of the session holding it, `None` if another session holds it; an
    /// error if the backend refuses its deployment, or the session held the lock before it
    /// asked or the next statement does not run on that server session holding it (a pooler).
    async fn take_new(
        &self,
        session: &mut L::Session,
        name: &str,
        wait: Duration,
    ) -> Result<Option<i64>> {
        let inner = &self.inner;
        let (backend, timeout) = (inner.backend, inner.settings.timeout);
        bounded(
            backend,
            timeout,
            "checking the deployment",
            inner.lock.check_deployment(session),
        )
        .await?;
        let locking = bounded(
            backend,
            wait.saturating_add(timeout),
            "taking the identity lock",
            inner.lock.try_lock(session, name, wait),
        )
        .await?;
        let server_session = match locking {
            Locking::Busy => return Ok(None),
            Locking::Shared => return Err(pooled(backend, name, "held it before it asked")),
            Locking::Taken(id) => id,
        };
        let proved = bounded(
            backend,
            timeout,
            "proving the identity lock",
            inner.lock.holds(session, name, server_session),
        )
        .await?;
        if !proved {
            return Err(pooled(
                backend,
                name,
                "did not hold it in its next statement",
            ));
        }
        Ok(Some(server_session))
    }

    /// A session that could not be opened (`e`): [`ClaimError::Unreachable`] only if the
    /// server did not answer and no transport connection to it can be opened either; a server
    /// that answered (an error it sent, a session setup that failed) or accepted the
    /// connection and never answered was reached.
    async fn unopened_or_failed(&self, e: ConnectError) -> ClaimError {
        let inner = &self.inner;
        let ConnectError { error: e, answered } = e;
        if !e.is_retryable() {
            return ClaimError::Failed(e);
        }
        if !answered && !inner.lock.reachable(inner.settings.connect_timeout).await {
            return ClaimError::Unreachable(e);
        }
        ClaimError::Failed(Error::Unavailable(format!(
            "{e}; a connection to {} could be opened, so this is not a start from the cache \
             file",
            inner.backend
        )))
    }

    async fn close(&self, session: L::Session) {
        let _ =
            tokio::time::timeout(self.inner.settings.timeout, self.inner.lock.close(session)).await;
    }

    /// The claim succeeded: `held` is this node's lock, and the server's row had
    /// `server_mark_ms`. Renewals may write again, and a start from the cache file is allowed
    /// again.
    pub async fn hold(
        &self,
        held: Held<L::Session>,
        server_mark_ms: Option<u64>,
        idle_limit: Duration,
    ) {
        self.reset(held, server_mark_ms, server_mark_ms, idle_limit)
            .await;
    }

    /// The server could not be reached (`cause`) and the node would start from its cache file
    /// with `start_mark_ms`: it holds the lock's name only, and the first write that reaches
    /// the server takes the lock (or finds the lease lost). Refused with
    /// `fence_on_disconnect` (every mark needs the server), and after this node learned that
    /// another process holds its identity, until a claim succeeds.
    pub async fn hold_offline(
        &self,
        identity: &str,
        name: &str,
        start_mark_ms: Option<u64>,
        idle_limit: Duration,
        cause: Error,
    ) -> Result<()> {
        let backend = self.inner.backend;
        if self.fences() {
            return Err(Error::Unavailable(format!(
                "{cause}; with fence_on_disconnect the {backend} workerId mode never starts from \
                 its cache file"
            )));
        }
        if self.inner.lost.load(Ordering::Acquire) {
            return Err(Error::Unavailable(format!(
                "{cause}; another process held this node's identity since its last claim, so \
                 the {backend} workerId mode starts from its cache file only after a claim \
                 reaches the server again"
            )));
        }
        let held = Held {
            identity: identity.to_owned(),
            name: name.to_owned(),
            session: None,
            server_session: 0,
        };
        self.reset(held, None, start_mark_ms, idle_limit).await;
        Ok(())
    }

    async fn reset(
        &self,
        held: Held<L::Session>,
        confirmed_mark_ms: Option<u64>,
        own_up_to: Option<u64>,
        idle_limit: Duration,
    ) {
        let inner = &self.inner;
        inner.lost.store(false, Ordering::Release);
        inner
            .confirmed_mark_ms
            .store(confirmed_mark_ms.unwrap_or(0), Ordering::Relaxed);
        *inner.state.lock().await = State {
            released: false,
            held: Some(held),
            own_up_to: own_up_to.unwrap_or(0),
            tried: Vec::new(),
            idle_limit,
        };
    }

    /// A renewal of `worker_id` with `mark_ms`: `LeaseLost` once another process took the lock
    /// (or wrote the identity's mark, or a write proved nothing). With `fence_on_disconnect`,
    /// `Ok` only once the mark committed on the lock's session, an error if it did not;
    /// without, `Ok` at once and the mark written in the background unless a write is in
    /// flight (the next renewal carries a later mark anyway). Needs a Tokio runtime.
    pub async fn renew(&self, worker_id: u64, mark_ms: u64) -> Result<Renewal> {
        let inner = &self.inner;
        if inner.lost.load(Ordering::Acquire) {
            return Ok(Renewal::LeaseLost);
        }
        if inner.settings.fence_on_disconnect {
            let mut state = inner.state.lock().await;
            if state.released {
                return Ok(Renewal::LeaseLost);
            }
            return match write(inner, &mut state, worker_id, mark_ms, MarkWrite::Raise).await? {
                true => Ok(Renewal::OK),
                false => Ok(Renewal::LeaseLost),
            };
        }
        if inner.in_flight.swap(true, Ordering::AcqRel) {
            return Ok(Renewal::OK);
        }
        let inner = Arc::clone(inner);
        tokio::spawn(async move {
            let mut state = inner.state.lock().await;
            if !state.released {
                let written = write(&inner, &mut state, worker_id, mark_ms, MarkWrite::Raise).await;
                if let Err(e) = written {
                    tracing::warn!(
                        worker_id,
                        mark_ms,
                        backend = inner.backend,
                        error = %e,
                        "mark not written to the server; the cache file has it"
                    );
                }
            }
            drop(state);
            inner.in_flight.store(false, Ordering::Release);
        });
        Ok(Renewal::OK)
    }

    /// The release: waits for a write in flight, stops later ones, writes `final_mark_ms` (the
    /// last timestamp issued, which may be below the last renewal's) on the lock's session,
    /// then ends the session. The lock is freed either way; an error of the final write is the
    /// caller's to log.
    pub async fn release(&self, worker_id: u64, final_mark_ms: u64) -> Result<()> {
        let inner = &self.inner;
        let mut state = inner.state.lock().await;
        state.released = true;
        let written = if inner.lost.load(Ordering::Acquire) {
            Ok(true)
        } else {
            write(
                inner,
                &mut state,
                worker_id,
                final_mark_ms,
                MarkWrite::Final,
            )
            .await
        };
        if let Some(session) = state.held.take().and_then(|h| h.session) {
            self.close(session).await;
        }
        written.map(drop)
    }

    /// The last mark the server confirmed, if any.
    pub fn confirmed_mark_ms(&self) -> Option<u64> {
        Some(self.inner.confirmed_mark_ms.load(Ordering::Relaxed)).filter(|m| *m > 0)
    }
}

/// The error of a claim whose lock proved shared: `how` the new session behaved.
fn pooled(backend: &str, name: &str, how: &str) -> Error {
    Error::Config(format!(
        "the {backend} identity lock {name:?}: a session that was just opened {how}, so the \
         server session is not this connection's own: a pooler in transaction or statement mode \
         (PgBouncer, ProxySQL, RDS Proxy) stands between this node and {backend}; the workerId \
         mode needs a direct connection (or a pooler in session mode)"
    ))
}

/// Writes the mark on the lock's session, first opening a session, taking the lock again and
/// checking the stored mark if the session is gone. `Ok(false)`, with the lease marked lost:
/// another process holds the lock, or wrote the mark while this node's lock was gone, or the
/// write proved nothing (the lock or the row is not this node's).
async fn write<L: SessionLock>(
    inner: &Inner<L>,
    state: &mut State<L::Session>,
    worker_id: u64,
    mark_ms: u64,
    how: MarkWrite,
) -> Result<bool> {
    let (backend, settings) = (inner.backend, inner.settings);
    let State {
        held,
        own_up_to,
        tried,
        idle_limit,
        ..
    } = state;
    let Some(held) = held.as_mut() else {
        return Ok(true);
    };
    if held.session.is_none() {
        let row = held.row(worker_id);
        match relock(inner, row, *own_up_to, tried, *idle_limit).await? {
            Some((session, server_session)) => {
                held.session = Some(session);
                held.server_session = server_session;
            }
            None => {
                inner.lost.store(true, Ordering::Release);
                return Ok(false);
            }
        }
    }
    if tried.len() >= MAX_TRIED {
        tried.remove(0);
    }
    tried.push(mark_ms);
    let mut session = held.session.take().expect("connected above");
    let written = bounded(
        backend,
        settings.timeout,
        "the mark update",
        inner
            .lock
            .write_mark(&mut session, held.row(worker_id), mark_ms, how),
    )
    .await;
    match written {
        Ok(Proof::Held(())) => {
            held.session = Some(session);
            *own_up_to = (*own_up_to).max(mark_ms);
            tried.clear();
            if how == MarkWrite::Raise {
                inner
                    .confirmed_mark_ms
                    .fetch_max(mark_ms, Ordering::Relaxed);
            }
            Ok(true)
        }
        Ok(Proof::NotHeld) => {
            tracing::error!(
                lock = %held.name,
                identity = %held.identity,
                backend,
                worker_id,
                "a mark write proved nothing: this session does not hold the identity lock, or \
                 the worker id's row is not this identity's; worker id lost"
            );
            inner.lost.store(true, Ordering::Release);
            let _ = tokio::time::timeout(settings.timeout, inner.lock.close(session)).await;
            Ok(false)
        }
        Err(e) => {
            // A statement the server refused leaves the session and its lock as they were: kept
            // (dropping it would free the lock for another process), once it proves the lock
            // again. One that was cut, or given up on, may have lost both: reconnect next time.
            let proved = bounded(
                backend,
                settings.timeout,
                "proving the identity lock after a failed write",
                inner
                    .lock
                    .holds(&mut session, &held.name, held.server_session),
            )
            .await;
            if matches!(proved, Ok(true)) {
                held.session = Some(session);
            } else {
                let _ = tokio::time::timeout(settings.timeout, inner.lock.close(session)).await;
            }
            Err(e)
        }
    }
}

/// A new session holding the lock of `row` again, after the last one was lost, and the server's
/// id of it; `None` if another session holds it, if the session held it before it asked (a
/// pooler), or if the stored mark is above this node's own and is none it sent (another
/// process of the identity held it meanwhile), or the row proves not to be this node's.
async fn relock<L: SessionLock>(
    inner: &Inner<L>,
    row: MarkRow<'_>,
    own_up_to: u64,
    tried: &[u64],
    idle_limit: Duration,
) -> Result<Option<(L::Session, i64)>> {
    let (backend, settings) = (inner.backend, inner.settings);
    let (name, worker_id) = (row.lock, row.worker_id);
    let mut session = bounded(
        backend,
        settings.connect_timeout,
        "connecting for the identity lock",
        async {
            inner
                .lock
                .connect(false, idle_limit)
                .await
                .map_err(|e| e.error)
        },
    )
    .await?;
    let checked = bounded(
        backend,
        settings.timeout,
        "taking the identity lock again",
        async {
            let server_session = match inner.lock.try_lock(&mut session, name, Duration::ZERO).await? {
                Locking::Taken(id) => id,
                Locking::Busy => {
                    tracing::error!(
                        lock = %name,
                        backend,
                        "another process took this node's identity lock while its connection \
                         was down; worker id lost"
                    );
                    return Ok(None);
                }
                Locking::Shared => {
                    tracing::error!(lock = %name, backend, "{}", pooled(backend, name, "held it before it asked"));
                    return Ok(None);
                }
            };
            let row = MarkRow {
                server_session,
                ..row
            };
            match inner.lock.read_mark(&mut session, row).await? {
                Proof::NotHeld => {
                    tracing::error!(
                        lock = %name,
                        identity = %row.identity,
                        backend,
                        worker_id,
                        "the identity lock, taken again, is not held by the statement that reads \
                         the mark, or the worker id's row is not this identity's; worker id lost"
                    );
                    Ok(None)
                }
                Proof::Held(Some(stored)) if stored > own_up_to && !tried.contains(&stored) => {
                    tracing::error!(
                        lock = %name,
                        backend,
                        worker_id,
                        stored_mark_ms = stored,
                        own_mark_ms = own_up_to,
                        "another process of this identity wrote its mark while this node's lock \
                         was gone; worker id lost"
                    );
                    Ok(None)
                }
                Proof::Held(_) => Ok(Some(server_session)),
            }
        },
    )
    .await?;
    let Some(server_session) = checked else {
        let _ = tokio::time::timeout(settings.timeout, inner.lock.close(session)).await;
        return Ok(None);
    };
    tracing::info!(lock = %name, "identity lock taken again after a reconnect");
    Ok(Some((session, server_session)))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Mutex as StdMutex;

    use super::*;

    /// A server of locks and marks in memory: a session is a number; a lock belongs to one
    /// session; sessions can be cut.
    #[derive(Default)]
    struct Server {
        next: AtomicU64,
        /// Lock name -> the session holding it.
        locks: StdMutex<HashMap<String, u64>>,
        /// Sessions cut by the "server".
        cut: StdMutex<Vec<u64>>,
        /// Worker id -> stored mark.
        marks: StdMutex<HashMap<u64, u64>>,
        /// Worker id -> the identity its row belongs to (any, when absent).
        owners: StdMutex<HashMap<u64, String>>,
        /// No connection can be opened.
        down: AtomicBool,
        /// Connections open, and the session's setup fails (an error the server sent).
        setup_fails: AtomicBool,
        /// Connections open, and nothing answers on them.
        silent: AtomicBool,
        /// No connection opens any more (a server that sent its error and went away).
        vanished: AtomicBool,
        /// Every lock statement fails.
        lock_fails: AtomicBool,
        /// A pooler: every new session is the same server session (1).
        pooled: AtomicBool,
        /// A pooler that frees a session's locks after each statement (`DISCARD ALL`).
        forgets: AtomicBool,
        /// The deployment is one the backend refuses.
        refused: AtomicBool,
        /// Every mark write fails with an error the server sent (its session and lock live on).
        write_fails: AtomicBool,
        writes: AtomicU64,
    }

    impl Server {
        /// Ends `session` as a server does when a connection drops: its locks go.
        fn cut(&self, session: u64) {
            self.cut.lock().unwrap().push(session);
            self.locks.lock().unwrap().retain(|_, s| *s != session);
        }
        fn holder(&self, name: &str) -> Option<u64> {
            self.locks.lock().unwrap().get(name).copied()
        }
        fn mark(&self, worker_id: u64) -> Option<u64> {
            self.marks.lock().unwrap().get(&worker_id).copied()
        }
        fn check(&self, session: u64) -> Result<()> {
            if self.down.load(Ordering::Relaxed) || self.cut.lock().unwrap().contains(&session) {
                return Err(Error::Unavailable("connection lost".into()));
            }
            Ok(())
        }
        /// Whether `session` holds `row`'s lock, is the session that took it, and the row is
        /// its identity's.
        fn proves(&self, session: u64, row: MarkRow<'_>) -> bool {
            let owner = self.owners.lock().unwrap().get(&row.worker_id).cloned();
            self.holder(row.lock) == Some(session)
                && row.server_session == session as i64
                && owner.is_none_or(|o| o == row.identity)
        }
    }

    #[async_trait]
    impl SessionLock for Arc<Server> {
        type Session = u64;

        async fn connect(
            &self,
            _at_start: bool,
            _idle: Duration,
        ) -> std::result::Result<u64, ConnectError> {
            if self.down.load(Ordering::Relaxed) || self.silent.load(Ordering::Relaxed) {
                let e = Error::Unavailable("down".into());
                return Err(ConnectError::unanswered(e));
            }
            if self.setup_fails.load(Ordering::Relaxed) {
                let e = Error::Unavailable("too many connections".into());
                return Err(ConnectError::answered(e));
            }
            if self.pooled.load(Ordering::Relaxed) {
                return Ok(1);
            }
            Ok(self.next.fetch_add(1, Ordering::Relaxed) + 1)
        }

        async fn reachable(&self, _timeout: Duration) -> bool {
            !self.down.load(Ordering::Relaxed) && !self.vanished.load(Ordering::Relaxed)
        }

        async fn try_lock(
            &self,
            session: &mut u64,
            name: &str,
            _wait: Duration,
        ) -> Result<Locking> {
            self.check(*session)?;
            if self.lock_fails.load(Ordering::Relaxed) {
                return Err(Error::Unavailable("lock wait timeout".into()));
            }
            let mut locks = self.locks.lock().unwrap();
            match locks.get(name) {
                Some(holder) if holder == session => Ok(Locking::Shared),
                Some(_) => Ok(Locking::Busy),
                None => {
                    if !self.forgets.load(Ordering::Relaxed) {
                        locks.insert(name.to_owned(), *session);
                    }
                    Ok(Locking::Taken(*session as i64))
                }
            }
        }

        async fn holds(&self, session: &mut u64, name: &str, server_session: i64) -> Result<bool> {
            self.check(*session)?;
            Ok(self.holder(name) == Some(*session) && server_session == *session as i64)
        }

        async fn check_deployment(&self, session: &mut u64) -> Result<()> {
            self.check(*session)?;
            match self.refused.load(Ordering::Relaxed) {
                true => Err(Error::Config("a multi-primary cluster".into())),
                false => Ok(()),
            }
        }

        async fn read_mark(
            &self,
            session: &mut u64,
            row: MarkRow<'_>,
        ) -> Result<Proof<Option<u64>>> {
            self.check(*session)?;
            if !self.proves(*session, row) {
                return Ok(Proof::NotHeld);
            }
            Ok(Proof::Held(self.mark(row.worker_id)))
        }

        async fn write_mark(
            &self,
            session: &mut u64,
            row: MarkRow<'_>,
            mark_ms: u64,
            how: MarkWrite,
        ) -> Result<Proof<()>> {
            self.check(*session)?;
            if self.write_fails.load(Ordering::Relaxed) {
                return Err(Error::Unavailable("lock wait timeout on the row".into()));
            }
            if !self.proves(*session, row) {
                return Ok(Proof::NotHeld);
            }
            self.writes.fetch_add(1, Ordering::Relaxed);
            let mut marks = self.marks.lock().unwrap();
            let m = marks.entry(row.worker_id).or_default();
            *m = match how {
                MarkWrite::Raise => (*m).max(mark_ms),
                MarkWrite::Final => mark_ms,
            };
            Ok(Proof::Held(()))
        }

        async fn close(&self, session: u64) {
            self.cut(session);
        }
    }

    const IDLE: Duration = Duration::from_secs(60);

    fn held_with(server: &Arc<Server>, fence: bool) -> HeldIdentity<Arc<Server>> {
        let settings = IdentitySettings {
            connect_timeout: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            fence_on_disconnect: fence,
        };
        HeldIdentity::new(Arc::clone(server), settings, "memory")
    }

    fn held(server: &Arc<Server>) -> HeldIdentity<Arc<Server>> {
        held_with(server, false)
    }

    /// A hold on the name `n`, its lock taken.
    async fn holding_with(server: &Arc<Server>, fence: bool) -> HeldIdentity<Arc<Server>> {
        let h = held_with(server, fence);
        let lock = h
            .lock_for_claim("x", "n", Duration::ZERO, IDLE)
            .await
            .unwrap()
            .unwrap();
        h.hold(lock, None, IDLE).await;
        h
    }

    async fn holding(server: &Arc<Server>) -> HeldIdentity<Arc<Server>> {
        holding_with(server, false).await
    }

    /// Lets the background write run and end.
    async fn settle(h: &HeldIdentity<Arc<Server>>) {
        for _ in 0..100 {
            tokio::task::yield_now().await;
            if !h.inner.in_flight.load(Ordering::Acquire) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        panic!("the background write never ended");
    }

    /// A background renewal, settled.
    async fn renew(h: &HeldIdentity<Arc<Server>>, worker_id: u64, mark: u64) -> Renewal {
        let r = h.renew(worker_id, mark).await.unwrap();
        settle(h).await;
        r
    }

    #[tokio::test]
    async fn a_second_holder_of_one_name_is_refused_until_the_first_releases() {
        let server = Arc::new(Server::default());
        let (a, b) = (holding(&server).await, held(&server));
        let refused = b
            .lock_for_claim("x", "n", Duration::ZERO, IDLE)
            .await
            .unwrap();
        assert!(refused.is_none());
        a.release(1, 5).await.unwrap();
        assert_eq!(server.holder("n"), None, "the release ended the session");
        let taken = b
            .lock_for_claim("x", "n", Duration::ZERO, IDLE)
            .await
            .unwrap();
        assert!(taken.is_some());
    }

    #[tokio::test]
    async fn a_server_that_cannot_be_reached_is_unreachable_and_nothing_else_is() {
        let server = Arc::new(Server::default());
        server.down.store(true, Ordering::Relaxed);
        let e = held(&server)
            .lock_for_claim("x", "n", Duration::ZERO, IDLE)
            .await
            .err()
            .unwrap();
        assert!(matches!(e, ClaimError::Unreachable(_)), "{e}");
        server.down.store(false, Ordering::Relaxed);
        // Connected, and the lock statement fails (a wait that ran out, say): the server was
        // reached.
        server.lock_fails.store(true, Ordering::Relaxed);
        let e = held(&server)
            .lock_for_claim("x", "n", Duration::ZERO, IDLE)
            .await
            .err()
            .unwrap();
        assert!(matches!(e, ClaimError::Failed(_)), "{e}");
    }

    #[tokio::test]
    async fn renewals_write_the_mark_in_the_background_and_confirm_it() {
        let server = Arc::new(Server::default());
        let h = held(&server);
        let lock = h
            .lock_for_claim("x", "n", Duration::ZERO, IDLE)
            .await
            .unwrap()
            .unwrap();
        h.hold(lock, Some(5), IDLE).await;
        assert_eq!(h.confirmed_mark_ms(), Some(5));
        assert_eq!(renew(&h, 7, 100).await, Renewal::OK);
        assert_eq!(server.mark(7), Some(100));
        assert_eq!(h.confirmed_mark_ms(), Some(100));
    }

    #[tokio::test]
    async fn a_lost_session_is_locked_again_or_the_lease_is_lost() {
        let server = Arc::new(Server::default());
        let h = holding(&server).await;
        let first = server.holder("n").unwrap();
        // The session dies; nobody else wants the name: the next writes lock it again.
        server.cut(first);
        renew(&h, 1, 10).await; // this write fails on the dead session
        assert_eq!(renew(&h, 1, 20).await, Renewal::OK);
        let second = server.holder("n").expect("locked again");
        assert_ne!(second, first);
        assert_eq!(server.mark(1), Some(20));

        // It dies again, and another process takes the name meanwhile: the lease is lost.
        server.cut(second);
        let other = held(&server);
        renew(&h, 1, 30).await;
        let theirs = other
            .lock_for_claim("x", "n", Duration::ZERO, IDLE)
            .await
            .unwrap();
        assert!(theirs.is_some());
        renew(&h, 1, 40).await;
        assert_eq!(h.renew(1, 50).await.unwrap(), Renewal::LeaseLost);
        assert_eq!(server.mark(1), Some(20), "no mark after the loss");
    }

    /// Another process held the identity while this node's lock was gone, wrote its marks and
    /// released: the lock is free again, but the stored mark is none this node sent. It issued
    /// with this worker id meanwhile, so this node must not go on.
    #[tokio::test]
    async fn a_mark_another_process_wrote_while_the_lock_was_gone_loses_the_lease() {
        for fence in [false, true] {
            let server = Arc::new(Server::default());
            let a = holding_with(&server, fence).await;
            assert!(a.renew(1, 100).await.unwrap().is_ok());
            settle(&a).await;
            server.cut(server.holder("n").unwrap());
            let b = holding_with(&server, fence).await;
            assert!(b.renew(1, 150).await.unwrap().is_ok());
            settle(&b).await;
            b.release(1, 140).await.unwrap();
            assert_eq!(server.holder("n"), None);
            // A's write fails on its dead session, then finds the foreign mark.
            let mut answers = Vec::new();
            for mark in [110, 120, 130] {
                answers.push(a.renew(1, mark).await.map_err(|e| e.to_string()));
                settle(&a).await;
            }
            assert_eq!(
                answers.last(),
                Some(&Ok(Renewal::LeaseLost)),
                "fence {fence}: {answers:?}"
            );
            if fence {
                assert!(
                    answers[0].is_err(),
                    "a failed write is not a renewal: {answers:?}"
                );
            }
            assert_eq!(
                server.mark(1),
                Some(140),
                "fence {fence}: B's final mark stays"
            );
            assert_eq!(server.holder("n"), None, "A left the lock free");
        }
    }

    /// A write whose answer was lost may have landed: its mark is this node's own.
    #[tokio::test]
    async fn a_mark_of_a_write_whose_answer_was_lost_is_this_nodes_own() {
        let server = Arc::new(Server::default());
        let h = holding_with(&server, true).await;
        assert!(h.renew(1, 100).await.unwrap().is_ok());
        // The write of 200 lands but its answer is lost, and the session with it.
        h.inner.state.lock().await.tried.push(200);
        server.marks.lock().unwrap().insert(1, 200);
        server.cut(server.holder("n").unwrap());
        let _ = h.renew(1, 210).await; // fails on the dead session, remembering 210 too
        assert_eq!(h.renew(1, 220).await.unwrap(), Renewal::OK);
        assert_eq!(server.mark(1), Some(220));
    }

    #[tokio::test]
    async fn with_the_fence_a_renewal_counts_only_once_the_mark_is_on_the_server() {
        let server = Arc::new(Server::default());
        let h = holding_with(&server, true).await;
        assert_eq!(h.renew(2, 100).await.unwrap(), Renewal::OK);
        assert_eq!(server.mark(2), Some(100), "written before the answer");
        assert_eq!(h.confirmed_mark_ms(), Some(100));
        // The server restarts: down, and every session (and lock) gone.
        server.down.store(true, Ordering::Relaxed);
        server.cut(server.holder("n").unwrap());
        let e = h.renew(2, 200).await.unwrap_err();
        assert!(matches!(e, Error::Unavailable(_)), "{e}");
        assert_eq!(h.confirmed_mark_ms(), Some(100));
        server.down.store(false, Ordering::Relaxed);
        assert_eq!(h.renew(2, 300).await.unwrap(), Renewal::OK);
        assert_eq!(server.mark(2), Some(300));
        // Another process takes the lock while the session is gone: lost at once.
        server.cut(server.holder("n").unwrap());
        let _theirs = holding_with(&server, true).await;
        assert!(
            h.renew(2, 400).await.is_err(),
            "the write on the dead session"
        );
        assert_eq!(h.renew(2, 410).await.unwrap(), Renewal::LeaseLost);
        assert_eq!(server.mark(2), Some(300));
    }

    #[tokio::test]
    async fn an_offline_start_takes_the_lock_at_the_first_renewal_that_reaches_the_server() {
        let server = Arc::new(Server::default());
        server.down.store(true, Ordering::Relaxed);
        let h = held(&server);
        let cause = || Error::Unavailable("down".into());
        h.hold_offline("x", "n", Some(5), IDLE, cause())
            .await
            .unwrap();
        assert_eq!(renew(&h, 3, 10).await, Renewal::OK);
        assert_eq!(server.holder("n"), None);
        server.down.store(false, Ordering::Relaxed);
        assert_eq!(renew(&h, 3, 20).await, Renewal::OK);
        assert!(server.holder("n").is_some());
        assert_eq!(h.confirmed_mark_ms(), Some(20));

        // With the fence there is no start from the cache file.
        let fenced = held_with(&server, true);
        let e = fenced
            .hold_offline("x", "m", Some(5), IDLE, cause())
            .await
            .unwrap_err();
        assert!(
            matches!(&e, Error::Unavailable(m) if m.contains("never starts from its cache file")),
            "{e}"
        );
    }

    #[tokio::test]
    async fn an_abandoned_lease_keeps_its_lock_for_the_next_claim() {
        let server = Arc::new(Server::default());
        let h = holding(&server).await;
        let session = server.holder("n");
        // A claim again (after an abandon): the held lock, not a refusal by our own session.
        let again = h
            .lock_for_claim("x", "n", Duration::ZERO, IDLE)
            .await
            .unwrap();
        assert!(again.is_some());
        assert_eq!(server.holder("n"), session);
    }

    #[tokio::test]
    async fn the_final_mark_is_written_under_the_lock_and_no_later_write_lands() {
        let server = Arc::new(Server::default());
        let h = holding(&server).await;
        assert_eq!(renew(&h, 4, 99).await, Renewal::OK);
        // The final mark, below the renewed one, replaces it on the lock's session; then the
        // session ends.
        h.release(4, 15).await.unwrap();
        assert_eq!(server.mark(4), Some(15));
        assert_eq!(server.holder("n"), None);
        let writes = server.writes.load(Ordering::Relaxed);
        renew(&h, 4, 120).await;
        assert_eq!(server.writes.load(Ordering::Relaxed), writes);
        assert_eq!(server.mark(4), Some(15), "the final mark stays");
    }

    /// A claim's outcome as a word, for the tables below.
    fn outcome(r: &Result<Option<Held<u64>>, ClaimError>) -> &'static str {
        match r {
            Ok(Some(_)) => "taken",
            Ok(None) => "busy",
            Err(ClaimError::Unreachable(_)) => "unreachable",
            Err(ClaimError::Failed(_)) => "failed",
        }
    }

    #[tokio::test]
    async fn only_a_server_no_connection_reaches_is_unreachable() {
        let server = Arc::new(Server::default());
        let claim = || async {
            held(&server)
                .lock_for_claim("x", "n", Duration::ZERO, IDLE)
                .await
        };
        server.down.store(true, Ordering::Relaxed);
        assert_eq!(outcome(&claim().await), "unreachable");
        server.down.store(false, Ordering::Relaxed);
        // Connected, and the session's setup failed with an error the server sent (too many
        // connections, say): reached.
        server.setup_fails.store(true, Ordering::Relaxed);
        let e = claim().await;
        assert_eq!(outcome(&e), "failed");
        let text = e.err().unwrap().to_string();
        assert!(text.contains("not a start from the cache file"), "{text}");
        // ... even if no connection opens right after it: the answer was the server's.
        server.vanished.store(true, Ordering::Relaxed);
        assert_eq!(outcome(&claim().await), "failed");
        server.vanished.store(false, Ordering::Relaxed);
        server.setup_fails.store(false, Ordering::Relaxed);
        // A connection accepted and never answered: reached.
        server.silent.store(true, Ordering::Relaxed);
        assert_eq!(outcome(&claim().await), "failed");
        server.silent.store(false, Ordering::Relaxed);
        assert_eq!(outcome(&claim().await), "taken");
    }

    /// Two clients behind a pooler share one server session: the second finds the lock held
    /// by its session before it asks, and is refused rather than told it holds it.
    #[tokio::test]
    async fn a_new_session_that_holds_the_lock_before_it_asks_is_a_pooler_and_refused() {
        let server = Arc::new(Server::default());
        server.pooled.store(true, Ordering::Relaxed);
        let a = held(&server);
        let lock = a.lock_for_claim("x", "n", Duration::ZERO, IDLE).await;
        assert_eq!(outcome(&lock), "taken");
        a.hold(lock.unwrap().unwrap(), None, IDLE).await;
        let b = held(&server)
            .lock_for_claim("x", "n", Duration::ZERO, IDLE)
            .await;
        assert_eq!(outcome(&b), "failed");
        let text = b.err().unwrap().to_string();
        assert!(text.contains("pooler"), "{text}");
    }

    /// A pooler that frees the lock after the statement that took it: the next statement does
    /// not hold it, and the claim is refused.
    #[tokio::test]
    async fn a_lock_the_next_statement_does_not_hold_is_a_pooler_and_refused() {
        let server = Arc::new(Server::default());
        server.forgets.store(true, Ordering::Relaxed);
        let r = held(&server)
            .lock_for_claim("x", "n", Duration::ZERO, IDLE)
            .await;
        assert_eq!(outcome(&r), "failed");
        let text = r.err().unwrap().to_string();
        assert!(
            text.contains("did not hold it in its next statement"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn a_deployment_the_backend_refuses_fails_the_claim() {
        let server = Arc::new(Server::default());
        server.refused.store(true, Ordering::Relaxed);
        let r = held(&server)
            .lock_for_claim("x", "n", Duration::ZERO, IDLE)
            .await;
        assert_eq!(outcome(&r), "failed");
        assert_eq!(server.holder("n"), None, "the session was closed");
    }

    /// A claim abandoned (a start that failed after it) keeps its session; if that session
    /// died meanwhile and another process took the lock, the next claim must not reuse it.
    #[tokio::test]
    async fn a_kept_session_that_lost_its_lock_is_not_reused() {
        let server = Arc::new(Server::default());
        let h = holding(&server).await;
        server.cut(server.holder("n").unwrap());
        let _theirs = holding(&server).await;
        let again = h.lock_for_claim("x", "n", Duration::ZERO, IDLE).await;
        assert_eq!(outcome(&again), "busy");
    }

    /// The worker id's row was deleted and given to another identity: a write names the
    /// identity, finds nothing of its own, and loses the lease, with or without the fence.
    #[tokio::test]
    async fn a_write_that_proves_nothing_loses_the_lease() {
        for fence in [false, true] {
            let server = Arc::new(Server::default());
            let h = holding_with(&server, fence).await;
            assert!(h.renew(9, 100).await.unwrap().is_ok());
            settle(&h).await;
            assert_eq!(server.mark(9), Some(100));
            server.owners.lock().unwrap().insert(9, "another".into());
            let first = h.renew(9, 200).await.unwrap();
            settle(&h).await;
            assert_eq!(first == Renewal::LeaseLost, fence, "fence {fence}");
            assert_eq!(h.renew(9, 300).await.unwrap(), Renewal::LeaseLost);
            assert_eq!(
                server.mark(9),
                Some(100),
                "fence {fence}: the other row kept its mark"
            );
        }
    }

    /// A mark write the server refused (a row lock wait, say) leaves the session and its lock
    /// alive: the session is kept, so that the lock is never freed for another process while
    /// this node goes on (without the fence) from its cache file.
    #[tokio::test]
    async fn a_write_the_server_refused_keeps_the_session_that_still_holds_the_lock() {
        for fence in [false, true] {
            let server = Arc::new(Server::default());
            let h = holding_with(&server, fence).await;
            let session = server.holder("n");
            server.write_fails.store(true, Ordering::Relaxed);
            let answer = h.renew(1, 100).await;
            settle(&h).await;
            assert_eq!(answer.is_err(), fence, "fence {fence}: {answer:?}");
            assert_eq!(
                server.holder("n"),
                session,
                "fence {fence}: the lock was freed"
            );
            let theirs = held(&server)
                .lock_for_claim("x", "n", Duration::ZERO, IDLE)
                .await;
            assert_eq!(outcome(&theirs), "busy", "fence {fence}");
            server.write_fails.store(false, Ordering::Relaxed);
            assert!(h.renew(1, 200).await.unwrap().is_ok());
            settle(&h).await;
            assert_eq!(
                server.mark(1),
                Some(200),
                "fence {fence}: written on the kept session"
            );
            assert_eq!(server.holder("n"), session);
        }
    }

    /// Once a node learned that another process holds its identity, its server unreachable
    /// is no reason to start from the cache file: only a claim that succeeds lifts that.
    #[tokio::test]
    async fn after_a_lease_lost_to_another_process_no_offline_start_until_a_claim() {
        let server = Arc::new(Server::default());
        let h = holding(&server).await;
        server.cut(server.holder("n").unwrap());
        let theirs = holding(&server).await;
        renew(&h, 1, 10).await; // fails on the dead session
        renew(&h, 1, 20).await; // finds the lock taken, in the background
        assert_eq!(renew(&h, 1, 30).await, Renewal::LeaseLost);
        server.down.store(true, Ordering::Relaxed);
        let cause = || Error::Unavailable("down".into());
        let e = h
            .hold_offline("x", "n", Some(20), IDLE, cause())
            .await
            .unwrap_err();
        assert!(e.to_string().contains("another process held"), "{e}");
        // The other process leaves; a claim reaches the server and succeeds: allowed again.
        server.down.store(false, Ordering::Relaxed);
        theirs.release(1, 30).await.unwrap();
        let lock = h
            .lock_for_claim("x", "n", Duration::ZERO, IDLE)
            .await
            .unwrap();
        h.hold(lock.unwrap(), Some(30), IDLE).await;
        h.hold_offline("x", "n", Some(30), IDLE, cause())
            .await
            .unwrap();
    }

    #[test]
    fn the_idle_limit_is_a_minute_or_ten_renew_periods() {
        assert_eq!(
            session_idle_limit(Duration::from_secs(1)),
            Duration::from_secs(60)
        );
        assert_eq!(
            session_idle_limit(Duration::from_secs(9)),
            Duration::from_secs(90)
        );
    }
}
