//! Fault scenarios every store with a server runs the same way (feature `provision`), against a
//! [`Dedicated`] server the scenario stops and starts.

use std::collections::HashSet;
use std::future::Future;
use std::time::{Duration, Instant};

use leaf_core::Error;

use crate::provision::Dedicated;

/// Longer than any single call may take: a call slower than this counts as a hang.
const CALL_BOUND: Duration = Duration::from_secs(3);

/// Segment mode through a stop and a start of its store's `server`: `next_id` takes one ID of
/// a tag through the caller's allocator (a step of about 1000, a switch wait well below a
/// second). Up: 1500 IDs, the first segment and a preloaded second. Down: IDs keep coming from
/// the buffers until they are spent, then every call fails quickly with a retryable
/// `Unavailable`, never hangs. Up again: serving resumes by itself, with IDs above every ID
/// issued before. No ID repeats.
pub async fn segments_through_a_server_restart<F, Fut>(server: &Dedicated, mut next_id: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = leaf_core::Result<i64>>,
{
    let mut seen = HashSet::new();
    let take = |id: i64, seen: &mut HashSet<i64>| assert!(seen.insert(id), "id {id} issued twice");
    // Up: the first segment and a preloaded second.
    let mut before_max = 0;
    for _ in 0..1500 {
        let id = next_id().await.unwrap();
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
        let r = next_id().await;
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
        let r = next_id().await;
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
        match next_id().await {
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
        let id = next_id().await.unwrap();
        take(id, &mut seen);
    }
}
