//! Uniqueness under concurrency, on the real system clock and a multi-threaded runtime.

mod common;

use std::collections::HashSet;
use std::sync::Arc;

use common::{MemRegistry, start_on};
use leaf_core::SystemClock;
use leaf_snowflake::SnowflakeConfig;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_tasks_get_unique_per_task_increasing_ids() {
    const TASKS: usize = 8;
    const PER_TASK: usize = 25_000;
    let reg = MemRegistry::new(17);
    let sf = start_on(
        &reg,
        Arc::new(SystemClock::new()),
        SnowflakeConfig::default(),
    )
    .await
    .unwrap();
    let renewer = sf.spawn_renewer();

    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let sf = sf.clone();
            tokio::spawn(async move {
                let mut ids = Vec::with_capacity(PER_TASK);
                for i in 0..PER_TASK {
                    // Mix single IDs and small batches, as a server does.
                    if (i + t) % 50 == 0 {
                        ids.extend(sf.next_ids(7).await.unwrap());
                    } else {
                        ids.push(sf.next_id().await.unwrap());
                    }
                }
                ids
            })
        })
        .collect();

    let mut all = HashSet::with_capacity(TASKS * PER_TASK * 2);
    let mut total = 0;
    for task in tasks {
        let ids = task.await.unwrap();
        for w in ids.windows(2) {
            assert!(w[0] < w[1], "per-task strictly increasing");
        }
        for id in &ids {
            assert_eq!(sf.decode(*id).unwrap().worker_id, 17);
        }
        total += ids.len();
        all.extend(ids);
    }
    assert!(total >= TASKS * PER_TASK);
    assert_eq!(all.len(), total, "every ID is unique");
    let status = sf.status();
    assert!(
        all.iter()
            .all(|id| sf.decode(*id).unwrap().timestamp_ms <= status.durable_mark_ms)
    );
    sf.shutdown().await.unwrap();
    renewer.await.unwrap();
}
