//! `MemoryStore`: an in-memory `SegmentStore` with fault injection, for the algorithm tests and
//! as the reference backend of the conformance suite.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use async_trait::async_trait;
use leaf_core::clamp_step;
use leaf_core::{
    Allocation, Error, NewTag, Result, SegmentStore, StoreCapabilities, Tag, TagRecord, TagUpdate,
};
use tokio::sync::watch;

/// An in-memory store. Faults are switched on and off by the test: [`fail`](Self::fail) makes
/// every call return a retryable backend error, [`pause`](Self::pause) makes allocations wait
/// until [`resume`](Self::resume).
#[derive(Debug)]
pub struct MemoryStore {
    rows: Mutex<BTreeMap<Tag, TagRecord>>,
    failing: AtomicBool,
    paused: watch::Sender<bool>,
    allocations: AtomicU64,
    lookups: AtomicU64,
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore {
            rows: Mutex::default(),
            failing: AtomicBool::new(false),
            paused: watch::channel(false).0,
            allocations: AtomicU64::new(0),
            lookups: AtomicU64::new(0),
        }
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// A store holding `tags`, each with `max_id` 1 and the given step.
    pub fn with_tags<'a>(tags: impl IntoIterator<Item = (&'a str, i64)>) -> Self {
        let s = Self::new();
        {
            let mut rows = s.rows.lock().unwrap();
            for (t, step) in tags {
                let tag = Tag::new(t).expect("test tags are valid");
                rows.insert(tag.clone(), record(tag, 1, step, None));
            }
        }
        s
    }

    /// Writes `record` as it is, over any row of its tag: a test's restore of an older copy.
    pub fn put(&self, record: TagRecord) {
        self.rows.lock().unwrap().insert(record.tag.clone(), record);
    }

    /// Makes every call fail (`true`) or work again (`false`).
    pub fn fail(&self, on: bool) {
        self.failing.store(on, Ordering::SeqCst);
    }

    /// Makes allocations wait until [`resume`](Self::resume).
    pub fn pause(&self) {
        self.paused.send_replace(true);
    }

    /// Lets paused allocations go on.
    pub fn resume(&self) {
        self.paused.send_replace(false);
    }

    /// How many allocations reached the store (successful or not).
    pub fn allocations(&self) -> u64 {
        self.allocations.load(Ordering::SeqCst)
    }

    /// How many single-tag lookups (`get`) reached the store.
    pub fn lookups(&self) -> u64 {
        self.lookups.load(Ordering::SeqCst)
    }

    fn check(&self) -> Result<()> {
        if self.failing.load(Ordering::SeqCst) {
            Err(Error::backend("memory", "injected store failure"))
        } else {
            Ok(())
        }
    }
}

fn record(tag: Tag, max_id: i64, step: i64, description: Option<String>) -> TagRecord {
    TagRecord {
        tag,
        max_id,
        step,
        description,
        updated_at_ms: None,
    }
}

#[async_trait]
impl SegmentStore for MemoryStore {
    fn kind(&self) -> &'static str {
        "memory"
    }

    fn capabilities(&self) -> StoreCapabilities {
        StoreCapabilities::new(false, false)
    }

    async fn allocate(&self, tag: &Tag, step: Option<i64>) -> Result<Allocation> {
        self.allocations.fetch_add(1, Ordering::SeqCst);
        let mut paused = self.paused.subscribe();
        // The sender lives in `self`, so the channel cannot close while we wait.
        let _ = paused.wait_for(|p| !*p).await;
        self.check()?;
        if let Some(s) = step {
            leaf_core::validate_step(s)?;
        }
        let mut rows = self.rows.lock().unwrap();
        let row = rows
            .get_mut(tag)
            .ok_or_else(|| Error::NotFound(format!("tag {tag}")))?;
        let used_step = clamp_step(tag, row.max_id, step.unwrap_or(row.step))?;
        row.max_id += used_step;
        Ok(Allocation {
            tag: tag.clone(),
            max_id: row.max_id,
            step: row.step,
            used_step,
        })
    }

    async fn get(&self, tag: &Tag) -> Result<Option<TagRecord>> {
        self.lookups.fetch_add(1, Ordering::SeqCst);
        self.check()?;
        Ok(self.rows.lock().unwrap().get(tag).cloned())
    }

    async fn list(&self) -> Result<Vec<TagRecord>> {
        self.check()?;
        Ok(self.rows.lock().unwrap().values().cloned().collect())
    }

    async fn create(&self, new: &NewTag) -> Result<TagRecord> {
        self.check()?;
        new.validate()?;
        let mut rows = self.rows.lock().unwrap();
        if rows.contains_key(&new.tag) {
            return Err(Error::AlreadyExists(format!("tag {}", new.tag)));
        }
        let r = record(
            new.tag.clone(),
            new.max_id,
            new.step,
            new.description.clone(),
        );
        rows.insert(new.tag.clone(), r.clone());
        Ok(r)
    }

    async fn update(&self, tag: &Tag, update: &TagUpdate) -> Result<TagRecord> {
        self.check()?;
        update.validate()?;
        let mut rows = self.rows.lock().unwrap();
        let row = rows
            .get_mut(tag)
            .ok_or_else(|| Error::NotFound(format!("tag {tag}")))?;
        if let Some(step) = update.step {
            row.step = step;
        }
        if let Some(d) = &update.description {
            row.description = Some(d.clone());
        }
        Ok(row.clone())
    }
}

/// A fresh [`MemoryStore`] as a [`StoreFixture`](crate::StoreFixture): one process, one map,
/// so the second handle is the same store.
#[derive(Debug, Default)]
pub struct MemoryFixture(pub std::sync::Arc<MemoryStore>);

#[async_trait]
impl crate::StoreFixture for MemoryFixture {
    async fn store(&self) -> std::sync::Arc<dyn SegmentStore> {
        self.0.clone()
    }
    async fn another_handle(&self) -> std::sync::Arc<dyn SegmentStore> {
        self.0.clone()
    }
}
