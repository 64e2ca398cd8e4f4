//! Faults on a real server: PostgreSQL stopped and started while segment mode serves and while
//! a worker id is held, row locks held by another transaction, and a database whose default
//! isolation rolls concurrent allocations back. Every failure must be quick and retryable,
//! never a hang, and no ID may repeat.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use leaf_core::{
    AcquireRequest, Error, NewTag, NodeIdentity, Renewal, SegmentStore, SystemClock, Tag,
    WorkerIdRegistry,
};
use leaf_registry_postgres::{PostgresBackend, PostgresConfig, PostgresStore};
use leaf_segment::{SegmentAllocator, SegmentConfig};
use sqlx::{AssertSqlSafe, Connection, PgConnection};

use common::provision;

/// Longer than any single call may take: a call slower than this counts as a hang.
const CALL_BOUND: Duration = Duration::from_secs(3);

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

async fn exec(url: &str, sql: &str) {
    let mut conn = PgConnection::connect(url).await.expect("raw connection");
    sqlx::raw_sql(AssertSqlSafe(sql.to_owned()))
        .execute(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn segment_mode_serves_through_a_server_restart_without_repeating_an_id() {
    // A server of our own: stopping the shared one would break the other tests.
    let server = provision::dedicated(&provision::POSTGRES)
        .await
        .unwrap_or_else(|e| panic!("no PostgreSQL container for the restart test: {e}"));
    let db = provision::postgres_database_on(server.endpoint())
        .await
        .expect("a database");
    let config = PostgresConfig {
        connect_timeout_ms: 1000,
        timeout_ms: 2000,
        ..PostgresConfig::with_url(&db.url)
    };
    let store: Arc<dyn SegmentStore> = Arc::new(PostgresStore::connect(&config).await.unwrap());
    let tag = Tag::new("restart").unwrap();
    store
        .create(&NewTag {
            step: 1000,
            ..NewTag::new(tag.clone())
        })
        .await
        .unwrap();
    // While the server is up this test wants every request served, so the switch waits long
    // enough for a load on a loaded machine, and still far below the scenario's bound of one
    // call once it is down.
    let segment_config = SegmentConfig {
        switch_wait: Duration::from_millis(500),
        ..SegmentConfig::default()
    };
    let alloc = SegmentAllocator::new(store.clone(), Arc::new(SystemClock::new()), segment_config);
    alloc.init().await.unwrap();

    leaf_testkit::faults::segments_through_a_server_restart(&server, || alloc.next_id("restart"))
        .await;
    drop(alloc);
    drop(db);
    server.remove().await.expect("remove the container");
}

/// A worker id held while PostgreSQL stops and starts: renewals go on into the cache file
/// (the node keeps issuing), and once the server is back the identity lock is taken again and
/// the marks reach the table again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_id_is_kept_through_a_server_restart() {
    let server = provision::dedicated(&provision::POSTGRES)
        .await
        .unwrap_or_else(|e| panic!("no PostgreSQL container for the restart test: {e}"));
    let db = provision::postgres_database_on(server.endpoint())
        .await
        .expect("a database");
    let config = PostgresConfig {
        connect_timeout_ms: 500,
        timeout_ms: 1000,
        ..PostgresConfig::with_url(&db.url)
    };
    let dir = tempfile::tempdir().unwrap();
    let node = PostgresBackend::connect(&config, "leaf")
        .unwrap()
        .registry(dir.path());
    let me = NodeIdentity::new("10.0.0.1", 8001);
    let lease = node
        .acquire(&AcquireRequest::new(me.clone(), 1023, now_ms()))
        .await
        .unwrap();

    server.stop(Duration::from_secs(10)).await.expect("stop");
    let mut mark = now_ms() + 3000;
    for _ in 0..5 {
        mark += 100;
        let started = Instant::now();
        assert_eq!(node.renew(&lease, mark).await.unwrap(), Renewal::OK);
        assert!(started.elapsed() < CALL_BOUND, "{:?}", started.elapsed());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    server.start().await.expect("start");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        mark += 100;
        assert_eq!(node.renew(&lease, mark).await.unwrap(), Renewal::OK);
        let mut conn = PgConnection::connect(&db.url).await.unwrap();
        let stored: Option<i64> =
            sqlx::query_scalar("SELECT max_timestamp FROM leaf_workerid_alloc WHERE id = $1")
                .bind(lease.worker_id as i32)
                .fetch_one(&mut conn)
                .await
                .unwrap();
        if stored.is_some_and(|s| s >= mark as i64 - 100) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the marks never reached the table again: {stored:?}, {mark}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    node.release(&lease, mark).await.unwrap();
    drop(db);
    server.remove().await.expect("remove the container");
}

/// Holds `tag`'s row lock in another connection's open transaction until dropped or closed.
async fn hold_row_lock(url: &str, tag: &str) -> PgConnection {
    let mut conn = PgConnection::connect(url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut conn).await.unwrap();
    sqlx::query("SELECT max_id FROM leaf_alloc WHERE biz_tag = $1 FOR UPDATE")
        .bind(tag)
        .execute(&mut conn)
        .await
        .unwrap();
    conn
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_row_lock_fails_the_allocation_within_the_lock_timeout() {
    let db = common::database().await;
    let config = PostgresConfig {
        lock_timeout_ms: 1000,
        timeout_ms: 10_000,
        ..PostgresConfig::with_url(&db.url)
    };
    let store = PostgresStore::connect(&config).await.unwrap();
    let tag = Tag::new("locked").unwrap();
    store.create(&NewTag::new(tag.clone())).await.unwrap();
    let holder = hold_row_lock(&db.url, "locked").await;

    let started = Instant::now();
    let e = store.allocate(&tag, None).await.unwrap_err();
    let took = started.elapsed();
    assert!(
        matches!(&e, Error::Unavailable(m) if m.contains("lock wait")),
        "{e}"
    );
    assert!(e.is_retryable());
    assert!(
        took >= Duration::from_millis(900),
        "it did not wait for the lock: {took:?}"
    );
    assert!(
        took < Duration::from_secs(6),
        "lock wait of 1 s took {took:?}"
    );

    holder.close().await.unwrap(); // rolls the holder back
    assert_eq!(store.allocate(&tag, None).await.unwrap().range(), 1..2001);
}

/// A call cut at `timeout_ms` is also given up by the server (`statement_timeout`, and
/// `lock_timeout` never above it): the abandoned update does not wait on for the lock, and
/// does not commit once the lock is free, so it reserves nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_allocation_is_given_up_by_the_server_too() {
    let db = common::database().await;
    // The lock timeout asked for is an hour; the call bound of 700 ms caps it.
    let config = PostgresConfig {
        lock_timeout_ms: 3_600_000,
        timeout_ms: 700,
        max_connections: 1,
        ..PostgresConfig::with_url(&db.url)
    };
    let store = PostgresStore::connect(&config).await.unwrap();
    let tag = Tag::new("stalled").unwrap();
    store.create(&NewTag::new(tag.clone())).await.unwrap();
    let holder = hold_row_lock(&db.url, "stalled").await;

    let started = Instant::now();
    let e = store.allocate(&tag, None).await.unwrap_err();
    let took = started.elapsed();
    assert!(
        matches!(e, Error::Unavailable(_)) && e.is_retryable(),
        "{e}"
    );
    assert!(
        took < Duration::from_secs(5),
        "a 700 ms bound took {took:?}"
    );

    // No session of the store is left waiting for the lock on the server.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut admin = PgConnection::connect(&db.url).await.unwrap();
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'leaf' \
             AND datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(&mut admin)
        .await
        .unwrap();
        if waiting == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the abandoned update still waits on the server"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Held past the bound, then freed: an update still waiting would commit now.
    tokio::time::sleep(Duration::from_millis(500)).await;
    holder.close().await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let range = loop {
        match store.allocate(&tag, None).await {
            Ok(a) => break a.range(),
            Err(e) => {
                assert!(e.is_retryable(), "{e}");
                assert!(Instant::now() < deadline, "the pool did not recover: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    assert_eq!(
        range,
        1..2001,
        "the cancelled allocation must not have committed"
    );
}

/// A database whose default isolation is `repeatable read` rolls back an update of a row that
/// a concurrent transaction changed (a serialization failure): the bare statement fails, the
/// store's allocations run again and all succeed, with ranges that never overlap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serialization_failures_are_run_again() {
    let db = common::database().await;
    let store = Arc::new(
        PostgresStore::connect(&PostgresConfig {
            max_connections: 8,
            ..PostgresConfig::with_url(&db.url)
        })
        .await
        .unwrap(),
    );
    let tag = Tag::new("contended").unwrap();
    store
        .create(&NewTag {
            step: 10,
            ..NewTag::new(tag.clone())
        })
        .await
        .unwrap();
    exec(
        &db.url,
        &format!(
            "ALTER DATABASE {} SET default_transaction_isolation = 'repeatable read'",
            db.name
        ),
    )
    .await;
    // New sessions only: the store's pooled ones still read committed.
    store.pool().close().await;
    let store = Arc::new(
        PostgresStore::connect(&PostgresConfig {
            max_connections: 8,
            ..PostgresConfig::with_url(&db.url)
        })
        .await
        .unwrap(),
    );
    let isolation: String = sqlx::query_scalar("SHOW transaction_isolation")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(isolation, "repeatable read");

    // The control: the same update without the store's retries fails under this contention.
    let bare = (0..8).map(|_| {
        let pool = store.pool().clone();
        tokio::spawn(async move {
            let mut failures = 0;
            for _ in 0..40 {
                let r = sqlx::query(
                    "UPDATE leaf_alloc SET max_id = max_id + step WHERE biz_tag = 'contended'",
                )
                .execute(&pool)
                .await;
                if let Err(e) = r {
                    let code = e
                        .as_database_error()
                        .and_then(|d| d.code())
                        .unwrap_or_default();
                    assert_eq!(code, "40001", "{e}");
                    failures += 1;
                }
            }
            failures
        })
    });
    let mut failures = 0;
    for t in bare.collect::<Vec<_>>() {
        failures += t.await.unwrap();
    }
    assert!(failures > 0, "the database never rolled an update back");

    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (store, tag) = (store.clone(), tag.clone());
            tokio::spawn(async move {
                let mut ranges = Vec::new();
                for _ in 0..40 {
                    ranges.push(
                        store
                            .allocate(&tag, None)
                            .await
                            .expect("an allocation")
                            .range(),
                    );
                }
                ranges
            })
        })
        .collect();
    let mut ranges = Vec::new();
    for t in tasks {
        ranges.extend(t.await.unwrap());
    }
    ranges.sort_by_key(|r| r.start);
    assert_eq!(ranges.len(), 320);
    for w in ranges.windows(2) {
        assert_eq!(w[0].end, w[1].start, "ranges follow each other: {w:?}");
    }
}
