//! Faults on a real server: a restart of the server while segment mode serves, and row locks
//! held by another transaction (`leaf_testkit::sql_cases::faults`). Every failure must be quick
//! and retryable, never a hang, and no ID may repeat.

mod common;

use std::time::{Duration, Instant};

use leaf_core::{Error, Tag};
use leaf_testkit::sql::database;
use leaf_testkit::sql_cases::faults::{first_range_once_recovered, hold_row_lock, store_with_tag};
use serde_json::json;

use common::Backend;

leaf_testkit::sql_tests!(Backend, faults;
    segment_mode_serves_through_a_server_restart_without_repeating_an_id,
    a_held_row_lock_fails_the_allocation_within_the_lock_wait =
        a_held_row_lock_fails_the_allocation(json!({ "lock_wait_timeout_s": 1 })),
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_allocation_is_cut_at_timeout_ms_and_the_pool_recovers() {
    let db = database::<Backend>().await;
    // The server would wait 50 s for the lock; the store gives up after 700 ms.
    let changes = json!({ "lock_wait_timeout_s": 50, "timeout_ms": 700, "max_connections": 1 });
    let tag = Tag::new("stalled").unwrap();
    let store = store_with_tag::<Backend>(&db, changes, &tag).await;
    let holder = hold_row_lock(&db, "stalled").await;

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

    holder.close().await;
    // The one pooled connection was abandoned mid-statement; the next call still works, and
    // the abandoned transaction reserved nothing.
    let range = first_range_once_recovered(&*store, &tag).await;
    assert_eq!(
        range,
        1..2001,
        "the cancelled allocation must not have committed"
    );
}
