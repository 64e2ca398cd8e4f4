//! `GenState`: the pure state machine behind the generator: which lease, which timestamp and
//! sequence come next, and why an ID cannot be issued at once. No clock and no waiting here:
//! the caller passes the readings in, so every rule is unit-tested below.

use std::time::Duration;

use leaf_core::{Error, Lease, Result, SnowflakeLayout};

/// The layout, pre-shifted for the hot path.
#[derive(Clone, Copy, Debug)]
pub(super) struct Params {
    pub(super) epoch_ms: u64,
    pub(super) max_t: u64,
    pub(super) timestamp_shift: u32,
    pub(super) sequence_bits: u32,
    pub(super) max_sequence: u64,
    pub(super) random_start: u64,
    /// How far ahead of the wall clock a spent millisecond may move on (0: never).
    pub(super) max_borrow_ms: u64,
}

impl Params {
    pub(super) fn new(layout: &SnowflakeLayout, random_start: u64, max_borrow_ms: u64) -> Self {
        Params {
            epoch_ms: layout.epoch_ms(),
            max_t: layout.max_timestamp_ms() - layout.epoch_ms(),
            timestamp_shift: layout.worker_bits() + layout.sequence_bits(),
            sequence_bits: layout.sequence_bits(),
            max_sequence: layout.max_sequence(),
            random_start: random_start.min(layout.ids_per_ms()),
            max_borrow_ms,
        }
    }

    #[inline]
    pub(super) fn first_sequence(&self) -> u64 {
        if self.random_start > 1 {
            fastrand::u64(0..self.random_start)
        } else {
            0
        }
    }

    /// Whether `now` is outside the timestamp field (before the epoch or past its end).
    #[inline]
    pub(super) fn outside_field(&self, now: u64) -> bool {
        // One comparison catches both ends: before the epoch wraps around to a huge value.
        now.wrapping_sub(self.epoch_ms) > self.max_t
    }

    #[cold]
    pub(super) fn out_of_range(&self, now: u64) -> Error {
        if now < self.epoch_ms {
            Error::Unavailable(format!(
                "the wall clock ({now} ms) is before the snowflake epoch ({} ms)",
                self.epoch_ms
            ))
        } else {
            Error::Exhausted(format!(
                "the snowflake timestamp field ran out at {} ms",
                self.epoch_ms + self.max_t
            ))
        }
    }
}

pub(super) enum Run {
    Running,
    /// The registry answered `LeaseLost`; the renewer tries to acquire a new worker id.
    Lost(String),
    Closed,
}

pub(super) struct GenState {
    pub(super) run: Run,
    /// The lease in use, or the last one after it was lost (for its worker id).
    pub(super) lease: Lease,
    /// Whether `lease` is still ours to renew and release.
    pub(super) held: bool,
    /// `worker_id << sequence_bits`.
    pub(super) worker_part: u64,
    /// The last timestamp issued, or the floor (the lease's previous mark) before the first.
    pub(super) last_ts: u64,
    pub(super) sequence: u64,
    /// The latest wall-clock reading an ID was issued at. It is `last_ts` unless spent
    /// milliseconds were borrowed ahead of the clock (`last_ts` is then up to `max_borrow_ms`
    /// ahead of it); a clock step back is measured from it, never from a borrowed timestamp.
    pub(super) wall_high: u64,
    /// Milliseconds borrowed ahead of the wall clock since start-up.
    pub(super) borrowed_total: u64,
    /// Nothing issued under this lease yet: `last_ts` is the floor and a clock behind it is the
    /// start-up wait, not a clock step back.
    pub(super) fresh: bool,
    pub(super) last_issued_ms: Option<u64>,
    pub(super) durable_mark: u64,
    /// Fencing: the monotonic instant after which nothing is issued (leases with a TTL).
    pub(super) valid_until: Option<Duration>,
    pub(super) renew_error: Option<String>,
    pub(super) gap_logged: bool,
    /// Where the wall clock should be by the monotonic clock.
    pub(super) reckoning: Reckoning,
    /// Set while the wall clock is too far ahead of the reckoning: how far. Nothing is issued
    /// and no mark is written from the wall clock meanwhile.
    pub(super) clock_ahead: Option<u64>,
}

/// The last trusted pair of readings: where the wall clock should be, by the monotonic clock.
#[derive(Clone, Copy, Debug)]
pub(super) struct Reckoning {
    wall_ms: u64,
    mono: Duration,
}

impl Reckoning {
    pub(super) fn new(wall_ms: u64, mono: Duration) -> Self {
        Reckoning { wall_ms, mono }
    }

    /// How far `wall_ms` is ahead of the reckoning at `mono` (0 when it is not ahead).
    fn ahead_ms(&self, wall_ms: u64, mono: Duration) -> u64 {
        let counted = u64::try_from(mono.saturating_sub(self.mono).as_millis()).unwrap_or(u64::MAX);
        wall_ms.saturating_sub(self.wall_ms.saturating_add(counted))
    }
}

/// What the clock check before a renewal found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ClockCheck {
    /// Within the bound; the reading is the new reckoning.
    Trusted,
    /// Within the bound again after a jump: issuing resumes.
    Resumed,
    /// Found too far ahead, newly.
    Jumped { ahead_ms: u64 },
    /// Still too far ahead.
    StillAhead { ahead_ms: u64 },
}

/// Why an ID could not be issued at once.
pub(super) enum Stall {
    Fail(Error),
    /// The sequence of `last_ts` is spent.
    NextMs {
        last_ts: u64,
    },
    /// Spent milliseconds were borrowed as far ahead of the wall clock as allowed (or up to the
    /// durable mark): wait until the clock reaches `until_ms`, or a renewal raises the mark;
    /// a clock found below `at_ms` (the reading this was found at) stepped back, which the next
    /// attempt reports. `mark_ms`: the durable mark, when it is what stopped the borrowing.
    CatchUp {
        until_ms: u64,
        at_ms: u64,
        mark_ms: Option<u64>,
    },
    /// This ID opened a millisecond borrowed ahead of the clock: it is handed out after a yield
    /// to the runtime, as the first ID of a millisecond that was waited for is, so that a
    /// caller that loops never holds a runtime thread across milliseconds.
    Borrowed(i64),
    /// Leave the lock and yield, then come back (a batch after a borrowed millisecond).
    Yield,
    /// The clock is behind the latest reading an ID was issued at (`wall_high`).
    Behind {
        behind_ms: u64,
    },
    /// The clock is behind the lease's previous mark (nothing issued yet).
    Startup {
        gap_ms: u64,
    },
    /// The clock is past the durable mark.
    Mark,
}

impl GenState {
    pub(super) fn new(lease: Lease, params: &Params, reckoning: Reckoning) -> Self {
        let mut s = GenState {
            run: Run::Running,
            lease: lease.clone(),
            held: true,
            worker_part: 0,
            last_ts: 0,
            sequence: 0,
            wall_high: 0,
            borrowed_total: 0,
            fresh: true,
            last_issued_ms: None,
            durable_mark: 0,
            valid_until: None,
            renew_error: None,
            gap_logged: false,
            reckoning,
            clock_ahead: None,
        };
        s.install(lease, params);
        s
    }

    /// Switches to `lease`: the next timestamp is above its previous mark and above everything
    /// issued so far, and nothing is issued until its first mark is durable.
    pub(super) fn install(&mut self, lease: Lease, params: &Params) {
        let floor = lease.prev_mark_ms.unwrap_or(0).max(self.last_ts);
        self.worker_part = lease.worker_id << params.sequence_bits;
        self.last_ts = floor;
        self.wall_high = floor;
        // A spent sequence at the floor makes the first ID go to a later millisecond: waited
        // for, or borrowed once the clock reads the floor.
        self.sequence = params.max_sequence;
        self.fresh = true;
        self.durable_mark = floor;
        self.valid_until = lease.ttl.map(|_| Duration::ZERO);
        self.held = true;
        self.lease = lease;
        if !matches!(self.run, Run::Closed) {
            self.run = Run::Running;
        }
    }

    /// Whether anything may be issued now; checked once per lock. `mono` reads the monotonic
    /// clock, only when the lease has a TTL (the hot path of other leases skips the read).
    #[inline]
    pub(super) fn admit(&self, mono: impl FnOnce() -> Duration) -> Result<(), Stall> {
        if !matches!(self.run, Run::Running) || self.clock_ahead.is_some() {
            return Err(Stall::Fail(self.halted_error()));
        }
        if let Some(until) = self.valid_until
            && mono() >= until
        {
            return Err(Stall::Fail(Error::LeaseLost(format!(
                "worker id {} was not renewed within its lease ttl minus the fencing margin",
                self.lease.worker_id
            ))));
        }
        Ok(())
    }

    #[cold]
    pub(super) fn halted_error(&self) -> Error {
        match (&self.run, self.clock_ahead) {
            (Run::Closed, _) => closed_error(),
            (_, Some(ahead_ms)) => Error::ClockJumpedForward { ahead_ms },
            (Run::Lost(reason), None) => Error::LeaseLost(reason.clone()),
            (Run::Running, None) => closed_error(),
        }
    }

    #[inline]
    pub(super) fn issue(&mut self, now: u64, p: &Params) -> Result<i64, Stall> {
        if now == self.last_ts {
            // At the end of a borrowed lead the clock reads the last timestamp: from here a
            // step back is measured from it.
            self.wall_high = now;
            if self.sequence >= p.max_sequence {
                return Err(self.borrow(now, p));
            }
            self.sequence += 1;
        } else if now > self.last_ts {
            if p.outside_field(now) {
                return Err(Stall::Fail(p.out_of_range(now)));
            }
            if now > self.durable_mark {
                return Err(Stall::Mark);
            }
            self.last_ts = now;
            self.wall_high = now;
            self.sequence = p.first_sequence();
            self.fresh = false;
            self.last_issued_ms = Some(now);
        } else if self.fresh {
            return Err(Stall::Startup {
                gap_ms: self.last_ts - now,
            });
        } else if now >= self.wall_high {
            // Ahead of the clock on borrowed milliseconds, and the clock did not go back.
            self.wall_high = now;
            if self.sequence >= p.max_sequence {
                return Err(self.borrow(now, p));
            }
            self.sequence += 1;
        } else {
            return Err(Stall::Behind {
                behind_ms: self.wall_high - now,
            });
        }
        Ok(self.id(p))
    }

    #[inline]
    fn id(&self, p: &Params) -> i64 {
        (((self.last_ts - p.epoch_ms) << p.timestamp_shift) | self.worker_part | self.sequence)
            as i64
    }

    /// The sequence of `last_ts` is spent and the wall clock reads `now` (not past it): moves
    /// on to the next millisecond ahead of the clock if that stays within `max_borrow_ms` of
    /// it, under the durable mark and inside the timestamp field; otherwise the wait that lets
    /// the clock catch up. Safe whatever the clock does next: every timestamp issued is at or
    /// under the durable mark, which a restart and any later holder of the worker id start
    /// above, and a clock step back is measured from `wall_high`.
    #[cold]
    fn borrow(&mut self, now: u64, p: &Params) -> Stall {
        let next = self.last_ts + 1;
        if next - now > p.max_borrow_ms || next > self.durable_mark || p.outside_field(next) {
            // Within the lead's bound again once the clock reaches `next - max_borrow_ms`; at
            // the mark or the field's end, once it passes `last_ts` (and the rules of a new
            // millisecond apply).
            let (until_ms, mark_ms) = if next - now > p.max_borrow_ms {
                (next - p.max_borrow_ms, None)
            } else {
                (next, Some(self.durable_mark))
            };
            return if now == self.last_ts {
                Stall::NextMs { last_ts: now }
            } else {
                Stall::CatchUp {
                    until_ms,
                    at_ms: now,
                    mark_ms,
                }
            };
        }
        self.last_ts = next;
        self.sequence = p.first_sequence();
        self.fresh = false;
        self.last_issued_ms = Some(next);
        self.borrowed_total += 1;
        Stall::Borrowed(self.id(p))
    }

    /// Checks the wall clock `now` against the reckoning at `mono` before a mark is written
    /// from it: a step ahead of more than `max_step_ms` stops issuing until it is undone; a
    /// trusted reading becomes the new reckoning, so slow drift never adds up to a jump.
    pub(super) fn check_clock(&mut self, now: u64, mono: Duration, max_step_ms: u64) -> ClockCheck {
        let ahead_ms = self.reckoning.ahead_ms(now, mono);
        if ahead_ms > max_step_ms {
            return match self.clock_ahead.replace(ahead_ms) {
                Some(_) => ClockCheck::StillAhead { ahead_ms },
                None => ClockCheck::Jumped { ahead_ms },
            };
        }
        self.reckoning = Reckoning::new(now, mono);
        match self.clock_ahead.take() {
            Some(_) => ClockCheck::Resumed,
            None => ClockCheck::Trusted,
        }
    }

    /// The mark a renewal at `now` writes: ahead of the clock by `window_ms`, never below what
    /// is durable or issued; not moved at all while the clock is not trusted.
    pub(super) fn next_mark(&self, now: u64, window_ms: u64) -> u64 {
        let floor = self.durable_mark.max(self.last_ts);
        match self.clock_ahead {
            Some(_) => floor,
            None => floor.max(now.saturating_add(window_ms)),
        }
    }

    pub(super) fn fenced(&self, mono: Duration) -> bool {
        self.valid_until.is_some_and(|until| mono >= until)
    }

    /// The start-up gap, when the clock is behind the floor before the first ID.
    pub(super) fn startup_gap(&self, now: u64) -> Option<u64> {
        (self.fresh && now < self.last_ts).then(|| self.last_ts - now)
    }

    pub(super) fn mark_reason(&self) -> String {
        match &self.renew_error {
            Some(e) => format!(
                "the clock passed the durable time mark {} ms and renewing it failed: {e}",
                self.durable_mark
            ),
            None => format!(
                "the clock passed the durable time mark {} ms and no renewal arrived in time",
                self.durable_mark
            ),
        }
    }
}

pub(super) fn closed_error() -> Error {
    Error::Unavailable("the snowflake generator is shut down".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    const EPOCH: u64 = 1000;

    /// 8 timestamp bits (the field ends at 1255), 2 worker bits, 2 sequence bits (4 IDs per
    /// millisecond), random start off, no borrowing.
    fn params() -> Params {
        borrowing(0)
    }

    /// As [`params`], borrowing up to `max_borrow_ms` ahead of the clock.
    fn borrowing(max_borrow_ms: u64) -> Params {
        Params::new(
            &SnowflakeLayout::new(8, 2, 2, EPOCH).unwrap(),
            0,
            max_borrow_ms,
        )
    }

    fn lease(worker_id: u64, prev_mark_ms: Option<u64>, ttl_ms: Option<u64>) -> Lease {
        let lease = Lease::new(worker_id, prev_mark_ms);
        match ttl_ms {
            Some(ms) => lease.with_ttl(Duration::from_millis(ms)),
            None => lease,
        }
    }

    /// One input to the state machine.
    #[derive(Debug)]
    enum Step {
        /// `issue` at this wall time (ms).
        Issue(u64),
        /// `admit` at this monotonic time (ms).
        Admit(u64),
        /// A renewal made this mark durable and extended the lease to this monotonic time.
        Renewed {
            mark: u64,
            valid_until: Option<u64>,
        },
        Install(Lease),
        Lose,
        Close,
        /// `check_clock` at this wall and monotonic time (ms), bound 60 ms.
        CheckClock(u64, u64),
        /// `next_mark` at this wall time, window 30 ms.
        NextMark(u64),
    }

    /// What the step gave.
    #[derive(Debug, PartialEq, Eq)]
    enum Got {
        /// An ID, taken apart: (timestamp, worker id, sequence).
        Id(u64, u64, u64),
        Admitted,
        Done,
        NextMs(u64),
        CatchUp(u64),
        /// The first ID of a borrowed millisecond, taken apart as `Id`.
        Ahead(u64, u64, u64),
        Behind(u64),
        Startup(u64),
        Mark,
        Exhausted,
        Unavailable,
        LeaseLost,
        ClockAhead(u64),
        Clock(ClockCheck),
        MarkAt(u64),
    }

    /// `id` taken apart: (timestamp, worker id, sequence).
    fn parts(id: i64, p: &Params) -> (u64, u64, u64) {
        let id = id as u64;
        (
            (id >> p.timestamp_shift) + p.epoch_ms,
            (id >> p.sequence_bits) & ((1 << (p.timestamp_shift - p.sequence_bits)) - 1),
            id & p.max_sequence,
        )
    }

    fn got(r: Result<Option<i64>, Stall>, p: &Params) -> Got {
        match r {
            Ok(Some(id)) => {
                let (t, w, s) = parts(id, p);
                Got::Id(t, w, s)
            }
            Err(Stall::Borrowed(id)) => {
                let (t, w, s) = parts(id, p);
                Got::Ahead(t, w, s)
            }
            Ok(None) => Got::Admitted,
            Err(Stall::NextMs { last_ts }) => Got::NextMs(last_ts),
            Err(Stall::CatchUp { until_ms, .. }) => Got::CatchUp(until_ms),
            Err(Stall::Yield) => panic!("issue never asks for a yield alone"),
            Err(Stall::Behind { behind_ms }) => Got::Behind(behind_ms),
            Err(Stall::Startup { gap_ms }) => Got::Startup(gap_ms),
            Err(Stall::Mark) => Got::Mark,
            Err(Stall::Fail(Error::Exhausted(_))) => Got::Exhausted,
            Err(Stall::Fail(Error::Unavailable(_))) => Got::Unavailable,
            Err(Stall::Fail(Error::LeaseLost(_))) => Got::LeaseLost,
            Err(Stall::Fail(Error::ClockJumpedForward { ahead_ms })) => Got::ClockAhead(ahead_ms),
            Err(Stall::Fail(e)) => panic!("unexpected error {e:?}"),
        }
    }

    /// Starts with `first` and runs `steps`, each with the outcome it must give.
    fn check(first: Lease, steps: &[(Step, Got)]) {
        check_with(params(), first, steps)
    }

    /// [`check`] with `p`.
    fn check_with(p: Params, first: Lease, steps: &[(Step, Got)]) {
        let mut g = GenState::new(first, &p, Reckoning::new(1000, Duration::ZERO));
        for (i, (step, expect)) in steps.iter().enumerate() {
            let outcome = match step {
                Step::Issue(now) => got(g.issue(*now, &p).map(Some), &p),
                Step::Admit(mono) => {
                    got(g.admit(|| Duration::from_millis(*mono)).map(|()| None), &p)
                }
                Step::Renewed { mark, valid_until } => {
                    g.durable_mark = g.durable_mark.max(*mark);
                    g.valid_until = valid_until.map(Duration::from_millis);
                    Got::Done
                }
                Step::Install(lease) => {
                    g.install(lease.clone(), &p);
                    Got::Done
                }
                Step::Lose => {
                    g.run = Run::Lost("lost".into());
                    Got::Done
                }
                Step::Close => {
                    g.run = Run::Closed;
                    Got::Done
                }
                Step::CheckClock(now, mono) => {
                    Got::Clock(g.check_clock(*now, Duration::from_millis(*mono), 60))
                }
                Step::NextMark(now) => MarkAt(g.next_mark(*now, 30)),
            };
            assert_eq!(&outcome, expect, "step {i}: {step:?}");
        }
    }

    use Got::*;
    use Step::*;

    fn renewed(mark: u64) -> Step {
        Renewed {
            mark,
            valid_until: None,
        }
    }

    #[test]
    fn sequence_within_a_millisecond_then_the_next() {
        check(
            lease(1, None, None),
            &[
                (renewed(1100), Done),
                (Issue(1010), Id(1010, 1, 0)),
                (Issue(1010), Id(1010, 1, 1)),
                (Issue(1010), Id(1010, 1, 2)),
                (Issue(1010), Id(1010, 1, 3)),
                (Issue(1010), NextMs(1010)),
                (Issue(1011), Id(1011, 1, 0)),
                (Issue(1013), Id(1013, 1, 0)),
            ],
        );
    }

    #[test]
    fn clock_behind_the_floor_is_the_startup_gap_then_a_step_back() {
        check(
            lease(2, Some(1050), None),
            &[
                (renewed(1100), Done),
                (Issue(1040), Startup(10)),
                // At the floor the sequence counts as spent: the first ID is above the mark.
                (Issue(1050), NextMs(1050)),
                (Issue(1051), Id(1051, 2, 0)),
                (Issue(1049), Behind(2)),
                (Issue(1051), Id(1051, 2, 1)),
            ],
        );
    }

    #[test]
    fn nothing_above_the_durable_mark() {
        check(
            lease(1, Some(1010), None),
            &[
                (Issue(1011), Mark),
                (renewed(1012), Done),
                (Issue(1012), Id(1012, 1, 0)),
                (Issue(1013), Mark),
                // A lower mark never lowers the durable one.
                (renewed(1005), Done),
                (Issue(1012), Id(1012, 1, 1)),
            ],
        );
    }

    #[test]
    fn both_ends_of_the_timestamp_field() {
        check(
            lease(0, None, None),
            &[
                (renewed(5000), Done),
                (Issue(999), Unavailable),
                (Issue(1255), Id(1255, 0, 0)),
                (Issue(1256), Exhausted),
            ],
        );
    }

    #[test]
    fn fencing_by_the_lease_ttl() {
        check(
            lease(3, None, Some(3000)),
            &[
                // No renewal yet: fenced from the start.
                (Admit(0), LeaseLost),
                (
                    Renewed {
                        mark: 1100,
                        valid_until: Some(500),
                    },
                    Done,
                ),
                (Admit(499), Admitted),
                (Issue(1010), Id(1010, 3, 0)),
                (Admit(500), LeaseLost),
            ],
        );
    }

    #[test]
    fn lost_closed_and_a_new_lease() {
        check(
            lease(1, None, None),
            &[
                (renewed(1100), Done),
                (Issue(1020), Id(1020, 1, 0)),
                (Lose, Done),
                (Admit(0), LeaseLost),
                // A new worker id starts above everything issued, even with a lower mark.
                (Install(lease(2, Some(1005), None)), Done),
                (Admit(0), Admitted),
                (Issue(1021), Mark),
                (renewed(1100), Done),
                (Issue(1020), NextMs(1020)),
                (Issue(1021), Id(1021, 2, 0)),
                (Close, Done),
                (Admit(0), Unavailable),
                // Closed stays closed.
                (Install(lease(3, None, None)), Done),
                (Admit(0), Unavailable),
            ],
        );
    }

    #[test]
    fn a_wall_clock_jump_forward_is_not_trusted_until_undone() {
        use ClockCheck::*;
        check(
            lease(1, None, None),
            &[
                (renewed(1100), Done),
                (Issue(1010), Id(1010, 1, 0)),
                // 50 ms of wall time in 40 ms of monotonic time: 10 ahead, trusted, and the
                // reading becomes the reckoning (wall 1050 at mono 40).
                (CheckClock(1050, 40), Clock(Trusted)),
                (NextMark(1050), MarkAt(1100)),
                (NextMark(1080), MarkAt(1110)),
                // 1050 + 10 counted = 1060; 1121 is 61 ahead: not trusted, and not issued from.
                (CheckClock(1121, 50), Clock(Jumped { ahead_ms: 61 })),
                (NextMark(1121), MarkAt(1100)),
                (Admit(50), ClockAhead(61)),
                (CheckClock(1200, 60), Clock(StillAhead { ahead_ms: 130 })),
                (Admit(60), ClockAhead(130)),
                // Back within the bound of the old reckoning: resumes.
                (CheckClock(1075, 70), Clock(Resumed)),
                (Admit(70), Admitted),
                (Issue(1075), Id(1075, 1, 0)),
                (NextMark(1075), MarkAt(1105)),
                // A step back is the step-back rule's business, not this one's.
                (CheckClock(900, 80), Clock(Trusted)),
                // Closed wins over an untrusted clock.
                (CheckClock(2000, 80), Clock(Jumped { ahead_ms: 1100 })),
                (Close, Done),
                (Admit(80), Unavailable),
            ],
        );
    }

    #[test]
    fn a_spent_millisecond_borrows_the_next_within_the_bound_and_the_mark() {
        check_with(
            borrowing(3),
            lease(1, None, None),
            &[
                (renewed(1012), Done),
                (Issue(1008), Id(1008, 1, 0)),
                (Issue(1008), Id(1008, 1, 1)),
                (Issue(1008), Id(1008, 1, 2)),
                (Issue(1008), Id(1008, 1, 3)),
                // Spent: the next milliseconds ahead of the clock, up to 3 ahead of it.
                (Issue(1008), Ahead(1009, 1, 0)),
                (Issue(1008), Id(1009, 1, 1)),
                (Issue(1008), Id(1009, 1, 2)),
                (Issue(1008), Id(1009, 1, 3)),
                (Issue(1008), Ahead(1010, 1, 0)),
                (Issue(1008), Id(1010, 1, 1)),
                (Issue(1008), Id(1010, 1, 2)),
                (Issue(1008), Id(1010, 1, 3)),
                (Issue(1008), Ahead(1011, 1, 0)),
                (Issue(1008), Id(1011, 1, 1)),
                (Issue(1008), Id(1011, 1, 2)),
                (Issue(1008), Id(1011, 1, 3)),
                // 1012 would be 4 ahead: the clock catches up to 1009 first.
                (Issue(1008), CatchUp(1009)),
                // The clock moving on inside the lead is no step back, and borrows again.
                (Issue(1009), Ahead(1012, 1, 0)),
                (Issue(1009), Id(1012, 1, 1)),
                (Issue(1009), Id(1012, 1, 2)),
                (Issue(1009), Id(1012, 1, 3)),
                // 1013 is within the bound of 1010 but past the durable mark: wait until the
                // clock passes the lead, where a new millisecond's rules apply.
                (Issue(1010), CatchUp(1013)),
                (renewed(1100), Done),
                (Issue(1010), Ahead(1013, 1, 0)),
                // A clock that reaches the lead issues from the clock again.
                (Issue(1013), Id(1013, 1, 1)),
                (Issue(1014), Id(1014, 1, 0)),
            ],
        );
    }

    #[test]
    fn a_step_back_inside_a_borrowed_lead_is_measured_from_the_clock_not_the_lead() {
        check_with(
            borrowing(3),
            lease(1, None, None),
            &[
                (renewed(1100), Done),
                (Issue(1010), Id(1010, 1, 0)),
                (Issue(1010), Id(1010, 1, 1)),
                (Issue(1010), Id(1010, 1, 2)),
                (Issue(1010), Id(1010, 1, 3)),
                (Issue(1010), Ahead(1011, 1, 0)),
                (Issue(1011), Id(1011, 1, 1)),
                // The clock read 1011, then 1009: 2 ms back, however far ahead the lead is.
                (Issue(1009), Behind(2)),
                (Issue(1011), Id(1011, 1, 2)),
            ],
        );
    }

    #[test]
    fn nothing_is_borrowed_without_a_bound_below_the_floor_or_past_the_field() {
        check(
            lease(1, None, None),
            &[
                (renewed(1100), Done),
                (Issue(1010), Id(1010, 1, 0)),
                (Issue(1010), Id(1010, 1, 1)),
                (Issue(1010), Id(1010, 1, 2)),
                (Issue(1010), Id(1010, 1, 3)),
                (Issue(1010), NextMs(1010)),
            ],
        );
        check_with(
            borrowing(100),
            lease(2, Some(1050), None),
            &[
                (renewed(1100), Done),
                // A restart's floor is waited for, never borrowed ahead of...
                (Issue(1040), Startup(10)),
                // ...but the millisecond after it may be, once the clock is there.
                (Issue(1050), Ahead(1051, 2, 0)),
                (Issue(1050), Id(1051, 2, 1)),
            ],
        );
        check_with(
            borrowing(100),
            lease(0, None, None),
            &[
                (renewed(5000), Done),
                (Issue(1255), Id(1255, 0, 0)),
                (Issue(1255), Id(1255, 0, 1)),
                (Issue(1255), Id(1255, 0, 2)),
                (Issue(1255), Id(1255, 0, 3)),
                // The field ends at 1255: nothing is borrowed past it.
                (Issue(1255), NextMs(1255)),
                (Issue(1256), Exhausted),
            ],
        );
    }

    #[test]
    fn a_new_lease_starts_above_a_borrowed_lead() {
        check_with(
            borrowing(5),
            lease(1, None, None),
            &[
                (renewed(1100), Done),
                (Issue(1010), Id(1010, 1, 0)),
                (Issue(1010), Id(1010, 1, 1)),
                (Issue(1010), Id(1010, 1, 2)),
                (Issue(1010), Id(1010, 1, 3)),
                (Issue(1010), Ahead(1011, 1, 0)),
                (Issue(1010), Id(1011, 1, 1)),
                (Issue(1010), Id(1011, 1, 2)),
                (Issue(1010), Id(1011, 1, 3)),
                (Issue(1010), Ahead(1012, 1, 0)),
                (Lose, Done),
                (Install(lease(2, Some(1005), None)), Done),
                (renewed(1100), Done),
                // The floor is the borrowed 1012, not the clock: the start-up wait.
                (Issue(1010), Startup(2)),
                (Issue(1012), Ahead(1013, 2, 0)),
                (Issue(1013), Id(1013, 2, 1)),
            ],
        );
    }
}
