//! The allocator's own unit tests; its behaviour is tested in `tests/allocator/`.

use leaf_core::ManualClock;
use leaf_testkit::MemoryStore;

use super::*;

/// A tag dropped from an allocator of transient tags leaves no entry behind (issue 32: a
/// business tag's row per day), and its name still serves, from a new segment.
#[tokio::test]
async fn a_dropped_transient_tag_frees_its_entry() {
    let store = Arc::new(MemoryStore::with_tags([("a", 10), ("b", 10)]));
    let clock = Arc::new(ManualClock::new(0));
    let alloc = SegmentAllocator::new(store, clock, SegmentConfig::default()).with_transient_tags();
    assert_eq!(alloc.next_id("a").await.unwrap(), 1);
    assert_eq!(alloc.next_id("b").await.unwrap(), 1);
    let entry = Arc::downgrade(&alloc.inner.lookup("a").unwrap());
    assert_eq!(alloc.drop_tags(|t| t == "a"), [Tag::new("a").unwrap()]);
    assert!(alloc.drop_tags(|t| t == "a").is_empty(), "dropped once");
    // The thread's copy of the map follows the next lookup.
    assert_eq!(alloc.next_id("b").await.unwrap(), 2);
    assert!(entry.upgrade().is_none(), "the dropped entry is still held");
    let tags: Vec<Tag> = alloc.snapshot().into_iter().map(|s| s.tag).collect();
    assert_eq!(tags, [Tag::new("b").unwrap()]);
    assert_eq!(alloc.next_id("a").await.unwrap(), 11, "a new segment");
}

#[test]
fn errors_are_copied_by_kind() {
    let check = |e: Error| {
        let c = clone_error(&e);
        assert_eq!(c.to_string(), e.to_string());
        assert_eq!(c.is_retryable(), e.is_retryable());
    };
    check(Error::NotFound("tag t".into()));
    check(Error::Exhausted("tag t".into()));
    check(Error::backend("sqlite", "database is locked"));
    check(Error::ClockMovedBackwards {
        behind_ms: 3,
        waited: false,
    });
}
