//! `Snowflake`: the generator, its durable time high-water mark, lease fencing and renewer.
//!
//! The hot path is one uncontended `std::sync::Mutex` around the generator state and one read
//! of the wall clock (plus the monotonic clock when the lease has a TTL). Everything that waits
//! (a sequence wrap, a lead of borrowed milliseconds at its bound, a small clock step back, the
//! start-up gap, the next durable mark) leaves the lock and waits asynchronously in the
//! [`Clock`]'s time (the next millisecond by yielding to the runtime), so no wait holds a
//! runtime thread and tests drive it with a manual clock.

mod lease;
mod state;
mod wait;

pub(crate) use wait::race;

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use leaf_core::{Clock, DecodedId, Error, NodeIdentity, Result, SnowflakeLayout, WorkerIdRegistry};
use tokio::sync::Notify;

use self::state::{GenState, Params, Run, Stall};
use crate::{SnowflakeConfig, SnowflakeState, SnowflakeStatus};

/// The largest up-front allocation of a batch; bigger batches grow as they fill.
const PREALLOC_LIMIT: usize = 1 << 16;

/// A snowflake ID generator holding one worker id from a [`WorkerIdRegistry`].
///
/// Cheap to clone: clones share one generator. See the crate docs for the guarantees.
#[derive(Clone)]
pub struct Snowflake {
    inner: Arc<Inner>,
}

struct Inner {
    params: Params,
    config: SnowflakeConfig,
    registry: Arc<dyn WorkerIdRegistry>,
    identity: NodeIdentity,
    clock: Arc<dyn Clock>,
    state: Mutex<GenState>,
    /// Woken when a mark becomes durable or issuing stops (lease lost, shutdown).
    renewed: Notify,
    /// Woken at shutdown, to end the renewer.
    stop: Arc<Notify>,
    /// One renewal (or the final release) at a time, so marks are written in order.
    renewing: tokio::sync::Mutex<()>,
    clock_backwards_total: AtomicU64,
    clock_jumps_total: AtomicU64,
}

impl Inner {
    #[inline]
    fn lock(&self) -> MutexGuard<'_, GenState> {
        // Nothing panics while holding the lock; a poisoned lock still holds consistent state.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    #[inline]
    fn try_one(&self) -> Result<i64, Stall> {
        let mut g = self.lock();
        g.admit(|| self.clock.monotonic())?;
        // Read under the lock: a reading taken before it could be older than a timestamp
        // another thread issued meanwhile and look like a clock step back.
        let now = self.clock.now_ms();
        g.issue(now, &self.params)
    }

    /// Fills `out` towards `n` IDs within one millisecond at most: at its end it returns
    /// `NextMs` (or `Yield` after the first ID of a millisecond borrowed ahead of the clock),
    /// so that a batch leaves the lock and yields before the next millisecond (and re-checks
    /// fencing there).
    fn fill(&self, out: &mut Vec<i64>, n: usize) -> Result<(), Stall> {
        let mut g = self.lock();
        g.admit(|| self.clock.monotonic())?;
        let now = self.clock.now_ms();
        while out.len() < n {
            match g.issue(now, &self.params) {
                Ok(id) => out.push(id),
                Err(Stall::Borrowed(id)) => {
                    out.push(id);
                    if out.len() < n {
                        return Err(Stall::Yield);
                    }
                }
                Err(stall) => return Err(stall),
            }
        }
        Ok(())
    }
}

pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Snowflake {
    /// The next ID. Completes without waiting on the fast path; waits (asynchronously) for the
    /// next millisecond, a small clock step back, the start-up gap or the next durable mark.
    #[inline]
    pub async fn next_id(&self) -> Result<i64> {
        match self.inner.try_one() {
            Ok(id) => Ok(id),
            // Boxed, so that the fast path's future stays small; the slow path runs at most
            // once per millisecond or on an error.
            Err(stall) => Box::pin(self.inner.next_id_slow(stall)).await,
        }
    }

    /// `n` IDs (`n >= 1`), ascending and unique; spans milliseconds when `n` exceeds what is left
    /// of the current one.
    pub async fn next_ids(&self, n: usize) -> Result<Vec<i64>> {
        if n == 0 {
            return Err(Error::InvalidInput(
                "the number of ids must be at least 1".into(),
            ));
        }
        let inner = &*self.inner;
        let mut out = Vec::with_capacity(n.min(PREALLOC_LIMIT));
        let mut waits = inner.waits();
        let mut filled = 0;
        loop {
            match inner.fill(&mut out, n) {
                Ok(()) => return Ok(out),
                Err(stall) => {
                    // The wait limits apply per stall: a batch that made progress starts afresh.
                    if out.len() > filled {
                        filled = out.len();
                        waits = inner.waits();
                    }
                    inner.wait_out(stall, &mut waits).await?;
                }
            }
        }
    }

    /// Takes an ID apart with this generator's layout.
    pub fn decode(&self, id: i64) -> Result<DecodedId> {
        self.inner.config.layout.decode(id)
    }

    /// The layout in use.
    pub fn layout(&self) -> &SnowflakeLayout {
        &self.inner.config.layout
    }

    /// The configuration in use (`max_startup_wait` raised to `mark_window` if it was below,
    /// `max_borrow` lowered to `mark_window - mark_renew` if it was above).
    pub fn config(&self) -> &SnowflakeConfig {
        &self.inner.config
    }

    /// The node identity the worker id was asked for.
    pub fn identity(&self) -> &NodeIdentity {
        &self.inner.identity
    }

    /// The worker id in use (or last used).
    pub fn worker_id(&self) -> u64 {
        self.inner.lock().lease.worker_id
    }

    /// A snapshot for health checks and metrics.
    pub fn status(&self) -> SnowflakeStatus {
        let inner = &*self.inner;
        let g = inner.lock();
        let now = inner.clock.now_ms();
        let mono = inner.clock.monotonic();
        let fenced = g.fenced(mono);
        let max_wait = millis(inner.config.max_startup_wait);
        let state = match (&g.run, g.clock_ahead) {
            (Run::Closed, _) => SnowflakeState::Closed,
            (_, Some(ahead_ms)) => SnowflakeState::ClockJumped { ahead_ms },
            (Run::Lost(_), None) => SnowflakeState::LeaseLost,
            (Run::Running, None) if fenced => SnowflakeState::LeaseLost,
            (Run::Running, None) => match g.startup_gap(now) {
                Some(gap) if gap > max_wait => SnowflakeState::Unavailable {
                    reason: inner.gap_reason(&g, gap),
                },
                Some(gap) => SnowflakeState::WaitingForClock { behind_ms: gap },
                // Readiness must see what every request would get: past the field's end it is
                // `Exhausted` for good, whatever the mark says.
                None if inner.params.outside_field(now) => match inner.params.out_of_range(now) {
                    Error::Exhausted(reason) => SnowflakeState::Exhausted { reason },
                    e => SnowflakeState::Unavailable {
                        reason: e.to_string(),
                    },
                },
                None if now > g.durable_mark => SnowflakeState::Unavailable {
                    reason: g.mark_reason(),
                },
                None => SnowflakeState::Ready,
            },
        };
        SnowflakeStatus {
            mode: inner.registry.mode(),
            worker_id: g.lease.worker_id,
            lease_ttl_ms: g.lease.ttl.map(millis),
            lease_valid_for_ms: g
                .valid_until
                .map(|until| millis(until.saturating_sub(mono))),
            state,
            durable_mark_ms: g.durable_mark,
            last_timestamp_ms: g.last_issued_ms,
            lead_ms: g.last_ts.saturating_sub(now.max(g.wall_high)),
            clock_behind_ms: if g.fresh {
                0
            } else {
                g.wall_high.saturating_sub(now)
            },
            borrowed_ms_total: g.borrowed_total,
            lease_valid: g.held && matches!(g.run, Run::Running) && !fenced,
            mark_lag_ms: (i128::from(g.durable_mark) - i128::from(now))
                .clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64,
            clock_backwards_total: inner.clock_backwards_total.load(Ordering::Relaxed),
            clock_jumps_total: inner.clock_jumps_total.load(Ordering::Relaxed),
            registry_mark_ms: inner.registry.confirmed_mark_ms(),
        }
    }
}

impl fmt::Debug for Snowflake {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Snowflake")
            .field("worker_id", &self.worker_id())
            .field("layout", self.layout())
            .field("registry", &self.inner.registry.mode())
            .finish_non_exhaustive()
    }
}
