//! The `mysql` workerId mode on a real server: the fork's table, ids never burnt by a restart,
//! the race on the unique key, the layout's range, the marks, and the cache-file fallback.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use leaf_core::{AcquireRequest, Error, NodeIdentity, Renewal, WorkerIdRegistry};
use leaf_registry_local::{LocalBackend, LocalRegistryConfig};
use leaf_registry_mysql::{LEAF_WORKERID_ALLOC_DDL, MysqlBackend, MysqlConfig, MysqlRegistry};
use leaf_testkit::RegistryFixture;
use sqlx::{Connection, MySqlConnection, Row};

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

async fn raw(url: &str) -> MySqlConnection {
    MySqlConnection::connect(url).await.expect("raw connection")
}

async fn stored_mark(url: &str, worker_id: u64) -> Option<i64> {
    sqlx::query("SELECT max_timestamp FROM leaf_workerid_alloc WHERE id = ?")
        .bind(worker_id)
        .fetch_one(&mut raw(url).await)
        .await
        .expect("the worker's row")
        .try_get("max_timestamp")
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarts_burn_no_auto_increment_values() {
    let fix = RegistryFix::new().await;
    let me = fix.identity(1);
    let mut first = None;
    for _ in 0..4 {
        let node = fix.node().await;
        let lease = node.acquire(&request(me.clone(), 1023)).await.unwrap();
        assert_eq!(*first.get_or_insert(lease.worker_id), lease.worker_id);
        node.release(&lease, now_ms()).await.unwrap();
    }
    // Had a restart tried an INSERT, InnoDB would have used up a value: the next node's id
    // follows the first one directly.
    let other = fix.node().await;
    let lease = other
        .acquire(&request(fix.identity(2), 1023))
        .await
        .unwrap();
    assert_eq!(lease.worker_id, first.unwrap() + 1);
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
        sqlx::query_scalar("SELECT COUNT(*) FROM leaf_workerid_alloc WHERE ip_port = ?")
            .bind(me.to_string())
            .fetch_one(&mut raw(&fix.db.url).await)
            .await
            .unwrap();
    assert_eq!(rows, 1);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fork_table_is_used_as_it_is() {
    let fix = RegistryFix::new().await;
    let mut conn = raw(&fix.db.url).await;
    sqlx::query(LEAF_WORKERID_ALLOC_DDL)
        .execute(&mut conn)
        .await
        .unwrap();
    let mark = now_ms() as i64 - 60_000;
    sqlx::query(
        "INSERT INTO leaf_workerid_alloc (id, ip_port, ip, port, max_timestamp) \
         VALUES (42, '10.0.0.1:8001', '10.0.0.1', '8001', ?)",
    )
    .bind(mark)
    .execute(&mut conn)
    .await
    .unwrap();
    let node = fix.node().await;
    let lease = node.acquire(&request(fix.identity(1), 1023)).await.unwrap();
    assert_eq!(lease.worker_id, 42, "the fork's id is the worker id");
    assert_eq!(lease.prev_mark_ms, Some(mark as u64));
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
    sqlx::query("UPDATE leaf_workerid_alloc SET max_timestamp = ? WHERE id = ?")
        .bind(high as i64)
        .bind(lease.worker_id)
        .execute(&mut raw(&fix.db.url).await)
        .await
        .unwrap();
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

/// The connection id holding `identity`'s lock, if a session holds it.
async fn lock_holder(admin: &mut MySqlConnection, identity: &NodeIdentity) -> Option<i64> {
    sqlx::query_scalar("SELECT IS_USED_LOCK(CONCAT('leaf_workerid:', DATABASE(), '/', ?))")
        .bind(identity.to_string())
        .fetch_one(admin)
        .await
        .unwrap()
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
    let config = MysqlConfig {
        fence_on_disconnect,
        ..common::config(&fix.db)
    };
    let a = fix.registry_with(fix.new_dir(), config.clone());
    let lease = a.acquire(&request(me.clone(), 1023)).await.unwrap();
    let mut admin = raw(&fix.db.url).await;
    let holder = lock_holder(&mut admin, &me)
        .await
        .expect("the first node holds its identity lock");
    sqlx::query(sqlx::AssertSqlSafe(format!("KILL CONNECTION {holder}")))
        .execute(&mut admin)
        .await
        .unwrap();
    // The kill ends the session asynchronously: wait until the lock is free.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while lock_holder(&mut admin, &me).await.is_some() {
        assert!(
            std::time::Instant::now() < deadline,
            "the killed session kept its lock"
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

fn unreachable(dir: &std::path::Path) -> impl std::future::Future<Output = MysqlRegistry> + '_ {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = MysqlConfig {
        connect_timeout_ms: 300,
        timeout_ms: 1000,
        ..MysqlConfig::with_url(format!("mysql://root:pw@127.0.0.1:{port}/leaf"))
    };
    async move {
        MysqlBackend::connect(&config, "leaf")
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

/// A node moved from the `local` mode to this one, with MySQL down at its first start here,
/// must not start as the worker id the `local` mode cached: MySQL may have given that id to
/// another identity.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_id_cached_by_the_local_mode_never_serves_a_start_here() {
    let dir = tempfile::tempdir().unwrap();
    let identity = NodeIdentity::new("10.0.0.1", 8001);
    let local = LocalBackend::new(
        LocalRegistryConfig {
            worker_id: 7,
            ..LocalRegistryConfig::default()
        },
        "leaf",
    )
    .registry(dir.path());
    let lease = local
        .acquire(&request(identity.clone(), 1023))
        .await
        .unwrap();
    assert_eq!(lease.worker_id, 7);
    local.renew(&lease, now_ms()).await.unwrap();
    local.release(&lease, now_ms()).await.unwrap();
    drop(local);

    let down = unreachable(dir.path()).await;
    let e = down.acquire(&request(identity, 1023)).await.unwrap_err();
    assert!(
        matches!(&e, Error::Unavailable(m) if m.contains("holds no worker id")),
        "the local mode's worker id was taken for this mode's: {e}"
    );
}

/// A mark that a build before `worker-mysql-{name}` kept in `worker-{name}` still counts after
/// the upgrade (the row's may lag it), for the worker id MySQL assigns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mark_in_the_cache_file_of_the_old_name_still_counts() {
    let fix = RegistryFix::new().await;
    let node = fix.registry_in(fix.new_dir());
    let lease = node.acquire(&request(fix.identity(1), 1023)).await.unwrap();
    node.release(&lease, now_ms()).await.unwrap();
    drop(node);

    let dir = fix.new_dir();
    let ahead = now_ms() + 60_000;
    let old = |worker_id: u64, mark: u64| format!("workerID={worker_id}\nmarkMs={mark}\n");
    std::fs::write(
        dir.join("worker-leaf.properties"),
        old(lease.worker_id, ahead),
    )
    .unwrap();
    let upgraded = fix.registry_in(dir.clone());
    let again = upgraded
        .acquire(&request(fix.identity(1), 1023))
        .await
        .unwrap();
    assert_eq!(again.worker_id, lease.worker_id);
    assert_eq!(
        again.prev_mark_ms,
        Some(ahead),
        "the old file's mark was lost"
    );
    upgraded.release(&again, ahead).await.unwrap();
    drop(upgraded);

    // Of another worker id (the local mode's, say), its mark does not apply: the row's does.
    let dir = fix.new_dir();
    let other_id = old(lease.worker_id + 7, ahead + 60_000);
    std::fs::write(dir.join("worker-leaf.properties"), other_id).unwrap();
    let other = fix.registry_in(dir);
    let third = other
        .acquire(&request(fix.identity(1), 1023))
        .await
        .unwrap();
    assert_eq!(third.worker_id, lease.worker_id);
    assert_eq!(third.prev_mark_ms, Some(ahead));
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
    assert!(shown.contains("root:***@"), "{shown}");
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
            let config = MysqlConfig {
                timeout_ms,
                connect_timeout_ms,
                ..MysqlConfig::with_url(url)
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

/// The final mark goes on the lock's own session, so it never lands after the lock is free:
/// a final write held up by a row lock (and given up on by the release's timeout) must not
/// lower the row under the next holder of the identity (issue 23, item 4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_final_mark_never_lands_under_the_next_holder() {
    let fix = RegistryFix::new().await;
    let me = fix.identity(6);
    let config = MysqlConfig {
        timeout_ms: 1000,
        ..common::config(&fix.db)
    };
    let node = |dir| -> MysqlRegistry {
        MysqlBackend::connect(&config, "leaf")
            .expect("registry")
            .registry(dir)
    };
    let a = node(fix.new_dir());
    let lease = a.acquire(&request(me.clone(), 1023)).await.unwrap();
    let high = now_ms() + 60_000;
    assert_eq!(a.renew(&lease, high).await.unwrap(), Renewal::OK);
    for _ in 0..500 {
        if a.confirmed_mark_ms() == Some(high) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        a.confirmed_mark_ms(),
        Some(high),
        "the renewal never landed"
    );
    // Another transaction holds the worker's row: A's final write waits behind it, past the
    // release's timeout.
    let mut blocker = raw(&fix.db.url).await;
    sqlx::query("BEGIN").execute(&mut blocker).await.unwrap();
    sqlx::query("SELECT id FROM leaf_workerid_alloc WHERE id = ? FOR UPDATE")
        .bind(lease.worker_id)
        .execute(&mut blocker)
        .await
        .unwrap();
    let low = now_ms();
    a.release(&lease, low).await.unwrap();
    drop(a);
    // B tries to take the identity while the final write is stuck, then after it went through.
    let b = node(fix.new_dir());
    let early = b.acquire(&request(me.clone(), 1023)).await;
    sqlx::query("COMMIT").execute(&mut blocker).await.unwrap();
    let theirs = match early {
        Ok(lease) => lease,
        Err(_) => {
            let mut got = None;
            for _ in 0..50 {
                match b.acquire(&request(me.clone(), 1023)).await {
                    Ok(lease) => {
                        got = Some(lease);
                        break;
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                }
            }
            got.expect("B takes the identity once A's session is gone")
        }
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stored = stored_mark(&fix.db.url, lease.worker_id).await;
    assert!(
        stored.map(|m| m as u64) >= theirs.prev_mark_ms,
        "B started from mark {:?}; the row went down to {stored:?} under it",
        theirs.prev_mark_ms
    );
}

/// With the fence a renewal counts once its row write matched the row: a mark left as it was
/// (`GREATEST` of an equal or lower mark changes nothing) still counts, and a missing row does
/// not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_fence_an_unchanged_mark_counts_and_a_missing_row_does_not() {
    let fix = RegistryFix::new().await;
    let config = MysqlConfig {
        fence_on_disconnect: true,
        ..common::config(&fix.db)
    };
    let node = fix.registry_with(fix.new_dir(), config);
    let lease = node.acquire(&request(fix.identity(1), 1023)).await.unwrap();
    let m = now_ms() + 3000;
    for mark in [m, m, m - 1000] {
        assert_eq!(
            node.renew(&lease, mark).await.unwrap(),
            Renewal::OK,
            "{mark}"
        );
    }
    assert_eq!(
        stored_mark(&fix.db.url, lease.worker_id).await,
        Some(m as i64)
    );
    sqlx::query("DELETE FROM leaf_workerid_alloc WHERE id = ?")
        .bind(lease.worker_id)
        .execute(&mut raw(&fix.db.url).await)
        .await
        .unwrap();
    let e = node.renew(&lease, m + 1000).await.unwrap_err();
    assert!(e.to_string().contains("no leaf_workerid_alloc row"), "{e}");
}
