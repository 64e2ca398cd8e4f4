//! The `postgres` workerId mode on a real server: the fork's table, ids never burnt by a
//! restart, the race of first starts, the layout's range, rows copied in with their ids, the
//! marks, the identity lock through a crash and a lost session, and the cache-file fallback.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use leaf_core::{AcquireRequest, Error, NodeIdentity, Renewal, WorkerIdRegistry};
use leaf_registry_postgres::{
    LEAF_WORKERID_ALLOC_DDL, PostgresBackend, PostgresConfig, PostgresRegistry,
};
use leaf_testkit::RegistryFixture;
use sqlx::{AssertSqlSafe, Connection, PgConnection};

use common::RegistryFix;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn request(identity: NodeIdentity, max_worker_id: u64) -> AcquireRequest {
    AcquireRequest::new(identity, max_worker_id, now_ms())
}

async fn raw(url: &str) -> PgConnection {
    PgConnection::connect(url).await.expect("raw connection")
}

async fn exec(url: &str, sql: &str) {
    sqlx::raw_sql(AssertSqlSafe(sql.to_owned()))
        .execute(&mut raw(url).await)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

async fn stored_mark(url: &str, worker_id: u64) -> Option<i64> {
    sqlx::query_scalar("SELECT max_timestamp FROM leaf_workerid_alloc WHERE id = $1")
        .bind(worker_id as i32)
        .fetch_one(&mut raw(url).await)
        .await
        .expect("the worker's row")
}

/// The server process holding `identity`'s advisory lock in this database, if any.
async fn lock_holder(url: &str, identity: &NodeIdentity) -> Option<i32> {
    sqlx::query_scalar(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted \
         AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
         AND objsubid = 1 \
         AND ((classid::bigint << 32) | objid::bigint) = hashtextextended($1, 0)",
    )
    .bind(format!("leaf_workerid:{identity}"))
    .fetch_optional(&mut raw(url).await)
    .await
    .expect("pg_locks")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarts_burn_no_sequence_values() {
    let fix = RegistryFix::new().await;
    let me = fix.identity(1);
    let mut first = None;
    for _ in 0..4 {
        let node = fix.node().await;
        let lease = node.acquire(&request(me.clone(), 1023)).await.unwrap();
        assert_eq!(*first.get_or_insert(lease.worker_id), lease.worker_id);
        node.release(&lease, now_ms()).await.unwrap();
    }
    // Had a restart tried an INSERT, the id's sequence would have used up a value: the next
    // node's id follows the first one directly.
    let other = fix.node().await;
    let lease = other
        .acquire(&request(fix.identity(2), 1023))
        .await
        .unwrap();
    assert_eq!(
        first,
        Some(1),
        "ids start at 1, as the fork's auto-increment"
    );
    assert_eq!(lease.worker_id, 2);
}

/// Six processes with one identity start at once: exactly one gets the identity's worker id
/// (one row, one lock); the others are refused, naming the identity, instead of sharing it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_first_starts_of_one_identity_one_wins_one_row() {
    let fix = RegistryFix::new().await;
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
    let rows: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM leaf_workerid_alloc WHERE ip_port = $1")
            .bind(me.to_string())
            .fetch_one(&mut raw(&fix.db.url).await)
            .await
            .unwrap();
    assert_eq!(rows, 1);
}

/// The first starts of a fleet on an empty database race to create `leaf_workerid_alloc`
/// (racing `CREATE TABLE`s of a table with an identity column were seen to fail with "type
/// already exists"): every node starts, each with its own id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_first_starts_on_an_empty_database_all_start() {
    for _ in 0..5 {
        let fix = RegistryFix::new().await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_id_beyond_the_layout_fails_with_a_clear_message() {
    let fix = RegistryFix::new().await;
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

/// The fork's rows copied in from MySQL with their ids: each node keeps its id and mark; the
/// id sequence, left behind the rows, is reported with the statement that moves it, and once
/// moved a new node gets the next id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_copied_in_with_their_ids_keep_them() {
    let fix = RegistryFix::new().await;
    let mark = now_ms() as i64 - 60_000;
    exec(&fix.db.url, LEAF_WORKERID_ALLOC_DDL).await;
    exec(
        &fix.db.url,
        &format!(
            "INSERT INTO leaf_workerid_alloc (id, ip_port, ip, port, max_timestamp) VALUES \
             (1, '10.0.0.9:8080', '10.0.0.9', '8080', NULL), \
             (42, '10.0.0.1:8001', '10.0.0.1', '8001', {mark})"
        ),
    )
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
    exec(
        &fix.db.url,
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn marks_reach_the_table_and_release_leaves_the_final_one() {
    let fix = RegistryFix::new().await;
    let node = fix.node().await;
    let lease = node.acquire(&request(fix.identity(1), 1023)).await.unwrap();
    let m = now_ms() + 3000;
    assert_eq!(node.renew(&lease, m).await.unwrap(), Renewal::OK);
    // The server copy is written in the background (within 10 s even on a busy machine).
    let mut seen = None;
    for _ in 0..500 {
        seen = stored_mark(&fix.db.url, lease.worker_id).await;
        if seen == Some(m as i64) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(seen, Some(m as i64));
    // The final mark is the last timestamp issued, below the renewed mark: it replaces it.
    let f = m - 2500;
    node.release(&lease, f).await.unwrap();
    assert_eq!(
        stored_mark(&fix.db.url, lease.worker_id).await,
        Some(f as i64)
    );
    assert_eq!(
        lock_holder(&fix.db.url, &fix.identity(1)).await,
        None,
        "the release ends the lock's session"
    );
    // A node with a fresh cache directory learns the mark from the table.
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
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_never_lower_the_server_mark() {
    let fix = RegistryFix::new().await;
    let node = fix.node().await;
    let lease = node.acquire(&request(fix.identity(1), 1023)).await.unwrap();
    let high = now_ms() + 60_000;
    exec(
        &fix.db.url,
        &format!(
            "UPDATE leaf_workerid_alloc SET max_timestamp = {high} WHERE id = {}",
            lease.worker_id
        ),
    )
    .await;
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
        stored_mark(&fix.db.url, lease.worker_id).await,
        Some(high as i64),
        "a renewal lowered the server's mark"
    );
}

/// A process that dies without a release (its connections closed by the kernel, as at a
/// crash) and is started again at once: the server ends the dead session and its advisory
/// lock, and the new process gets the identity's worker id, with the cache file's mark.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_right_after_a_crash_gets_the_identity_back() {
    let fix = RegistryFix::new().await;
    let me = fix.identity(3);
    let dir = fix.new_dir();
    let node = fix.registry_in(dir.clone());
    let lease = node.acquire(&request(me.clone(), 1023)).await.unwrap();
    let m = now_ms() + 3000;
    node.renew(&lease, m).await.unwrap();
    let holder = lock_holder(&fix.db.url, &me).await;
    assert!(holder.is_some(), "the node holds its identity lock");
    drop(node); // a crash: no release, the lock's socket just closes

    let again = fix.registry_in(dir);
    let lease2 = again
        .acquire(&request(me.clone(), 1023))
        .await
        .expect("the restart gets its identity back");
    assert_eq!(lease2.worker_id, lease.worker_id);
    assert!(lease2.prev_mark_ms >= Some(m), "{:?}", lease2.prev_mark_ms);
    let now_holder = lock_holder(&fix.db.url, &me).await;
    assert!(
        now_holder.is_some() && now_holder != holder,
        "a new session holds the lock: {holder:?} then {now_holder:?}"
    );
}

/// The identity lock's session dies (a server-side termination, a network cut) and another
/// process with the same identity starts meanwhile. With `fence_on_disconnect` no renewal of
/// the first one counts once its session is gone: each fails (its mark write cannot commit)
/// until one finds the lock taken and answers `LeaseLost`. Without it the renewals answer `Ok`
/// until the background write finds the lock taken, and the two may both issue meanwhile (the
/// documented risk of the default); then `LeaseLost`. What A's renewals answered after B
/// acquired.
async fn lock_lost_to_another_process(fence_on_disconnect: bool) -> Vec<String> {
    let fix = RegistryFix::new().await;
    let me = fix.identity(2);
    let config = PostgresConfig {
        fence_on_disconnect,
        ..common::config(&fix.db)
    };
    let a = fix.registry_with(fix.new_dir(), config.clone());
    let lease = a.acquire(&request(me.clone(), 1023)).await.unwrap();
    let holder = lock_holder(&fix.db.url, &me)
        .await
        .expect("the first node holds its identity lock");
    let ended: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
        .bind(holder)
        .fetch_one(&mut raw(&fix.db.url).await)
        .await
        .unwrap();
    assert!(ended);
    // The backend ends asynchronously: wait until the lock is free.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while lock_holder(&fix.db.url, &me).await.is_some() {
        assert!(
            std::time::Instant::now() < deadline,
            "the ended session kept its lock"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let b = fix.registry_with(fix.new_dir(), config);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_fence_a_lock_lost_to_another_process_never_renews_again() {
    let answers = lock_lost_to_another_process(true).await;
    assert!(
        answers.iter().all(|a| !a.starts_with("Ok(Ok")),
        "a renewal counted after the lock's session was gone: {answers:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_fence_a_lock_lost_to_another_process_loses_the_lease() {
    let answers = lock_lost_to_another_process(false).await;
    eprintln!("without fence_on_disconnect, A's renewals after B acquired: {answers:?}");
}

/// The identity lock's session dies and nobody takes the identity: the next renewals take the
/// lock again on a new connection, and the marks reach the table again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_session_with_nobody_waiting_takes_the_lock_again() {
    let fix = RegistryFix::new().await;
    let me = fix.identity(4);
    let node = fix.node().await;
    let lease = node.acquire(&request(me.clone(), 1023)).await.unwrap();
    let holder = lock_holder(&fix.db.url, &me).await.expect("held");
    exec(
        &fix.db.url,
        &format!("SELECT pg_terminate_backend({holder})"),
    )
    .await;
    let mut mark = now_ms() + 3000;
    for _ in 0..100 {
        mark += 1;
        assert_eq!(node.renew(&lease, mark).await.unwrap(), Renewal::OK);
        if node.confirmed_mark_ms() >= Some(mark - 1)
            && stored_mark(&fix.db.url, lease.worker_id).await >= Some(mark as i64 - 1)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        stored_mark(&fix.db.url, lease.worker_id).await >= Some(mark as i64 - 1),
        "the marks reach the table again"
    );
    let again = lock_holder(&fix.db.url, &me).await;
    assert!(
        again.is_some() && again != Some(holder),
        "a new session holds the lock: {again:?}"
    );
}

fn unreachable(dir: &std::path::Path) -> impl std::future::Future<Output = PostgresRegistry> + '_ {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = PostgresConfig {
        connect_timeout_ms: 300,
        timeout_ms: 1000,
        ..PostgresConfig::with_url(format!("postgres://postgres:pw@127.0.0.1:{port}/leaf"))
    };
    async move {
        PostgresBackend::connect(&config, "leaf")
            .unwrap()
            .registry(dir)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_down_at_start_up_starts_from_the_cache_file_with_its_mark() {
    let fix = RegistryFix::new().await;
    let dir = fix.new_dir();
    let node = fix.registry_in(dir.clone());
    let lease = node.acquire(&request(fix.identity(1), 1023)).await.unwrap();
    let m = now_ms() + 3000;
    node.renew(&lease, m).await.unwrap();
    drop(node); // a crash: no release

    let down = unreachable(&dir).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_down_without_a_cache_file_is_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let down = unreachable(dir.path()).await;
    let e = down
        .acquire(&request(NodeIdentity::new("10.0.0.1", 8001), 1023))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::Unavailable(m) if m.contains("holds no worker id")),
        "{e}"
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
    let down = unreachable(dir.path()).await;
    let e = down
        .acquire(&request(NodeIdentity::new("10.0.0.1", 8001), 1023))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::Unavailable(m) if m.contains("holds no worker id")),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_process_on_one_cache_directory_refuses() {
    let fix = RegistryFix::new().await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_output_hides_the_password() {
    let fix = RegistryFix::new().await;
    let node = fix.node().await;
    let shown = format!("{node:?}");
    assert!(!shown.contains(":leaftest@"), "{shown}");
    assert!(shown.contains("postgres:***@"), "{shown}");
}

/// A second live process of one identity, its cache directory holding the identity's worker id
/// from an earlier run, whose lock wait outlasts its timeouts (its link stalls once it has
/// connected): never a start from the cache file while the first holds the identity (issue
/// 23, item 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_process_whose_lock_wait_runs_out_never_starts_from_its_cache_file() {
    let fix = &RegistryFix::new().await;
    let make = |timeout_ms, connect_timeout_ms| {
        move |dir, url: &str| -> std::sync::Arc<dyn WorkerIdRegistry> {
            let config = PostgresConfig {
                timeout_ms,
                connect_timeout_ms,
                ..PostgresConfig::with_url(url)
            };
            fix.registry_with(dir, config)
        }
    };
    leaf_testkit::identity_cases::a_second_process_never_starts_from_its_cache_file(
        &fix.db.url,
        &make(5000, 3000),
        &make(1000, 500),
        Duration::from_secs(5),
        Duration::from_millis(800),
    )
    .await;
}
