//! Test support: a store that records what it allocated and can hide tags from its listing.

use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use leaf_core::{
    Allocation, Clock, NewTag, Result, SegmentStore, StoreCapabilities, Tag, TagRecord, TagUpdate,
};
use leaf_segment::{SegmentAllocator, SegmentConfig};
use leaf_testkit::MemoryStore;

/// One successful allocation and the step the allocator asked for.
#[derive(Clone, Debug)]
pub(crate) struct Call {
    pub(crate) step_arg: Option<i64>,
    pub(crate) alloc: Allocation,
}

/// Wraps `MemoryStore`, recording every successful allocation.
#[derive(Debug, Default)]
pub(crate) struct RecordingStore {
    pub(crate) mem: MemoryStore,
    calls: Mutex<Vec<Call>>,
    listed: Mutex<Option<Vec<Tag>>>,
}

impl RecordingStore {
    pub(crate) fn with_tags<'a>(tags: impl IntoIterator<Item = (&'a str, i64)>) -> Arc<Self> {
        Arc::new(RecordingStore {
            mem: MemoryStore::with_tags(tags),
            ..Default::default()
        })
    }

    pub(crate) fn calls(&self, tag: &str) -> Vec<Call> {
        let calls = self.calls.lock().unwrap();
        calls
            .iter()
            .filter(|c| c.alloc.tag.as_str() == tag)
            .cloned()
            .collect()
    }

    pub(crate) fn ranges(&self, tag: &str) -> Vec<Range<i64>> {
        self.calls(tag).iter().map(|c| c.alloc.range()).collect()
    }

    pub(crate) fn step_args(&self, tag: &str) -> Vec<Option<i64>> {
        self.calls(tag).iter().map(|c| c.step_arg).collect()
    }

    /// Makes the store show exactly these of its rows (`None`: all of them), as if the others had
    /// been deleted.
    pub(crate) fn set_listed(&self, tags: Option<&[&str]>) {
        *self.listed.lock().unwrap() =
            tags.map(|t| t.iter().map(|s| Tag::new(s).unwrap()).collect());
    }

    /// Whether `id` lies in a range the store allocated for `tag`.
    pub(crate) fn allocated(&self, tag: &str, id: i64) -> bool {
        self.ranges(tag).iter().any(|r| r.contains(&id))
    }
}

#[async_trait]
impl SegmentStore for RecordingStore {
    fn kind(&self) -> &'static str {
        "recording"
    }

    fn capabilities(&self) -> StoreCapabilities {
        self.mem.capabilities()
    }

    async fn allocate(&self, tag: &Tag, step: Option<i64>) -> Result<Allocation> {
        let alloc = self.mem.allocate(tag, step).await?;
        self.calls.lock().unwrap().push(Call {
            step_arg: step,
            alloc: alloc.clone(),
        });
        Ok(alloc)
    }

    async fn get(&self, tag: &Tag) -> Result<Option<TagRecord>> {
        let row = self.mem.get(tag).await?;
        let listed = self.listed.lock().unwrap().clone();
        Ok(row.filter(|r| listed.is_none_or(|keep| keep.contains(&r.tag))))
    }

    async fn list(&self) -> Result<Vec<TagRecord>> {
        let rows = self.mem.list().await?;
        let listed = self.listed.lock().unwrap().clone();
        Ok(match listed {
            Some(keep) => rows.into_iter().filter(|r| keep.contains(&r.tag)).collect(),
            None => rows,
        })
    }

    async fn create(&self, new: &NewTag) -> Result<TagRecord> {
        self.mem.create(new).await
    }

    async fn update(&self, tag: &Tag, update: &TagUpdate) -> Result<TagRecord> {
        self.mem.update(tag, update).await
    }
}

/// An initialised allocator over `store`.
pub(crate) async fn allocator(
    store: &Arc<RecordingStore>,
    clock: Arc<dyn Clock>,
    config: SegmentConfig,
) -> SegmentAllocator {
    let a = SegmentAllocator::new(store.clone(), clock, config);
    a.init().await.expect("init");
    a
}

/// A config whose switch wait is generous, for tests that are not about it.
pub(crate) fn patient() -> SegmentConfig {
    SegmentConfig {
        switch_wait: Duration::from_secs(5),
        ..Default::default()
    }
}

/// Waits (async, bounded) until `cond` holds.
pub(crate) async fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let waited = tokio::time::timeout(Duration::from_secs(10), async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "timed out waiting for {what}");
}

/// The snapshot of one tag.
pub(crate) fn snap(a: &SegmentAllocator, tag: &str) -> leaf_segment::TagSnapshot {
    a.snapshot()
        .into_iter()
        .find(|s| s.tag.as_str() == tag)
        .unwrap_or_else(|| panic!("tag {tag} not cached"))
}
