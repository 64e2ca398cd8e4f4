//! [`HeldIdentity`](super::HeldIdentity) against a server of locks and marks in memory.

use std::collections::HashMap;
use std::sync::Mutex as StdMutex;

use async_trait::async_trait;

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

    async fn try_lock(&self, session: &mut u64, name: &str, _wait: Duration) -> Result<Locking> {
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

    async fn read_mark(&self, session: &mut u64, row: MarkRow<'_>) -> Result<Proof<Option<u64>>> {
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
