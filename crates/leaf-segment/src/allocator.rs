//! `SegmentAllocator`: the tag cache, the lock-free hot path, and the loads behind it.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, Weak};
use std::time::Duration;

use arc_swap::ArcSwap;
use leaf_core::{Clock, Error, Result, SegmentStore, Tag};
use tokio::runtime::Handle;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::arena::{self, Arena};
use crate::entry::{Seg, Slow, TagEntry, Take};
use crate::next_id::{NextId, SLOW, SlowFuture, Source};
use crate::step::next_step;
use crate::tags::{self, Recently, TagMap};
use crate::{LoadObserver, SegmentConfig, StepRule, TagSnapshot};

mod load;
mod refresh;

type Hasher = foldhash::fast::RandomState;

/// Gives each allocator an identity for the per-thread map cache.
static NEXT_ALLOCATOR_ID: AtomicU64 = AtomicU64::new(1);

/// Bound on remembered unknown tags. A flood of distinct names beyond it is not remembered:
/// that costs store lookups, never unbounded memory.
const MAX_MISSES: usize = 65_536;
/// The index of an entry kept out of the arena: no slot has it, so the hot path's by-index
/// step misses and the hashed lookup serves it.
const UNINDEXED: usize = usize::MAX;
/// The first retry of a failed background load waits this long (then doubles).
const FIRST_BACKOFF: Duration = Duration::from_millis(50);

/// Which rows of the store's listing are an allocator's tags.
type Keep = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// A by-name request: the allocator and the tag it names.
#[derive(Clone, Copy)]
struct ByName<'a> {
    alloc: &'a SegmentAllocator,
    tag: &'a str,
}

impl<'a> Source<'a> for ByName<'a> {
    #[inline(always)]
    fn fast(self) -> i64 {
        self.alloc.fast_one(self.tag)
    }

    #[cold]
    #[inline(never)]
    fn slow(self) -> SlowFuture<'a> {
        Box::pin(self.alloc.inner.next_id_slow(self.tag))
    }
}

/// Leaf's double-buffered segment allocator. Cheap to clone; clones share everything.
///
/// Must be used inside a Tokio runtime with the timer enabled: loads run as spawned tasks and the
/// switch wait is a Tokio timeout.
#[derive(Clone)]
pub struct SegmentAllocator {
    inner: Arc<Inner>,
    /// `inner.id`, one pointer hop closer to the hot path.
    id: u64,
}

pub(crate) struct Inner {
    id: u64,
    store: Arc<dyn SegmentStore>,
    clock: Arc<dyn Clock>,
    config: SegmentConfig,
    observer: RwLock<Option<Arc<dyn LoadObserver>>>,
    /// Sizes the loads instead of Leaf's dynamic step, when set.
    step_rule: RwLock<Option<Arc<dyn StepRule>>>,
    /// Which listed rows are this allocator's tags (`None`: all).
    listed: RwLock<Option<Keep>>,
    /// Whether new entries go to the arena (see `with_transient_tags`).
    indexed: AtomicBool,
    /// The tags in the cache. Replaced whole on change (rare); threads keep a copy
    /// (`tags::lookup`).
    tags: ArcSwap<TagMap>,
    /// Every entry ever created, by index (the hot path's way in).
    arena: Arena,
    /// Bumped after every store to `tags`.
    version: AtomicU64,
    /// Serialises writers of `tags`.
    map_write: Mutex<()>,
    misses: Mutex<Misses>,
}

/// Unknown tags and when to forget them (monotonic time).
#[derive(Default)]
struct Misses {
    until: HashMap<Tag, Duration, Hasher>,
    /// Bumped by every forget, so a lookup that raced with one does not record a stale miss.
    epoch: u64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn unknown(tag: &Tag) -> Error {
    Error::NotFound(format!("tag {tag}"))
}

/// A copy of a load's error for each request that waited on it (`Error` is not `Clone`).
fn clone_error(e: &Error) -> Error {
    match e {
        Error::NotFound(m) => Error::NotFound(m.clone()),
        Error::InvalidInput(m) => Error::InvalidInput(m.clone()),
        Error::AlreadyExists(m) => Error::AlreadyExists(m.clone()),
        Error::Unavailable(m) => Error::Unavailable(m.clone()),
        Error::LeaseLost(m) => Error::LeaseLost(m.clone()),
        Error::Exhausted(m) => Error::Exhausted(m.clone()),
        Error::Config(m) => Error::Config(m.clone()),
        Error::ClockMovedBackwards { behind_ms, waited } => Error::ClockMovedBackwards {
            behind_ms: *behind_ms,
            waited: *waited,
        },
        Error::Backend { backend, source } => Error::backend(backend, source.to_string()),
        other => Error::Unavailable(other.to_string()),
    }
}

impl SegmentAllocator {
    /// An allocator over `store`, timing its steps and waits with `clock`. No I/O happens until
    /// [`init`](Self::init) or the first request.
    pub fn new(store: Arc<dyn SegmentStore>, clock: Arc<dyn Clock>, config: SegmentConfig) -> Self {
        let id = NEXT_ALLOCATOR_ID.fetch_add(1, Ordering::Relaxed);
        SegmentAllocator {
            id,
            inner: Arc::new(Inner {
                id,
                store,
                clock,
                config,
                observer: RwLock::new(None),
                step_rule: RwLock::new(None),
                tags: ArcSwap::from_pointee(TagMap::default()),
                arena: Arena::default(),
                version: AtomicU64::new(0),
                map_write: Mutex::new(()),
                misses: Mutex::default(),
                listed: RwLock::new(None),
                indexed: AtomicBool::new(true),
            }),
        }
    }

    /// Takes only the rows for which `keep` is true from the store's list (start-up and the
    /// refresh): rows that other code counts in the same store (business tags' periods) stay
    /// out of the cache, the snapshots and the metrics. A row left out still answers when asked
    /// for by name.
    pub fn with_listing_filter(self, keep: impl Fn(&str) -> bool + Send + Sync + 'static) -> Self {
        *self
            .inner
            .listed
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(keep));
        self
    }

    /// For tags that come and go (a row per day, dropped with [`drop_tags`](Self::drop_tags)
    /// once over): their entries stay out of the append-only arena, so that a dropped tag's
    /// memory is freed. Their requests by name take the hashed lookup (a few tens of
    /// nanoseconds more); a [`handle`](Self::handle) is as fast as ever.
    pub fn with_transient_tags(self) -> Self {
        self.inner.indexed.store(false, Ordering::Relaxed);
        self
    }

    /// Drops the cached tags whose name `drop` is true of (their buffered IDs are skipped, never
    /// reissued: a later request loads a new segment), and gives them. A request in flight on
    /// a dropped tag finds it again by name.
    pub fn drop_tags(&self, drop: impl Fn(&str) -> bool) -> Vec<Tag> {
        let _writer = lock(&self.inner.map_write);
        let current = self.inner.tags.load_full();
        let mut map = TagMap::with_capacity(current.len());
        let mut dropped = Vec::new();
        for entry in current.entries() {
            if drop(entry.tag.as_str()) {
                entry.remove();
                dropped.push(entry.tag.clone());
            } else {
                map.insert(entry.clone());
            }
        }
        if !dropped.is_empty() {
            self.inner.publish_map(map);
        }
        dropped
    }

    /// Sizes every load with `rule` instead of Leaf's dynamic step (business tags grow a
    /// period's reservations with their use, up to each row's own cap).
    pub fn with_step_rule(self, rule: Arc<dyn StepRule>) -> Self {
        *self
            .inner
            .step_rule
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Some(rule);
        self
    }

    /// Reports every load attempt to `observer` (metrics).
    pub fn with_observer(self, observer: Arc<dyn LoadObserver>) -> Self {
        *self
            .inner
            .observer
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Some(observer);
        self
    }

    /// Loads the tag list, as Leaf's `init`. Segments load on first use (or via
    /// [`warm`](Self::warm)).
    pub async fn init(&self) -> Result<()> {
        self.inner.refresh_tags().await?;
        tracing::info!(
            store = self.inner.store.kind(),
            tags = self.inner.tags.load().len(),
            "segment allocator ready"
        );
        Ok(())
    }

    /// Re-reads the tag list every `refresh_interval` until the allocator is dropped or the task
    /// aborted. Needs a Tokio runtime (it panics outside one, as `tokio::spawn` does).
    pub fn spawn_refresher(&self) -> JoinHandle<()> {
        let weak = Arc::downgrade(&self.inner);
        let clock = self.inner.clock.clone();
        let every = self.inner.config.refresh_interval;
        tokio::spawn(async move {
            loop {
                clock.sleep(every).await;
                let Some(inner) = weak.upgrade() else {
                    return;
                };
                if let Err(e) = inner.refresh_tags().await {
                    tracing::warn!(error = %e, "refreshing the tag list failed; keeping the cached tags");
                }
                inner.sample_all();
            }
        })
    }

    /// Adds the store's new tags and drops the vanished ones. An empty list removes nothing (a
    /// store that answers with no rows is more likely broken than emptied).
    pub async fn refresh_tags(&self) -> Result<()> {
        self.inner.refresh_tags().await
    }

    /// The next ID of `tag`.
    ///
    /// `NotFound` for a tag the store does not know, `InvalidInput` for a malformed one,
    /// `Unavailable` when both segments are spent and the next does not arrive within
    /// `switch_wait`; the first load of a tag returns the store's own error.
    ///
    /// Used as an `async fn`; completes on its first poll unless it has to wait for a segment.
    /// A caller that asks for one tag over and over saves the name lookup with a
    /// [`handle`](Self::handle).
    pub fn next_id<'a>(&'a self, tag: &'a str) -> impl Future<Output = Result<i64>> + Send + 'a {
        NextId::new(ByName { alloc: self, tag })
    }

    /// `n` (at least 1) unique IDs of `tag` in ascending order. Each segment's share is taken
    /// with one atomic step; a batch larger than what is buffered spans segments.
    pub async fn next_ids(&self, tag: &str, n: usize) -> Result<Vec<i64>> {
        self.inner.next_ids(tag, n).await
    }

    /// The shared state, for `TagHandle`.
    pub(crate) fn inner(&self) -> &Arc<Inner> {
        &self.inner
    }

    /// Forgets what the store last said against `tag` (unknown, exhausted), so that the next
    /// request asks it again; the server calls it after creating or changing the tag.
    pub fn forget_miss(&self, tag: &str) {
        {
            let mut m = lock(&self.inner.misses);
            m.until.remove(tag);
            m.epoch += 1;
        }
        if let Some(entry) = self.inner.lookup(tag) {
            entry.lock().exhausted = None;
        }
    }

    /// Every cached tag's state, ordered by tag.
    pub fn snapshot(&self) -> Vec<TagSnapshot> {
        let map = self.inner.tags.load_full();
        let now = self.inner.clock.monotonic();
        let mut out: Vec<TagSnapshot> = map
            .entries()
            .map(|e| e.snapshot(&mut e.lock(), now))
            .collect();
        out.sort_by(|a, b| a.tag.cmp(&b.tag));
        out
    }

    /// The tags used within `within`, ordered (for a warm restart). Use is noticed when a sample
    /// is taken (loads, switches, snapshots, refresh ticks, this call), so a tag may be reported
    /// up to one refresh interval longer than `within`, never shorter.
    pub fn recently_used(&self, within: Duration) -> Vec<Tag> {
        let map = self.inner.tags.load_full();
        let now = self.inner.clock.monotonic();
        let mut tags: Vec<Tag> = map
            .entries()
            .filter(|e| {
                let mut s = e.lock();
                let issued = e.issued(&s);
                s.usage.sample(now, issued);
                s.usage
                    .last_change()
                    .is_some_and(|t| now.saturating_sub(t) <= within)
            })
            .map(|e| e.tag.clone())
            .collect();
        tags.sort();
        tags
    }

    /// Starts the first load of each of `tags` in the background (warm restart). Tags the store
    /// does not know are skipped.
    pub fn warm(&self, tags: Vec<Tag>) {
        let Ok(handle) = Handle::try_current() else {
            tracing::warn!("warming tags needs a tokio runtime; skipped");
            return;
        };
        let inner = self.inner.clone();
        handle.spawn(async move {
            for tag in tags {
                match inner.entry_for(tag.as_str()).await {
                    Ok(entry) => {
                        let mut s = entry.lock();
                        if !s.initialized
                            && !s.loading
                            && s.exhausted.is_none()
                            && let Err(e) = inner.begin_load(&entry, &mut s, true)
                        {
                            tracing::warn!(tag = %tag, error = %e, "cannot warm tag");
                        }
                    }
                    Err(e) => tracing::debug!(tag = %tag, error = %e, "not warming tag"),
                }
            }
        });
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn SegmentStore> {
        &self.inner.store
    }

    /// The clock it times steps and waits with.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    /// The configuration.
    pub fn config(&self) -> &SegmentConfig {
        &self.inner.config
    }

    /// The whole hot path: a comparison with the thread's last tag, and one `fetch_add`. No lock,
    /// no allocation, no clock. Returns the ID, or [`SLOW`].
    #[inline(always)]
    fn fast_one(&self, tag: &str) -> i64 {
        let entry = match tags::recently(self.id, tag) {
            Recently::Is(i) => self.inner.arena.get(i),
            Recently::Compare(i) => self.inner.arena.get(i).filter(|e| same_tag(e, tag)),
            Recently::Not => None,
        };
        let Some(entry) = entry else {
            return self.fast_lookup(tag);
        };
        self.inner.take_one(entry)
    }

    /// The fast path for a tag other than the thread's last one: a hashed lookup first.
    #[cold]
    #[inline(never)]
    fn fast_lookup(&self, tag: &str) -> i64 {
        let inner = &self.inner;
        // Acquire pairs with `publish_map`: a version seen implies its map is stored.
        let version = inner.version.load(Ordering::Acquire);
        let Some(index) = tags::lookup(self.id, version, || inner.tags.load_full(), tag) else {
            return SLOW;
        };
        let Some(entry) = inner.arena.get(arena::locate(index)) else {
            return SLOW;
        };
        tags::remember(self.id, tag, index);
        match entry.take(1) {
            Take::Got { start, preload, .. } => {
                if preload {
                    inner.request_preload(entry);
                }
                start
            }
            Take::Spent => SLOW,
        }
    }
}

#[inline(never)]
fn same_tag(entry: &TagEntry, tag: &str) -> bool {
    entry.tag.as_str() == tag
}

impl fmt::Debug for SegmentAllocator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SegmentAllocator")
            .field("store", &self.inner.store.kind())
            .field("tags", &self.inner.tags.load().len())
            .field("config", &self.inner.config)
            .finish()
    }
}

impl Inner {
    /// One ID of `entry` with one `fetch_add`, or [`SLOW`] when its segment is spent or a
    /// refresh dropped the tag (the slow path looks it up again; the ID is skipped).
    #[inline(always)]
    pub(crate) fn take_one(self: &Arc<Self>, entry: &Arc<TagEntry>) -> i64 {
        match entry.take(1) {
            _ if entry.is_removed() => SLOW,
            Take::Got {
                start,
                preload: false,
                ..
            } => start,
            Take::Got { start, .. } => {
                self.request_preload(entry);
                start
            }
            Take::Spent => SLOW,
        }
    }

    fn lookup(&self, tag: &str) -> Option<Arc<TagEntry>> {
        self.tags.load().get(tag).cloned()
    }

    /// A new entry, in the arena. The caller holds `map_write`, which serialises arena pushes.
    fn new_entry(&self, tag: Tag) -> Arc<TagEntry> {
        let make = |index| TagEntry::new(tag.clone(), index);
        if !self.indexed.load(Ordering::Relaxed) {
            return Arc::new(make(UNINDEXED));
        }
        // Past the arena's capacity (billions of entries) the entry is not reachable by index:
        // it is served by the hashed lookup only.
        self.arena
            .push(make)
            .unwrap_or_else(|| Arc::new(make(UNINDEXED)))
    }

    fn publish_map(&self, map: TagMap) {
        self.tags.store(Arc::new(map));
        self.version.fetch_add(1, Ordering::Release);
    }

    fn step_rule(&self) -> Option<Arc<dyn StepRule>> {
        self.step_rule
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn observer(&self) -> Option<Arc<dyn LoadObserver>> {
        self.observer
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The cached entry of `tag`; for a tag not in the cache, one store lookup (unless a recent
    /// one found nothing), so that a tag created since the last refresh works at once.
    pub(crate) async fn entry_for(&self, tag: &str) -> Result<Arc<TagEntry>> {
        if let Some(e) = self.lookup(tag) {
            // The thread's last entry may be one a refresh dropped (see `tags::recently`).
            tags::remember(self.id, tag, e.index);
            return Ok(e);
        }
        tags::forget(self.id);
        let tag = Tag::new(tag)?;
        let epoch = {
            let mut m = lock(&self.misses);
            if let Some(&until) = m.until.get(&tag) {
                if self.clock.monotonic() < until {
                    return Err(unknown(&tag));
                }
                m.until.remove(&tag);
            }
            m.epoch
        };
        if self.store.get(&tag).await?.is_some() {
            return Ok(self.insert_entry(tag));
        }
        let mut m = lock(&self.misses);
        if m.epoch == epoch {
            let now = self.clock.monotonic();
            if m.until.len() >= MAX_MISSES {
                m.until.retain(|_, until| *until > now);
                if m.until.len() >= MAX_MISSES {
                    m.until.clear();
                }
            }
            m.until
                .insert(tag.clone(), now.saturating_add(self.config.miss_ttl));
        }
        Err(unknown(&tag))
    }

    fn insert_entry(&self, tag: Tag) -> Arc<TagEntry> {
        let _writer = lock(&self.map_write);
        let current = self.tags.load_full();
        if let Some(e) = current.get(tag.as_str()) {
            return e.clone();
        }
        let entry = self.new_entry(tag);
        let mut map = (*current).clone();
        map.insert(entry.clone());
        self.publish_map(map);
        entry
    }

    pub(crate) async fn next_ids(self: &Arc<Self>, tag: &str, n: usize) -> Result<Vec<i64>> {
        let entry = self.entry_for(tag).await?;
        self.take_ids(&entry, n).await
    }

    /// `n` IDs of `entry`, one atomic step per segment.
    pub(crate) async fn take_ids(
        self: &Arc<Self>,
        entry: &Arc<TagEntry>,
        n: usize,
    ) -> Result<Vec<i64>> {
        if n == 0 {
            return Err(Error::InvalidInput("count must be at least 1".into()));
        }
        let mut ids = Vec::with_capacity(n.min(1 << 16));
        while ids.len() < n {
            let want = (n - ids.len()) as u64;
            let (start, count) = self.take_slow(entry, want).await?;
            ids.extend(start..start + count as i64);
        }
        Ok(ids)
    }

    pub(crate) async fn next_id_slow(self: &Arc<Self>, tag: &str) -> Result<i64> {
        let entry = self.entry_for(tag).await?;
        let (id, _) = self.take_slow(&entry, 1).await?;
        Ok(id)
    }

    /// Takes up to `want` IDs, loading the first segment, switching, or waiting (at most
    /// `switch_wait`) for the next one as needed.
    pub(crate) async fn take_slow(
        self: &Arc<Self>,
        entry: &Arc<TagEntry>,
        want: u64,
    ) -> Result<(i64, u64)> {
        let mut deadline = None;
        loop {
            if let Take::Got {
                start,
                count,
                preload,
            } = entry.take_batch(want)
            {
                if preload {
                    self.request_preload(entry);
                }
                return Ok((start, count));
            }
            let mut notified = pin!(entry.notify.notified());
            let initialized = {
                let mut s = entry.lock();
                if s.initialized {
                    if entry.has_ids(&s) {
                        continue;
                    }
                    if s.next_ready {
                        entry.switch(&mut s);
                        let issued = entry.issued(&s);
                        s.usage.sample(self.clock.monotonic(), issued);
                        continue;
                    }
                    entry.cap_overrun(&s);
                    if let Some(why) = s.exhausted(self.clock.monotonic(), self.config.miss_ttl) {
                        return Err(Error::Exhausted(why));
                    }
                    if !s.loading {
                        self.begin_load(entry, &mut s, false)?;
                    }
                    // Registered before the lock is released, so the load's wake-up is not missed.
                    notified.as_mut().enable();
                }
                s.initialized
            };
            if !initialized {
                self.first_load(entry).await?;
                continue;
            }
            let deadline = *deadline
                .get_or_insert_with(|| Instant::now().checked_add(self.config.switch_wait));
            let timed_out = match deadline {
                Some(d) => tokio::time::timeout_at(d, notified).await.is_err(),
                None => {
                    notified.await;
                    false
                }
            };
            if timed_out {
                return Err(Error::Unavailable(format!(
                    "both segments of tag {} are spent and the next one is not loaded yet",
                    entry.tag
                )));
            }
        }
    }
}

#[cfg(test)]
mod tests;
