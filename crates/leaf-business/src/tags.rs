//! Business tags: a base tag whose counter restarts each period, printed by a template.
//!
//! A business tag `order` is stored as rows of the tag's own store, under names that a plain
//! tag can never take (see [`shape`](crate::shape)):
//!
//! - `order`: its claim on the name, written first, insert-if-absent, with no ID left, so that
//!   no plain tag takes the name and a node that knows no business tags answers "exhausted"
//!   for it, never a number.
//! - `order@`: the definition. Its description holds the properties
//!   (`leaf-props:v1 reset=day zone=Asia/Shanghai first=1 format=ORD{date:%Y%m%d}{seq:06}`),
//!   written once, with the tag, and never changed; its `max_id` is never used.
//! - `order@20261126` (`order@202611`, `order@2026`; `order@all` for a tag that never restarts):
//!   one counter per period, created on first use by whichever node needs it first. Creation is
//!   insert-if-absent, so racing creators share one row and its ranges stay disjoint. Rows are
//!   never deleted: a deleted row re-created by a late node would hand its numbers out again.
//!
//! The period is read from the issuing node's clock, in the tag's zone, when the values are
//! taken, and travels with them: a value taken at 23:59:59.999 keeps its day whenever it is
//! printed. Nodes whose clocks straddle midnight count in different rows, and the date is part
//! of every printed ID, so they cannot print the same ID. Values are unique and increasing
//! within a node and a period, not gap-free (as Leaf's segments).
//!
//! This module holds [`BusinessTags`] and the definitions it knows; taking values is in
//! `issue`, the period rows in `periods`, creation in `create`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use leaf_core::{Clock, Error, Result, SegmentStore, Tag};
use leaf_segment::{LoadObserver, SegmentAllocator, SegmentConfig, StepRule};

use crate::classify::shape;
use crate::issue::Current;
use crate::{Definition, definition_tag};

/// The least a request waits for a period row's next segment.
const SWITCH_WAIT: Duration = Duration::from_millis(500);
/// Bound on remembered unknown base tags (a flood of names costs lookups, never memory).
pub(crate) const MAX_MISSES: usize = 65_536;
/// How long a base tag without a definition is remembered as plain.
const MISS_TTL: Duration = Duration::from_secs(1);

/// The business tags of one store: definitions (cached; they never change) and one allocator
/// over the period rows, whose steps never grow past each row's capped step.
pub struct BusinessTags {
    pub(crate) store: Arc<dyn SegmentStore>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) alloc: SegmentAllocator,
    pub(crate) defs: Definitions,
    /// Base tags found to have no definition, until when (the clock's monotonic time).
    misses: Mutex<HashMap<Box<str>, Duration>>,
    /// Per base tag, the next period's row, once preloaded.
    pub(crate) preloaded: Mutex<HashMap<Tag, Tag>>,
    /// Per base tag, what it counts in now.
    pub(crate) currents: Mutex<HashMap<Tag, Arc<Current>>>,
}

impl std::fmt::Debug for BusinessTags {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let defs = self.defs.read().unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("BusinessTags")
            .field("store", &self.store.kind())
            .field("definitions", &defs.len())
            .finish_non_exhaustive()
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl BusinessTags {
    /// Business tags over `store`, timed by `clock`; `config` is the plain allocator's, whose
    /// dynamic step gives way to [`Definition::load_step`] for the period rows.
    pub fn new(store: Arc<dyn SegmentStore>, clock: Arc<dyn Clock>, config: SegmentConfig) -> Self {
        let config = SegmentConfig {
            // Capped steps are small: a request waits for the next segment rather than fail.
            switch_wait: config.switch_wait.max(SWITCH_WAIT),
            ..config
        };
        let defs = Definitions::default();
        BusinessTags {
            // A row per period, dropped once its period is over.
            alloc: SegmentAllocator::new(Arc::clone(&store), Arc::clone(&clock), config)
                .with_transient_tags()
                .with_step_rule(Arc::new(PeriodSteps(Arc::clone(&defs)))),
            store,
            clock,
            defs,
            misses: Mutex::default(),
            preloaded: Mutex::default(),
            currents: Mutex::default(),
        }
    }

    /// Business tags beside a plain allocator, on its store and clock, and that allocator with
    /// the rows of the business tags known here (their bases' claims too) left out of its
    /// listing: they are counted by the business tags' own allocator, so that the plain cache
    /// never holds them.
    pub fn beside(plain: SegmentAllocator) -> (Arc<Self>, SegmentAllocator) {
        let business = Arc::new(Self::new(
            Arc::clone(plain.store()),
            Arc::clone(plain.clock()),
            plain.config().clone(),
        ));
        let known = Arc::clone(&business);
        let plain = plain.with_listing_filter(move |name| !known.owns(name));
        (business, plain)
    }

    /// The allocator of the period rows (its snapshot shows them).
    pub fn allocator(&self) -> &SegmentAllocator {
        &self.alloc
    }

    /// Reports every load of a period row to `observer`, under the row's base tag (`order`
    /// for `order@20261127`), so that what it counts by tag stays one entry per business tag.
    pub fn observe_loads(&self, observer: Arc<dyn LoadObserver>) {
        // Clones of an allocator share everything, its observer too.
        let _ = self.alloc.clone().with_observer(Arc::new(ByBase(observer)));
    }

    pub(crate) fn remember(&self, def: Arc<Definition>) {
        lock(&self.misses).remove(def.base.as_str());
        self.defs
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(def.base.clone(), def);
    }

    /// Whether `base` is known here as a business tag (no I/O: the hot path of plain tags).
    pub fn is_known(&self, base: &str) -> bool {
        self.known(base).is_some()
    }

    /// Whether the row `name` belongs to a business tag known here: its claim, definition or
    /// a period row (no I/O).
    pub fn owns(&self, name: &str) -> bool {
        self.is_known(shape(name).base().unwrap_or(name))
    }

    /// The definition of `base`, read from the store the first time; `None` for a tag that
    /// has none (remembered for a second).
    pub async fn definition(&self, base: &str) -> Result<Option<Arc<Definition>>> {
        if let Some(d) = self
            .defs
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(base)
        {
            return Ok(Some(Arc::clone(d)));
        }
        let now = self.clock.monotonic();
        if lock(&self.misses)
            .get(base)
            .is_some_and(|until| now < *until)
        {
            return Ok(None);
        }
        let Ok(tag) = Tag::new(base) else {
            return Ok(None);
        };
        let Ok(row) = definition_tag(&tag) else {
            return Ok(None);
        };
        let Some(record) = self.store.get(&row).await? else {
            let mut misses = lock(&self.misses);
            if misses.len() >= MAX_MISSES {
                misses.clear();
            }
            misses.insert(base.into(), now + MISS_TTL);
            return Ok(None);
        };
        let def = match Definition::from_record(&record) {
            None => return Ok(None),
            Some(Ok(def)) => Arc::new(def),
            // Bad data in the store, not the caller's mistake.
            Some(Err(e)) => {
                tracing::error!(row = %row, error = %e, "an unreadable business tag definition");
                return Err(Error::Config(format!(
                    "the definition of business tag {tag} cannot be read"
                )));
            }
        };
        self.remember(Arc::clone(&def));
        Ok(Some(def))
    }

    /// Reads every definition of the store (the server calls it at start-up; each is also read
    /// at its first use).
    pub async fn refresh(&self) -> Result<usize> {
        let mut n = 0;
        for record in self.store.list().await? {
            match Definition::from_record(&record) {
                Some(Ok(def)) => {
                    self.remember(Arc::new(def));
                    n += 1;
                }
                Some(Err(e)) => {
                    tracing::warn!(tag = %record.tag, error = %e, "unreadable business tag definition")
                }
                None => {}
            }
        }
        Ok(n)
    }
}

/// The definitions known here, by base tag; shared with the period rows' step rule.
pub(crate) type Definitions = Arc<RwLock<HashMap<Tag, Arc<Definition>>>>;

/// The step rule of the period rows: each load sized by its tag's [`Definition::load_step`].
#[derive(Debug)]
struct PeriodSteps(Definitions);

impl StepRule for PeriodSteps {
    fn step(&self, tag: &Tag, last: Option<i64>) -> Option<i64> {
        let base = shape(tag.as_str()).base()?;
        let defs = self.0.read().unwrap_or_else(PoisonError::into_inner);
        Some(defs.get(base)?.load_step(last))
    }
}

/// A load observer that sees a period row's loads as its base tag's.
#[derive(Debug)]
struct ByBase(Arc<dyn LoadObserver>);

impl LoadObserver for ByBase {
    fn on_load(&self, tag: &Tag, ok: bool, took: Duration) {
        match shape(tag.as_str())
            .base()
            .and_then(|base| Tag::new(base).ok())
        {
            Some(base) => self.0.on_load(&base, ok, took),
            None => self.0.on_load(tag, ok, took),
        }
    }
}
