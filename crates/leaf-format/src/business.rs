//! Business tags: a base tag whose counter restarts each period, printed by a template.
//!
//! A business tag `order` is stored as rows of the tag's own store, under names that a plain
//! tag can never take (see [`reserved`]):
//!
//! - `order@`: the definition. Its description holds the properties
//!   (`leaf-props:v1 reset=day zone=Asia/Shanghai first=1 format=ORD{date:%Y%m%d}{seq:06}`),
//!   written once, with the tag, and never changed; its `max_id` is never used.
//! - `order@20261126` (`order@202611`, `order@2026`; `order@all` for a tag that never restarts):
//!   one counter per period, created on first use by whichever node needs it first. Creation is
//!   insert-if-absent, so racing creators share one row and its ranges stay disjoint. Rows are
//!   never deleted: a deleted row re-created by a late node would hand its numbers out again.
//!
//! The base name itself has no row, so a node that does not know business tags answers "not
//! found" for `order` rather than counting it as a plain tag.
//!
//! The period is read from the issuing node's clock, in the tag's zone, when the values are
//! taken, and travels with them: a value taken at 23:59:59.999 keeps its day whenever it is
//! printed. Nodes whose clocks straddle midnight count in different rows, and the date is part
//! of every printed ID, so they cannot print the same ID. Values are unique and increasing
//! within a node and a period, not gap-free (as Leaf's segments).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock};
use std::time::Duration;

use leaf_core::{Clock, Error, NewTag, Result, SegmentStore, Tag, TagRecord, TagUpdate};
use leaf_segment::{LoadObserver, SegmentAllocator, SegmentConfig, StepRule, TagHandle};

use crate::{Period, Renderer, Reset, Template, Zone};

/// What starts a definition row's description.
pub const PROPS_PREFIX: &str = "leaf-props:v1 ";
/// What starts a definition row's description while it is written and read back: no node
/// reads a draft as a business tag. As long as [`PROPS_PREFIX`], so that both fit alike.
pub const DRAFT_PREFIX: &str = "leaf-draft:v1 ";
const _: () = assert!(DRAFT_PREFIX.len() == PROPS_PREFIX.len());
/// What starts the description of a business tag's claim on its base name (the base's own
/// row, with no ID left).
pub const CLAIM_PREFIX: &str = "leaf-business: counted in ";
/// The suffix of the one counter of a tag that never restarts.
pub const ALL_PERIODS: &str = "all";
/// How long before a period starts its row is created and its first segment loaded.
pub const PRELOAD_AHEAD: Duration = Duration::from_secs(30);
/// A period row's step is at most this share of what its format's width can print, so that
/// the loads of many nodes cannot burn a fixed-width day: 1 / 100.
pub const STEP_SHARE: i64 = 100;
/// A node's first load of a period takes at most this share of the row's capped step: 1 / 10.
pub const FIRST_SHARE: i64 = 10;
/// The least a request waits for a period row's next segment.
const SWITCH_WAIT: Duration = Duration::from_millis(500);
/// Bound on remembered unknown base tags (a flood of names costs lookups, never memory).
const MAX_MISSES: usize = 65_536;
/// How long a base tag without a definition is remembered as plain.
const MISS_TTL: Duration = Duration::from_secs(1);
/// The longest base name: the row names add `@` and up to eight characters, within Leaf's
/// `biz_tag varchar(128)`.
pub const MAX_BASE_CHARS: usize = leaf_core::MAX_TAG_CHARS - 9;

/// If `name` has the shape of a business tag's row (`base@`, `base@all`, `base@` and 4, 6 or 8
/// digits), its base and suffix. Plain tags of this shape are refused at creation.
pub fn reserved(name: &str) -> Option<(&str, &str)> {
    let (base, suffix) = name.rsplit_once('@')?;
    let digits = suffix.bytes().all(|b| b.is_ascii_digit()) && matches!(suffix.len(), 4 | 6 | 8);
    (suffix.is_empty() || suffix == ALL_PERIODS || digits).then_some((base, suffix))
}

/// Whether `record` is a business tag's claim on its base name.
pub fn is_claim(record: &TagRecord) -> bool {
    record.max_id == i64::MAX
        && record
            .description
            .as_deref()
            .is_some_and(|d| d.starts_with(CLAIM_PREFIX))
}

/// The definition row of `base`: `base@`.
pub fn definition_tag(base: &Tag) -> Result<Tag> {
    Tag::new(format!("{base}@"))
}

/// A business tag's properties, fixed when it is created.
#[derive(Clone, Debug, PartialEq)]
pub struct Properties {
    reset: Option<Reset>,
    zone: Zone,
    first: i64,
    format: Template,
}

impl Properties {
    /// Checks and joins the properties as a client gives them: a `format` is required (a
    /// counter that restarts is meaningless without its date, and a template is what makes a
    /// tag a business tag), `time_zone` defaults to UTC, `first` to 1.
    pub fn new(
        reset: Option<Reset>,
        time_zone: Option<&str>,
        first: Option<i64>,
        format: Option<&str>,
    ) -> Result<Self> {
        let Some(format) = format else {
            return Err(Error::InvalidInput(match reset {
                Some(r) => format!(
                    "a tag that restarts each {r} needs a format with its date, such as \
                     \"ORD{{date:%Y%m%d}}{{seq:06}}\""
                ),
                None => "time_zone and first need a format (and a reset to restart)".into(),
            }));
        };
        let zone = match time_zone {
            Some(name) => Zone::new(name)?,
            None => Zone::utc(),
        };
        let first = first.unwrap_or(1);
        let format = Template::parse(format, reset)?;
        format.check_first(first)?;
        let props = Properties {
            reset,
            zone,
            first,
            format,
        };
        let text = props.to_description();
        let chars = text.chars().count();
        if chars > leaf_core::MAX_DESCRIPTION_CHARS {
            return Err(Error::InvalidInput(format!(
                "the properties take {chars} characters in the definition row, at most {} fit: \
                 shorten the format",
                leaf_core::MAX_DESCRIPTION_CHARS
            )));
        }
        Ok(props)
    }

    /// How the counter restarts (`None`: never).
    pub fn reset(&self) -> Option<Reset> {
        self.reset
    }

    /// The zone its periods are read in.
    pub fn zone(&self) -> &Zone {
        &self.zone
    }

    /// Each period's first value.
    pub fn first(&self) -> i64 {
        self.first
    }

    /// How its values are printed.
    pub fn format(&self) -> &Template {
        &self.format
    }

    /// The definition row's description; the format comes last, since it may hold any text.
    pub fn to_description(&self) -> String {
        self.text(PROPS_PREFIX)
    }

    /// The description of the definition row while it is checked ([`DRAFT_PREFIX`]).
    fn to_draft(&self) -> String {
        self.text(DRAFT_PREFIX)
    }

    fn text(&self, prefix: &str) -> String {
        let mut s = String::from(prefix);
        if let Some(r) = self.reset {
            s.push_str("reset=");
            s.push_str(r.as_str());
            s.push(' ');
        }
        s.push_str(&format!(
            "zone={} first={} format={}",
            self.zone.name(),
            self.first,
            self.format.as_str()
        ));
        s
    }

    /// The properties a definition row's description holds.
    pub fn from_description(text: &str) -> Result<Self> {
        let bad = |why: &str| Error::InvalidInput(format!("definition {text:?}: {why}"));
        let mut rest = text
            .strip_prefix(PROPS_PREFIX)
            .ok_or_else(|| bad("not a leaf-props:v1 definition"))?;
        let (mut reset, mut zone, mut first) = (None, None, None);
        let format = loop {
            if let Some(f) = rest.strip_prefix("format=") {
                break f;
            }
            let (pair, tail) = rest.split_once(' ').ok_or_else(|| bad("no format"))?;
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| bad("a field without ="))?;
            match key {
                "reset" => reset = Some(value.parse::<Reset>()?),
                "zone" => zone = Some(value),
                "first" => first = Some(value.parse::<i64>().map_err(|_| bad("first"))?),
                _ => return Err(bad(&format!("unknown field {key:?}"))),
            }
            rest = tail;
        };
        Properties::new(reset, zone, first, Some(format))
    }

    /// The step of a period row for a tag created with `step`: at most 1/[`STEP_SHARE`] of
    /// the values the format's width can print (at least 1).
    pub fn row_step(&self, step: i64) -> i64 {
        match self.format.max_value() {
            Some(max) => {
                let share = (i128::from(max) - i128::from(self.first) + 1) / i128::from(STEP_SHARE);
                step.min(i64::try_from(share).unwrap_or(i64::MAX).max(1))
            }
            None => step,
        }
    }

    /// The period of a value taken at `unix_ms` (`None` for a tag that never restarts).
    pub fn period_at(&self, unix_ms: i64) -> Result<Option<Period>> {
        self.reset
            .map(|r| Period::at(r, &self.zone, unix_ms))
            .transpose()
    }
}

/// A business tag as read from its definition row.
#[derive(Clone, Debug)]
pub struct Definition {
    base: Tag,
    step: i64,
    props: Properties,
}

impl Definition {
    /// Reads a definition row (`base@`); `None` if the row is not one.
    pub fn from_record(record: &TagRecord) -> Option<Result<Self>> {
        let (base, suffix) = reserved(record.tag.as_str())?;
        if !suffix.is_empty() {
            return None;
        }
        let text = record.description.as_deref().unwrap_or_default();
        if !text.starts_with(PROPS_PREFIX) {
            // A plain tag of that shape, from before business tags.
            return None;
        }
        Some(
            Tag::new(base)
                .and_then(|base| Ok((base, Properties::from_description(text)?)))
                .map(|(base, props)| Definition {
                    base,
                    step: record.step,
                    props,
                }),
        )
    }

    /// The base tag.
    pub fn base(&self) -> &Tag {
        &self.base
    }

    /// The step it was created with (each period row's is [`Properties::row_step`] of it).
    pub fn step(&self) -> i64 {
        self.step
    }

    /// Its properties.
    pub fn props(&self) -> &Properties {
        &self.props
    }

    /// The step of one load of a period row by one node: a tenth of the row's capped step
    /// ([`Properties::row_step`]) at its first load of the period, then twice its `last`, up
    /// to the cap. A period is reserved as it is used: nodes that preload it hold little of it
    /// (100 nodes preloading a `{seq:06}` day at the largest cap hold 10% of it before it
    /// starts), and a busy node reaches the cap within a few loads.
    pub fn load_step(&self, last: Option<i64>) -> i64 {
        let cap = self.props.row_step(self.step);
        // At least 1: a cap of 1 to 10 starts at 1.
        let first = (cap + FIRST_SHARE - 1) / FIRST_SHARE;
        match last {
            None => first,
            Some(last) => last.saturating_mul(2).clamp(first, cap),
        }
    }

    /// The row that counts `period` (`None`: the tag's one counter).
    pub fn row(&self, period: Option<Period>) -> Result<Tag> {
        match period {
            Some(p) => Tag::new(format!("{}@{}", self.base, p.key())),
            None => Tag::new(format!("{}@{ALL_PERIODS}", self.base)),
        }
    }

    /// The row to create for a new business tag, its description a draft.
    fn new_row(&self) -> Result<NewTag> {
        Ok(NewTag {
            tag: definition_tag(&self.base)?,
            // Never counted from: the periods have rows of their own.
            max_id: 0,
            step: self.step,
            description: Some(self.props.to_draft()),
        })
    }

    /// The period and value of `text`, an ID this tag printed.
    pub fn decode(&self, text: &str) -> Result<(Option<Period>, i64)> {
        let (date, value) = self.props.format.decode(text)?;
        let period = match (self.props.reset, date) {
            (Some(r), Some(d)) => Some(Period::of(r, d)),
            _ => None,
        };
        Ok((period, value))
    }
}

/// Values taken for one request: their period and how to print them.
#[derive(Debug)]
pub struct Issued {
    /// The period they were taken in.
    pub period: Option<Period>,
    /// The values, ascending.
    pub values: Vec<i64>,
    /// The values printed by the tag's format, in order.
    pub ids: Vec<String>,
}

/// The business tags of one store: definitions (cached; they never change) and one allocator
/// over the period rows, whose steps never grow past each row's capped step.
pub struct BusinessTags {
    store: Arc<dyn SegmentStore>,
    clock: Arc<dyn Clock>,
    alloc: SegmentAllocator,
    defs: Definitions,
    /// Base tags found to have no definition, until when (the clock's monotonic time).
    misses: Mutex<HashMap<Box<str>, Duration>>,
    /// Per base tag, the next period's row, once preloaded.
    preloaded: Mutex<HashMap<Tag, Tag>>,
    /// Per base tag, what it counts in now.
    currents: Mutex<HashMap<Tag, Arc<Current>>>,
}

/// A business tag's period as of late: its row and printer, and when it holds.
#[derive(Debug)]
struct Current {
    period: Option<Period>,
    row: Tag,
    /// The row's entry in the allocator, once found: requests skip the name lookup (its rows
    /// are transient tags, which the by-name path finds by hashing).
    handle: OnceLock<TagHandle>,
    renderer: Renderer,
    /// Its start and end (exclusive), Unix milliseconds.
    from_ms: i64,
    until_ms: i64,
}

/// Values taken for a business tag, and how to print them.
#[derive(Debug)]
pub struct Taken {
    /// The values, ascending.
    pub values: Vec<i64>,
    current: Arc<Current>,
}

impl Taken {
    /// The period they were taken in.
    pub fn period(&self) -> Option<Period> {
        self.current.period
    }

    /// The values printed, in order; `Exhausted` (and nothing printed) if one no longer fits
    /// the format's width.
    pub fn render(&self) -> Result<Vec<String>> {
        self.values
            .iter()
            .map(|&v| self.current.renderer.render(v))
            .collect()
    }

    /// The values printed into one buffer (one allocation for a batch); as [`render`](Self::render).
    pub fn render_joined(&self) -> Result<Joined> {
        let mut joined = Joined {
            text: String::with_capacity(self.values.len() * 24),
            ends: Vec::with_capacity(self.values.len()),
        };
        for &v in &self.values {
            self.current.renderer.render_into(v, &mut joined.text)?;
            joined.ends.push(joined.text.len());
        }
        Ok(joined)
    }
}

/// IDs printed one after another into one buffer.
#[derive(Clone, Debug, Default)]
pub struct Joined {
    text: String,
    ends: Vec<usize>,
}

impl Joined {
    /// The IDs, in order.
    pub fn iter(&self) -> impl Iterator<Item = &str> + '_ {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts.zip(&self.ends).map(|(a, &b)| &self.text[a..b])
    }

    /// How many.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }
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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
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

    /// Business tags beside a plain allocator, on its store and clock.
    pub fn beside(plain: &SegmentAllocator) -> Self {
        Self::new(
            Arc::clone(plain.store()),
            Arc::clone(plain.clock()),
            plain.config().clone(),
        )
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

    /// Creates `base` with `props` and `step` (its definition row), refusing a base that is
    /// a plain tag already or has a reserved shape; `AlreadyExists` if it exists.
    pub async fn create(
        &self,
        base: &Tag,
        step: i64,
        props: Properties,
    ) -> Result<Arc<Definition>> {
        check_base(base)?;
        leaf_core::validate_step(step)?;
        let def = Definition {
            base: base.clone(),
            step,
            props,
        };
        let row = def.new_row()?;
        // Rows of the reserved shape under this base from before business tags (plain tags
        // named `order@2026`, `order@`) would become this tag's rows: refused. A draft of the
        // definition is a creation of this tag, judged below.
        let draft =
            |r: &TagRecord| r.tag == row.tag && r.description.as_ref() == row.description.as_ref();
        if let Some(old) = self.store.list().await?.into_iter().find(|r| {
            reserved(r.tag.as_str()).is_some_and(|(b, _)| b == base.as_str()) && !draft(r)
        }) {
            return Err(Error::AlreadyExists(format!(
                "tag {} exists: a business tag {base} would take it as one of its rows",
                old.tag
            )));
        }
        // The name is claimed first, in one atomic step: the base's own row, insert-if-absent,
        // with no ID left (`max_id` at `i64::MAX`). A plain creation of the name then fails on
        // it, and a node that knows no business tags (an older one, Java Leaf) answers it
        // "exhausted", never a number.
        let claim = NewTag {
            tag: base.clone(),
            max_id: i64::MAX,
            step: 1,
            description: Some(format!("{CLAIM_PREFIX}{base}@")),
        };
        match self.store.create(&claim).await {
            Ok(_) => {}
            // A claim without a definition is a creation cut short: finish it.
            Err(Error::AlreadyExists(_))
                if self.store.get(base).await?.is_some_and(|r| is_claim(&r)) => {}
            Err(Error::AlreadyExists(_)) => {
                return Err(Error::AlreadyExists(format!(
                    "tag {base} exists as a plain tag: a business tag needs a name of its own"
                )));
            }
            Err(e) => return Err(e),
        }
        // The definition is written as a draft, which no node reads as a business tag, and read
        // back: a store that changed its text (a MySQL column in latin1 or 3-byte utf8, in
        // non-strict mode, stores '?' for what it lacks) would have other nodes print other IDs
        // than this one. Only a draft read back as written becomes the definition.
        let written = row.description.clone().unwrap_or_default();
        match self.store.create(&row).await {
            Ok(_) => {}
            // The same draft: a creation cut short, or racing with this one, of the same tag.
            Err(Error::AlreadyExists(_))
                if self.store.get(&row.tag).await?.is_some_and(|r| draft(&r)) => {}
            Err(Error::AlreadyExists(_)) => {
                return Err(Error::AlreadyExists(format!("tag {base} exists")));
            }
            Err(e) => return Err(e),
        }
        self.read_back(&def, &row.tag, &written).await?;
        let text = def.props.to_description();
        let activate = TagUpdate {
            step: None,
            description: Some(text.clone()),
        };
        self.store.update(&row.tag, &activate).await?;
        if let Err(e) = self.read_back(&def, &row.tag, &text).await {
            // Back to a draft (its ASCII start survives any column): never read as a tag.
            let undo = TagUpdate {
                step: None,
                description: Some(written),
            };
            self.store.update(&row.tag, &undo).await?;
            return Err(e);
        }
        let def = Arc::new(def);
        self.remember(Arc::clone(&def));
        tracing::info!(tag = %base, definition = %def.props.to_description(), "business tag created");
        Ok(def)
    }

    /// `InvalidInput` unless `row`, the definition row of `def`, holds `text` as written.
    async fn read_back(&self, def: &Definition, row: &Tag, text: &str) -> Result<()> {
        let stored = self.store.get(row).await?.and_then(|r| r.description);
        if stored.as_deref() == Some(text) {
            return Ok(());
        }
        let base = &def.base;
        tracing::error!(tag = %base, written = text, stored = ?stored, "the store changed a business tag's definition; not created");
        Err(Error::InvalidInput(format!(
            "business tag {base} is not created: the store holds {stored:?} where {text:?} was \
             written, so its description column cannot hold these characters (a MySQL column in \
             latin1 or 3-byte utf8, in non-strict mode?). Use characters it holds, or a column \
             that holds them; the rows {base} and {base}@ hold no ID and no node reads them as \
             a business tag: remove them to use the name again"
        )))
    }

    fn remember(&self, def: Arc<Definition>) {
        lock(&self.misses).remove(def.base.as_str());
        self.defs
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(def.base.clone(), def);
    }

    /// Whether `base` is known here as a business tag (no I/O: the hot path of plain tags).
    pub fn is_known(&self, base: &str) -> bool {
        let defs = self.defs.read().unwrap_or_else(PoisonError::into_inner);
        !defs.is_empty() && defs.contains_key(base)
    }

    /// Whether the row `name` belongs to a business tag known here: its claim, definition or
    /// a period row (no I/O).
    pub fn owns(&self, name: &str) -> bool {
        match reserved(name) {
            Some((base, _)) => self.is_known(base),
            None => self.is_known(name),
        }
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

    /// `n` (at least 1) IDs of `def`, taken in the period the clock is in now and printed.
    /// A value past the format's width is `Exhausted` (see [`take`](Self::take) to tell it
    /// from the store's errors).
    pub async fn next(&self, def: &Definition, n: usize) -> Result<Issued> {
        let taken = self.take(def, n).await?;
        let ids = taken.render()?;
        Ok(Issued {
            period: taken.period(),
            values: taken.values,
            ids,
        })
    }

    /// `n` (at least 1) values of `def`, taken in the period the clock is in now, to be printed
    /// by [`Taken::render`] or [`Taken::render_joined`] (whose only error is a value past the
    /// format's width).
    pub async fn take(&self, def: &Definition, n: usize) -> Result<Taken> {
        let now = self.clock.now_ms() as i64;
        let current = self.current(def, now)?;
        let handle = match current.handle.get() {
            Some(h) => h,
            None => {
                let row = current.row.as_str();
                let h = match self.alloc.handle(row).await {
                    Err(Error::NotFound(_)) => {
                        self.ensure_row(def, &current.row).await?;
                        self.alloc.handle(row).await?
                    }
                    h => h?,
                };
                current.handle.get_or_init(|| h)
            }
        };
        let values = if n == 1 {
            // The allocator's lock-free path, as a plain tag's single IDs take.
            handle.next_id().await.map(|v| vec![v])?
        } else {
            handle.next_ids(n).await?
        };
        if current.until_ms.saturating_sub(now) <= PRELOAD_AHEAD.as_millis() as i64 {
            self.preload(def, current.period);
        }
        Ok(Taken { values, current })
    }

    /// What `def` counts in at `now_ms`: the period, its row and its printer, computed once per
    /// period (no time-zone arithmetic, no allocation on the way of each request).
    fn current(&self, def: &Definition, now_ms: i64) -> Result<Arc<Current>> {
        if let Some(c) = lock(&self.currents).get(&def.base)
            && (c.from_ms..c.until_ms).contains(&now_ms)
        {
            return Ok(Arc::clone(c));
        }
        let period = def.props.period_at(now_ms)?;
        let (from_ms, until_ms) = match period {
            Some(p) => (
                p.start_ms(&def.props.zone)?,
                p.next().start_ms(&def.props.zone)?,
            ),
            None => (i64::MIN, i64::MAX),
        };
        let current = Arc::new(Current {
            period,
            row: def.row(period)?,
            handle: OnceLock::new(),
            renderer: def.props.format.renderer(period),
            from_ms,
            until_ms,
        });
        let before = {
            let mut currents = lock(&self.currents);
            if currents.len() >= MAX_MISSES {
                currents.clear();
            }
            currents.insert(def.base.clone(), Arc::clone(&current))
        };
        if before.is_some_and(|b| b.row != current.row) {
            self.retire(def, &current);
        }
        Ok(current)
    }

    /// Once `def` counts in `current`, drops what it held for other periods: their rows'
    /// allocator entries and preload mark, so that a node serving a daily tag for years holds
    /// the current day's and the next one's, not one entry per day. A request still in flight
    /// on an older row finds it again by name (and the next change of period drops it).
    fn retire(&self, def: &Definition, current: &Current) {
        let Some(next) = current.period.and_then(|p| def.row(Some(p.next())).ok()) else {
            return;
        };
        let base = def.base.as_str();
        let dropped = self.alloc.drop_tags(|name| {
            reserved(name).is_some_and(|(b, suffix)| b == base && !suffix.is_empty())
                && name != current.row.as_str()
                && name != next.as_str()
        });
        let mut preloaded = lock(&self.preloaded);
        if preloaded.get(&def.base) != Some(&next) {
            preloaded.remove(&def.base);
        }
        tracing::debug!(tag = %base, dropped = ?dropped, "periods over dropped");
    }

    /// For a period row of a business tag (`order@20261127`, `ticket@all`) whose period is
    /// within one period of the clock's now (in the tag's zone): creates it if absent, as a node would
    /// on first use, and gives the definition. `None` for a name that is no business tag's row
    /// (a plain tag, a definition row, a row whose base has no definition); `InvalidInput` for a
    /// period the tag cannot have or too far from now (a leasing client's clock gone astray must
    /// not create rows for years ahead).
    pub async fn ensure_period(&self, row: &Tag) -> Result<Option<Arc<Definition>>> {
        let now_ms = self.clock.now_ms() as i64;
        let Some((base, suffix)) = reserved(row.as_str()) else {
            return Ok(None);
        };
        if suffix.is_empty() {
            return Ok(None);
        }
        let Some(def) = self.definition(base).await? else {
            return Ok(None);
        };
        let period = match def.props.reset {
            None if suffix == ALL_PERIODS => None,
            None => {
                return Err(Error::InvalidInput(format!(
                    "tag {base} never restarts: its one row is {base}@{ALL_PERIODS}"
                )));
            }
            Some(reset) => Some(Period::from_key(reset, suffix)?),
        };
        // A stored row is read as it is; the window bounds only what is created.
        if self.store.get(row).await?.is_some() {
            return Ok(Some(def));
        }
        if let (Some(p), Some(now)) = (period, def.props.period_at(now_ms)?) {
            let before = def.props.period_at(now.start_ms(&def.props.zone)? - 1)?;
            if p != now && Some(p) != before && p != now.next() {
                return Err(Error::InvalidInput(format!(
                    "period {p} of tag {base} is not within one period of this server's clock \
                     ({now})"
                )));
            }
        }
        self.ensure_row(&def, row).await?;
        Ok(Some(def))
    }

    /// How much a lease of `row`, a period row of `def`, reserves for a leasing client that
    /// `asked` for that much (`None`: the most): at most the row's capped step once its period
    /// has started at this node's clock, and at most a node's first load of a period
    /// ([`Definition::load_step`]) before, so that clients preloading a period hold no more of
    /// it than nodes do, whatever they ask.
    pub fn lease_step(&self, def: &Definition, row: &Tag, asked: Option<i64>) -> Result<i64> {
        let started = match (def.props.reset, reserved(row.as_str())) {
            (Some(reset), Some((_, suffix))) => {
                let start = Period::from_key(reset, suffix)?.start_ms(&def.props.zone)?;
                start <= self.clock.now_ms() as i64
            }
            _ => true,
        };
        let most = if started {
            def.props.row_step(def.step)
        } else {
            def.load_step(None)
        };
        Ok(asked.map_or(most, |a| a.clamp(1, most)))
    }

    /// Creates `row` if absent, with the tag's first value and capped step.
    async fn ensure_row(&self, def: &Definition, row: &Tag) -> Result<()> {
        ensure_row(self.store.as_ref(), def, row).await?;
        self.alloc.forget_miss(row.as_str());
        Ok(())
    }

    /// Shortly before the next period starts, creates its row and loads its first segment, so
    /// that the first request after midnight does not wait for the store.
    fn preload(&self, def: &Definition, period: Option<Period>) {
        let Some(period) = period else { return };
        let Ok(row) = def.row(Some(period.next())) else {
            return;
        };
        if lock(&self.preloaded).insert(def.base.clone(), row.clone()) == Some(row.clone()) {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (store, alloc, def) = (
            Arc::clone(&self.store),
            self.alloc.clone(),
            Definition::clone(def),
        );
        handle.spawn(async move {
            // A store that cannot create rows here (a leasing client without the admin token)
            // may still load it: the server creates a period row a client reads.
            if let Err(e) = ensure_row(store.as_ref(), &def, &row).await {
                tracing::debug!(row = %row, error = %e, "the next period's row was not created here");
            }
            alloc.forget_miss(row.as_str());
            alloc.warm(vec![row]);
        });
    }
}

/// The definitions known here, by base tag; shared with the period rows' step rule.
type Definitions = Arc<RwLock<HashMap<Tag, Arc<Definition>>>>;

/// The step rule of the period rows: each load sized by its tag's [`Definition::load_step`].
#[derive(Debug)]
struct PeriodSteps(Definitions);

impl StepRule for PeriodSteps {
    fn step(&self, tag: &Tag, last: Option<i64>) -> Option<i64> {
        let (base, _) = reserved(tag.as_str())?;
        let defs = self.0.read().unwrap_or_else(PoisonError::into_inner);
        Some(defs.get(base)?.load_step(last))
    }
}

/// A load observer that sees a period row's loads as its base tag's.
#[derive(Debug)]
struct ByBase(Arc<dyn LoadObserver>);

impl LoadObserver for ByBase {
    fn on_load(&self, tag: &Tag, ok: bool, took: Duration) {
        match reserved(tag.as_str()).and_then(|(base, _)| Tag::new(base).ok()) {
            Some(base) => self.0.on_load(&base, ok, took),
            None => self.0.on_load(tag, ok, took),
        }
    }
}

/// Creates `row` if absent; a row created meanwhile by another node is fine (its ranges are
/// allocated like any other).
async fn ensure_row(store: &dyn SegmentStore, def: &Definition, row: &Tag) -> Result<()> {
    let new = NewTag {
        tag: row.clone(),
        max_id: def.props.first,
        step: def.props.row_step(def.step),
        description: Some(format!("period of {}", def.base)),
    };
    match store.create(&new).await {
        Ok(_) => {
            tracing::info!(row = %row, step = new.step, "period row created");
            Ok(())
        }
        Err(Error::AlreadyExists(_)) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Refuses base names that cannot be a business tag's.
fn check_base(base: &Tag) -> Result<()> {
    let chars = base.as_str().chars().count();
    if chars > MAX_BASE_CHARS {
        return Err(Error::InvalidInput(format!(
            "a business tag has at most {MAX_BASE_CHARS} characters (its rows add up to 9), got \
             {chars}"
        )));
    }
    if base.as_str().contains('@') {
        return Err(Error::InvalidInput(format!(
            "tag {base}: a business tag's name has no '@' (its rows' names use it)"
        )));
    }
    Ok(())
}

/// Refuses a plain tag whose name has the shape of a business tag's row.
pub fn check_plain(tag: &Tag) -> Result<()> {
    match reserved(tag.as_str()) {
        Some(_) => Err(Error::InvalidInput(format!(
            "tag {tag}: names ending in '@', '@all' or '@' and 4, 6 or 8 digits are reserved for \
             business tags' rows"
        ))),
        None => Ok(()),
    }
}

/// The starts of the descriptions this crate writes (a definition's properties in any version,
/// a claim in any wording): a row holding one is read as part of a business tag.
const RESERVED_DESCRIPTIONS: [&str; 3] = ["leaf-props:", "leaf-draft:", "leaf-business:"];

/// Refuses a description that a node would read as a business tag's properties or claim, on
/// any tag: written by hand on a plain tag, it would make one a business tag without a claim,
/// or give a business tag a second definition.
pub fn check_description(description: Option<&str>) -> Result<()> {
    match description {
        Some(d) if RESERVED_DESCRIPTIONS.iter().any(|p| d.starts_with(p)) => {
            Err(Error::InvalidInput(format!(
                "a description starting with {} is reserved for business tags' rows",
                RESERVED_DESCRIPTIONS.map(|p| format!("{p:?}")).join(" or ")
            )))
        }
        _ => Ok(()),
    }
}

/// Refuses a new plain tag that is not one: a name of a business row's shape, a description
/// that reads as properties, bad numbers. `POST /v1/tags` and the seed tags go through it.
pub fn check_new_plain(new: &NewTag) -> Result<()> {
    check_plain(&new.tag)?;
    check_description(new.description.as_deref())?;
    new.validate()
}

/// Refuses a change (`PATCH`) of `tag`'s row: every name of a business row's shape, by the name
/// alone (a definition created a moment ago on another node is not seen by any lookup here),
/// and a description that reads as properties. See [`check_unclaimed`] for the base name.
pub fn check_update(tag: &Tag, update: &TagUpdate) -> Result<()> {
    if reserved(tag.as_str()).is_some() {
        return Err(Error::InvalidInput(format!(
            "tag {tag}: rows named like a business tag's (ending in '@', '@all' or '@' and 4, 6 \
             or 8 digits) are never changed here: a business tag's properties and steps are \
             fixed (a different numbering is a new tag), and a plain tag of that shape from \
             before business tags is changed in its database"
        )));
    }
    check_description(update.description.as_deref())?;
    update.validate()
}

/// Refuses a change of `stored` (the row as read from the store just before) when it is a
/// business tag's claim on its base name.
pub fn check_unclaimed(stored: &TagRecord) -> Result<()> {
    if is_claim(stored) {
        return Err(Error::InvalidInput(format!(
            "tag {} is a business tag: its properties and its rows' steps never change (a \
             different numbering is a new tag)",
            stored.tag
        )));
    }
    Ok(())
}

/// One entry of a store's listing with business tags grouped: a plain row, or a business
/// tag's definition with its period rows under it (oldest first).
#[derive(Clone, Debug)]
pub struct Grouped {
    /// The row: a plain tag's, or a business tag's definition row (`base@`).
    pub record: TagRecord,
    /// The definition, for a business tag.
    pub definition: Option<Definition>,
    /// A business tag's period rows.
    pub periods: Vec<TagRecord>,
}

/// `rows` (a store's listing) with each business tag's period rows under its definition, so
/// that a listing shows base tags, not one row per day forever. A period row whose definition
/// is missing or unreadable stays at the top level, as a plain row would.
pub fn group_rows(rows: Vec<TagRecord>) -> Vec<Grouped> {
    let mut out: Vec<Grouped> = Vec::with_capacity(rows.len());
    let mut by_base: HashMap<String, usize> = HashMap::new();
    let mut periods: Vec<(String, TagRecord)> = Vec::new();
    let mut claims: Vec<TagRecord> = Vec::new();
    for record in rows {
        if is_claim(&record) {
            claims.push(record);
            continue;
        }
        match reserved(record.tag.as_str()).map(|(b, s)| (b.to_owned(), s.is_empty())) {
            Some((base, true)) => match Definition::from_record(&record) {
                Some(Ok(def)) => {
                    by_base.insert(base, out.len());
                    out.push(Grouped {
                        record,
                        definition: Some(def),
                        periods: Vec::new(),
                    });
                }
                _ => out.push(Grouped {
                    record,
                    definition: None,
                    periods: Vec::new(),
                }),
            },
            Some((base, false)) => periods.push((base, record)),
            None => out.push(Grouped {
                record,
                definition: None,
                periods: Vec::new(),
            }),
        }
    }
    // A claim is shown with its tag; one without a definition (a creation cut short) alone.
    for record in claims {
        if !by_base.contains_key(record.tag.as_str()) {
            out.push(Grouped {
                record,
                definition: None,
                periods: Vec::new(),
            });
        }
    }
    for (base, record) in periods {
        match by_base.get(&base) {
            Some(&i) => out[i].periods.push(record),
            None => out.push(Grouped {
                record,
                definition: None,
                periods: Vec::new(),
            }),
        }
    }
    out.sort_by(|a, b| a.record.tag.cmp(&b.record.tag));
    for g in &mut out {
        g.periods.sort_by(|a, b| a.tag.cmp(&b.tag));
    }
    out
}

#[cfg(test)]
mod tests {
    use leaf_core::ManualClock;
    use leaf_testkit::MemoryStore;

    use super::*;

    /// 2026-11-27 00:00:00 UTC.
    const MIDNIGHT_MS: i64 = 1_795_737_600_000;
    const DAY_MS: i64 = 86_400_000;

    /// A store whose description column holds Latin-1 only, and stores `?` for the rest, as
    /// MySQL does in non-strict mode.
    #[derive(Debug)]
    struct Latin1(MemoryStore);

    fn latin1(text: &Option<String>) -> Option<String> {
        let keep = |c: char| if u32::from(c) < 256 { c } else { '?' };
        text.as_ref().map(|t| t.chars().map(keep).collect())
    }

    #[async_trait::async_trait]
    impl SegmentStore for Latin1 {
        fn kind(&self) -> &'static str {
            "latin1"
        }
        fn capabilities(&self) -> leaf_core::StoreCapabilities {
            self.0.capabilities()
        }
        async fn allocate(&self, tag: &Tag, step: Option<i64>) -> Result<leaf_core::Allocation> {
            self.0.allocate(tag, step).await
        }
        async fn get(&self, tag: &Tag) -> Result<Option<TagRecord>> {
            self.0.get(tag).await
        }
        async fn list(&self) -> Result<Vec<TagRecord>> {
            self.0.list().await
        }
        async fn create(&self, new: &NewTag) -> Result<TagRecord> {
            let description = latin1(&new.description);
            self.0
                .create(&NewTag {
                    description,
                    ..new.clone()
                })
                .await
        }
        async fn update(&self, tag: &Tag, update: &TagUpdate) -> Result<TagRecord> {
            let description = latin1(&update.description);
            let update = TagUpdate {
                description,
                ..update.clone()
            };
            self.0.update(tag, &update).await
        }
    }

    fn daily(format: &str) -> Properties {
        Properties::new(Some(Reset::Day), None, None, Some(format)).unwrap()
    }

    /// Issue 32: a definition the store does not hold as written is refused by the node that
    /// writes it, and no node reads what the store holds as a business tag.
    #[tokio::test]
    async fn a_definition_the_store_changes_is_refused_and_never_read() {
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(MIDNIGHT_MS as u64));
        let store = Arc::new(Latin1(MemoryStore::new()));
        let node = || BusinessTags::new(store.clone(), clock.clone(), SegmentConfig::default());
        let (a, b) = (node(), node());
        let order = tag("order");
        let e = a
            .create(&order, 10, daily("订单{date:%Y%m%d}{seq:06}"))
            .await
            .unwrap_err();
        assert!(
            matches!(&e, Error::InvalidInput(m) if m.contains("cannot hold")),
            "{e}"
        );
        for n in [&a, &b, &node()] {
            assert!(
                n.definition("order").await.unwrap().is_none(),
                "read as a tag"
            );
        }
        let stored = store.get(&tag("order@")).await.unwrap().unwrap();
        assert!(stored.description.unwrap().starts_with(DRAFT_PREFIX));
        // Tried again, it is refused: what the store holds is not its draft.
        let e = a
            .create(&order, 10, daily("订单{date:%Y%m%d}{seq:06}"))
            .await
            .unwrap_err();
        assert!(matches!(e, Error::AlreadyExists(_)), "{e}");
        // What the column holds is created as ever, Latin-1 included.
        let def = a
            .create(&tag("bon"), 10, daily("Bön{date:%Y%m%d}{seq:06}"))
            .await
            .unwrap();
        assert_eq!(b.next(&def, 1).await.unwrap().ids, ["Bön20261127000001"]);
    }

    /// A creation cut short after its draft is finished by the same creation; a draft of other
    /// properties is never taken over.
    #[tokio::test]
    async fn a_draft_is_finished_only_by_its_own_creation() {
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(MIDNIGHT_MS as u64));
        let store = Arc::new(MemoryStore::new());
        let tags = BusinessTags::new(store.clone(), clock, SegmentConfig::default());
        let props = daily("T{date:%Y%m%d}{seq:04}");
        let cut = NewTag {
            description: Some(props.to_draft()),
            max_id: 0,
            ..NewTag::new(tag("ticket@"))
        };
        store.create(&cut).await.unwrap();
        assert!(
            tags.definition("ticket").await.unwrap().is_none(),
            "a draft is no tag"
        );
        let e = tags
            .create(&tag("ticket"), 10, daily("U{date:%Y%m%d}{seq:04}"))
            .await;
        assert!(matches!(e, Err(Error::AlreadyExists(_))), "{e:?}");
        tags.create(&tag("ticket"), 10, props.clone())
            .await
            .unwrap();
        let stored = store.get(&tag("ticket@")).await.unwrap().unwrap();
        assert_eq!(stored.description, Some(props.to_description()));
        let e = tags.create(&tag("ticket"), 10, props).await.unwrap_err();
        assert!(matches!(e, Error::AlreadyExists(_)), "created twice: {e}");
    }

    /// Issue 32: a node serving a daily tag for days keeps what the current period and the
    /// next need, not one allocator entry and one preload mark per day forever.
    #[tokio::test]
    async fn ended_periods_leave_nothing_behind() {
        let clock = ManualClock::new(MIDNIGHT_MS as u64);
        let store = Arc::new(MemoryStore::new());
        let tags = BusinessTags::new(store, Arc::new(clock.clone()), SegmentConfig::default());
        let props = Properties::new(Some(Reset::Day), None, None, Some("O{date:%Y%m%d}{seq:04}"));
        let def = tags
            .create(&tag("order"), 50, props.unwrap())
            .await
            .unwrap();
        for day in 0..10 {
            let midnight = MIDNIGHT_MS + day * DAY_MS;
            for at in [midnight + 1_000, midnight + DAY_MS - 10_000] {
                clock.set_ms(at as u64);
                let ids = tags.next(&def, 1).await.unwrap().ids;
                assert!(ids[0].starts_with('O'), "{ids:?}");
                // The next day's preload runs meanwhile.
                tokio::task::yield_now().await;
            }
        }
        let held: Vec<String> = tags
            .allocator()
            .snapshot()
            .into_iter()
            .map(|s| s.tag.to_string())
            .collect();
        assert!(
            held.len() <= 2 && held.iter().all(|t| t >= &"order@20261206".to_string()),
            "entries held after 10 days: {held:?}"
        );
        let marks = lock(&tags.preloaded).len();
        assert!(marks <= 1, "{marks} preload marks held after 10 days");
    }

    fn tag(name: &str) -> Tag {
        Tag::new(name).unwrap()
    }

    #[test]
    fn load_steps_table() {
        let check = |format: &str, step: i64, last: Option<i64>, expect: i64| {
            let props = Properties::new(Some(Reset::Day), None, None, Some(format)).unwrap();
            let def = Definition {
                base: tag("t"),
                step,
                props,
            };
            assert_eq!(
                def.load_step(last),
                expect,
                "{format} step {step} after {last:?}"
            );
        };
        let six = "O{date:%Y%m%d}{seq:06}";
        // The largest cap of a six-digit day is 9,999: a node starts at 1,000 and doubles.
        check(six, 1_000_000, None, 1000);
        check(six, 1_000_000, Some(1000), 2000);
        check(six, 1_000_000, Some(4000), 8000);
        check(six, 1_000_000, Some(8000), 9_999);
        check(six, 1_000_000, Some(9_999), 9_999);
        // A smaller step is its own cap.
        check(six, 100, None, 10);
        check(six, 100, Some(10), 20);
        check(six, 100, Some(80), 100);
        check(six, 95, None, 10);
        // Never below the first range, never 0.
        check(six, 100, Some(1), 10);
        check(six, 1, None, 1);
        check(six, 1, Some(1), 1);
        check("O{date:%Y%m%d}{seq:02}", 1000, None, 1);
        check("O{date:%Y%m%d}{seq}", 50_000, None, 5_000);
        check("O{date:%Y%m%d}{seq}", 50_000, Some(40_000), 50_000);
    }

    #[test]
    fn changes_table() {
        let check = |name: &str, description: Option<&str>, ok: bool| {
            let update = TagUpdate {
                step: Some(10),
                description: description.map(str::to_owned),
            };
            let got = check_update(&tag(name), &update);
            assert_eq!(got.is_ok(), ok, "{name} {description:?}: {got:?}");
        };
        // Rows of a business tag's shape, whatever the change, with no lookup.
        for name in [
            "order@",
            "order@all",
            "order@2026",
            "order@202611",
            "order@20261127",
        ] {
            check(name, None, false);
            check(name, Some("x"), false);
        }
        check("order", None, true);
        check("mail@host", Some("a mail tag"), true);
        check("order@2026112", None, true);
        // Descriptions that read as properties or a claim, on any tag.
        for d in [
            "leaf-props:v1 zone=UTC first=1 format=X{seq}",
            "leaf-props:v9",
            "leaf-business: counted in t@",
            "leaf-business:",
        ] {
            check("plain", Some(d), false);
        }
        for d in [
            "",
            "Leaf-props:v1",
            " leaf-props:v1",
            "leaf-propsv1",
            "made by hand",
        ] {
            check("plain", Some(d), true);
        }
    }

    #[test]
    fn new_plain_tags_table() {
        let check = |name: &str, description: Option<&str>, step: i64, ok: bool| {
            let new = NewTag {
                description: description.map(str::to_owned),
                step,
                ..NewTag::new(tag(name))
            };
            let got = check_new_plain(&new);
            assert_eq!(got.is_ok(), ok, "{name} {description:?} {step}: {got:?}");
        };
        check("seeded", None, 10, true);
        check("seeded@", None, 10, false);
        check("seeded@2026", None, 10, false);
        check("seeded", Some("leaf-props:v1 format={seq}"), 10, false);
        check(
            "seeded",
            Some("leaf-business: counted in seeded@"),
            10,
            false,
        );
        check("seeded", None, 0, false);
    }

    #[test]
    fn claims_are_not_changed() {
        let record = |max_id: i64, description: &str| TagRecord {
            tag: tag("order"),
            max_id,
            step: 1,
            description: Some(description.into()),
            updated_at_ms: None,
        };
        assert!(check_unclaimed(&record(i64::MAX, "leaf-business: counted in order@")).is_err());
        assert!(check_unclaimed(&record(5, "leaf-business: counted in order@")).is_ok());
        assert!(check_unclaimed(&record(i64::MAX, "used up by hand")).is_ok());
    }
}
