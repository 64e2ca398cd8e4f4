//! Faults on a real server: a restart of the server while segment mode serves, and row locks
//! held by another transaction. Every failure must be quick and retryable, never a hang, and
//! no ID may repeat.

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use leaf_core::{Error, NewTag, SegmentStore, SystemClock, Tag};
use leaf_registry_mysql::{MysqlConfig, MysqlStore};
use leaf_segment::{SegmentAllocator, SegmentConfig};
use sqlx::{Connection, MySqlConnection};

use common::provision;

/// Longer than any single call may take: a call slower than this counts as a hang.
const CALL_BOUND: Duration = Duration::from_secs(3);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn segment_mode_serves_through_a_server_restart_without_repeating_an_id() {
    // A server of our own: stopping the shared one would break the other tests.
    let server = provision::dedicated(&provision::MYSQL)
        .await
        .unwrap_or_else(|e| panic!("no MySQL container for the restart test: {e}"));
    let db = provision::mysql_database_on(server.endpoint())
        .await
        .expect("a database");
    let config = MysqlConfig {
        connect_timeout_ms: 1000,
        timeout_ms: 2000,
        ..MysqlConfig::with_url(&db.url)
    };
    let store: Arc<dyn SegmentStore> = Arc::new(MysqlStore::connect(&config).await.unwrap());
    let tag = Tag::new("restart").unwrap();
    store
        .create(&NewTag {
            step: 1000,
            ..NewTag::new(tag.clone())
        })
        .await
        .unwrap();
    // A loaded CI machine can take longer than the default 10 ms switch wait for one MySQL
    // transaction; while the server is up this test wants every request served, so the switch
    // waits long enough for a load, and still far below CALL_BOUND once the server is down.
    let segment_config = SegmentConfig {
        switch_wait: Duration::from_millis(500),
        ..SegmentConfig::default()
    };
    let alloc = SegmentAllocator::new(store.clone(), Arc::new(SystemClock::new()), segment_config);
    alloc.init().await.unwrap();

    let mut seen = HashSet::new();
    let take = |id: i64, seen: &mut HashSet<i64>| assert!(seen.insert(id), "id {id} issued twice");
    // Up: the first segment and a preloaded second.
    let mut before_max = 0;
    for _ in 0..1500 {
        let id = alloc.next_id("restart").await.unwrap();
        take(id, &mut seen);
        before_max = before_max.max(id);
    }

    server
        .stop(Duration::from_secs(10))
        .await
        .expect("stop the server");
    // Down: serving goes on from the buffers until they are spent, then fails fast.
    let mut served_while_down = 0u64;
    let failure = loop {
        let started = Instant::now();
        let r = alloc.next_id("restart").await;
        assert!(
            started.elapsed() < CALL_BOUND,
            "a call took {:?}",
            started.elapsed()
        );
        match r {
            Ok(id) => {
                take(id, &mut seen);
                before_max = before_max.max(id);
                served_while_down += 1;
                assert!(served_while_down < 10_000_000, "the buffers never ran out");
            }
            Err(e) => break e,
        }
    };
    assert!(served_while_down > 0, "nothing was served from the buffers");
    assert!(
        failure.is_retryable() && matches!(failure, Error::Unavailable(_)),
        "spent buffers with the store down: {failure}"
    );
    // Still down: every further request fails quickly too.
    for _ in 0..20 {
        let started = Instant::now();
        let r = alloc.next_id("restart").await;
        assert!(
            r.is_err(),
            "an id while the server is down and the buffers are spent"
        );
        assert!(
            started.elapsed() < CALL_BOUND,
            "a call took {:?}",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    server.start().await.expect("start the server again");
    // Up again: serving resumes by itself, with IDs above every ID issued before.
    let deadline = Instant::now() + Duration::from_secs(30);
    let first_after = loop {
        let started = Instant::now();
        match alloc.next_id("restart").await {
            Ok(id) => break id,
            Err(e) => {
                assert!(
                    started.elapsed() < CALL_BOUND,
                    "a call took {:?}",
                    started.elapsed()
                );
                assert!(Instant::now() < deadline, "serving did not resume: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    take(first_after, &mut seen);
    assert!(
        first_after > before_max,
        "{first_after} after the restart, {before_max} before"
    );
    for _ in 0..3000 {
        let id = alloc.next_id("restart").await.unwrap();
        take(id, &mut seen);
    }
    drop(alloc);
    drop(db);
    server.remove().await.expect("remove the container");
}

/// Holds `tag`'s row lock in another connection's open transaction until dropped.
async fn hold_row_lock(url: &str, tag: &str) -> MySqlConnection {
    let mut conn = MySqlConnection::connect(url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut conn).await.unwrap();
    sqlx::query("SELECT max_id FROM leaf_alloc WHERE biz_tag = ? FOR UPDATE")
        .bind(tag)
        .execute(&mut conn)
        .await
        .unwrap();
    conn
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_row_lock_fails_the_allocation_within_the_lock_wait() {
    let db = common::database().await;
    let config = MysqlConfig {
        lock_wait_timeout_s: 1,
        timeout_ms: 10_000,
        ..MysqlConfig::with_url(&db.url)
    };
    let store = MysqlStore::connect(&config).await.unwrap();
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
        took < Duration::from_secs(3),
        "lock wait of 1 s took {took:?}"
    );

    holder.close().await.unwrap(); // rolls the holder back
    assert_eq!(store.allocate(&tag, None).await.unwrap().range(), 1..2001);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_allocation_is_cut_at_timeout_ms_and_the_pool_recovers() {
    let db = common::database().await;
    // The server would wait 50 s for the lock; the store gives up after 700 ms.
    let config = MysqlConfig {
        lock_wait_timeout_s: 50,
        timeout_ms: 700,
        max_connections: 1,
        ..MysqlConfig::with_url(&db.url)
    };
    let store = MysqlStore::connect(&config).await.unwrap();
    let tag = Tag::new("stalled").unwrap();
    store.create(&NewTag::new(tag.clone())).await.unwrap();
    let holder = hold_row_lock(&db.url, "stalled").await;

    let started = Instant::now();
    let e = store.allocate(&tag, None).await.unwrap_err();
    let took = started.elapsed();
    assert!(
        matches!(&e, Error::Unavailable(m) if m.contains("700 ms")),
        "{e}"
    );
    assert!(
        took < Duration::from_secs(2),
        "a 700 ms bound took {took:?}"
    );

    holder.close().await.unwrap();
    // The one pooled connection was abandoned mid-statement; the next call still works, and
    // the abandoned transaction reserved nothing.
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
