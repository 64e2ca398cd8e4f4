//! The tag list and what the allocator reports: refreshes, listing filters, batches, input checks, warm-up, snapshots, observers and exhaustion.

use super::*;

#[tokio::test]
async fn refresh_ignores_an_empty_list_and_drops_vanished_tags() {
    let store = RecordingStore::with_tags([("a", 10), ("b", 10)]);
    let alloc = allocator(&store, system(), patient()).await;
    let cached = |alloc: &SegmentAllocator| -> Vec<String> {
        alloc.snapshot().iter().map(|s| s.tag.to_string()).collect()
    };
    assert_eq!(cached(&alloc), ["a", "b"]);
    let before = alloc.next_id("b").await.unwrap();

    store.set_listed(Some(&[]));
    alloc.refresh_tags().await.unwrap();
    assert_eq!(cached(&alloc), ["a", "b"], "an empty list removes nothing");

    store.set_listed(Some(&["a"]));
    alloc.refresh_tags().await.unwrap();
    assert_eq!(cached(&alloc), ["a"], "b vanished");
    let gone = alloc.next_id("b").await;
    assert!(matches!(gone, Err(Error::NotFound(_))), "{gone:?}");

    store.set_listed(None);
    store
        .create(&NewTag::new(Tag::new("c").unwrap()))
        .await
        .unwrap();
    alloc.refresh_tags().await.unwrap();
    assert_eq!(cached(&alloc), ["a", "b", "c"]);
    assert!(!snap(&alloc, "c").initialized, "segments load on first use");
    let after = alloc.next_id("b").await.unwrap();
    assert!(after > before, "a re-added tag starts past its old segment");
}

#[tokio::test]
async fn a_listing_filter_keeps_other_rows_out_of_the_cache() {
    let store = RecordingStore::with_tags([("a", 10), ("order@", 10), ("order@20261127", 10)]);
    let alloc = SegmentAllocator::new(store.clone(), system(), patient())
        .with_listing_filter(|name| !name.contains('@'));
    alloc.init().await.unwrap();
    let cached = |alloc: &SegmentAllocator| -> Vec<String> {
        alloc.snapshot().iter().map(|s| s.tag.to_string()).collect()
    };
    assert_eq!(cached(&alloc), ["a"]);
    store
        .create(&NewTag::new(Tag::new("order@20261128").unwrap()))
        .await
        .unwrap();
    alloc.refresh_tags().await.unwrap();
    assert_eq!(
        cached(&alloc),
        ["a"],
        "the refresh filters as the start did"
    );
}

#[tokio::test]
async fn batches_are_ascending_unique_and_span_segments() {
    let clock = ManualClock::new(0);
    let store = RecordingStore::with_tags([("t", 10), ("u", 10)]);
    let config = SegmentConfig {
        max_step: 10,
        ..patient()
    };
    let alloc = allocator(&store, Arc::new(clock), config).await;
    let check = |ids: &[i64], n: usize, tag: &str| {
        assert_eq!(ids.len(), n);
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "ascending: {ids:?}");
        assert!(ids.iter().all(|id| store.allocated(tag, *id)), "{ids:?}");
    };

    let mut singles = Vec::new();
    for _ in 0..7 {
        singles.push(alloc.next_id("t").await.unwrap());
    }
    let batch = alloc.next_ids("t", 10).await.unwrap();
    check(&batch, 10, "t");
    assert_eq!(
        batch,
        (8..18).collect::<Vec<_>>(),
        "3 from the first segment, 7 from the next"
    );
    assert!(batch[0] > singles[6]);

    let big = alloc.next_ids("u", 35).await.unwrap();
    check(&big, 35, "u");
    assert!(
        store.ranges("u").len() >= 4,
        "larger than one step: several segments"
    );
    let more = alloc.next_ids("u", 1).await.unwrap();
    assert!(more[0] > big[34]);
}

#[tokio::test]
async fn malformed_tags_and_counts_are_invalid_input() {
    let store = RecordingStore::with_tags([("t", 10)]);
    let alloc = allocator(&store, system(), patient()).await;
    let long = "x".repeat(129);
    for bad in ["a/b", "", "tab\there", long.as_str()] {
        let r = alloc.next_id(bad).await;
        assert!(matches!(r, Err(Error::InvalidInput(_))), "{bad:?}: {r:?}");
        let r = alloc.next_ids(bad, 2).await;
        assert!(matches!(r, Err(Error::InvalidInput(_))), "{bad:?}: {r:?}");
    }
    assert!(matches!(
        alloc.next_ids("t", 0).await,
        Err(Error::InvalidInput(_))
    ));
    assert_eq!(
        store.mem.lookups(),
        0,
        "malformed tags never reach the store"
    );
}

#[tokio::test]
async fn warm_loads_in_the_background_and_recently_used_tracks_use() {
    let clock = ManualClock::new(0);
    let store = RecordingStore::with_tags([("a", 100), ("b", 100), ("c", 100)]);
    let alloc = allocator(&store, Arc::new(clock.clone()), patient()).await;
    alloc.warm(vec![
        Tag::new("a").unwrap(),
        Tag::new("b").unwrap(),
        Tag::new("gone").unwrap(),
    ]);
    wait_for("the warm loads", || store.mem.allocations() == 2).await;
    wait_for("both tags initialised", || {
        snap(&alloc, "a").initialized && snap(&alloc, "b").initialized
    })
    .await;
    assert!(!snap(&alloc, "c").initialized);
    assert!(
        alloc.recently_used(Duration::from_secs(60)).is_empty(),
        "warming is not use"
    );

    assert_eq!(alloc.next_id("a").await.unwrap(), 1);
    assert_eq!(
        store.mem.allocations(),
        2,
        "the first request did not wait on the store"
    );
    let tags = |v: Vec<Tag>| v.iter().map(|t| t.to_string()).collect::<Vec<_>>();
    assert_eq!(tags(alloc.recently_used(Duration::from_secs(60))), ["a"]);

    clock.advance(Duration::from_secs(120));
    alloc.next_id("b").await.unwrap();
    assert_eq!(tags(alloc.recently_used(Duration::from_secs(60))), ["b"]);
    assert_eq!(
        tags(alloc.recently_used(Duration::from_secs(3600))),
        ["a", "b"]
    );
}

#[tokio::test]
async fn snapshot_reports_buffers_rate_and_loads() {
    let clock = ManualClock::new(0);
    let store = RecordingStore::with_tags([("t", 1000)]);
    let alloc = allocator(&store, Arc::new(clock.clone()), patient()).await;
    let fresh = snap(&alloc, "t");
    assert!(!fresh.initialized && fresh.buffers == [None, None] && fresh.remaining == 0);

    alloc.next_ids("t", 200).await.unwrap();
    wait_for("the preload", || snap(&alloc, "t").next_ready).await;
    clock.advance(Duration::from_secs(2));
    let s = snap(&alloc, "t");
    let cur = s.buffers[s.current].expect("current buffer");
    let next = s.buffers[1 - s.current].expect("next buffer");
    assert_eq!((cur.value, cur.max, cur.step), (201, 1001, 1000));
    assert_eq!((next.value, next.max, next.step), (1001, 3001, 2000));
    assert_eq!(s.remaining, 800 + 2000);
    assert_eq!(s.step, 2000);
    assert_eq!((s.loads_ok, s.loads_failed), (2, 0));
    assert_eq!(s.ids_per_sec, 100.0);
    assert_eq!(s.buffered_secs, Some(28.0));
}

#[derive(Debug, Default)]
struct CountingObserver {
    ok: AtomicU64,
    failed: AtomicU64,
}

impl LoadObserver for CountingObserver {
    fn on_load(&self, tag: &Tag, ok: bool, _took: Duration) {
        assert_eq!(tag.as_str(), "t");
        if ok { &self.ok } else { &self.failed }.fetch_add(1, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn the_observer_sees_every_load() {
    let store = RecordingStore::with_tags([("t", 10)]);
    let observer = Arc::new(CountingObserver::default());
    let alloc =
        SegmentAllocator::new(store.clone(), system(), patient()).with_observer(observer.clone());
    alloc.init().await.unwrap();
    store.mem.fail(true);
    assert!(alloc.next_id("t").await.is_err());
    store.mem.fail(false);
    alloc.next_id("t").await.unwrap();
    alloc.next_id("t").await.unwrap();
    wait_for("the preload", || observer.ok.load(Ordering::SeqCst) == 2).await;
    assert_eq!(observer.failed.load(Ordering::SeqCst), 1);
}

#[test]
fn request_futures_are_send() {
    fn send<T: Send>(_: &T) {}
    let store = RecordingStore::with_tags([("t", 10)]);
    let alloc = SegmentAllocator::new(store, system(), SegmentConfig::default());
    let one = alloc.next_id("t");
    let many = alloc.next_ids("t", 2);
    let refresh = alloc.refresh_tags();
    let init = alloc.init();
    let handle = alloc.handle("t");
    send(&handle);
    send(&one);
    send(&many);
    send(&refresh);
    send(&init);
}

#[tokio::test]
async fn the_fast_path_completes_on_the_first_poll() {
    use std::future::Future;
    use std::task::{Context, Poll, Waker};

    let store = RecordingStore::with_tags([("t", 1000), ("u", 1000)]);
    let alloc = allocator(&store, system(), patient()).await;
    assert_eq!(alloc.next_id("t").await.unwrap(), 1);
    assert_eq!(alloc.next_id("u").await.unwrap(), 1);
    let mut cx = Context::from_waker(Waker::noop());
    // The same tag again, then a different one: both served without waiting.
    for (tag, expect) in [("u", 2), ("u", 3), ("t", 2), ("u", 4)] {
        let mut fut = std::pin::pin!(alloc.next_id(tag));
        match fut.as_mut().poll(&mut cx) {
            Poll::Ready(r) => assert_eq!(r.unwrap(), expect, "{tag}"),
            Poll::Pending => panic!("{tag}: the fast path waited"),
        }
    }
}

async fn create_at(store: &RecordingStore, tag: &str, max_id: i64, step: i64) {
    let new = NewTag {
        max_id,
        step,
        ..NewTag::new(Tag::new(tag).unwrap())
    };
    store.create(&new).await.unwrap();
}

#[tokio::test]
async fn every_id_up_to_i64_max_is_issued_then_the_tag_is_exhausted() {
    let store = RecordingStore::with_tags([]);
    let start = i64::MAX - 250;
    // Step 100 fits; the doubled preload step (200) is more than is left after the first
    // segment (150).
    create_at(&store, "end", start, 100).await;
    create_at(&store, "spent", i64::MAX, 100).await;
    let config = SegmentConfig {
        switch_wait: Duration::from_secs(2),
        ..Default::default()
    };
    let alloc = allocator(&store, system(), config).await;

    let mut ids = Vec::new();
    let err = loop {
        match alloc.next_id("end").await {
            Ok(id) => ids.push(id),
            Err(e) => break e,
        }
    };
    assert_eq!(ids, (start..i64::MAX).collect::<Vec<_>>());
    assert!(matches!(err, Error::Exhausted(_)), "{err}");
    assert!(err.to_string().contains("exhausted"), "{err}");

    // Remembered: no request goes to the store again.
    let allocations = store.mem.allocations();
    for _ in 0..50 {
        let r = alloc.next_id("end").await;
        assert!(matches!(r, Err(Error::Exhausted(_))), "{r:?}");
    }
    let r = alloc.next_ids("end", 10).await;
    assert!(matches!(r, Err(Error::Exhausted(_))), "{r:?}");
    assert_eq!(store.mem.allocations(), allocations);

    // A tag exhausted at its first load is remembered the same way.
    for _ in 0..3 {
        let r = alloc.next_id("spent").await;
        assert!(matches!(r, Err(Error::Exhausted(_))), "{r:?}");
    }
    assert_eq!(store.mem.allocations(), allocations + 1);

    // A refresh (or a change of the row, through `forget_miss`) lets the store answer again.
    alloc.refresh_tags().await.unwrap();
    let r = alloc.next_id("end").await;
    assert!(matches!(r, Err(Error::Exhausted(_))), "{r:?}");
    assert_eq!(store.mem.allocations(), allocations + 2);
    alloc.forget_miss("spent");
    let r = alloc.next_id("spent").await;
    assert!(matches!(r, Err(Error::Exhausted(_))), "{r:?}");
    assert_eq!(store.mem.allocations(), allocations + 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_handle_shares_the_tags_cursor_and_completes_on_the_first_poll() {
    use std::future::Future;
    use std::task::{Context, Poll, Waker};

    let store = RecordingStore::with_tags([("t", 10), ("u", 10)]);
    let alloc = allocator(&store, system(), patient()).await;
    let unknown = alloc.handle("nope").await;
    assert!(matches!(unknown, Err(Error::NotFound(_))), "{unknown:?}");
    let bad = alloc.handle("").await;
    assert!(matches!(bad, Err(Error::InvalidInput(_))), "{bad:?}");

    let h = alloc.handle("t").await.unwrap();
    assert_eq!(h.tag().as_str(), "t");
    // The first request loads the first segment; handle and name take from one cursor.
    assert_eq!(h.next_id().await.unwrap(), 1);
    assert_eq!(alloc.next_id("t").await.unwrap(), 2);
    assert_eq!(h.next_id().await.unwrap(), 3);
    assert_eq!(alloc.next_id("u").await.unwrap(), 1);
    let mut cx = Context::from_waker(Waker::noop());
    for expect in [4, 5] {
        let mut fut = std::pin::pin!(h.next_id());
        match fut.as_mut().poll(&mut cx) {
            Poll::Ready(r) => assert_eq!(r.unwrap(), expect),
            Poll::Pending => panic!("the handle's fast path waited"),
        }
    }
    // Across segment switches, from several tasks at once: unique, inside allocated ranges.
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let h = h.clone();
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for _ in 0..500 {
                ids.push(h.next_id().await.unwrap());
            }
            ids.extend(h.next_ids(25).await.unwrap());
            ids
        }));
    }
    let mut seen = HashSet::new();
    for t in tasks {
        let ids = t.await.unwrap();
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "ascending per task");
        for id in ids {
            assert!(
                store.allocated("t", id),
                "{id} outside the allocated ranges"
            );
            assert!(seen.insert(id), "{id} issued twice");
        }
    }
    assert_eq!(seen.len(), 4 * 525);
    let none = h.next_ids(0).await;
    assert!(matches!(none, Err(Error::InvalidInput(_))), "{none:?}");

    // A refresh drops the tag: the handle fails as the name does, and serves again, past the
    // old IDs, once the tag is back.
    let last = h.next_id().await.unwrap();
    store.set_listed(Some(&["u"]));
    alloc.refresh_tags().await.unwrap();
    let gone = h.next_id().await;
    assert!(matches!(gone, Err(Error::NotFound(_))), "{gone:?}");
    store.set_listed(None);
    alloc.refresh_tags().await.unwrap();
    let back = h.next_id().await.unwrap();
    assert!(back > last, "{back} after {last}");
    assert!(h.next_ids(3).await.unwrap()[0] > back);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn local_handles_take_chunks_of_the_tags_segment_and_never_share_an_id() {
    let store = RecordingStore::with_tags([("t", 100)]);
    let alloc = allocator(&store, system(), patient()).await;
    let h = alloc.handle("t").await.unwrap();
    for chunk in [0, leaf_segment::MAX_CHUNK + 1] {
        let r = h.local(chunk);
        assert!(matches!(r, Err(Error::InvalidInput(_))), "{chunk}: {r:?}");
    }
    // A chunk is one step on the tag's cursor: the shared handle goes on above it.
    let mut local = h.local(16).unwrap();
    assert_eq!(local.next_id().await.unwrap(), 1);
    assert_eq!(local.remaining(), 15);
    assert_eq!(h.next_id().await.unwrap(), 17);
    assert_eq!(local.next_id().await.unwrap(), 2);
    // Tasks with their own local handle (chunks of 16 and 64, with segments of 100: chunks
    // are cut at a segment's end) and one on the shared handle, across many switches.
    let mut tasks = Vec::new();
    for chunk in [16, 64, 64, 0] {
        let h = h.clone();
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            if chunk == 0 {
                for _ in 0..2000 {
                    ids.push(h.next_id().await.unwrap());
                }
            } else {
                let mut local = h.local(chunk).unwrap();
                for _ in 0..2000 {
                    ids.push(local.next_id().await.unwrap());
                }
            }
            ids
        }));
    }
    let mut seen: HashSet<i64> = [1, 2, 17].into();
    for t in tasks {
        let ids = t.await.unwrap();
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "ascending per handle");
        for id in ids {
            assert!(
                store.allocated("t", id),
                "{id} outside the allocated ranges"
            );
            assert!(seen.insert(id), "{id} issued twice");
        }
    }
    assert_eq!(seen.len(), 3 + 4 * 2000);
    // What the first local handle still holds comes after what it gave, whatever was taken
    // since.
    let more = local.next_id().await.unwrap();
    assert_eq!(more, 3);
    assert!(!seen.contains(&more));
}

/// What [`Scripted`] answers to its next allocations, before it passes them to its store.
#[derive(Debug)]
enum Scripted {
    /// The first allocation it made, again (a lowered `max_id`, an older copy of the store).
    Repeat,
    /// `Exhausted`.
    Exhausted,
}

/// A store whose next allocations follow a script, then the in-memory store's.
#[derive(Debug, Default)]
struct ScriptedStore {
    mem: leaf_testkit::MemoryStore,
    script: std::sync::Mutex<std::collections::VecDeque<Scripted>>,
    first: std::sync::Mutex<Option<leaf_core::Allocation>>,
}

impl ScriptedStore {
    fn then(&self, answers: impl IntoIterator<Item = Scripted>) {
        self.script.lock().unwrap().extend(answers);
    }
}

#[async_trait::async_trait]
impl SegmentStore for ScriptedStore {
    fn kind(&self) -> &'static str {
        "scripted"
    }
    fn capabilities(&self) -> leaf_core::StoreCapabilities {
        self.mem.capabilities()
    }
    async fn allocate(
        &self,
        tag: &Tag,
        step: Option<i64>,
    ) -> leaf_core::Result<leaf_core::Allocation> {
        let next = self.script.lock().unwrap().pop_front();
        match next {
            Some(Scripted::Repeat) => Ok(self.first.lock().unwrap().clone().expect("a first")),
            Some(Scripted::Exhausted) => Err(Error::Exhausted(format!("tag {tag} ran out"))),
            None => {
                let a = self.mem.allocate(tag, step).await?;
                self.first.lock().unwrap().get_or_insert(a.clone());
                Ok(a)
            }
        }
    }
    async fn get(&self, tag: &Tag) -> leaf_core::Result<Option<leaf_core::TagRecord>> {
        self.mem.get(tag).await
    }
    async fn list(&self) -> leaf_core::Result<Vec<leaf_core::TagRecord>> {
        self.mem.list().await
    }
    async fn create(&self, new: &NewTag) -> leaf_core::Result<leaf_core::TagRecord> {
        self.mem.create(new).await
    }
    async fn update(
        &self,
        tag: &Tag,
        update: &leaf_core::TagUpdate,
    ) -> leaf_core::Result<leaf_core::TagRecord> {
        self.mem.update(tag, update).await
    }
}

/// A store that answers a range it handed out before (its `max_id` lowered, an older copy
/// restored, another store behind the same name): the allocator refuses it and hands out no ID
/// twice; serving goes on once the store answers above it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_range_below_one_handed_out_is_refused_and_no_id_repeats() {
    let store = Arc::new(ScriptedStore {
        mem: leaf_testkit::MemoryStore::with_tags([("t", 10)]),
        ..ScriptedStore::default()
    });
    let alloc = SegmentAllocator::new(store.clone(), system(), patient());
    alloc.init().await.unwrap();
    let mut seen = HashSet::new();
    for _ in 0..10 {
        assert!(seen.insert(alloc.next_id("t").await.unwrap()));
    }
    // Every later load answers the first range again, three times, then the store's own.
    store.then([Scripted::Repeat, Scripted::Repeat, Scripted::Repeat]);
    for _ in 0..30 {
        let id = alloc
            .next_id("t")
            .await
            .expect("served once the store answers above");
        assert!(seen.insert(id), "id {id} handed out twice");
    }
    let s = snap(&alloc, "t");
    assert!(
        s.loads_failed >= 3,
        "the repeated ranges were not refused: {s:?}"
    );
}

/// An exhausted tag is asked about again once `miss_ttl` has passed, without `forget_miss` (a
/// client of the servers has nobody to call it): a row that was changed meanwhile serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exhausted_tag_is_asked_again_after_the_miss_ttl() {
    let store = Arc::new(ScriptedStore {
        mem: leaf_testkit::MemoryStore::with_tags([("t", 10)]),
        ..ScriptedStore::default()
    });
    let clock = Arc::new(ManualClock::new(0));
    let config = SegmentConfig {
        miss_ttl: Duration::from_secs(2),
        ..patient()
    };
    let alloc = SegmentAllocator::new(store.clone(), clock.clone(), config);
    store.then([Scripted::Exhausted]);
    let e = alloc.next_id("t").await.unwrap_err();
    assert!(matches!(e, Error::Exhausted(_)), "{e}");
    // Within the miss TTL the store is not asked again.
    clock.advance(Duration::from_secs(1));
    let e = alloc.next_id("t").await.unwrap_err();
    assert!(matches!(e, Error::Exhausted(_)), "{e}");
    assert_eq!(store.mem.allocations(), 0);
    clock.advance(Duration::from_secs(1));
    assert_eq!(alloc.next_id("t").await.unwrap(), 1);
}
