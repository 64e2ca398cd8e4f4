//! One tag's double buffer: two segment slots, one packed cursor, and the slow-path state.
//!
//! The hot path is one `fetch_add` on `state`, which packs the current segment's number (its
//! epoch) with the count of IDs taken from it. Because epoch and count move in one atomic word,
//! a request can never count against one segment and read another's bounds unnoticed: it reads
//! the slot of the epoch it got, and a sequence number in the slot tells whether the slot still
//! holds that epoch (a slot is reused two epochs later). Slots and `state` are written only
//! under the per-tag mutex; readers take no lock.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering, fence};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use leaf_core::{Allocation, Error, Result, Tag};
use tokio::sync::Notify;

use crate::usage::Usage;
use crate::{SegmentView, TagSnapshot};

/// Low bits of `state`: IDs taken from the current segment (may run past its length).
const OFFSET_BITS: u32 = 40;
const OFFSET_MASK: u64 = (1 << OFFSET_BITS) - 1;
/// High bits of `state`: the current epoch, truncated.
const EPOCH_MASK: u64 = (1 << (64 - OFFSET_BITS)) - 1;
/// A slot's sequence number while it is being rewritten; never a truncated epoch.
const WRITING: u64 = u64::MAX;
/// The longest segment accepted from a store (a row's step is at most `i32::MAX`).
const MAX_SEGMENT_LEN: u64 = 1 << 32;
/// Largest single `fetch_add` of a batch, so that racing batches on a spent segment cannot push
/// the count into the epoch bits before the slow path caps it.
const MAX_TAKE: u64 = 1 << 28;
/// Spent requests keep counting; past this overrun the slow path pulls the count back.
const CAP_OVERRUN: u64 = 1 << 32;

fn pack(epoch: u64, off: u64) -> u64 {
    ((epoch & EPOCH_MASK) << OFFSET_BITS) | off
}

fn unpack(v: u64) -> (u64, u64) {
    (v >> OFFSET_BITS, v & OFFSET_MASK)
}

/// Keeps the written-per-request `state` off the cache line of the read-mostly slots.
#[repr(align(128))]
#[derive(Debug)]
struct CacheLine<T>(T);

#[derive(Debug, Default)]
struct Slot {
    /// The truncated epoch the slot holds, or [`WRITING`].
    seq: AtomicU64,
    start: AtomicI64,
    len: AtomicU64,
    preload_at: AtomicU64,
}

/// A segment as the slow path keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Seg {
    pub(crate) start: i64,
    pub(crate) len: u64,
}

impl Seg {
    /// Checks a store's answer before any ID of it is handed out.
    pub(crate) fn from_allocation(a: &Allocation, backend: &'static str) -> Result<Seg> {
        let bad = |why: String| Error::backend(backend, why);
        if a.used_step < 1 || a.used_step as u64 > MAX_SEGMENT_LEN {
            return Err(bad(format!(
                "allocation for tag {} reserved {} ids",
                a.tag, a.used_step
            )));
        }
        match a.max_id.checked_sub(a.used_step) {
            Some(start) if start >= 0 => Ok(Seg {
                start,
                len: a.used_step as u64,
            }),
            _ => Err(bad(format!(
                "allocation for tag {} has max_id {} below its step {}",
                a.tag, a.max_id, a.used_step
            ))),
        }
    }

    fn end(&self) -> i64 {
        self.start + self.len as i64
    }
}

/// What a take got.
#[derive(Debug)]
pub(crate) enum Take {
    /// `count` IDs from `start`; `preload` when this take crossed the preload point.
    Got {
        start: i64,
        count: u64,
        preload: bool,
    },
    /// Nothing: the segment is spent, the tag not loaded yet, or the slot was being reused.
    Spent,
}

/// The slow path's view of a tag, under [`TagEntry::lock`].
#[derive(Debug, Default)]
pub(crate) struct Slow {
    pub(crate) initialized: bool,
    /// The current segment's epoch, untruncated.
    epoch: u64,
    /// Each slot's segment, once written.
    segs: [Option<Seg>; 2],
    pub(crate) next_ready: bool,
    pub(crate) loading: bool,
    /// The step of the latest load, and the row's stored step it returned.
    pub(crate) step: i64,
    pub(crate) stored_step: i64,
    /// When the latest successful load started (monotonic).
    pub(crate) last_load_at: Option<Duration>,
    /// IDs of the segments switched away from.
    issued_before: u64,
    pub(crate) loads_ok: u64,
    pub(crate) loads_failed: u64,
    /// Bumped when a load ends, so first-load waiters can tell their load has finished.
    pub(crate) load_gen: u64,
    /// The failure of the latest load, if it failed.
    pub(crate) last_error: Option<Error>,
    /// The store's `Exhausted` message once the tag has no IDs left, and when (monotonic):
    /// later requests get it without a load for `miss_ttl`, then the store is asked again (a
    /// refresh or a change of the row clears it at once).
    pub(crate) exhausted: Option<(String, Duration)>,
    /// The end of the highest range installed: a range from the store that starts below it
    /// (a lowered `max_id`, a store restored from an older copy, another store) is refused.
    high_water: i64,
    pub(crate) usage: Usage,
}

impl Slow {
    /// The store's `Exhausted` message if the tag ran out less than `again` ago; past that it
    /// is forgotten, so that the store is asked again (its row may have been changed).
    pub(crate) fn exhausted(&mut self, now: Duration, again: Duration) -> Option<String> {
        match &self.exhausted {
            Some((why, at)) if now.saturating_sub(*at) < again => Some(why.clone()),
            Some(_) => {
                self.exhausted = None;
                None
            }
            None => None,
        }
    }
}

/// What every request writes: the cursor, alone on its line.
#[derive(Debug, Default)]
struct Hot {
    state: AtomicU64,
}

/// One tag in the cache.
#[derive(Debug)]
pub(crate) struct TagEntry {
    hot: CacheLine<Hot>,
    slots: CacheLine<[Slot; 2]>,
    pub(crate) tag: Tag,
    /// Where the allocator's arena keeps this entry.
    pub(crate) index: usize,
    /// Set by a refresh that dropped the tag; read by every request. Kept off the cursor's line:
    /// under contention another thread's `fetch_add` may take that line away between a
    /// request's `fetch_add` and this read (a second transfer per request), while this line,
    /// written once, stays shared by every core.
    removed: AtomicBool,
    slow: Mutex<Slow>,
    /// Woken when a load ends.
    pub(crate) notify: Notify,
}

impl TagEntry {
    /// An entry with no segment: epoch 0 in slot 0 with length 0, so every take is `Spent`.
    pub(crate) fn new(tag: Tag, index: usize) -> Self {
        TagEntry {
            hot: CacheLine(Hot::default()),
            slots: CacheLine(Default::default()),
            tag,
            index,
            removed: AtomicBool::new(false),
            slow: Mutex::default(),
            notify: Notify::new(),
        }
    }

    /// Marks the tag as dropped by a refresh: requests stop using this entry and background
    /// retries end.
    pub(crate) fn remove(&self) {
        self.removed.store(true, Ordering::Relaxed);
    }

    #[inline(always)]
    pub(crate) fn is_removed(&self) -> bool {
        self.removed.load(Ordering::Relaxed)
    }

    /// The slow-path state. A panic under the lock leaves the state consistent (every update is a
    /// few plain assignments), so poisoning is ignored rather than spread to every request.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Slow> {
        self.slow.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes up to `want` (at least 1) IDs with one atomic step.
    #[inline(always)]
    pub(crate) fn take(&self, want: u64) -> Take {
        // Acquire pairs with the Release store that published this epoch, making its slot
        // visible.
        let v = self.hot.0.state.fetch_add(want, Ordering::Acquire);
        let (epoch, off) = unpack(v);
        let slot = &self.slots.0[(epoch & 1) as usize];
        let seq = slot.seq.load(Ordering::Acquire);
        let start = slot.start.load(Ordering::Relaxed);
        let len = slot.len.load(Ordering::Relaxed);
        let preload_at = slot.preload_at.load(Ordering::Relaxed);
        // Seqlock read: the fields above belong to `epoch` only if the sequence number did not
        // change around them.
        fence(Ordering::Acquire);
        if seq != epoch || slot.seq.load(Ordering::Relaxed) != seq || off >= len {
            return Take::Spent;
        }
        Take::Got {
            start: start + off as i64,
            count: (len - off).min(want),
            preload: off <= preload_at && preload_at - off < want,
        }
    }

    /// Takes up to `want` IDs, first checking that the current segment has any, so that a batch
    /// on a spent segment does not push the count far past its end.
    pub(crate) fn take_batch(&self, want: u64) -> Take {
        let (epoch, off) = unpack(self.hot.0.state.load(Ordering::Acquire));
        let slot = &self.slots.0[(epoch & 1) as usize];
        let len = slot.len.load(Ordering::Relaxed);
        if off >= len {
            return Take::Spent;
        }
        self.take(want.min(len - off).clamp(1, MAX_TAKE))
    }

    /// Publishes a loaded segment: the first one becomes current, later ones become the next.
    /// A segment that starts below the end of one installed before is refused, never handed
    /// out: its IDs may have been issued already.
    pub(crate) fn install(&self, s: &mut Slow, seg: Seg, threshold: f64) -> Result<()> {
        if s.initialized && seg.start < s.high_water {
            tracing::error!(
                tag = %self.tag,
                start = seg.start,
                high_water = s.high_water,
                "the store returned a range below one already handed out (was max_id lowered, \
                 or the store restored from an older copy?); refused"
            );
            return Err(Error::Unavailable(format!(
                "the store returned the range {}..{} of tag {}, below {}, the end of one already \
                 handed out; refused",
                seg.start,
                seg.end(),
                self.tag,
                s.high_water
            )));
        }
        s.high_water = s.high_water.max(seg.end());
        let epoch = s.epoch + 1;
        let idx = (epoch & 1) as usize;
        let slot = &self.slots.0[idx];
        // Seqlock write (one writer: the caller holds the lock).
        slot.seq.swap(WRITING, Ordering::Acquire);
        fence(Ordering::Release);
        let preload_at = ((seg.len as f64 * threshold) as u64).min(seg.len - 1);
        slot.start.store(seg.start, Ordering::Relaxed);
        slot.len.store(seg.len, Ordering::Relaxed);
        slot.preload_at.store(preload_at, Ordering::Relaxed);
        slot.seq.store(epoch & EPOCH_MASK, Ordering::Release);
        s.segs[idx] = Some(seg);
        if s.initialized {
            s.next_ready = true;
        } else {
            s.initialized = true;
            self.publish(s, epoch);
        }
        Ok(())
    }

    /// Makes the ready next segment current. The caller has checked that the current one is
    /// spent: every count in it is past its end, so overwriting `state` loses no ID.
    pub(crate) fn switch(&self, s: &mut Slow) {
        debug_assert!(s.next_ready);
        s.issued_before += self.current_len(s);
        s.next_ready = false;
        self.publish(s, s.epoch + 1);
    }

    fn publish(&self, s: &mut Slow, epoch: u64) {
        s.epoch = epoch;
        self.hot.0.state.store(pack(epoch, 0), Ordering::Release);
    }

    fn current_len(&self, s: &Slow) -> u64 {
        match s.segs[(s.epoch & 1) as usize] {
            Some(seg) if s.initialized => seg.len,
            _ => 0,
        }
    }

    /// IDs taken from the current segment. Under the lock `state` holds `s.epoch`.
    fn current_taken(&self, s: &Slow) -> u64 {
        let (_, off) = unpack(self.hot.0.state.load(Ordering::Acquire));
        off.min(self.current_len(s))
    }

    /// Whether the current segment has IDs left.
    pub(crate) fn has_ids(&self, s: &Slow) -> bool {
        self.current_taken(s) < self.current_len(s)
    }

    /// IDs handed out since the tag was loaded.
    pub(crate) fn issued(&self, s: &Slow) -> u64 {
        s.issued_before + self.current_taken(s)
    }

    /// Pulls a spent segment's count back to its length before it can reach the epoch bits.
    pub(crate) fn cap_overrun(&self, s: &Slow) {
        let len = self.current_len(s);
        let mut v = self.hot.0.state.load(Ordering::Relaxed);
        loop {
            let (epoch, off) = unpack(v);
            if epoch != s.epoch & EPOCH_MASK || off <= len + CAP_OVERRUN {
                return;
            }
            match self.hot.0.state.compare_exchange_weak(
                v,
                pack(epoch, len),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(now) => v = now,
            }
        }
    }

    /// The tag's state for the `/cache` page and the metrics.
    pub(crate) fn snapshot(&self, s: &mut Slow, now: Duration) -> TagSnapshot {
        let issued = self.issued(s);
        s.usage.sample(now, issued);
        let ids_per_sec = s.usage.rate(now, issued);
        let cur = (s.epoch & 1) as usize;
        let taken = self.current_taken(s);
        let mut remaining = 0;
        let mut buffers = [None, None];
        for (i, view) in buffers.iter_mut().enumerate() {
            let Some(seg) = s.segs[i].filter(|_| s.initialized) else {
                continue;
            };
            let value = if i == cur {
                remaining += seg.len - taken;
                seg.start + taken as i64
            } else if s.next_ready {
                remaining += seg.len;
                seg.start
            } else {
                seg.end()
            };
            *view = Some(SegmentView {
                value,
                max: seg.end(),
                step: seg.len as i64,
            });
        }
        let remaining = remaining as i64;
        TagSnapshot {
            tag: self.tag.clone(),
            initialized: s.initialized,
            buffers,
            current: cur,
            next_ready: s.next_ready,
            loading: s.loading,
            step: s.step,
            remaining,
            ids_per_sec,
            buffered_secs: (ids_per_sec > 0.0).then(|| remaining as f64 / ids_per_sec),
            loads_ok: s.loads_ok,
            loads_failed: s.loads_failed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> TagEntry {
        TagEntry::new(Tag::new("t").unwrap(), 0)
    }

    fn got(t: Take) -> (i64, u64, bool) {
        match t {
            Take::Got {
                start,
                count,
                preload,
            } => (start, count, preload),
            Take::Spent => panic!("expected ids"),
        }
    }

    #[test]
    fn a_new_entry_has_no_ids() {
        let e = entry();
        assert!(matches!(e.take(1), Take::Spent));
        assert!(matches!(e.take_batch(5), Take::Spent));
    }

    #[test]
    fn takes_switches_and_preload_point() {
        let e = entry();
        let mut s = e.lock();
        e.install(
            &mut s,
            Seg {
                start: 100,
                len: 10,
            },
            0.1,
        )
        .unwrap();
        assert!(s.initialized && !s.next_ready);
        drop(s);
        assert_eq!(got(e.take(1)), (100, 1, false));
        // 10% of 10 used: the second ID crosses the preload point.
        assert_eq!(got(e.take(1)), (101, 1, true));
        assert_eq!(got(e.take(1)), (102, 1, false));
        // A batch gets what is left of the segment, no more.
        assert_eq!(got(e.take_batch(50)), (103, 7, false));
        assert!(matches!(e.take(1), Take::Spent));
        let mut s = e.lock();
        assert!(!e.has_ids(&s));
        e.install(&mut s, Seg { start: 500, len: 4 }, 0.5).unwrap();
        assert!(s.next_ready);
        e.switch(&mut s);
        assert_eq!(e.issued(&s), 10);
        drop(s);
        // Half of 4 used is not more than half: the third ID crosses the point.
        assert_eq!(got(e.take_batch(2)), (500, 2, false));
        assert_eq!(got(e.take(1)), (502, 1, true));
    }

    #[test]
    fn a_stale_epoch_is_refused() {
        let e = entry();
        let mut s = e.lock();
        e.install(&mut s, Seg { start: 0, len: 1 }, 0.0).unwrap();
        e.install(&mut s, Seg { start: 1, len: 1 }, 0.0).unwrap();
        e.switch(&mut s);
        // A reader that counted in epoch 1 reads slot 1 after it was refilled for epoch 3.
        e.install(&mut s, Seg { start: 2, len: 1 }, 0.0).unwrap();
        e.switch(&mut s);
        e.hot.0.state.store(pack(1, 0), Ordering::Relaxed);
        assert!(matches!(e.take(1), Take::Spent));
    }

    #[test]
    fn a_range_below_one_installed_before_is_refused() {
        let e = entry();
        let mut s = e.lock();
        e.install(
            &mut s,
            Seg {
                start: 100,
                len: 10,
            },
            0.1,
        )
        .unwrap();
        e.install(
            &mut s,
            Seg {
                start: 200,
                len: 10,
            },
            0.1,
        )
        .unwrap();
        e.switch(&mut s);
        // The store hands out 100..110 again (its max_id lowered, an older copy restored):
        // refused whether it overlaps the current range or an earlier one.
        for start in [100, 205, 209] {
            let e2 = e.install(&mut s, Seg { start, len: 10 }, 0.1).unwrap_err();
            assert!(
                matches!(&e2, Error::Unavailable(m) if m.contains("below 210")),
                "{e2}"
            );
        }
        assert!(!s.next_ready, "nothing installed");
        // Ranges with gaps (other servers took some) are fine.
        e.install(
            &mut s,
            Seg {
                start: 300,
                len: 10,
            },
            0.1,
        )
        .unwrap();
        assert!(s.next_ready);
    }

    #[test]
    fn overrun_is_capped() {
        let e = entry();
        let mut s = e.lock();
        e.install(&mut s, Seg { start: 0, len: 10 }, 0.1).unwrap();
        e.hot
            .0
            .state
            .fetch_add(CAP_OVERRUN + 100, Ordering::Relaxed);
        e.cap_overrun(&s);
        assert_eq!(unpack(e.hot.0.state.load(Ordering::Relaxed)), (1, 10));
        assert!(!e.has_ids(&s));
    }

    #[test]
    fn allocations_are_checked() {
        let t = Tag::new("t").unwrap();
        let a = |max_id, used_step| Allocation {
            tag: t.clone(),
            max_id,
            step: 10,
            used_step,
        };
        assert_eq!(
            Seg::from_allocation(&a(11, 10), "m").unwrap(),
            Seg { start: 1, len: 10 }
        );
        assert!(Seg::from_allocation(&a(11, 0), "m").is_err());
        assert!(Seg::from_allocation(&a(5, 10), "m").is_err());
        assert!(Seg::from_allocation(&a(i64::MIN, 10), "m").is_err());
    }
}
