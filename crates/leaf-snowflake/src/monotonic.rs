//! The arithmetic of the monotonic mode's leader (issue 37), apart from any backend or clock:
//! strictly increasing 63-bit IDs `(ms - epoch) << LOGICAL_BITS | logical`, handed out under a
//! *window*, a time the backend confirmed durable before the leader issues under it.
//!
//! - Within a millisecond the logical part counts up; when it is spent the count runs on into
//!   the next millisecond (the ID is one number: `last + 1` carries into the time part), ahead
//!   of the wall clock if it must. The wall clock only ever raises the floor; nothing waits on
//!   it.
//! - No ID is issued at or past the window: an issue that would reach it asks for a longer one
//!   ([`NotIssued::NeedWindow`]) and the caller confirms it in the backend before asking again. The window
//!   bounds how far IDs may run ahead of real time.
//! - A new leader starts above the last confirmed window it read with its claim
//!   ([`Oracle::after`]): every ID of every earlier leader is below it, whatever the new
//!   leader's clock says.
//!
//! Why that is linearizable across a failover is argued in ARCHITECTURE.md ("Monotonic IDs").

mod leader;

use std::ops::RangeInclusive;

pub use leader::{Leader, LeaderConfig, LeaderStatus, Refusal};

/// Bits of the logical counter: 4,194,304 IDs a millisecond before the count runs into the
/// next one. The other 41 bits hold milliseconds since the epoch: 69 years.
pub const LOGICAL_BITS: u32 = 22;

/// The largest ID: 63 bits, so that every ID is a positive `i64`.
const MAX_ID: u64 = (1 << 63) - 1;

/// The most IDs one issue hands out: one millisecond's worth. A larger request is refused
/// rather than asked of the window (it would need more than a millisecond of it at once).
pub const MAX_ISSUE: u64 = 1 << LOGICAL_BITS;

/// The time part of an ID and its first ID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MonotonicLayout {
    /// Unix milliseconds of time part 0.
    pub epoch_ms: u64,
}

impl MonotonicLayout {
    /// The first ID of Unix millisecond `ms` (0 before the epoch; the largest ID past the
    /// layout's end).
    pub fn first_of(&self, ms: u64) -> u64 {
        let since = ms.saturating_sub(self.epoch_ms);
        since
            .checked_mul(1 << LOGICAL_BITS)
            .filter(|id| *id <= MAX_ID)
            .unwrap_or(MAX_ID)
    }

    /// The Unix millisecond an ID was issued in (its time part).
    pub fn ms_of(&self, id: u64) -> u64 {
        self.epoch_ms + (id >> LOGICAL_BITS)
    }
}

/// Why [`Oracle::issue`] handed nothing out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotIssued {
    /// The IDs would reach the window: confirm a window ending after `past_ms` in the backend,
    /// [`Oracle::extend`] to it, and ask again.
    NeedWindow {
        /// The millisecond the asked-for IDs would reach.
        past_ms: u64,
    },
    /// More than [`MAX_ISSUE`] IDs at once.
    TooMany,
    /// The layout's last ID was issued: its 41 bits of milliseconds are spent.
    Exhausted,
}

/// A leader's state: the last ID issued and the confirmed window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Oracle {
    layout: MonotonicLayout,
    /// The last ID issued (or the floor below the first one).
    last: u64,
    /// No ID's time part reaches this Unix millisecond: the backend holds it durably.
    window_end_ms: u64,
}

impl Oracle {
    /// A new leader whose claim read `confirmed_ms`, the last window any leader had confirmed
    /// (0 for none): it starts above every ID issued under it, and holds no window of its own
    /// yet.
    pub fn after(layout: MonotonicLayout, confirmed_ms: u64) -> Oracle {
        Oracle {
            layout,
            last: layout.first_of(confirmed_ms).saturating_sub(1),
            window_end_ms: confirmed_ms,
        }
    }

    /// The confirmed window's end.
    pub fn window_end_ms(&self) -> u64 {
        self.window_end_ms
    }

    /// The last ID issued (or the floor below the first).
    pub fn last(&self) -> u64 {
        self.last
    }

    /// Takes a window the backend confirmed up to `end_ms`; a window never shrinks.
    pub fn extend(&mut self, end_ms: u64) {
        self.window_end_ms = self.window_end_ms.max(end_ms);
    }

    /// `n` (at least 1, at most [`MAX_ISSUE`]) IDs at wall-clock `now_ms`: the next after the
    /// last, and not below the first of `now_ms`. Nothing is taken when it refuses:
    /// [`NotIssued::NeedWindow`] when the last of them would reach the window.
    pub fn issue(&mut self, now_ms: u64, n: u64) -> Result<RangeInclusive<u64>, NotIssued> {
        if n > MAX_ISSUE {
            return Err(NotIssued::TooMany);
        }
        let n = n.max(1);
        let first = (self.last + 1).max(self.layout.first_of(now_ms));
        // Both sums stay far below u64::MAX: `last` is at most MAX_ID (2^63 - 1).
        let last = first + (n - 1);
        if last > MAX_ID {
            return Err(NotIssued::Exhausted);
        }
        let past_ms = self.layout.ms_of(last);
        if past_ms >= self.window_end_ms {
            return Err(NotIssued::NeedWindow { past_ms });
        }
        self.last = last;
        Ok(first..=last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EPOCH: u64 = 1_700_000_000_000;
    const LAYOUT: MonotonicLayout = MonotonicLayout { epoch_ms: EPOCH };
    const PER_MS: u64 = 1 << LOGICAL_BITS;

    fn leader(window_end_ms: u64) -> Oracle {
        let mut o = Oracle::after(LAYOUT, 0);
        o.extend(window_end_ms);
        o
    }

    #[test]
    fn ids_rise_within_a_millisecond_and_follow_the_clock() {
        let now = EPOCH + 1_000;
        let mut o = leader(now + 3_000);
        let a = o.issue(now, 3).unwrap();
        assert_eq!(a, LAYOUT.first_of(now)..=LAYOUT.first_of(now) + 2);
        let b = o.issue(now, 1).unwrap();
        assert_eq!(*b.start(), a.end() + 1);
        // The clock moved on: the floor rises to its millisecond.
        let c = o.issue(now + 5, 1).unwrap();
        assert_eq!(*c.start(), LAYOUT.first_of(now + 5));
        assert_eq!(LAYOUT.ms_of(*c.start()), now + 5);
    }

    #[test]
    fn a_clock_that_goes_back_never_lowers_an_id() {
        let now = EPOCH + 10_000;
        let mut o = leader(now + 3_000);
        let a = o.issue(now, 10).unwrap();
        let b = o.issue(now - 5_000, 10).unwrap();
        assert_eq!(*b.start(), a.end() + 1);
    }

    #[test]
    fn a_spent_millisecond_runs_into_the_next_without_waiting_up_to_the_window() {
        let now = EPOCH + 1_000;
        let mut o = leader(now + 2);
        // A whole millisecond and one more: the count carries into now + 1.
        o.issue(now, PER_MS).unwrap();
        let a = o.issue(now, 1).unwrap();
        assert_eq!(LAYOUT.ms_of(*a.end()), now + 1);
        // The rest of now + 1 fits; one more would reach the window at now + 2.
        let rest = PER_MS - 1;
        assert!(o.issue(now, rest).is_ok());
        let before = o.clone();
        assert_eq!(
            o.issue(now, 1),
            Err(NotIssued::NeedWindow { past_ms: now + 2 })
        );
        assert_eq!(o, before, "a refused issue takes nothing");
        o.extend(now + 3_000);
        let b = o.issue(now, 1).unwrap();
        assert_eq!(*b.start(), LAYOUT.first_of(now + 2));
    }

    #[test]
    fn a_new_leader_starts_above_the_confirmed_window_whatever_its_clock() {
        let old_now = EPOCH + 50_000;
        let mut old = leader(old_now + 3_000);
        // The old leader ran ahead of its clock as far as its window allowed.
        let mut last_old = 0;
        for _ in 0..10_000 {
            match old.issue(old_now, PER_MS / 2) {
                Ok(r) => last_old = *r.end(),
                Err(_) => break,
            }
        }
        assert_eq!(LAYOUT.ms_of(last_old), old_now + 2_999);
        // The new leader's clock is 10 s behind the old one's.
        let mut new = Oracle::after(LAYOUT, old.window_end_ms());
        assert!(
            new.issue(old_now - 10_000, 1).is_err(),
            "no window of its own yet"
        );
        new.extend(old_now - 10_000 + 3_000);
        assert!(
            new.issue(old_now - 10_000, 1).is_err(),
            "a window below the floor is none"
        );
        new.extend(old_now + 6_000);
        let first = new.issue(old_now - 10_000, 1).unwrap();
        assert!(*first.start() > last_old);
        assert_eq!(*first.start(), LAYOUT.first_of(old_now + 3_000));
    }

    #[test]
    fn windows_never_shrink_and_the_layout_ends_in_a_positive_i64() {
        let mut o = leader(EPOCH + 10);
        o.extend(EPOCH + 5);
        assert_eq!(o.window_end_ms(), EPOCH + 10);
        assert_eq!(LAYOUT.first_of(EPOCH - 1), 0);
        assert_eq!(LAYOUT.first_of(u64::MAX), MAX_ID);
        assert!(i64::try_from(LAYOUT.first_of(EPOCH + (1 << 40))).is_ok());
        // At the end of the layout nothing more is issued, never a wrapped ID.
        let mut end = Oracle::after(LAYOUT, u64::MAX - 1);
        end.extend(u64::MAX);
        assert_eq!(end.issue(u64::MAX - 1, 2), Err(NotIssued::Exhausted));
    }

    #[test]
    fn the_last_id_of_the_layout_is_issued_once_and_then_nothing() {
        // A window past the layout's end, and the floor one below its last ID.
        let mut o = Oracle::after(LAYOUT, 0);
        o.extend(u64::MAX);
        o.last = MAX_ID - 1;
        assert_eq!(o.issue(EPOCH, 1), Ok(MAX_ID..=MAX_ID));
        assert_eq!(o.issue(EPOCH, 1), Err(NotIssued::Exhausted));
        assert_eq!(o.issue(u64::MAX, 1), Err(NotIssued::Exhausted));
    }

    #[test]
    fn a_request_larger_than_a_millisecond_is_refused_not_sent_to_the_window() {
        let now = EPOCH + 1_000;
        let mut o = leader(now + 3_000);
        assert_eq!(o.issue(now, MAX_ISSUE + 1), Err(NotIssued::TooMany));
        assert_eq!(o.issue(now, u64::MAX), Err(NotIssued::TooMany));
        assert_eq!(
            o.issue(now, MAX_ISSUE).map(|r| r.count() as u64),
            Ok(MAX_ISSUE)
        );
    }
}
