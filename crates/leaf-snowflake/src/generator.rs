//! `Snowflake`: the generator, its durable time high-water mark, lease fencing and renewer.
//!
//! The hot path is one uncontended `std::sync::Mutex` around the generator state and one read
//! of the wall clock (plus the monotonic clock when the lease has a TTL). Everything that waits
//! (a sequence wrap, a small clock step back, the start-up gap, the next durable mark) leaves
//! the lock and waits in the [`Clock`]'s time, so tests drive it with a manual clock.

use std::fmt;
use std::future::{Future, poll_fn};
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::Poll;
use std::time::Duration;

use leaf_core::{
    AcquireRequest, Clock, DecodedId, Error, Lease, NodeIdentity, Renewal, Result, SnowflakeLayout,
    WorkerIdRegistry,
};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::{SnowflakeConfig, SnowflakeState, SnowflakeStatus};

/// Clock reads spent busy-waiting for the next millisecond before sleeping 1 ms instead.
/// A little over a millisecond of reads of the system clock, so that a normal wrap never falls
/// through to the (coarser) sleep; a clock that does not move (a manual clock) falls through
/// after a bounded spin instead of hanging.
const SPIN_LIMIT: u32 = 50_000;

/// How long a sequence wrap waits for a wall clock that does not advance before giving up.
const STALL_LIMIT: Duration = Duration::from_secs(1);

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
}

/// The layout, pre-shifted for the hot path.
#[derive(Clone, Copy, Debug)]
struct Params {
    epoch_ms: u64,
    max_t: u64,
    timestamp_shift: u32,
    sequence_bits: u32,
    max_sequence: u64,
    random_start: u64,
}

impl Params {
    fn new(layout: &SnowflakeLayout, random_start: u64) -> Self {
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
    fn first_sequence(&self) -> u64 {
        if self.random_start > 1 {
            fastrand::u64(0..self.random_start)
        } else {
            0
        }
    }

    #[cold]
    fn out_of_range(&self, now: u64) -> Error {
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

enum Run {
    Running,
    /// The registry answered `LeaseLost`; the renewer tries to acquire a new worker id.
    Lost(String),
    Closed,
}

struct GenState {
    run: Run,
    /// The lease in use, or the last one after it was lost (for its worker id).
    lease: Lease,
    /// Whether `lease` is still ours to renew and release.
    held: bool,
    /// `worker_id << sequence_bits`.
    worker_part: u64,
    /// The last timestamp issued, or the floor (the lease's previous mark) before the first.
    last_ts: u64,
    sequence: u64,
    /// Nothing issued under this lease yet: `last_ts` is the floor and a clock behind it is the
    /// start-up wait, not a clock step back.
    fresh: bool,
    last_issued_ms: Option<u64>,
    durable_mark: u64,
    /// Fencing: the monotonic instant after which nothing is issued (leases with a TTL).
    valid_until: Option<Duration>,
    renew_error: Option<String>,
    gap_logged: bool,
}

/// Why an ID could not be issued at once.
enum Stall {
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
    fn new(lease: Lease, params: &Params) -> Self {
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
        };
        s.install(lease, params);
        s
    }

    /// Switches to `lease`: the next timestamp is above its previous mark and above everything
    /// issued so far, and nothing is issued until its first mark is durable.
    fn install(&mut self, lease: Lease, params: &Params) {
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

    /// Whether anything may be issued now; checked once per lock.
    #[inline]
    fn admit(&self, clock: &dyn Clock) -> Result<(), Stall> {
        if !matches!(self.run, Run::Running) {
            return Err(Stall::Fail(self.halted_error()));
        }
        if let Some(until) = self.valid_until
            && clock.monotonic() >= until
        {
            return Err(Stall::Fail(Error::LeaseLost(format!(
                "worker id {} was not renewed within its lease ttl minus the fencing margin",
                self.lease.worker_id
            ))));
        }
        Ok(())
    }

    #[cold]
    fn halted_error(&self) -> Error {
        match &self.run {
            Run::Lost(reason) => Error::LeaseLost(reason.clone()),
            _ => closed_error(),
        }
    }

    #[inline]
    fn issue(&mut self, now: u64, p: &Params) -> Result<i64, Stall> {
        if now == self.last_ts {
            if self.sequence >= p.max_sequence {
                return Err(Stall::NextMs { last_ts: now });
            }
            self.sequence += 1;
        } else if now > self.last_ts {
            // One comparison catches both ends: before the epoch wraps around to a huge value.
            if now.wrapping_sub(p.epoch_ms) > p.max_t {
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

    fn fenced(&self, mono: Duration) -> bool {
        self.valid_until.is_some_and(|until| mono >= until)
    }

    /// The start-up gap, when the clock is behind the floor before the first ID.
    fn startup_gap(&self, now: u64) -> Option<u64> {
        (self.fresh && now < self.last_ts).then(|| self.last_ts - now)
    }

    fn mark_reason(&self) -> String {
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

fn closed_error() -> Error {
    Error::Unavailable("the snowflake generator is shut down".into())
}

/// Per-call bookkeeping of the waits, so that no call waits without bound.
struct Waits {
    since: Duration,
    waited_back: bool,
    counted_back: bool,
    mark_deadline: Option<Duration>,
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
        g.admit(&*self.clock)?;
        // Read under the lock: a reading taken before it could be older than a timestamp
        // another thread issued meanwhile and look like a clock step back.
        let now = self.clock.now_ms();
        g.issue(now, &self.params)
    }

    fn fill(&self, out: &mut Vec<i64>, n: usize) -> Result<(), Stall> {
        let mut g = self.lock();
        g.admit(&*self.clock)?;
        let mut now = self.clock.now_ms();
        while out.len() < n {
            match g.issue(now, &self.params) {
                Ok(id) => out.push(id),
                Err(Stall::NextMs { last_ts }) => {
                    now = self.clock.now_ms();
                    if now == last_ts {
                        return Err(Stall::NextMs { last_ts });
                    }
                    // A long batch re-checks fencing every millisecond.
                    g.admit(&*self.clock)?;
                }
                Err(stall) => return Err(stall),
            }
        }
        Ok(())
    }

    fn waits(&self) -> Waits {
        Waits {
            since: self.clock.monotonic(),
            waited_back: false,
            counted_back: false,
            mark_deadline: None,
        }
    }

    async fn next_id_slow(&self, mut stall: Stall) -> Result<i64> {
        let mut waits = self.waits();
        loop {
            self.wait_out(stall, &mut waits).await?;
            match self.try_one() {
                Ok(id) => return Ok(id),
                Err(next) => stall = next,
            }
        }
    }

    /// Waits until `stall` may have cleared, or fails when it cannot clear in time.
    async fn wait_out(&self, stall: Stall, w: &mut Waits) -> Result<()> {
        let cfg = &self.config;
        match stall {
            Stall::Fail(e) => Err(e),
            Stall::NextMs { last_ts } => {
                // Sleeping ~1 ms here would lose most of a millisecond's IDs; spin instead.
                for _ in 0..SPIN_LIMIT {
                    if self.clock.now_ms() != last_ts {
                        return Ok(());
                    }
                    std::hint::spin_loop();
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

    fn gap_reason(&self, g: &GenState, gap_ms: u64) -> String {
        format!(
            "the clock is {gap_ms} ms behind worker id {}'s previous mark {} ms, more than \
             snowflake.max_startup_wait_ms ({}); waiting for it to catch up",
            g.lease.worker_id,
            g.last_ts,
            millis(self.config.max_startup_wait)
        )
    }

    fn acquire_request(&self, now_ms: u64) -> AcquireRequest {
        AcquireRequest {
            identity: self.identity.clone(),
            max_worker_id: self.config.layout.max_worker_id(),
            now_ms,
            max_ahead_ms: millis(self.config.max_startup_wait),
        }
    }

    /// Acquires a new worker id after the last one was lost.
    async fn reacquire(&self) -> Result<Lease> {
        let req = self.acquire_request(self.clock.now_ms());
        let lease = match self.registry.acquire(&req).await {
            Ok(lease) => lease,
            Err(e) => {
                tracing::warn!(error = %e, "snowflake could not acquire a new worker id");
                return Err(e);
            }
        };
        if let Err(e) = check_lease(&lease, &self.config, self.registry.mode()) {
            // Best effort: the id is unusable either way.
            let _ = self
                .registry
                .release(&lease, lease.prev_mark_ms.unwrap_or(0))
                .await;
            return Err(e);
        }
        tracing::info!(
            worker_id = lease.worker_id,
            prev_mark_ms = ?lease.prev_mark_ms,
            "snowflake acquired a new worker id"
        );
        self.lock().install(lease.clone(), &self.params);
        Ok(lease)
    }

    /// Logs when the start-up gap makes the generator unavailable, and when it recovers.
    fn log_clock_gap(&self) {
        let now = self.clock.now_ms();
        let mut g = self.lock();
        let far = g
            .startup_gap(now)
            .filter(|gap| *gap > millis(self.config.max_startup_wait));
        match far {
            Some(gap) if !g.gap_logged => {
                g.gap_logged = true;
                tracing::error!("snowflake unavailable: {}", self.gap_reason(&g, gap));
            }
            None if g.gap_logged => {
                g.gap_logged = false;
                tracing::info!("snowflake clock caught up with the previous mark");
            }
            _ => {}
        }
    }

    fn is_closed(&self) -> bool {
        matches!(self.lock().run, Run::Closed)
    }
}

/// Checks what the generator needs from a lease the registry returned.
fn check_lease(lease: &Lease, config: &SnowflakeConfig, mode: &str) -> Result<()> {
    let layout = &config.layout;
    if lease.worker_id > layout.max_worker_id() {
        return Err(Error::Config(format!(
            "worker id {} from the {mode} registry does not fit snowflake.worker_bits = {} \
             (largest worker id {})",
            lease.worker_id,
            layout.worker_bits(),
            layout.max_worker_id()
        )));
    }
    if let Some(ttl) = lease.ttl
        && ttl <= config.fencing_margin
    {
        return Err(Error::Config(format!(
            "snowflake.fencing_margin_ms ({}) must be below the {mode} registry's lease ttl \
             ({} ms)",
            millis(config.fencing_margin),
            millis(ttl)
        )));
    }
    Ok(())
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Runs two futures until either finishes.
async fn race(a: impl Future<Output = ()>, b: impl Future<Output = ()>) {
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

impl Snowflake {
    /// Validates the layout against the clock, acquires a worker id and makes the first durable
    /// mark. Does not spawn the renewer (see [`spawn_renewer`](Self::spawn_renewer)).
    ///
    /// Succeeds when the clock is too far behind the worker id's previous mark; the generator
    /// is then unavailable until the clock catches up (see [`status`](Self::status)).
    pub async fn start(
        registry: Arc<dyn WorkerIdRegistry>,
        identity: NodeIdentity,
        clock: Arc<dyn Clock>,
        config: SnowflakeConfig,
    ) -> Result<Snowflake> {
        let config = config.validated()?;
        let layout = config.layout;
        let now = clock.now_ms();
        layout.check_now(now)?;
        let params = Params::new(&layout, config.random_start);
        let mode = registry.mode();
        let req = AcquireRequest {
            identity: identity.clone(),
            max_worker_id: layout.max_worker_id(),
            now_ms: now,
            max_ahead_ms: millis(config.max_startup_wait),
        };
        let lease = registry.acquire(&req).await?;
        let prev = lease.prev_mark_ms.unwrap_or(0);
        if let Err(e) = check_lease(&lease, &config, mode) {
            let _ = registry.release(&lease, prev).await;
            return Err(e);
        }
        tracing::info!(
            mode,
            worker_id = lease.worker_id,
            prev_mark_ms = ?lease.prev_mark_ms,
            lease_ttl_ms = lease.ttl.map(millis),
            "snowflake layout: {}",
            layout.describe(now)
        );
        let state = GenState::new(lease.clone(), &params);
        let sf = Snowflake {
            inner: Arc::new(Inner {
                params,
                config,
                registry,
                identity,
                clock,
                state: Mutex::new(state),
                renewed: Notify::new(),
                stop: Arc::new(Notify::new()),
                renewing: tokio::sync::Mutex::new(()),
                clock_backwards_total: AtomicU64::new(0),
            }),
        };
        match sf.renew_once().await {
            Ok(Renewal::Ok) => {}
            Ok(Renewal::LeaseLost) => {
                return Err(Error::LeaseLost(format!(
                    "the {mode} registry took worker id {} back before its first mark",
                    lease.worker_id
                )));
            }
            Err(e) => {
                // Nothing was issued, so the previous mark is still the right final mark.
                let _ = sf.inner.registry.release(&lease, prev).await;
                return Err(e);
            }
        }
        sf.inner.log_clock_gap();
        Ok(sf)
    }

    /// Spawns the renewer on the current tokio runtime: one [`renew_once`](Self::renew_once)
    /// every `mark_renew` until [`shutdown`](Self::shutdown) or until every handle is dropped.
    pub fn spawn_renewer(&self) -> JoinHandle<()> {
        // A weak handle, so that dropping the generator (a simulated crash) ends the renewer.
        let weak = Arc::downgrade(&self.inner);
        let clock = Arc::clone(&self.inner.clock);
        let stop = Arc::clone(&self.inner.stop);
        let period = self.inner.config.mark_renew;
        tokio::spawn(async move {
            loop {
                let mut stopped = pin!(stop.notified());
                stopped.as_mut().enable();
                match weak.upgrade() {
                    Some(inner) if !inner.is_closed() => {}
                    _ => return,
                }
                race(stopped, clock.sleep(period)).await;
                let Some(inner) = weak.upgrade() else { return };
                if inner.is_closed() {
                    return;
                }
                // Failures are logged and kept for `status`; the next tick retries.
                let _ = Snowflake { inner }.renew_once().await;
            }
        })
    }

    /// One renewal step: re-acquires a worker id if the last one was lost, then writes
    /// `mark = max(previous mark, now + mark_window)`. On `Renewal::Ok` the mark becomes durable
    /// and, with a lease TTL, issuing may go on until the monotonic time read before the call
    /// plus the TTL minus `fencing_margin`. `Renewal::LeaseLost` stops issuing at once.
    pub async fn renew_once(&self) -> Result<Renewal> {
        let inner = &*self.inner;
        let _turn = inner.renewing.lock().await;
        let (lease, lost) = {
            let g = inner.lock();
            match g.run {
                Run::Closed => return Err(closed_error()),
                Run::Lost(_) => (g.lease.clone(), true),
                Run::Running => (g.lease.clone(), false),
            }
        };
        let lease = if lost {
            inner.reacquire().await?
        } else {
            lease
        };
        // Fencing counts from before the call: the lease may have been extended at any moment
        // after this.
        let before = inner.clock.monotonic();
        let now = inner.clock.now_ms();
        let mark = {
            let g = inner.lock();
            g.durable_mark
                .max(g.last_ts)
                .max(now.saturating_add(millis(inner.config.mark_window)))
        };
        let result = inner.registry.renew(&lease, mark).await;
        let worker_id = lease.worker_id;
        match result {
            Ok(Renewal::Ok) => {
                {
                    let mut g = inner.lock();
                    if !matches!(g.run, Run::Running) || g.lease != lease {
                        return Ok(Renewal::Ok);
                    }
                    g.durable_mark = g.durable_mark.max(mark);
                    g.valid_until = lease
                        .ttl
                        .map(|ttl| before + ttl.saturating_sub(inner.config.fencing_margin));
                    if g.renew_error.take().is_some() {
                        tracing::info!(worker_id, mark_ms = mark, "snowflake mark renewed again");
                    }
                }
                inner.renewed.notify_waiters();
                inner.log_clock_gap();
                Ok(Renewal::Ok)
            }
            Ok(Renewal::LeaseLost) => {
                {
                    let mut g = inner.lock();
                    g.held = false;
                    if matches!(g.run, Run::Running) {
                        g.run = Run::Lost(format!(
                            "the {} registry reports worker id {worker_id} lost",
                            inner.registry.mode()
                        ));
                    }
                }
                tracing::error!(
                    worker_id,
                    "snowflake worker id lease lost; issuing stopped until a new id is acquired"
                );
                inner.renewed.notify_waiters();
                Ok(Renewal::LeaseLost)
            }
            Err(e) => {
                tracing::warn!(worker_id, mark_ms = mark, error = %e, "snowflake mark renewal failed");
                inner.lock().renew_error = Some(e.to_string());
                Err(e)
            }
        }
    }

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

    /// The configuration in use (`max_startup_wait` raised to `mark_window` if it was below).
    pub fn config(&self) -> &SnowflakeConfig {
        &self.inner.config
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
        let fenced = g.fenced(inner.clock.monotonic());
        let max_wait = millis(inner.config.max_startup_wait);
        let state = match g.run {
            Run::Closed => SnowflakeState::Closed,
            Run::Lost(_) => SnowflakeState::LeaseLost,
            Run::Running if fenced => SnowflakeState::LeaseLost,
            Run::Running => match g.startup_gap(now) {
                Some(gap) if gap > max_wait => SnowflakeState::Unavailable {
                    reason: inner.gap_reason(&g, gap),
                },
                Some(gap) => SnowflakeState::WaitingForClock { behind_ms: gap },
                None if now > g.durable_mark => SnowflakeState::Unavailable {
                    reason: g.mark_reason(),
                },
                None => SnowflakeState::Ready,
            },
        };
        SnowflakeStatus {
            worker_id: g.lease.worker_id,
            state,
            durable_mark_ms: g.durable_mark,
            last_timestamp_ms: g.last_issued_ms,
            lease_valid: g.held && matches!(g.run, Run::Running) && !fenced,
            mark_lag_ms: (i128::from(g.durable_mark) - i128::from(now))
                .clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64,
            clock_backwards_total: inner.clock_backwards_total.load(Ordering::Relaxed),
        }
    }

    /// Stops issuing, stops the renewer, and releases the worker id with the last timestamp
    /// actually issued (or the previous mark if none) as its final mark, so that a clean
    /// restart does not wait. Later calls do nothing.
    pub async fn shutdown(&self) -> Result<()> {
        let inner = &*self.inner;
        {
            let mut g = inner.lock();
            if matches!(g.run, Run::Closed) {
                return Ok(());
            }
            g.run = Run::Closed;
        }
        inner.stop.notify_waiters();
        inner.renewed.notify_waiters();
        // An in-flight renewal finishes first, so the final mark is the last write.
        let _turn = inner.renewing.lock().await;
        let (lease, held, final_mark) = {
            let g = inner.lock();
            (g.lease.clone(), g.held, g.last_ts)
        };
        if !held {
            // A lost lease is not ours to release.
            return Ok(());
        }
        inner.registry.release(&lease, final_mark).await?;
        inner.lock().held = false;
        tracing::info!(
            worker_id = lease.worker_id,
            final_mark_ms = final_mark,
            "snowflake worker id released"
        );
        Ok(())
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
