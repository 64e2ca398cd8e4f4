//! How a SQL workerId mode proves its hold on a node identity (issue 32), on a real server:
//! only a server to which no connection could be opened at all lets a node start from its
//! cache file (any answer, or a connection accepted and never answered, is a server reached);
//! a node that lost its identity to another process never starts from the file again before a
//! claim succeeds; a lock is proved, never assumed from a session; every mark statement names
//! the identity and proves the lock.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use leaf_core::{Error, Lease, NodeIdentity, Renewal};
use leaf_sql::{
    Conn, Dialect, Locking, MarkRow, MarkWrite, Options, Proof, Queries, RegistryDialect,
};
use serde_json::{Value, json};
use sqlx::{AssertSqlSafe, Connection, Executor};

use super::{now_ms, request};
use crate::RegistryFixture;
use crate::identity_cases::{authority, through};
use crate::proxy::{Link, Proxy};
use crate::sql::{SqlBackend, SqlFix, config_of};

/// Short bounds, so that a claim that meets a fault gives up quickly.
pub fn tight() -> Value {
    json!({ "connect_timeout_ms": 500, "timeout_ms": 1000 })
}

/// A cache directory whose earlier run held `identity`: it holds the identity's worker id and
/// mark, so that a start from it is possible. The worker id.
pub async fn earlier_run<B: SqlBackend>(
    fix: &SqlFix<B>,
    identity: &NodeIdentity,
) -> (PathBuf, u64) {
    let dir = fix.new_dir();
    let lease =
        crate::identity_cases::earlier_run(fix.registry_in(dir.clone()).as_ref(), identity).await;
    (dir, lease.worker_id)
}

/// Process A holds identity X on the fixture's server; then `meanwhile` runs (a fault set up
/// once A holds its connections); then process B, whose cache directory holds X's worker id,
/// claims X on the server at `url` with `changes`: B must not start (its server was reached,
/// so its cache file is no reason to), and its error is not the missing file's. B's error,
/// for the caller's checks of its text.
pub async fn a_claim_that_reached_the_server_never_starts_from_the_cache_file<B: SqlBackend>(
    fix: &SqlFix<B>,
    url: &str,
    changes: Value,
    meanwhile: impl AsyncFnOnce(),
) -> Error {
    let me = NodeIdentity::new("10.0.0.32", 8032);
    let (dir, _) = earlier_run(fix, &me).await;
    let a = fix.node().await;
    let held = a
        .acquire(&request(me.clone(), 1023))
        .await
        .expect("A holds X");
    meanwhile().await;
    let b = fix.registry_with(dir, &config_of::<B>(url, changes));
    let started = Instant::now();
    let answer = b.acquire(&request(me.clone(), 1023)).await;
    let e = match answer {
        Ok(lease) => panic!(
            "B started with worker id {} (from its cache file, {:?} into the claim) while A held \
             it: its server at {} was reached",
            lease.worker_id,
            started.elapsed(),
            authority(url)
        ),
        Err(e) => e,
    };
    assert!(
        !e.to_string().contains("holds no worker id"),
        "B had no cache file to start from: {e}"
    );
    a.release(&held, now_ms()).await.expect("A's release");
    e
}

/// No connection can be opened: the connection attempt gets no answer at all (a listener whose
/// queue is full drops it, as a host that is gone does). The one case besides a refused
/// connection in which a node starts from its cache file.
pub async fn a_connection_attempt_no_one_answers_starts_from_the_cache_file<B: SqlBackend>() {
    let fix = SqlFix::<B>::new().await;
    let me = NodeIdentity::new("10.0.0.33", 8033);
    let (dir, worker_id) = earlier_run(&fix, &me).await;
    let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
    socket
        .bind("127.0.0.1:0".parse().expect("an address"))
        .expect("bind");
    // A backlog of 0 holds one connection that is never accepted; later attempts get no answer.
    let silent = socket.listen(0).expect("listen");
    let address = silent.local_addr().expect("its address").to_string();
    let _queued = tokio::net::TcpStream::connect(&address)
        .await
        .expect("the one queued connection");
    let url = through(&fix.db.url, &address);
    let b = fix.registry_with(dir, &config_of::<B>(&url, tight()));
    let lease = b
        .acquire(&request(me, 1023))
        .await
        .expect("a start from the cache file when no connection opens");
    assert_eq!(lease.worker_id, worker_id);
}

/// A server that accepts the connection and never answers (a frozen or saturated server, here
/// a stalled link in front of the real one) was reached.
pub async fn a_server_that_accepts_and_never_answers_was_reached<B: SqlBackend>() {
    let fix = SqlFix::<B>::new().await;
    let link = Proxy::start(authority(&fix.db.url)).await;
    link.set_link(Link::Stalled);
    let url = through(&fix.db.url, &link.address);
    let e = a_claim_that_reached_the_server_never_starts_from_the_cache_file(
        &fix,
        &url,
        tight(),
        async || {},
    )
    .await;
    assert!(e.to_string().contains("could be opened"), "{e}");
}

/// A server that answers one connection with `answer` (an error of its own, in its protocol)
/// and is gone before its answer is read: no connection opens to it afterwards, so only its
/// answer tells that it was reached. B claims through it while A holds the identity (as
/// [`a_claim_that_reached_the_server_never_starts_from_the_cache_file`]), and its error says
/// the server refuses connections although one could be opened.
pub async fn a_server_that_answered_and_is_gone_was_reached<B, F, Fut>(answer: F)
where
    B: SqlBackend,
    F: FnOnce(tokio::net::TcpStream) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let fix = SqlFix::<B>::new().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a listener");
    let address = listener.local_addr().expect("its address").to_string();
    let server = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.expect("B's connection");
        // Gone before B reads a byte of the answer: B's probe finds nothing listening.
        drop(listener);
        answer(stream).await;
    });
    let url = through(&fix.db.url, &address);
    let e = a_claim_that_reached_the_server_never_starts_from_the_cache_file(
        &fix,
        &url,
        tight(),
        async || {},
    )
    .await;
    // Bounded: a claim that never connected would leave the server waiting for ever.
    let answered = tokio::time::timeout(Duration::from_secs(5), server).await;
    answered
        .expect("B connected to the server")
        .expect("the server answered");
    let text = e.to_string();
    assert!(
        text.contains("refuses connections") && text.contains("could be opened"),
        "{text}"
    );
}

/// Refused credentials (MySQL 1045, PostgreSQL 28P01): the server answered.
pub async fn refused_credentials_were_reached<B: SqlBackend>() {
    let fix = SqlFix::<B>::new().await;
    let url = fix.db.url.replacen(":leaftest@", ":not-the-password@", 1);
    assert_ne!(url, fix.db.url, "the test server's password is leaftest");
    let e = a_claim_that_reached_the_server_never_starts_from_the_cache_file(
        &fix,
        &url,
        tight(),
        async || {},
    )
    .await;
    assert!(matches!(e, Error::Config(_)), "{e}");
}

/// Renews `lease` on `node` until it is lost (at most 5 s): the answers.
async fn renew_until_lost(node: &dyn leaf_core::WorkerIdRegistry, lease: &Lease) -> Vec<String> {
    let mut answers = Vec::new();
    for _ in 0..100 {
        let answer = node.renew(lease, now_ms() + 3000).await;
        answers.push(format!("{answer:?}"));
        if matches!(answer, Ok(Renewal::LeaseLost)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    answers
}

/// Ends the session holding `identity`'s lock and waits until the lock is free.
async fn end_lock_session<B: SqlBackend>(fix: &SqlFix<B>, identity: &NodeIdentity) {
    let holder = fix
        .lock_holder(identity)
        .await
        .expect("a session holds the identity's lock");
    fix.db.exec(&B::end_session(holder)).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while fix.lock_holder(identity).await.is_some() {
        assert!(Instant::now() < deadline, "the ended session kept its lock");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A's lock session dies, B takes the identity, and A learns it (`LeaseLost`). Then A's server
/// cannot be reached at all, and A claims again, as the generator's renewer does after a loss:
/// it must not start from its cache file while B holds the identity.
pub async fn after_losing_its_identity_a_node_never_starts_from_its_cache_file<B: SqlBackend>() {
    let fix = SqlFix::<B>::new().await;
    let me = fix.identity(5);
    let link = Proxy::start(authority(&fix.db.url)).await;
    let url = through(&fix.db.url, &link.address);
    let a = fix.registry_with(fix.new_dir(), &config_of::<B>(&url, tight()));
    let lease = a
        .acquire(&request(me.clone(), 1023))
        .await
        .expect("A starts");
    end_lock_session(&fix, &me).await;
    let b = fix.node().await;
    let theirs = b
        .acquire(&request(me.clone(), 1023))
        .await
        .expect("B starts");
    assert_eq!(theirs.worker_id, lease.worker_id);
    let answers = renew_until_lost(a.as_ref(), &lease).await;
    assert_eq!(
        answers.last().map(String::as_str),
        Some("Ok(LeaseLost)"),
        "{answers:?}"
    );
    // Closed: connections to A's server are refused from now on.
    drop(link);
    match a.acquire(&request(me.clone(), 1023)).await {
        Ok(again) => panic!(
            "A started again from its cache file with worker id {} while B held it",
            again.worker_id
        ),
        Err(e) => assert!(e.to_string().contains("another process held"), "{e}"),
    }
    b.release(&theirs, now_ms()).await.expect("B's release");
}

/// A claim whose start failed after it (the generator abandons the lease) keeps its lock
/// session for the next claim. That session dies and B takes the identity: A's next claim must
/// not reuse the dead session as if it still held the lock.
pub async fn a_kept_lock_session_is_proved_before_it_is_reused<B: SqlBackend>() {
    let fix = SqlFix::<B>::new().await;
    let me = fix.identity(6);
    let a = fix.node().await;
    let lease = a
        .acquire(&request(me.clone(), 1023))
        .await
        .expect("A's claim");
    a.abandon(&lease).await;
    end_lock_session(&fix, &me).await;
    let b = fix.node().await;
    let theirs = b
        .acquire(&request(me.clone(), 1023))
        .await
        .expect("B starts");
    match a.acquire(&request(me.clone(), 1023)).await {
        Ok(again) => panic!(
            "A claimed worker id {} again on its dead session while B held it",
            again.worker_id
        ),
        Err(e) => assert!(matches!(e, Error::AlreadyExists(_)), "{e}"),
    }
    b.release(&theirs, now_ms()).await.expect("B's release");
}

/// The worker id's row is deleted while A holds it and given to another identity (the start-up
/// error itself tells operators to remove unused rows): A's mark writes name A's identity, find
/// nothing, and lose the lease; the other identity's mark is never touched.
pub async fn a_worker_id_given_to_another_identity_loses_the_lease<B: SqlBackend>(fence: bool) {
    let fix = SqlFix::<B>::new().await;
    let me = fix.identity(7);
    let config = fix.config(json!({ "fence_on_disconnect": fence }));
    let a = fix.registry_with(fix.new_dir(), &config);
    let lease = a
        .acquire(&request(me.clone(), 1023))
        .await
        .expect("A starts");
    let id = lease.worker_id;
    let theirs = (now_ms() + 600_000) as i64;
    fix.db
        .exec(&format!("DELETE FROM leaf_workerid_alloc WHERE id = {id}"))
        .await;
    fix.db
        .exec(&format!(
            "INSERT INTO leaf_workerid_alloc (id, ip_port, ip, port, max_timestamp) \
             VALUES ({id}, '10.9.9.9:9', '10.9.9.9', '9', {theirs})"
        ))
        .await;
    let answers = renew_until_lost(a.as_ref(), &lease).await;
    assert_eq!(
        answers.last().map(String::as_str),
        Some("Ok(LeaseLost)"),
        "fence {fence}: {answers:?}"
    );
    // The other identity's row, under it: A wrote nothing there (its last write is done).
    tokio::time::sleep(Duration::from_millis(200)).await;
    let sql = "SELECT max_timestamp FROM leaf_workerid_alloc WHERE ip_port = '10.9.9.9:9'";
    assert_eq!(fix.db.scalar(sql).await, Some(theirs), "fence {fence}");
}

/// The dialect's statements on two sessions of one server, one holding the identity lock: the
/// lock taken once (and seen as held before when asked again on its session), every mark
/// statement finding nothing on the session without the lock, for another identity, for a
/// worker id without a row, or naming another server session than the lock's (as a pooler's
/// would run it), reading and writing on the lock's own session, and finding nothing on that
/// session once its lock is freed (the statement's own proof of the lock, not the session's
/// id, refuses it then).
pub async fn mark_statements_prove_the_lock_and_the_identity<B: SqlBackend>()
where
    for<'c> &'c mut Conn<B::Dialect>: Executor<'c, Database = <B::Dialect as Dialect>::Db>,
{
    let fix = SqlFix::<B>::new().await;
    let me = fix.identity(8);
    // The table and the identity's row, its lock freed again.
    let node = fix.node().await;
    let lease = node
        .acquire(&request(me.clone(), 1023))
        .await
        .expect("a claim");
    node.release(&lease, 1000).await.expect("its release");
    type D<B> = <B as SqlBackend>::Dialect;
    let options: Options<D<B>> = fix.db.url.parse().expect("the URL's options");
    let name = <D<B> as RegistryDialect>::lock_name(&options, &me);
    let connect = || async {
        <Conn<D<B>> as Connection>::connect(&fix.db.url)
            .await
            .expect("a session")
    };
    let (mut holder, mut other) = (connect().await, connect().await);
    let locking = <D<B> as RegistryDialect>::try_lock(&mut holder, &name, Duration::ZERO).await;
    let Locking::Taken(session) = locking.unwrap() else {
        panic!("a free lock was not taken");
    };
    let again = <D<B> as RegistryDialect>::try_lock(&mut holder, &name, Duration::ZERO).await;
    assert_eq!(
        again.unwrap(),
        Locking::Shared,
        "a session that holds the lock, asking"
    );
    let theirs = <D<B> as RegistryDialect>::try_lock(&mut other, &name, Duration::ZERO).await;
    assert_eq!(theirs.unwrap(), Locking::Busy);
    let holds = async |conn: &mut Conn<D<B>>, server_session| {
        <D<B> as RegistryDialect>::holds(conn, &name, server_session)
            .await
            .unwrap()
    };
    assert!(holds(&mut holder, session).await);
    assert!(!holds(&mut other, session).await);
    // The lock's session, named as another: a pooler's other server session.
    assert!(!holds(&mut holder, session + 1).await);

    let identity = me.to_string();
    let row = MarkRow {
        worker_id: lease.worker_id,
        identity: &identity,
        lock: &name,
        server_session: session,
    };
    let not_mine = MarkRow {
        identity: "10.9.9.9:9",
        ..row
    };
    let no_row = MarkRow {
        worker_id: lease.worker_id + 100,
        ..row
    };
    let not_the_locks_session = MarkRow {
        server_session: session + 1,
        ..row
    };
    finds_nothing::<D<B>>(&mut other, row, "the session without the lock").await;
    finds_nothing::<D<B>>(&mut holder, not_mine, "another identity").await;
    finds_nothing::<D<B>>(&mut holder, no_row, "a worker id without a row").await;
    finds_nothing::<D<B>>(&mut holder, not_the_locks_session, "another server session").await;
    assert_eq!(
        fix.stored_mark(lease.worker_id).await,
        Some(1000),
        "nothing was written"
    );
    let written = <D<B> as Queries>::write_mark(&mut holder, row, 5000, MarkWrite::Raise).await;
    assert_eq!(written.unwrap(), Proof::Held(()));
    let read = <D<B> as Queries>::read_mark(&mut holder, row).await;
    assert_eq!(read.unwrap(), Proof::Held(Some(5000)));
    // An unchanged mark is written too (it proves the lock all the same).
    let lower = <D<B> as Queries>::write_mark(&mut holder, row, 4000, MarkWrite::Raise).await;
    assert_eq!(lower.unwrap(), Proof::Held(()));
    assert_eq!(fix.stored_mark(lease.worker_id).await, Some(5000));
    // The lock freed on its own session, which stays open: only the proof of the lock in each
    // statement tells it from the holder.
    sqlx::raw_sql(AssertSqlSafe(B::unlock(&name)))
        .execute(&mut holder)
        .await
        .expect("the lock freed on its session");
    assert!(!holds(&mut holder, session).await, "the lock was freed");
    finds_nothing::<D<B>>(&mut holder, row, "the lock's session after freeing it").await;
    holder.close().await.expect("close");
    other.close().await.expect("close");
}

/// Every mark statement of `D` on `conn` for `row` finds nothing (`who` says why, for the
/// message).
async fn finds_nothing<D: Queries>(conn: &mut Conn<D>, row: MarkRow<'_>, who: &str) {
    for how in [MarkWrite::Raise, MarkWrite::Final] {
        let written = D::write_mark(&mut *conn, row, 5000, how).await;
        assert_eq!(written.unwrap(), Proof::NotHeld, "{how:?} for {who}");
    }
    let read = D::read_mark(&mut *conn, row).await;
    assert_eq!(read.unwrap(), Proof::NotHeld, "the read for {who}");
}
