//! The generator never holds a runtime thread across a millisecond: waiting for the next one is
//! async, so other tasks on the same thread run while a saturating client waits.
//!
//! The real clock is needed here (a manual clock makes every wait a sleep, which yields anyway);
//! the checks count how often another task ran, never how long anything took.

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use common::{MemRegistry, start_on};
use leaf_core::{Result, SnowflakeLayout, SystemClock, TWITTER_EPOCH_MS};
use leaf_snowflake::{Snowflake, SnowflakeConfig};

/// One sequence bit and no random start: 2 IDs per millisecond, so every few IDs wait.
async fn tiny_generator() -> Snowflake {
    let config = SnowflakeConfig {
        layout: SnowflakeLayout::new(41, 10, 1, TWITTER_EPOCH_MS).unwrap(),
        random_start: 0,
        ..SnowflakeConfig::default()
    };
    // No renewer: the first mark (now + 3 s) covers the ~100 ms these tests issue.
    start_on(&MemRegistry::new(1), Arc::new(SystemClock::new()), config)
        .await
        .expect("snowflake starts")
}

/// Runs `load` beside a task that counts its own turns on the same thread, and checks that the
/// counter got a turn between every two milliseconds the IDs span.
async fn check_other_task_runs(
    sf: &Snowflake,
    load: impl AsyncFnOnce(&Snowflake) -> Result<Vec<i64>>,
) {
    let turns = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let counter = tokio::spawn({
        let (turns, stop) = (turns.clone(), stop.clone());
        async move {
            while !stop.load(Ordering::Relaxed) {
                turns.fetch_add(1, Ordering::Relaxed);
                tokio::task::yield_now().await;
            }
        }
    });
    // Let the counter take its first turn before the load starts.
    tokio::task::yield_now().await;
    let before = turns.load(Ordering::Relaxed);
    let ids = load(sf).await.unwrap();
    let during = turns.load(Ordering::Relaxed) - before;
    stop.store(true, Ordering::Relaxed);
    counter.await.unwrap();

    let millis: HashSet<u64> = ids
        .iter()
        .map(|id| sf.decode(*id).unwrap().timestamp_ms)
        .collect();
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), ids.len());
    assert!(millis.len() >= 50, "{} ms spanned", millis.len());
    assert!(
        during >= millis.len() as u64 - 1,
        "the other task ran {during} times while the IDs spanned {} milliseconds",
        millis.len()
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_batch_yields_to_other_tasks_between_milliseconds() {
    let sf = tiny_generator().await;
    check_other_task_runs(&sf, async |sf| sf.next_ids(200).await).await;
}

#[tokio::test(flavor = "current_thread")]
async fn single_ids_waiting_for_the_next_millisecond_yield() {
    let sf = tiny_generator().await;
    check_other_task_runs(&sf, async |sf| {
        let mut ids = Vec::new();
        for _ in 0..200 {
            ids.push(sf.next_id().await?);
        }
        Ok(ids)
    })
    .await;
}
