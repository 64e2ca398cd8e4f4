//! Every wait of the generator: a sequence wrap, a lead of borrowed milliseconds at its bound,
//! a small clock step back, the start-up gap, the next durable mark. Each leaves the lock and waits in the [`Clock`](leaf_core::Clock)'s time.

use std::future::{Future, poll_fn};
use std::pin::pin;
use std::sync::atomic::Ordering;
use std::task::Poll;
use std::time::Duration;

use leaf_core::{Error, Result};

use super::state::{GenState, Run, Stall};
use super::{Inner, millis};

/// Yields spent waiting for the next millisecond before sleeping 1 ms instead. A yield costs a
/// microsecond or more (the runtime polls its drivers in between), so a normal wrap sees the
/// next millisecond well before this many; a clock that does not move (a manual clock) falls
/// through to the sleep instead of yielding forever.
pub(super) const YIELD_LIMIT: u32 = 10_000;

/// The longest sleep of a lead's catch-up before the clock is read again (a step back is found
/// this soon).
const CATCH_UP_STEP: Duration = Duration::from_millis(10);

/// How long a sequence wrap waits for a wall clock that does not advance before giving up.
pub(super) const STALL_LIMIT: Duration = Duration::from_secs(1);

/// Per-call bookkeeping of the waits, so that no call waits without bound.
pub(super) struct Waits {
    pub(super) since: Duration,
    pub(super) waited_back: bool,
    pub(super) counted_back: bool,
    pub(super) mark_deadline: Option<Duration>,
}

impl Inner {
    pub(super) fn waits(&self) -> Waits {
        Waits {
            since: self.clock.monotonic(),
            waited_back: false,
            counted_back: false,
            mark_deadline: None,
        }
    }

    pub(super) async fn next_id_slow(&self, mut stall: Stall) -> Result<i64> {
        let mut waits = self.waits();
        loop {
            if let Stall::Borrowed(id) = stall {
                tokio::task::yield_now().await;
                return Ok(id);
            }
            self.wait_out(stall, &mut waits).await?;
            match self.try_one() {
                Ok(id) => return Ok(id),
                Err(next) => stall = next,
            }
        }
    }

    /// Waits until `stall` may have cleared, or fails when it cannot clear in time.
    pub(super) async fn wait_out(&self, stall: Stall, w: &mut Waits) -> Result<()> {
        let cfg = &self.config;
        match stall {
            Stall::Fail(e) => Err(e),
            Stall::NextMs { last_ts } => {
                // Yield, never spin: the other tasks of this runtime thread run while the
                // millisecond ends, and the next one is seen within a yield (a ~1 ms sleep would
                // lose most of it). At least one yield, so a batch yields between milliseconds
                // even when the clock moved on while it filled.
                for _ in 0..YIELD_LIMIT {
                    tokio::task::yield_now().await;
                    if self.clock.now_ms() != last_ts {
                        return Ok(());
                    }
                }
                if self.clock.monotonic().saturating_sub(w.since) > STALL_LIMIT {
                    return Err(Error::Unavailable(format!(
                        "the wall clock stayed at {last_ts} ms for more than {} ms",
                        STALL_LIMIT.as_millis()
                    )));
                }
                self.clock.sleep(Duration::from_millis(1)).await;
                Ok(())
            }
            // `next_id_slow` hands a borrowed ID out itself; here it is only the yield.
            Stall::Yield | Stall::Borrowed(_) => {
                tokio::task::yield_now().await;
                Ok(())
            }
            Stall::CatchUp {
                until_ms,
                at_ms,
                mark_ms,
            } => {
                // The lead is at its bound (or at the durable mark): the clock catches up by
                // as much as one more millisecond needs, slept through in steps of at most
                // `CATCH_UP_STEP` but for the last millisecond, which is yielded through as
                // `NextMs` is. A renewal (the mark raised) or a clock that stepped back ends
                // the wait at once: the next attempt borrows again or reports the step back.
                let started = self.clock.monotonic();
                let limit = STALL_LIMIT.saturating_add(cfg.max_borrow);
                let mut yields = 0;
                loop {
                    let now = self.clock.now_ms();
                    if now >= until_ms || now < at_ms {
                        return Ok(());
                    }
                    if self.clock.monotonic().saturating_sub(started) > limit {
                        return Err(Error::Unavailable(format!(
                            "the wall clock did not reach {until_ms} ms (at {now} ms) within {} ms",
                            limit.as_millis()
                        )));
                    }
                    if until_ms - now > 1 || yields >= YIELD_LIMIT {
                        let step =
                            Duration::from_millis((until_ms - now - 1).max(1)).min(CATCH_UP_STEP);
                        let mut renewed = pin!(self.renewed.notified());
                        renewed.as_mut().enable();
                        if mark_ms.is_some_and(|m| self.lock().durable_mark > m) {
                            // The mark that stopped the borrowing was raised since.
                            return Ok(());
                        }
                        race(renewed, self.clock.sleep(step)).await;
                    } else {
                        yields += 1;
                        tokio::task::yield_now().await;
                    }
                }
            }
            Stall::Behind { behind_ms } => {
                if !w.counted_back {
                    w.counted_back = true;
                    self.clock_backwards_total.fetch_add(1, Ordering::Relaxed);
                }
                let waited = w.waited_back;
                if waited || behind_ms > millis(cfg.max_backwards) {
                    tracing::warn!(
                        behind_ms,
                        waited,
                        max_backwards_ms = millis(cfg.max_backwards),
                        "snowflake clock moved backwards"
                    );
                    return Err(Error::ClockMovedBackwards { behind_ms, waited });
                }
                w.waited_back = true;
                tracing::debug!(behind_ms, "snowflake clock moved backwards; waiting it out");
                self.clock.sleep(Duration::from_millis(behind_ms)).await;
                Ok(())
            }
            Stall::Startup { gap_ms } => {
                if gap_ms > millis(cfg.max_startup_wait) {
                    let g = self.lock();
                    return Err(Error::Unavailable(self.gap_reason(&g, gap_ms)));
                }
                if self.clock.monotonic().saturating_sub(w.since)
                    > cfg.max_startup_wait + STALL_LIMIT
                {
                    return Err(Error::Unavailable(format!(
                        "the clock is still {gap_ms} ms behind the worker id's previous mark \
                         after waiting {} ms",
                        millis(cfg.max_startup_wait + STALL_LIMIT)
                    )));
                }
                // The first timestamp must be above the previous mark, hence the extra 1 ms.
                self.clock.sleep(Duration::from_millis(gap_ms + 1)).await;
                Ok(())
            }
            Stall::Mark => {
                let mono = self.clock.monotonic();
                let deadline = *w.mark_deadline.get_or_insert(mono + 2 * cfg.mark_renew);
                if mono >= deadline {
                    return Err(Error::Unavailable(self.lock().mark_reason()));
                }
                let mut renewed = pin!(self.renewed.notified());
                renewed.as_mut().enable();
                // A renewal may have landed between the failed attempt and `enable`.
                {
                    let g = self.lock();
                    if g.durable_mark >= self.clock.now_ms() || !matches!(g.run, Run::Running) {
                        return Ok(());
                    }
                }
                race(renewed, self.clock.sleep(deadline - mono)).await;
                Ok(())
            }
        }
    }

    pub(super) fn gap_reason(&self, g: &GenState, gap_ms: u64) -> String {
        format!(
            "the clock is {gap_ms} ms behind worker id {}'s previous mark {} ms, more than \
             the longest start-up wait ({} ms); waiting for it to catch up",
            g.lease.worker_id,
            g.last_ts,
            millis(self.config.max_startup_wait)
        )
    }
}

/// Runs two futures until either finishes.
pub(crate) async fn race(a: impl Future<Output = ()>, b: impl Future<Output = ()>) {
    let mut a = pin!(a);
    let mut b = pin!(b);
    poll_fn(|cx| {
        if a.as_mut().poll(cx).is_ready() || b.as_mut().poll(cx).is_ready() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await
}
