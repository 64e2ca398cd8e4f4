//! The `mysql` workerId mode on a real server: the fork's table, ids never burnt by a restart,
//! the race on the unique key, the layout's range, the marks, and the cache-file fallback.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use leaf_core::{AcquireRequest, Error, NodeIdentity, Renewal, WorkerIdRegistry};
use leaf_registry_mysql::{LEAF_WORKERID_ALLOC_DDL, MysqlConfig, MysqlRegistry};
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
    AcquireRequest {
        identity,
        max_worker_id,
        now_ms: now_ms(),
        max_ahead_ms: 10_000,
    }
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_first_starts_of_one_identity_share_one_row() {
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
    let mut ids = Vec::new();
    for t in tasks {
        ids.push(
            t.await
                .unwrap()
                .expect("every racer gets the row's id")
                .worker_id,
        );
    }
    assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
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
    assert_eq!(node.renew(&lease, m).await.unwrap(), Renewal::Ok);
    // The server copy is written in the background.
    let mut seen = None;
    for _ in 0..100 {
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
    async move { MysqlRegistry::connect(&config, dir, "leaf").await.unwrap() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_down_at_start_up_starts_from_the_cache_file_with_its_mark() {
    let fix = RegistryFix::new().await;
    let dir = fix.new_dir();
    let node = fix.registry_in(dir.clone()).await;
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
    assert_eq!(down.renew(&again, m + 1000).await.unwrap(), Renewal::Ok);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_process_on_one_cache_directory_refuses() {
    let fix = RegistryFix::new().await;
    let dir = fix.new_dir();
    let a = fix.registry_in(dir.clone()).await;
    a.acquire(&request(fix.identity(1), 1023)).await.unwrap();
    let b = fix.registry_in(dir).await;
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
