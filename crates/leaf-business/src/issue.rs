//! Taking a business tag's values: the period the clock is in, its row's entry in the
//! allocator and its printer, computed once per period; the next period's row preloaded
//! before it starts, and what a period held dropped once it is over.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use leaf_core::{Error, Result, Tag};
use leaf_format::{Period, Renderer};
use leaf_segment::TagHandle;

use crate::classify::{Shape, shape};
use crate::periods::ensure_row;
use crate::tags::{MAX_MISSES, lock};
use crate::{BusinessTags, Definition};

/// How long before a period starts its row is created and its first segment loaded.
pub const PRELOAD_AHEAD: Duration = Duration::from_secs(30);

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

/// A business tag's period as of late: its row and printer, and when it holds.
#[derive(Debug)]
pub(crate) struct Current {
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

impl BusinessTags {
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
            matches!(shape(name), Shape::Period { base: b, .. } if b == base)
                && name != current.row.as_str()
                && name != next.as_str()
        });
        let mut preloaded = lock(&self.preloaded);
        if preloaded.get(&def.base) != Some(&next) {
            preloaded.remove(&def.base);
        }
        tracing::debug!(tag = %base, dropped = ?dropped, "periods over dropped");
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

#[cfg(test)]
mod tests {
    use leaf_core::ManualClock;
    use leaf_format::Reset;
    use leaf_segment::SegmentConfig;
    use leaf_testkit::MemoryStore;

    use super::*;
    use crate::Properties;

    /// 2026-11-27 00:00:00 UTC.
    const MIDNIGHT_MS: i64 = 1_795_737_600_000;
    const DAY_MS: i64 = 86_400_000;

    /// Issue 32: a node serving a daily tag for days keeps what the current period and the
    /// next need, not one allocator entry and one preload mark per day forever.
    #[tokio::test]
    async fn ended_periods_leave_nothing_behind() {
        let clock = ManualClock::new(MIDNIGHT_MS as u64);
        let store = Arc::new(MemoryStore::new());
        let tags = BusinessTags::new(store, Arc::new(clock.clone()), SegmentConfig::default());
        let props = Properties::new(Some(Reset::Day), None, None, Some("O{date:%Y%m%d}{seq:04}"));
        let def = tags
            .create(&Tag::new("order").unwrap(), 50, props.unwrap())
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
}
