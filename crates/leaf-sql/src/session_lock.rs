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

mod lock;
#[cfg(test)]
mod tests;
mod write;

pub use lock::{ConnectError, Locking, MarkRow, MarkWrite, Proof, SessionLock, session_idle_limit};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::Mutex;

use leaf_core::{ClaimError, Error, Renewal, Result, bounded};

use write::write;

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
