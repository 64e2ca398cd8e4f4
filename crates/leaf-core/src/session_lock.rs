//! [`HeldIdentity`]: how a non-recycling workerId mode on a database (`mysql`, `postgres`) holds
//! its node identity while it runs, written once: a lock that lives as long as one server
//! session (a dedicated connection), and the database's copy of the time mark written on that
//! session in the background. The backend says how to open a session and take the lock, and
//! how to raise the mark ([`SessionLock`]); the order of things lives here.
//!
//! - At a claim the lock is taken before the identity's row is read or inserted, so that two
//!   processes with one identity never both start; a start waits a moment for a crashed
//!   predecessor's session to end. An abandoned lease keeps its lock, and the next claim of the
//!   same identity reuses it.
//! - A renewal answers at once (the cache file is the durable record) and writes the mark on
//!   the lock's session in the background, at most one write at a time. If that session is
//!   gone, the write opens another and takes the lock again without waiting; if another
//!   process holds it by then, the lease is lost and every later renewal says so.
//! - A start from the cache file (the server down) holds the lock's name only: the first
//!   renewal that reaches the server takes it.
//! - The release waits for a write in flight, stops later ones (so that the final mark, which
//!   may be below the last renewal's, stays), lets the backend write the final mark, and ends
//!   the session, which frees the lock.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Mutex;

use crate::{Renewal, Result, bounded};

/// When a lock is tried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockAttempt {
    /// At a claim: wait up to this long for another session's lock to be freed (a crashed
    /// predecessor's session ends when the server notices its closed connection). Errors are
    /// start-up errors: refused credentials are a configuration mistake.
    Start(Duration),
    /// In a renewal, after the lock's session was lost: never wait. Errors are outages.
    Renewal,
}

/// A backend's identity lock: sessions, the lock on one, and the mark written on it.
#[async_trait]
pub trait SessionLock: Send + Sync + 'static {
    /// A server session (a dedicated connection) that may hold the lock.
    type Session: Send + 'static;

    /// Opens a session and takes the lock `name` on it as `attempt` says: the session holding
    /// it, or `None` if another session holds it.
    async fn lock(&self, name: &str, attempt: LockAttempt) -> Result<Option<Self::Session>>;

    /// Raises the stored mark of `worker_id` to `mark_ms` on `session`; a stored mark that is
    /// higher stays.
    async fn raise_mark(
        &self,
        session: &mut Self::Session,
        worker_id: u64,
        mark_ms: u64,
    ) -> Result<()>;

    /// Ends `session`, which frees the lock. Default: dropped.
    async fn close(&self, session: Self::Session) {
        drop(session);
    }
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
    /// The bound of one background mark write, and of the release's session end.
    timeout: Duration,
    /// The backend, for messages (`mysql`).
    backend: &'static str,
    state: Mutex<State<L::Session>>,
    in_flight: AtomicBool,
    /// Another process holds the identity lock: the lease is lost.
    lost: AtomicBool,
    /// The last mark the server confirmed (Unix ms), 0 before the first.
    confirmed_mark_ms: AtomicU64,
}

struct State<S> {
    released: bool,
    /// The lock's name and, while connected, its session.
    held: Option<Held<S>>,
}

/// The lock a claim took: its name and its session. Dropping it ends the session.
pub struct Held<S> {
    name: String,
    session: Option<S>,
}

impl<L: SessionLock> HeldIdentity<L> {
    /// Holds nothing yet; `lock` does the backend's part, `timeout` bounds each background
    /// write, `backend` names it in the log.
    pub fn new(lock: L, timeout: Duration, backend: &'static str) -> Self {
        HeldIdentity {
            inner: Arc::new(Inner {
                lock,
                timeout,
                backend,
                state: Mutex::new(State {
                    released: false,
                    held: None,
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

    /// The lock `name` for a claim: the session this node still holds it on (an abandoned
    /// lease keeps it), else a new session's, waiting up to `wait`; `None` if another live
    /// session holds it. Until [`hold`](Self::hold), nothing is held.
    pub async fn lock_for_claim(
        &self,
        name: &str,
        wait: Duration,
    ) -> Result<Option<Held<L::Session>>> {
        let kept = self.inner.state.lock().await.held.take();
        if let Some(held) = kept.filter(|h| h.name == name && h.session.is_some()) {
            return Ok(Some(held));
        }
        let session = self.inner.lock.lock(name, LockAttempt::Start(wait)).await?;
        Ok(session.map(|s| Held {
            name: name.to_owned(),
            session: Some(s),
        }))
    }

    /// The claim succeeded: `held` is this node's lock, and the server's row had
    /// `confirmed_mark_ms`. Renewals may write again.
    pub async fn hold(&self, held: Held<L::Session>, confirmed_mark_ms: Option<u64>) {
        self.reset(held, confirmed_mark_ms).await;
    }

    /// The node starts from its cache file while the server cannot be reached: it holds the
    /// lock's name only, and the first renewal that reaches the server takes the lock (or finds
    /// the lease lost).
    pub async fn hold_offline(&self, name: &str) {
        let held = Held {
            name: name.to_owned(),
            session: None,
        };
        self.reset(held, None).await;
    }

    async fn reset(&self, held: Held<L::Session>, confirmed_mark_ms: Option<u64>) {
        let inner = &self.inner;
        inner.lost.store(false, Ordering::Release);
        inner
            .confirmed_mark_ms
            .store(confirmed_mark_ms.unwrap_or(0), Ordering::Relaxed);
        *inner.state.lock().await = State {
            released: false,
            held: Some(held),
        };
    }

    /// A renewal: `LeaseLost` once another process took the lock; else `Ok`, the mark written
    /// to the server in the background unless a write is in flight (the next renewal carries a
    /// later mark anyway). Needs a Tokio runtime.
    pub fn renew(&self, worker_id: u64, mark_ms: u64) -> Renewal {
        let inner = &self.inner;
        if inner.lost.load(Ordering::Acquire) {
            return Renewal::LeaseLost;
        }
        if inner.in_flight.swap(true, Ordering::AcqRel) {
            return Renewal::OK;
        }
        let inner = Arc::clone(inner);
        tokio::spawn(async move {
            let mut state = inner.state.lock().await;
            if !state.released {
                let written = bounded(
                    inner.backend,
                    inner.timeout,
                    "the mark update",
                    write_mark(&inner.lock, &mut state, worker_id, mark_ms),
                )
                .await;
                match written {
                    Ok(true) => {
                        inner
                            .confirmed_mark_ms
                            .fetch_max(mark_ms, Ordering::Relaxed);
                    }
                    Ok(false) => {
                        tracing::error!(
                            worker_id,
                            backend = inner.backend,
                            "another process took this node's identity lock while its \
                             connection was down; worker id lost"
                        );
                        inner.lost.store(true, Ordering::Release);
                    }
                    Err(e) => tracing::warn!(
                        worker_id,
                        mark_ms,
                        backend = inner.backend,
                        error = %e,
                        "mark not written to the server; the cache file has it"
                    ),
                }
            }
            drop(state);
            inner.in_flight.store(false, Ordering::Release);
        });
        Renewal::OK
    }

    /// The release: waits for a write in flight, stops later ones, runs `final_write` (the
    /// final mark, which may be below the last renewal's), then ends the lock's session.
    /// Errors of `final_write` are the caller's to log; the lock is freed either way.
    pub async fn release<T>(&self, final_write: impl Future<Output = T>) -> T {
        let mut state = self.inner.state.lock().await;
        state.released = true;
        let written = final_write.await;
        if let Some(session) = state.held.take().and_then(|h| h.session) {
            let _ = tokio::time::timeout(self.inner.timeout, self.inner.lock.close(session)).await;
        }
        written
    }

    /// The last mark the server confirmed, if any.
    pub fn confirmed_mark_ms(&self) -> Option<u64> {
        Some(self.inner.confirmed_mark_ms.load(Ordering::Relaxed)).filter(|m| *m > 0)
    }
}

/// Writes the mark on the lock's session, opening a session and taking the lock again first if
/// it is gone. `Ok(false)`: another session holds the lock now.
async fn write_mark<L: SessionLock>(
    lock: &L,
    state: &mut State<L::Session>,
    worker_id: u64,
    mark_ms: u64,
) -> Result<bool> {
    let Some(held) = state.held.as_mut() else {
        return Ok(true);
    };
    if held.session.is_none() {
        match lock.lock(&held.name, LockAttempt::Renewal).await? {
            Some(session) => {
                tracing::info!(lock = %held.name, "identity lock taken again after a reconnect");
                held.session = Some(session);
            }
            None => return Ok(false),
        }
    }
    let session = held.session.as_mut().expect("connected above");
    match lock.raise_mark(session, worker_id, mark_ms).await {
        Ok(()) => Ok(true),
        Err(e) => {
            // The session (and with it the lock) may be gone: reconnect next time.
            held.session = None;
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Mutex as StdMutex;

    use super::*;
    use crate::Error;

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
        down: AtomicBool,
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
    }

    #[async_trait]
    impl SessionLock for Arc<Server> {
        type Session = u64;

        async fn lock(&self, name: &str, _attempt: LockAttempt) -> Result<Option<u64>> {
            if self.down.load(Ordering::Relaxed) {
                return Err(Error::Unavailable("down".into()));
            }
            let session = self.next.fetch_add(1, Ordering::Relaxed) + 1;
            let mut locks = self.locks.lock().unwrap();
            if locks.contains_key(name) {
                return Ok(None);
            }
            locks.insert(name.to_owned(), session);
            Ok(Some(session))
        }

        async fn raise_mark(&self, session: &mut u64, worker_id: u64, mark_ms: u64) -> Result<()> {
            if self.down.load(Ordering::Relaxed) || self.cut.lock().unwrap().contains(session) {
                return Err(Error::Unavailable("connection lost".into()));
            }
            self.writes.fetch_add(1, Ordering::Relaxed);
            let mut marks = self.marks.lock().unwrap();
            let m = marks.entry(worker_id).or_default();
            *m = (*m).max(mark_ms);
            Ok(())
        }

        async fn close(&self, session: u64) {
            self.cut(session);
        }
    }

    fn held(server: &Arc<Server>) -> HeldIdentity<Arc<Server>> {
        HeldIdentity::new(Arc::clone(server), Duration::from_secs(1), "memory")
    }

    /// A hold on the name `n`, its lock taken.
    async fn holding(server: &Arc<Server>) -> HeldIdentity<Arc<Server>> {
        let h = held(server);
        let lock = h
            .lock_for_claim("n", Duration::ZERO)
            .await
            .unwrap()
            .unwrap();
        h.hold(lock, None).await;
        h
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

    #[tokio::test]
    async fn a_second_holder_of_one_name_is_refused_until_the_first_releases() {
        let server = Arc::new(Server::default());
        let (a, b) = (holding(&server).await, held(&server));
        assert!(
            b.lock_for_claim("n", Duration::ZERO)
                .await
                .unwrap()
                .is_none()
        );
        a.release(async {}).await;
        assert_eq!(server.holder("n"), None, "the release ended the session");
        assert!(
            b.lock_for_claim("n", Duration::ZERO)
                .await
                .unwrap()
                .is_some()
        );
    }

    #[tokio::test]
    async fn renewals_write_the_mark_in_the_background_and_confirm_it() {
        let server = Arc::new(Server::default());
        let h = held(&server);
        let lock = h
            .lock_for_claim("n", Duration::ZERO)
            .await
            .unwrap()
            .unwrap();
        h.hold(lock, Some(5)).await;
        assert_eq!(h.confirmed_mark_ms(), Some(5));
        assert_eq!(h.renew(7, 100), Renewal::OK);
        settle(&h).await;
        assert_eq!(server.marks.lock().unwrap()[&7], 100);
        assert_eq!(h.confirmed_mark_ms(), Some(100));
    }

    #[tokio::test]
    async fn a_lost_session_is_locked_again_or_the_lease_is_lost() {
        let server = Arc::new(Server::default());
        let h = holding(&server).await;
        let first = server.holder("n").unwrap();
        // The session dies; nobody else wants the name: the next writes lock it again.
        server.cut(first);
        h.renew(1, 10);
        settle(&h).await; // this write fails on the dead session
        assert_eq!(h.renew(1, 20), Renewal::OK);
        settle(&h).await;
        let second = server.holder("n").expect("locked again");
        assert_ne!(second, first);
        assert_eq!(server.marks.lock().unwrap()[&1], 20);

        // It dies again, and another process takes the name meanwhile: the lease is lost.
        server.cut(second);
        let other = held(&server);
        h.renew(1, 30);
        settle(&h).await;
        let theirs = other.lock_for_claim("n", Duration::ZERO).await.unwrap();
        assert!(theirs.is_some());
        h.renew(1, 40);
        settle(&h).await;
        assert_eq!(h.renew(1, 50), Renewal::LeaseLost);
        assert_eq!(
            server.marks.lock().unwrap()[&1],
            20,
            "no mark after the loss"
        );
    }

    #[tokio::test]
    async fn an_offline_start_takes_the_lock_at_the_first_renewal_that_reaches_the_server() {
        let server = Arc::new(Server::default());
        server.down.store(true, Ordering::Relaxed);
        let h = held(&server);
        h.hold_offline("n").await;
        assert_eq!(h.renew(3, 10), Renewal::OK);
        settle(&h).await;
        assert_eq!(server.holder("n"), None);
        server.down.store(false, Ordering::Relaxed);
        assert_eq!(h.renew(3, 20), Renewal::OK);
        settle(&h).await;
        assert!(server.holder("n").is_some());
        assert_eq!(h.confirmed_mark_ms(), Some(20));
    }

    #[tokio::test]
    async fn an_abandoned_lease_keeps_its_lock_for_the_next_claim() {
        let server = Arc::new(Server::default());
        let h = holding(&server).await;
        let session = server.holder("n");
        // A claim again (after an abandon): the held lock, not a refusal by our own session.
        let again = h.lock_for_claim("n", Duration::ZERO).await.unwrap();
        assert!(again.is_some());
        assert_eq!(server.holder("n"), session);
    }

    #[tokio::test]
    async fn after_the_release_no_background_write_lands() {
        let server = Arc::new(Server::default());
        let h = holding(&server).await;
        let final_mark = h
            .release(async {
                server.marks.lock().unwrap().insert(4, 15);
            })
            .await;
        let _: () = final_mark;
        let writes = server.writes.load(Ordering::Relaxed);
        h.renew(4, 99);
        settle(&h).await;
        assert_eq!(server.writes.load(Ordering::Relaxed), writes);
        assert_eq!(server.marks.lock().unwrap()[&4], 15, "the final mark stays");
    }
}
