//! Faults of the SQL segment stores on a real server: a restart of the server while segment
//! mode serves, and a row lock another transaction holds. Every failure must be quick and
//! retryable, never a hang, and no ID may repeat.

use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use leaf_core::{Error, NewTag, SegmentStore, SystemClock, Tag};
use leaf_segment::{SegmentAllocator, SegmentConfig};
use serde_json::{Value, json};

use crate::provision::{SqlDatabase, SqlSession};
use crate::sql::{SqlBackend, config_of, database, database_on, store_of};

/// Segment mode through a stop and a start of a server of the test's own
/// ([`segments_through_a_server_restart`](crate::faults::segments_through_a_server_restart)),
/// through `leaf_segment`'s allocator.
pub async fn segment_mode_serves_through_a_server_restart_without_repeating_an_id<B: SqlBackend>() {
    // A server of our own: stopping the shared one would break the other tests.
    let server = crate::provision::dedicated(B::SERVER)
        .await
        .unwrap_or_else(|e| panic!("no container for the restart test: {e}"));
    let db = database_on::<B>(server.endpoint()).await;
    let tag = Tag::new("restart").unwrap();
    let changes = json!({ "connect_timeout_ms": 1000, "timeout_ms": 2000 });
    let store = store_of::<B>(&config_of::<B>(&db.url, changes))
        .await
        .unwrap();
    store
        .create(&NewTag {
            step: 1000,
            ..NewTag::new(tag.clone())
        })
        .await
        .unwrap();
    // A loaded CI machine can take longer than the default 10 ms switch wait for one
    // allocation; while the server is up this test wants every request served, so the switch
    // waits long enough for a load, and still far below the scenario's bound of one call once
    // the server is down.
    let segment_config = SegmentConfig {
        switch_wait: Duration::from_millis(500),
        ..SegmentConfig::default()
    };
    let alloc = SegmentAllocator::new(store, Arc::new(SystemClock::new()), segment_config);
    alloc.init().await.unwrap();

    crate::faults::segments_through_a_server_restart(&server, || alloc.next_id("restart")).await;
    drop(alloc);
    drop(db);
    server.remove().await.expect("remove the container");
}

/// Holds `tag`'s row lock in another session's open transaction until it is closed.
pub async fn hold_row_lock(db: &SqlDatabase, tag: &str) -> SqlSession {
    let mut session = db.session().await;
    session.exec("BEGIN").await;
    let lock = format!("SELECT max_id FROM leaf_alloc WHERE biz_tag = '{tag}' FOR UPDATE");
    session.exec(&lock).await;
    session
}

/// A row lock another transaction holds fails an allocation with a retryable `Unavailable`
/// saying so, after the lock wait (`lock_wait`: the backend's setting of 1 s) and well within
/// the call's bound; once it is freed, the tag allocates from its start.
pub async fn a_held_row_lock_fails_the_allocation<B: SqlBackend>(lock_wait: Value) {
    let db = database::<B>().await;
    let mut changes = json!({ "timeout_ms": 10_000 });
    changes
        .as_object_mut()
        .unwrap()
        .extend(lock_wait.as_object().unwrap().clone());
    let tag = Tag::new("locked").unwrap();
    let store = store_with_tag::<B>(&db, changes, &tag).await;
    let holder = hold_row_lock(&db, "locked").await;

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

    holder.close().await; // rolls the holder back
    assert_eq!(store.allocate(&tag, None).await.unwrap().range(), 1..2001);
}

/// The range of the first allocation of `tag` that succeeds within 10 s, every failure before
/// it retryable: a pool whose connection was abandoned mid-statement recovers.
pub async fn first_range_once_recovered(store: &dyn SegmentStore, tag: &Tag) -> Range<i64> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match store.allocate(tag, None).await {
            Ok(a) => return a.range(),
            Err(e) => {
                assert!(e.is_retryable(), "{e}");
                assert!(Instant::now() < deadline, "the pool did not recover: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// A store on `db` with `changes`, and `tag` created in it.
pub async fn store_with_tag<B: SqlBackend>(
    db: &SqlDatabase,
    changes: Value,
    tag: &Tag,
) -> Arc<dyn SegmentStore> {
    let store = store_of::<B>(&config_of::<B>(&db.url, changes))
        .await
        .unwrap();
    store.create(&NewTag::new(tag.clone())).await.unwrap();
    store
}
