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
}

impl Params {
    pub(super) fn new(layout: &SnowflakeLayout, random_start: u64) -> Self {
        Params {
            epoch_ms: layout.epoch_ms(),
            max_t: layout.max_timestamp_ms() - layout.epoch_ms(),
            timestamp_shift: layout.worker_bits() + layout.sequence_bits(),
            sequence_bits: layout.sequence_bits(),
            max_sequence: layout.max_sequence(),
            random_start: random_start.min(layout.ids_per_ms()),
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
    /// The clock is behind the last issued timestamp.
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
        // A spent sequence at the floor makes the first ID wait for a later millisecond.
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
            if self.sequence >= p.max_sequence {
                return Err(Stall::NextMs { last_ts: now });
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
            self.sequence = p.first_sequence();
            self.fresh = false;
            self.last_issued_ms = Some(now);
        } else if self.fresh {
            return Err(Stall::Startup {
                gap_ms: self.last_ts - now,
            });
        } else {
            return Err(Stall::Behind {
                behind_ms: self.last_ts - now,
            });
        }
        Ok(
            (((self.last_ts - p.epoch_ms) << p.timestamp_shift) | self.worker_part | self.sequence)
                as i64,
        )
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
    /// millisecond), random start off.
    fn params() -> Params {
        Params::new(&SnowflakeLayout::new(8, 2, 2, EPOCH).unwrap(), 0)
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

    fn got(r: Result<Option<i64>, Stall>, p: &Params) -> Got {
        match r {
            Ok(Some(id)) => {
                let id = id as u64;
                Got::Id(
                    (id >> p.timestamp_shift) + p.epoch_ms,
                    (id >> p.sequence_bits) & ((1 << (p.timestamp_shift - p.sequence_bits)) - 1),
                    id & p.max_sequence,
                )
            }
            Ok(None) => Got::Admitted,
            Err(Stall::NextMs { last_ts }) => Got::NextMs(last_ts),
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
        let p = params();
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
}
