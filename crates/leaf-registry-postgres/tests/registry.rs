//! The `postgres` workerId mode on a real server: what every SQL mode runs
//! (`leaf_testkit::sql_cases::registry`: ids never burnt by a restart, the race of first
//! starts, the layout's range, the marks, a lost lock, the cache-file fallback), and what is
//! PostgreSQL's own: the race to create the table, rows copied in with their ids, the identity
//! lock through a crash and a lost session, and another mode's cache file.

mod common;

use std::time::Duration;

use leaf_core::{Error, NodeIdentity, Renewal};
use leaf_registry_postgres::LEAF_WORKERID_ALLOC_DDL;
use leaf_testkit::RegistryFixture;
use leaf_testkit::sql::unreachable_registry;
use leaf_testkit::sql_cases::{now_ms, request};

use common::{Backend, Fix};

leaf_testkit::sql_registry_tests!(Backend, lock_freed_at_release = true);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarts_burn_no_sequence_values() {
    let first = leaf_testkit::sql_cases::registry::restarts_burn_no_ids::<Backend>().await;
    assert_eq!(first, 1, "ids start at 1, as the fork's auto-increment");
}

/// The first starts of a fleet on an empty database race to create `leaf_workerid_alloc`
/// (racing `CREATE TABLE`s of a table with an identity column were seen to fail with "type
/// already exists"): every node starts, each with its own id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_first_starts_on_an_empty_database_all_start() {
    for _ in 0..5 {
        let fix = Fix::new().await;
        let mut tasks = Vec::new();
        for i in 1..=8 {
            let (node, me) = (fix.node().await, fix.identity(i));
            tasks.push(tokio::spawn(async move {
                node.acquire(&request(me, 1023)).await.map(|l| l.worker_id)
            }));
        }
        let mut ids = std::collections::BTreeSet::new();
        for t in tasks {
            ids.insert(t.await.unwrap().expect("every node starts"));
        }
        assert_eq!(ids, (1..=8).collect());
    }
}

/// The fork's rows copied in from MySQL with their ids: each node keeps its id and mark; the
/// id sequence, left behind the rows, is reported with the statement that moves it, and once
/// moved a new node gets the next id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_copied_in_with_their_ids_keep_them() {
    let fix = Fix::new().await;
    let mark = now_ms() as i64 - 60_000;
    fix.db.exec(LEAF_WORKERID_ALLOC_DDL).await;
    fix.db
        .exec(&format!(
            "INSERT INTO leaf_workerid_alloc (id, ip_port, ip, port, max_timestamp) VALUES \
             (1, '10.0.0.9:8080', '10.0.0.9', '8080', NULL), \
             (42, '10.0.0.1:8001', '10.0.0.1', '8001', {mark})"
        ))
        .await;
    let node = fix.node().await;
    let lease = node.acquire(&request(fix.identity(1), 1023)).await.unwrap();
    assert_eq!(lease.worker_id, 42, "the fork's id is the worker id");
    assert_eq!(lease.prev_mark_ms, Some(mark as u64));

    let fresh = fix.node().await;
    let e = fresh
        .acquire(&request(fix.identity(2), 1023))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::Config(m) if m.contains("setval(")),
        "{e}"
    );
    fix.db
        .exec(
            "SELECT setval(pg_get_serial_sequence('leaf_workerid_alloc', 'id'), max(id)) \
             FROM leaf_workerid_alloc",
        )
        .await;
    let fresh = fix.node().await;
    assert_eq!(
        fresh
            .acquire(&request(fix.identity(2), 1023))
            .await
            .unwrap()
            .worker_id,
        43
    );
}

/// A process that dies without a release (its connections closed by the kernel, as at a
/// crash) and is started again at once: the server ends the dead session and its advisory
/// lock, and the new process gets the identity's worker id, with the cache file's mark.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_right_after_a_crash_gets_the_identity_back() {
    let fix = Fix::new().await;
    let me = fix.identity(3);
    let dir = fix.new_dir();
    let node = fix.registry_in(dir.clone());
    let lease = node.acquire(&request(me.clone(), 1023)).await.unwrap();
    let m = now_ms() + 3000;
    node.renew(&lease, m).await.unwrap();
    let holder = fix.lock_holder(&me).await;
    assert!(holder.is_some(), "the node holds its identity lock");
    drop(node); // a crash: no release, the lock's socket just closes

    let again = fix.registry_in(dir);
    let lease2 = again
        .acquire(&request(me.clone(), 1023))
        .await
        .expect("the restart gets its identity back");
    assert_eq!(lease2.worker_id, lease.worker_id);
    assert!(lease2.prev_mark_ms >= Some(m), "{:?}", lease2.prev_mark_ms);
    let now_holder = fix.lock_holder(&me).await;
    assert!(
        now_holder.is_some() && now_holder != holder,
        "a new session holds the lock: {holder:?} then {now_holder:?}"
    );
}

/// The identity lock's session dies and nobody takes the identity: the next renewals take the
/// lock again on a new connection, and the marks reach the table again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_session_with_nobody_waiting_takes_the_lock_again() {
    let fix = Fix::new().await;
    let me = fix.identity(4);
    let node = fix.node().await;
    let lease = node.acquire(&request(me.clone(), 1023)).await.unwrap();
    let holder = fix.lock_holder(&me).await.expect("held");
    fix.db
        .exec(&format!("SELECT pg_terminate_backend({holder})"))
        .await;
    let mut mark = now_ms() + 3000;
    for _ in 0..100 {
        mark += 1;
        assert_eq!(node.renew(&lease, mark).await.unwrap(), Renewal::OK);
        if node.confirmed_mark_ms() >= Some(mark - 1)
            && fix.stored_mark(lease.worker_id).await >= Some(mark as i64 - 1)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        fix.stored_mark(lease.worker_id).await >= Some(mark as i64 - 1),
        "the marks reach the table again"
    );
    let again = fix.lock_holder(&me).await;
    assert!(
        again.is_some() && again != Some(holder),
        "a new session holds the lock: {again:?}"
    );
}

/// The mysql mode's cache file is not this mode's: a node moved from one to the other never
/// starts from the other's worker id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_modes_cache_file_is_never_used() {
    let dir = tempfile::tempdir().unwrap();
    let other = leaf_core::CacheFile::open(dir.path(), "worker-leaf").unwrap();
    other
        .write(&leaf_core::CacheRecord {
            worker_id: 9,
            mark_ms: now_ms(),
        })
        .unwrap();
    drop(other);
    let down = unreachable_registry::<Backend>(dir.path());
    let e = down
        .acquire(&request(NodeIdentity::new("10.0.0.1", 8001), 1023))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::Unavailable(m) if m.contains("holds no worker id")),
        "{e}"
    );
}
