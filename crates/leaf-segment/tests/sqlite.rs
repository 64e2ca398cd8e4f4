//! The allocator on the real embedded store: several allocators, in one process and in two OS
//! processes, sharing one SQLite file never hand out an ID twice.

use std::collections::HashSet;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use leaf_core::{NewTag, SegmentStore, SystemClock, Tag};
use leaf_registry_local::SqliteStore;
use leaf_segment::{SegmentAllocator, SegmentConfig};

const TAG: &str = "shared";
const CHILD_DB: &str = "LEAFTEST_SEGMENT_CHILD_DB";
const CHILD_GATE: &str = "LEAFTEST_SEGMENT_CHILD_GATE";
const PER_CHILD: usize = 3000;

async fn allocator(url: &str) -> SegmentAllocator {
    let store = Arc::new(SqliteStore::connect_url(url).await.expect("open sqlite"));
    let config = SegmentConfig {
        // Small segments and no growth: the allocators go back to the file all the time.
        max_step: 16,
        ..SegmentConfig::default()
    };
    let a = SegmentAllocator::new(store, Arc::new(SystemClock::new()), config);
    a.init().await.expect("init");
    a
}

async fn create_tag(url: &str) {
    let store = SqliteStore::connect_url(url).await.expect("open sqlite");
    let mut new = NewTag::new(Tag::new(TAG).unwrap());
    new.step = 7;
    match store.create(&new).await {
        Ok(_) | Err(leaf_core::Error::AlreadyExists(_)) => {}
        Err(e) => panic!("create tag: {e}"),
    }
}

/// Takes IDs until `n` are in hand, retrying the `Unavailable` of a switch that had to wait for
/// the other allocator's transaction.
async fn take(a: &SegmentAllocator, n: usize) -> Vec<i64> {
    let mut ids = Vec::with_capacity(n);
    let mut unavailable = 0;
    while ids.len() < n {
        match a.next_id(TAG).await {
            Ok(id) => ids.push(id),
            Err(leaf_core::Error::Unavailable(_)) if unavailable < 10_000 => unavailable += 1,
            Err(e) => panic!("next_id: {e}"),
        }
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_allocators_on_one_file_issue_no_duplicate() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("leaf.db").display());
    create_tag(&url).await;
    let a = allocator(&url).await;
    let b = allocator(&url).await;
    let mut tasks = Vec::new();
    for alloc in [&a, &b] {
        for _ in 0..4 {
            let alloc = alloc.clone();
            tasks.push(tokio::spawn(async move { take(&alloc, 1500).await }));
        }
    }
    let mut seen = HashSet::new();
    for t in tasks {
        for id in t.await.unwrap() {
            assert!(seen.insert(id), "id {id} issued twice");
        }
    }
    assert_eq!(seen.len(), 8 * 1500);
    // Every ID lies below what the file says was reserved.
    let row = a
        .store()
        .get(&Tag::new(TAG).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert!(seen.iter().all(|&id| (1..row.max_id).contains(&id)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_on_one_file_issue_no_duplicate() {
    if let Ok(url) = std::env::var(CHILD_DB) {
        // The child: one allocator of its own, IDs to stdout. It takes its first ID (so holds
        // a segment of the file) before it says it is ready, and takes the rest only after the
        // parent's start signal, that is after the other child holds a segment too: whichever
        // finishes first, each child's later segments lie above the other's first one.
        let a = allocator(&url).await;
        let mut ids = take(&a, 1).await;
        let gate = std::path::PathBuf::from(std::env::var(CHILD_GATE).expect("gate"));
        std::fs::write(gate.join(format!("ready-{}", std::process::id())), "").unwrap();
        while !gate.join("go").exists() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        while ids.len() < PER_CHILD {
            ids.extend(take(&a, (PER_CHILD - ids.len()).min(10)).await);
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // The harness's "test NAME ... " has no newline yet under --nocapture.
        println!();
        for id in ids {
            println!("id {id}");
        }
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("leaf.db").display());
    create_tag(&url).await;
    let children: Vec<_> = (0..2)
        .map(|_| {
            Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "two_processes_on_one_file_issue_no_duplicate",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_DB, &url)
                .env(CHILD_GATE, dir.path())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("start child")
        })
        .collect();
    // Both children hold an open allocator before either takes an ID.
    let ready = || {
        let names = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name());
        names
            .filter(|n| n.to_string_lossy().starts_with("ready-"))
            .count()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while ready() < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the children never became ready"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    std::fs::write(dir.path().join("go"), "").unwrap();
    let mut seen = HashSet::new();
    let mut per_child = Vec::new();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "child failed: {:?}", out.status);
        let ids: Vec<i64> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .filter_map(|l| l.strip_prefix("id ")?.parse().ok())
            .collect();
        assert_eq!(ids.len(), PER_CHILD, "every child reports all its IDs");
        per_child.push(ids.clone());
        for id in ids {
            assert!(seen.insert(id), "id {id} issued by both processes");
        }
    }
    // The two processes really took segments of the file at the same time: the spans of their
    // IDs overlap (one process's segments lie between the other's).
    let span = |ids: &[i64]| (*ids.iter().min().unwrap(), *ids.iter().max().unwrap());
    let ((lo0, hi0), (lo1, hi1)) = (span(&per_child[0]), span(&per_child[1]));
    assert!(
        lo0 < hi1 && lo1 < hi0,
        "the children did not run at the same time ({lo0}..={hi0} vs {lo1}..={hi1}); the test \
         proves nothing"
    );
}

#[tokio::test]
async fn every_id_up_to_i64_max_is_issued_from_the_file_then_the_tag_is_exhausted() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("leaf.db").display());
    let store = Arc::new(SqliteStore::connect_url(&url).await.expect("open sqlite"));
    let start = i64::MAX - 250;
    let new = NewTag {
        max_id: start,
        step: 100,
        ..NewTag::new(Tag::new("end").unwrap())
    };
    store.create(&new).await.unwrap();
    let config = SegmentConfig {
        switch_wait: std::time::Duration::from_secs(2),
        ..SegmentConfig::default()
    };
    let a = SegmentAllocator::new(store.clone(), Arc::new(SystemClock::new()), config);
    a.init().await.expect("init");
    let mut ids = Vec::new();
    let err = loop {
        match a.next_id("end").await {
            Ok(id) => ids.push(id),
            Err(e) => break e,
        }
    };
    // The doubled step (200) did not fit after the first segment; the rest was still issued.
    assert_eq!(ids, (start..i64::MAX).collect::<Vec<_>>());
    assert!(matches!(err, leaf_core::Error::Exhausted(_)), "{err}");
    let again = a.next_ids("end", 5).await;
    assert!(
        matches!(again, Err(leaf_core::Error::Exhausted(_))),
        "{again:?}"
    );
    let row = store.get(&Tag::new("end").unwrap()).await.unwrap().unwrap();
    assert_eq!(row.max_id, i64::MAX);
}
