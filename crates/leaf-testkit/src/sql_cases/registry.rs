//! The SQL workerId modes on a real server: the fork's table, ids never burnt by a restart,
//! the race of first starts, the layout's range, the marks, the identity lock lost to another
//! process, and the cache-file fallback.

use std::sync::Arc;
use std::time::{Duration, Instant};

use leaf_core::{Error, NodeIdentity, Renewal, WorkerIdRegistry};
use serde_json::json;

use super::{now_ms, request};
use crate::RegistryFixture;
use crate::sql::{SqlBackend, SqlFix, config_of, registry_of, unreachable_registry};

/// Four restarts of one node, then another node: a restart never tries an insert (which would
/// use up an id, an auto-increment value or a value of a sequence), so the next node's id
/// follows the first one directly. The first id.
pub async fn restarts_burn_no_ids<B: SqlBackend>() -> u64 {
    let fix = SqlFix::<B>::new().await;
    let me = fix.identity(1);
    let mut first = None;
    for _ in 0..4 {
        let node = fix.node().await;
        let lease = node.acquire(&request(me.clone(), 1023)).await.unwrap();
        assert_eq!(*first.get_or_insert(lease.worker_id), lease.worker_id);
        node.release(&lease, now_ms()).await.unwrap();
    }
    let other = fix.node().await;
    let lease = other
        .acquire(&request(fix.identity(2), 1023))
        .await
        .unwrap();
    let first = first.expect("a first id");
    assert_eq!(lease.worker_id, first + 1);
    first
}

/// Six processes with one identity start at once: exactly one gets the identity's worker id
/// (one row, one lock); the others are refused, naming the identity, instead of sharing it.
pub async fn concurrent_first_starts_of_one_identity_one_wins_one_row<B: SqlBackend>() {
    let fix = SqlFix::<B>::new().await;
    let me = fix.identity(7);
    let mut nodes = Vec::new();
    for _ in 0..6 {
        nodes.push(fix.node().await);
    }
    let tasks: Vec<_> = nodes
        .iter()
        .map(|n| {
            let (n, me) = (n.clone(), me.clone());
            tokio::spawn(async move { n.acquire(&request(me, 1023)).await })
        })
        .collect();
    let (mut won, mut refused) = (Vec::new(), 0);
    for t in tasks {
        match t.await.unwrap() {
            Ok(lease) => won.push(lease.worker_id),
            Err(Error::AlreadyExists(m)) if m.contains(&me.to_string()) => refused += 1,
            Err(e) => panic!("a racer failed otherwise: {e}"),
        }
    }
    assert_eq!((won.len(), refused), (1, 5), "won {won:?}");
    let rows = format!("SELECT COUNT(*) FROM leaf_workerid_alloc WHERE ip_port = '{me}'");
    assert_eq!(fix.db.scalar(&rows).await, Some(1));
}

/// An id above the layout's largest fails start-up, saying so.
pub async fn a_worker_id_beyond_the_layout_fails_with_a_clear_message<B: SqlBackend>() {
    let fix = SqlFix::<B>::new().await;
    let a = fix.node().await;
    assert_eq!(
        a.acquire(&request(fix.identity(1), 1))
            .await
            .unwrap()
            .worker_id,
        1
    );
    let b = fix.node().await;
    let e = b.acquire(&request(fix.identity(2), 1)).await.unwrap_err();
    let Error::Config(m) = &e else {
        panic!("expected a configuration error, got {e}");
    };
    assert!(
        m.contains("worker id 2") && m.contains("largest worker id is 1"),
        "{m}"
    );
}

/// A renewed mark reaches the table (in the background), the release leaves the final one
/// (below it), and a node with a fresh cache directory learns it from the table. With
/// `lock_freed`, the release has ended the lock's session by the time it returns.
pub async fn marks_reach_the_table_and_release_leaves_the_final_one<B: SqlBackend>(
    lock_freed: bool,
) {
    let fix = SqlFix::<B>::new().await;
    let node = fix.node().await;
    let lease = node.acquire(&request(fix.identity(1), 1023)).await.unwrap();
    let m = now_ms() + 3000;
    assert_eq!(node.renew(&lease, m).await.unwrap(), Renewal::OK);
    // The server copy is written in the background (within 10 s even on a busy machine).
    let mut seen = None;
    for _ in 0..500 {
        seen = fix.stored_mark(lease.worker_id).await;
        if seen == Some(m as i64) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(seen, Some(m as i64));
    // The final mark is the last timestamp issued, below the renewed mark: it replaces it.
    let f = m - 2500;
    node.release(&lease, f).await.unwrap();
    assert_eq!(fix.stored_mark(lease.worker_id).await, Some(f as i64));
    if lock_freed {
        assert_eq!(
            fix.lock_holder(&fix.identity(1)).await,
            None,
            "the release ends the lock's session"
        );
    }
    let elsewhere = fix.node().await;
    let again = elsewhere
        .acquire(&request(fix.identity(1), 1023))
        .await
        .unwrap();
    assert_eq!(
        (again.worker_id, again.prev_mark_ms),
        (lease.worker_id, Some(f))
    );
}

/// Renewals only raise the server's mark: a row that holds a later mark (written by an
/// earlier owner of the identity, or a renewal that raced ahead) keeps it.
pub async fn renewals_never_lower_the_server_mark<B: SqlBackend>() {
    let fix = SqlFix::<B>::new().await;
    let node = fix.node().await;
    let lease = node.acquire(&request(fix.identity(1), 1023)).await.unwrap();
    let high = now_ms() + 60_000;
    let id = lease.worker_id;
    let raise = format!("UPDATE leaf_workerid_alloc SET max_timestamp = {high} WHERE id = {id}");
    fix.db.exec(&raise).await;
    let low = now_ms() + 3000;
    assert_eq!(node.renew(&lease, low).await.unwrap(), Renewal::OK);
    // Wait until the background write of `low` has completed.
    for _ in 0..250 {
        if node.confirmed_mark_ms() == Some(low) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        node.confirmed_mark_ms(),
        Some(low),
        "the write never completed"
    );
    assert_eq!(
        fix.stored_mark(id).await,
        Some(high as i64),
        "a renewal lowered the server's mark"
    );
}

/// The identity lock's session dies (a server-side termination, a network cut) and another
/// process with the same identity starts meanwhile. With `fence_on_disconnect` no renewal of
/// the first one counts once its session is gone: each fails (its mark write cannot commit)
/// until one finds the lock taken and answers `LeaseLost`. Without it the renewals answer `Ok`
/// until the background write finds the lock taken, and the two may both issue meanwhile (the
/// documented risk of the default); then `LeaseLost`. What A's renewals answered after B
/// acquired.
async fn lock_lost_to_another_process<B: SqlBackend>(fence_on_disconnect: bool) -> Vec<String> {
    let fix = SqlFix::<B>::new().await;
    let me = fix.identity(2);
    let config = fix.config(json!({ "fence_on_disconnect": fence_on_disconnect }));
    let a = fix.registry_with(fix.new_dir(), &config);
    let lease = a.acquire(&request(me.clone(), 1023)).await.unwrap();
    let holder = fix
        .lock_holder(&me)
        .await
        .expect("the first node holds its identity lock");
    fix.db.exec(&B::end_session(holder)).await;
    // The session ends asynchronously: wait until the lock is free.
    let deadline = Instant::now() + Duration::from_secs(10);
    while fix.lock_holder(&me).await.is_some() {
        assert!(Instant::now() < deadline, "the ended session kept its lock");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let b = fix.registry_with(fix.new_dir(), &config);
    let theirs = b
        .acquire(&request(me.clone(), 1023))
        .await
        .expect("the identity is free once the first lock's session is gone");
    assert_eq!(theirs.worker_id, lease.worker_id);
    let mut answers = Vec::new();
    for _ in 0..100 {
        let answer = a.renew(&lease, now_ms() + 3000).await;
        answers.push(format!("{answer:?}"));
        if matches!(answer, Ok(Renewal::LeaseLost)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        answers.last().map(String::as_str),
        Some("Ok(LeaseLost)"),
        "{answers:?}"
    );
    assert!(b.renew(&theirs, now_ms() + 3000).await.unwrap().is_ok());
    answers
}

/// A lock lost to another process (`lock_lost_to_another_process`), with the fence: no renewal
/// counts after the session died.
pub async fn with_the_fence_a_lock_lost_to_another_process_never_renews_again<B: SqlBackend>() {
    let answers = lock_lost_to_another_process::<B>(true).await;
    assert!(
        answers.iter().all(|a| !a.starts_with("Ok(Ok")),
        "a renewal counted after the lock's session was gone: {answers:?}"
    );
}

/// A lock lost to another process (`lock_lost_to_another_process`), without the fence: the
/// lease is lost in the end.
pub async fn without_the_fence_a_lock_lost_to_another_process_loses_the_lease<B: SqlBackend>() {
    let answers = lock_lost_to_another_process::<B>(false).await;
    eprintln!("without fence_on_disconnect, A's renewals after B acquired: {answers:?}");
}

/// A node that crashed, its server down at its next start: it starts from its cache file,
/// with its mark, so the start-up time check still applies.
pub async fn a_server_down_at_start_up_starts_from_the_cache_file_with_its_mark<B: SqlBackend>() {
    let fix = SqlFix::<B>::new().await;
    let dir = fix.new_dir();
    let node = fix.registry_in(dir.clone());
    let lease = node.acquire(&request(fix.identity(1), 1023)).await.unwrap();
    let m = now_ms() + 3000;
    node.renew(&lease, m).await.unwrap();
    drop(node); // a crash: no release

    let down = unreachable_registry::<B>(&dir);
    let again = down.acquire(&request(fix.identity(1), 1023)).await.unwrap();
    assert_eq!(again.worker_id, lease.worker_id);
    assert_eq!(
        again.prev_mark_ms,
        Some(m),
        "the fallback carries the mark, so the start-up time check still applies"
    );
    // The fallback lease renews into the cache file like any other.
    assert_eq!(down.renew(&again, m + 1000).await.unwrap(), Renewal::OK);
    // And it respects the layout.
    down.release(&again, m).await.unwrap();
    let e = down
        .acquire(&request(fix.identity(1), 0))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Config(_)), "{e}");
}

/// A server down and no cache file: `Unavailable`, saying the directory holds no worker id.
pub async fn a_server_down_without_a_cache_file_is_unavailable<B: SqlBackend>() {
    let dir = tempfile::tempdir().unwrap();
    let down = unreachable_registry::<B>(dir.path());
    let e = down
        .acquire(&request(NodeIdentity::new("10.0.0.1", 8001), 1023))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::Unavailable(m) if m.contains("holds no worker id")),
        "{e}"
    );
}

/// Two registries on one cache directory: the second is refused (`Config`).
pub async fn a_second_process_on_one_cache_directory_refuses<B: SqlBackend>() {
    let fix = SqlFix::<B>::new().await;
    let dir = fix.new_dir();
    let a = fix.registry_in(dir.clone());
    a.acquire(&request(fix.identity(1), 1023)).await.unwrap();
    let b = fix.registry_in(dir);
    let e = b
        .acquire(&request(fix.identity(1), 1023))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Config(_)), "{e}");
}

/// A registry's `Debug` shows the URL without its password.
pub async fn debug_output_hides_the_password<B: SqlBackend>() {
    let fix = SqlFix::<B>::new().await;
    let node = fix.node().await;
    let shown = format!("{node:?}");
    assert!(!shown.contains(":leaftest@"), "{shown}");
    assert!(shown.contains(&fix.hidden_password()), "{shown}");
}

/// A second live process of one identity, its cache directory holding the identity's worker id
/// from an earlier run, whose lock wait outlasts its timeouts (its link stalls once it has
/// connected): never a start from the cache file while the first holds the identity (issue
/// 23, item 1).
pub async fn a_second_process_whose_lock_wait_runs_out_never_starts_from_its_cache_file<
    B: SqlBackend,
>() {
    let fix = &SqlFix::<B>::new().await;
    let make = |timeout_ms: u64, connect_timeout_ms: u64| {
        move |dir, url: &str| -> Arc<dyn WorkerIdRegistry> {
            let changes =
                json!({ "timeout_ms": timeout_ms, "connect_timeout_ms": connect_timeout_ms });
            fix.registry_with(dir, &config_of::<B>(url, changes))
        }
    };
    crate::identity_cases::a_second_process_never_starts_from_its_cache_file(
        &fix.db.url,
        &make(5000, 3000),
        &make(1000, 500),
        Duration::from_secs(5),
        Duration::from_millis(800),
    )
    .await;
}

/// `fence_on_disconnect` through a database outage that A, behind a proxy, stays cut off from
/// for longer, so that B takes the identity (issue 23, item 2), on a server of the test's own
/// ([`an_outage_with_a_partitioned_holder`](crate::identity_cases::an_outage_with_a_partitioned_holder)).
pub async fn outage<B: SqlBackend>(fence_on_disconnect: bool) -> crate::identity_cases::Outage {
    // A server of our own: the test stops it.
    let server = crate::provision::dedicated(B::SERVER)
        .await
        .unwrap_or_else(|e| panic!("no container for the outage test: {e}"));
    let db = crate::sql::database_on::<B>(server.endpoint()).await;
    let make = |dir, url: &str| -> Arc<dyn WorkerIdRegistry> {
        let changes = json!({
            "fence_on_disconnect": fence_on_disconnect,
            "connect_timeout_ms": 1000,
            "timeout_ms": 2000,
        });
        registry_of::<B>(&config_of::<B>(url, changes), dir)
    };
    let seen =
        crate::identity_cases::an_outage_with_a_partitioned_holder(&server, &db.url, &make).await;
    drop(db);
    server.remove().await.expect("remove the container");
    seen
}

/// With the fence no ID is issued by both A and B.
pub async fn with_fence_on_disconnect_no_id_is_issued_by_both<B: SqlBackend>() {
    crate::identity_cases::assert_fenced(&outage::<B>(true).await);
}

/// Without it, what happens is recorded (Leaf's availability, and the documented risk of the
/// default).
pub async fn without_fence_on_disconnect_the_cut_off_holder_issues_beside_the_next<
    B: SqlBackend,
>() {
    crate::identity_cases::report_unfenced(&outage::<B>(false).await);
}
