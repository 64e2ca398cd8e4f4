//! Faults on a real server: what every SQL store runs (`leaf_testkit::sql_cases::faults`:
//! segment mode through a restart of the server, a row lock held by another transaction), and
//! PostgreSQL's own: the server stopped and started while a worker id is held, a stalled
//! allocation given up by the server too, and a database whose default isolation rolls
//! concurrent allocations back. Every failure must be quick and retryable, never a hang, and no
//! ID may repeat.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use leaf_core::{Error, NewTag, NodeIdentity, Renewal, SegmentStore, Tag, WorkerIdRegistry};
use leaf_registry_postgres::{PostgresConfig, PostgresStore};
use leaf_testkit::sql::{config_of, database, database_on, registry_of};
use leaf_testkit::sql_cases::faults::{first_range_once_recovered, hold_row_lock, store_with_tag};
use leaf_testkit::sql_cases::{now_ms, request};
use serde_json::json;

use common::Backend;

leaf_testkit::sql_tests!(Backend, faults;
    segment_mode_serves_through_a_server_restart_without_repeating_an_id,
    a_held_row_lock_fails_the_allocation_within_the_lock_timeout =
        a_held_row_lock_fails_the_allocation(json!({ "lock_timeout_ms": 1000 })),
);

/// Longer than any single call may take: a call slower than this counts as a hang.
const CALL_BOUND: Duration = Duration::from_secs(3);

/// A worker id held while PostgreSQL stops and starts: renewals go on into the cache file
/// (the node keeps issuing), and once the server is back the identity lock is taken again and
/// the marks reach the table again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_id_is_kept_through_a_server_restart() {
    let server = leaf_testkit::provision::dedicated(&leaf_testkit::provision::POSTGRES)
        .await
        .unwrap_or_else(|e| panic!("no PostgreSQL container for the restart test: {e}"));
    let db = database_on::<Backend>(server.endpoint()).await;
    let config = config_of::<Backend>(
        &db.url,
        json!({ "connect_timeout_ms": 500, "timeout_ms": 1000 }),
    );
    let dir = tempfile::tempdir().unwrap();
    let node: Arc<dyn WorkerIdRegistry> = registry_of::<Backend>(&config, dir.path().into());
    let me = NodeIdentity::new("10.0.0.1", 8001);
    let lease = node.acquire(&request(me.clone(), 1023)).await.unwrap();

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
    let id = lease.worker_id;
    loop {
        mark += 100;
        assert_eq!(node.renew(&lease, mark).await.unwrap(), Renewal::OK);
        let sql = format!("SELECT max_timestamp FROM leaf_workerid_alloc WHERE id = {id}");
        let stored = db.scalar(&sql).await;
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

/// A call cut at `timeout_ms` is also given up by the server (`statement_timeout`, and
/// `lock_timeout` never above it): the abandoned update does not wait on for the lock, and
/// does not commit once the lock is free, so it reserves nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_allocation_is_given_up_by_the_server_too() {
    let db = database::<Backend>().await;
    // The lock timeout asked for is an hour; the call bound of 700 ms caps it.
    let changes = json!({ "lock_timeout_ms": 3_600_000, "timeout_ms": 700, "max_connections": 1 });
    let tag = Tag::new("stalled").unwrap();
    let store = store_with_tag::<Backend>(&db, changes, &tag).await;
    let holder = hold_row_lock(&db, "stalled").await;

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
    let mut admin = db.session().await;
    let waiting = "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'leaf' \
                   AND datname = current_database() AND wait_event_type = 'Lock'";
    while admin.scalar(waiting).await != Some(0) {
        assert!(
            Instant::now() < deadline,
            "the abandoned update still waits on the server"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Held past the bound, then freed: an update still waiting would commit now.
    tokio::time::sleep(Duration::from_millis(500)).await;
    holder.close().await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let range = first_range_once_recovered(&*store, &tag).await;
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
    let db = database::<Backend>().await;
    let config = PostgresConfig {
        max_connections: 8,
        ..PostgresConfig::with_url(&db.url)
    };
    let store = Arc::new(PostgresStore::connect(&config).await.unwrap());
    let tag = Tag::new("contended").unwrap();
    store
        .create(&NewTag {
            step: 10,
            ..NewTag::new(tag.clone())
        })
        .await
        .unwrap();
    db.exec(&format!(
        "ALTER DATABASE {} SET default_transaction_isolation = 'repeatable read'",
        db.name
    ))
    .await;
    // New sessions only: the store's pooled ones still read committed.
    store.pool().close().await;
    let store = Arc::new(PostgresStore::connect(&config).await.unwrap());
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
