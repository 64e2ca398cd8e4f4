//! Faults on a real server: a restart of the server while segment mode serves, and row locks
//! held by another transaction. Every failure must be quick and retryable, never a hang, and
//! no ID may repeat.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use leaf_core::{Error, NewTag, SegmentStore, SystemClock, Tag};
use leaf_registry_mysql::{MysqlConfig, MysqlStore};
use leaf_segment::{SegmentAllocator, SegmentConfig};
use sqlx::{Connection, MySqlConnection};

use common::provision;

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
    // waits long enough for a load, and still far below the scenario's bound of one call once
    // the server is down.
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
        took < Duration::from_secs(6),
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
        took < Duration::from_secs(5),
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
