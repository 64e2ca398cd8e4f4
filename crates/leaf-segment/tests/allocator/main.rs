//! Black-box tests of the segment allocator over an in-memory store.

#[path = "../common/mod.rs"]
mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{RecordingStore, allocator, patient, snap, wait_for};
use leaf_core::{Clock, Error, ManualClock, NewTag, SegmentStore, SystemClock, Tag};
use leaf_segment::{LoadObserver, SegmentAllocator, SegmentConfig, StepRule};

fn system() -> Arc<dyn Clock> {
    Arc::new(SystemClock::new())
}

fn is_unavailable<T: std::fmt::Debug>(r: &leaf_core::Result<T>) -> bool {
    matches!(r, Err(Error::Unavailable(_)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_ids_are_unique_and_inside_allocated_ranges() {
    let tags = [("a", 7), ("b", 13), ("c", 50)];
    let store = RecordingStore::with_tags(tags);
    let config = SegmentConfig {
        max_step: 64,
        ..patient()
    };
    let alloc = allocator(&store, system(), config).await;
    let mut tasks = Vec::new();
    for t in 0..16usize {
        let alloc = alloc.clone();
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            let mut unavailable = 0;
            for i in 0..1500usize {
                let tag = tags[(t + i) % tags.len()].0;
                let r = if i % 4 == 0 {
                    alloc.next_ids(tag, 1 + i % 9).await
                } else {
                    alloc.next_id(tag).await.map(|id| vec![id])
                };
                match r {
                    Ok(ids) => got.extend(ids.into_iter().map(|id| (tag, id))),
                    Err(Error::Unavailable(_)) => unavailable += 1,
                    Err(e) => panic!("unexpected error {e}"),
                }
            }
            (got, unavailable)
        }));
    }
    let mut all = Vec::new();
    let mut unavailable = 0;
    for t in tasks {
        let (got, u) = t.await.unwrap();
        all.extend(got);
        unavailable += u;
    }
    assert!(unavailable < 50, "{unavailable} requests found no segment");
    let unique: HashSet<_> = all.iter().collect();
    assert_eq!(unique.len(), all.len(), "an ID was handed out twice");
    for (tag, _) in tags {
        let mut ranges = store.ranges(tag);
        assert!(ranges.len() > 20, "tag {tag}: only {} loads", ranges.len());
        ranges.sort_by_key(|r| r.start);
        assert!(
            ranges.windows(2).all(|w| w[0].end <= w[1].start),
            "store overlap"
        );
        for (_, id) in all.iter().filter(|(t, _)| *t == tag) {
            let i = ranges.partition_point(|r| r.start <= *id);
            assert!(
                i > 0 && ranges[i - 1].contains(id),
                "tag {tag}: id {id} outside every allocation"
            );
        }
    }
}

#[tokio::test]
async fn store_down_serves_from_buffers_then_recovers_by_itself() {
    let clock = ManualClock::new(0);
    let store = RecordingStore::with_tags([("t", 10)]);
    let config = SegmentConfig {
        switch_wait: Duration::from_millis(20),
        retry_backoff_max: Duration::from_secs(1),
        ..Default::default()
    };
    let alloc = allocator(&store, Arc::new(clock.clone()), config).await;
    let mut last = alloc.next_id("t").await.unwrap();
    // The second ID passes 10% of the segment: the next one loads in the background.
    last = last.max(alloc.next_id("t").await.unwrap());
    wait_for("the preload", || snap(&alloc, "t").next_ready).await;

    store.mem.fail(true);
    let buffered = snap(&alloc, "t").remaining;
    assert_eq!(
        buffered,
        8 + 20,
        "the rest of the first segment and the (doubled) next one"
    );
    for _ in 0..buffered {
        let id = alloc.next_id("t").await.expect("served from the buffers");
        assert!(id > last);
        last = id;
    }
    let spent = alloc.next_id("t").await;
    assert!(is_unavailable(&spent), "{spent:?}");
    wait_for("a failed load", || snap(&alloc, "t").loads_failed > 0).await;
    assert!(snap(&alloc, "t").loading, "the load keeps retrying");

    store.mem.fail(false);
    // Each advance lets the retry's backoff run out; nothing but the clock and the store changes.
    let recovered = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            clock.advance(Duration::from_secs(1));
            match alloc.next_id("t").await {
                Ok(id) => return id,
                Err(Error::Unavailable(_)) => tokio::time::sleep(Duration::from_millis(1)).await,
                Err(e) => panic!("unexpected error {e}"),
            }
        }
    })
    .await
    .expect("serving resumes once the store is back");
    assert!(recovered > last);
    assert!(store.allocated("t", recovered));
}

#[tokio::test]
async fn first_load_returns_the_stores_own_error() {
    let store = RecordingStore::with_tags([("t", 10)]);
    let alloc = allocator(&store, system(), patient()).await;
    store.mem.fail(true);
    let r = alloc.next_id("t").await;
    assert!(matches!(r, Err(Error::Backend { .. })), "{r:?}");
    assert!(
        !snap(&alloc, "t").loading,
        "a first load is not retried in the background"
    );
    store.mem.fail(false);
    assert_eq!(alloc.next_id("t").await.unwrap(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switch_wait_is_bounded_when_the_store_stalls() {
    let store = RecordingStore::with_tags([("t", 5)]);
    let switch_wait = Duration::from_millis(50);
    let config = SegmentConfig {
        switch_wait,
        // The preload starts with the third ID, after the store is paused.
        preload_threshold: 0.5,
        ..Default::default()
    };
    let alloc = allocator(&store, system(), config).await;
    alloc.next_id("t").await.unwrap();
    store.mem.pause();
    for _ in 0..4 {
        alloc.next_id("t").await.unwrap();
    }
    wait_for("the stalled preload", || store.mem.allocations() == 2).await;
    // Several waiters at once on two runtime threads: none blocks a thread, each gives up in time.
    let mut waiters = Vec::new();
    for _ in 0..8 {
        let alloc = alloc.clone();
        waiters.push(tokio::spawn(async move {
            let start = Instant::now();
            let r = alloc.next_id("t").await;
            (r, start.elapsed())
        }));
    }
    let all = tokio::time::timeout(Duration::from_secs(5), async {
        let mut out = Vec::new();
        for w in waiters {
            out.push(w.await.unwrap());
        }
        out
    })
    .await
    .expect("waits are bounded, never a hang");
    for (r, took) in all {
        assert!(is_unavailable(&r), "{r:?}");
        assert!(took >= switch_wait, "gave up after {took:?}");
    }
    assert_eq!(store.mem.allocations(), 2, "never two loads of one tag");

    store.mem.resume();
    wait_for("the resumed load", || snap(&alloc, "t").next_ready).await;
    assert_eq!(alloc.next_id("t").await.unwrap(), 6);
}

#[tokio::test(flavor = "current_thread")]
async fn a_waiting_request_lets_the_loader_run_on_the_same_thread() {
    let store = RecordingStore::with_tags([("t", 5)]);
    let config = SegmentConfig {
        // The preload starts with the segment's last ID, so the next request must wait for it.
        preload_threshold: 1.0,
        switch_wait: Duration::from_secs(5),
        ..Default::default()
    };
    let alloc = allocator(&store, system(), config).await;
    let ids: Vec<i64> = {
        let mut v = Vec::new();
        for _ in 0..6 {
            v.push(alloc.next_id("t").await.unwrap());
        }
        v
    };
    assert_eq!(ids, vec![1, 2, 3, 4, 5, 6]);
}

#[tokio::test]
async fn step_doubles_stays_and_halves_with_the_clock() {
    let clock = ManualClock::new(0);
    let store = RecordingStore::with_tags([("t", 10)]);
    let config = SegmentConfig {
        // Each segment's first ID starts the next load.
        preload_threshold: 0.0,
        ..patient()
    };
    let alloc = allocator(&store, Arc::new(clock.clone()), config).await;
    let loads = |n: usize| {
        let store = store.clone();
        move || store.calls("t").len() == n
    };
    alloc.next_id("t").await.unwrap();
    wait_for("load 2", loads(2)).await;
    assert_eq!(store.step_args("t"), vec![None, Some(20)], "quick: doubled");
    assert_eq!(snap(&alloc, "t").step, 20);

    let drain_and_switch = async |advance_s: u64, loads_after: usize| {
        clock.advance(Duration::from_secs(advance_s));
        let left = snap(&alloc, "t").remaining;
        for _ in 0..=left {
            alloc.next_id("t").await.unwrap();
        }
        wait_for("the next load", loads(loads_after)).await;
    };
    drain_and_switch(1000, 3).await;
    assert_eq!(
        store.step_args("t")[2],
        Some(20),
        "between the bounds: kept"
    );
    drain_and_switch(2000, 4).await;
    assert_eq!(store.step_args("t")[3], Some(10), "slow: halved");
    drain_and_switch(2000, 5).await;
    assert_eq!(
        store.step_args("t")[4],
        Some(10),
        "never below the stored step"
    );
    let ranges = store.ranges("t");
    assert_eq!(
        ranges.iter().map(|r| r.end - r.start).collect::<Vec<_>>(),
        vec![10, 20, 20, 10, 10]
    );
}

/// A step rule sizes every load in place of Leaf's dynamic step, from the first.
#[tokio::test]
async fn a_step_rule_sizes_every_load() {
    #[derive(Debug)]
    struct Grow;
    impl StepRule for Grow {
        fn step(&self, tag: &Tag, last: Option<i64>) -> Option<i64> {
            (tag.as_str() == "t").then(|| last.map_or(3, |l| l + 1))
        }
    }
    let store = RecordingStore::with_tags([("t", 10), ("u", 10)]);
    let config = SegmentConfig {
        preload_threshold: 0.0,
        ..patient()
    };
    let alloc = allocator(&store, system(), config)
        .await
        .with_step_rule(Arc::new(Grow));
    for _ in 0..7 {
        alloc.next_id("t").await.unwrap();
    }
    wait_for("load 3", || store.calls("t").len() == 3).await;
    assert_eq!(store.step_args("t"), vec![Some(3), Some(4), Some(5)]);
    alloc.next_id("u").await.unwrap();
    wait_for("load 2 of u", || store.calls("u").len() == 2).await;
    assert_eq!(store.step_args("u"), vec![None, None], "the stored step");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn preload_starts_exactly_once() {
    let store = RecordingStore::with_tags([("t", 100)]);
    let alloc = allocator(&store, system(), patient()).await;
    alloc.next_id("t").await.unwrap();
    assert_eq!(store.mem.allocations(), 1);
    store.mem.pause();
    let mut tasks = Vec::new();
    for i in 0..20 {
        let alloc = alloc.clone();
        tasks.push(tokio::spawn(async move {
            let mut n = 0;
            for _ in 0..2 {
                if i % 2 == 0 {
                    alloc.next_id("t").await.unwrap();
                    n += 1;
                } else {
                    n += alloc.next_ids("t", 2).await.unwrap().len();
                }
            }
            n
        }));
    }
    let mut taken = 1;
    for t in tasks {
        taken += t.await.unwrap();
    }
    assert_eq!(taken, 61, "past 10% of the segment");
    wait_for("the preload to reach the store", || {
        store.mem.allocations() >= 2
    })
    .await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        store.mem.allocations(),
        2,
        "one preload, not one per request"
    );
    let s = snap(&alloc, "t");
    assert!(s.loading && !s.next_ready);
    store.mem.resume();
    wait_for("the preload to land", || snap(&alloc, "t").next_ready).await;
    assert_eq!(store.mem.allocations(), 2);
}

#[tokio::test]
async fn new_tags_work_at_once_and_unknown_tags_are_remembered() {
    let clock = ManualClock::new(0);
    let store = RecordingStore::with_tags([("a", 10)]);
    let miss_ttl = Duration::from_secs(1);
    let config = SegmentConfig {
        miss_ttl,
        ..patient()
    };
    let alloc = allocator(&store, Arc::new(clock.clone()), config).await;
    let create = async |name: &str| {
        store
            .create(&NewTag::new(Tag::new(name).unwrap()))
            .await
            .unwrap();
    };

    create("fresh").await;
    assert_eq!(
        alloc.next_id("fresh").await.unwrap(),
        1,
        "created after init"
    );
    assert_eq!(store.mem.lookups(), 1);
    assert_eq!(alloc.next_id("fresh").await.unwrap(), 2);
    assert_eq!(store.mem.lookups(), 1, "cached now");

    let e = alloc.next_id("nope").await.unwrap_err();
    assert!(matches!(&e, Error::NotFound(m) if m == "tag nope"), "{e}");
    assert_eq!(store.mem.lookups(), 2);
    assert!(matches!(
        alloc.next_id("nope").await,
        Err(Error::NotFound(_))
    ));
    assert!(matches!(
        alloc.next_ids("nope", 3).await,
        Err(Error::NotFound(_))
    ));
    assert_eq!(store.mem.lookups(), 2, "a miss is remembered");

    clock.advance(miss_ttl);
    assert!(matches!(
        alloc.next_id("nope").await,
        Err(Error::NotFound(_))
    ));
    assert_eq!(store.mem.lookups(), 3, "and forgotten after miss_ttl");

    create("nope").await;
    assert!(matches!(
        alloc.next_id("nope").await,
        Err(Error::NotFound(_))
    ));
    assert_eq!(store.mem.lookups(), 3);
    alloc.forget_miss("nope");
    assert_eq!(alloc.next_id("nope").await.unwrap(), 1);
    assert_eq!(store.mem.lookups(), 4);
}

mod tags;
