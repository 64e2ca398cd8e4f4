//! [`Leader`]: one node's part in the monotonic mode. Every node campaigns for one cluster-wide
//! claim, a worker id from a pool of one in a registry of its own; the holder is the leader.
//! The claim's confirmed mark is the leader's window: the leader confirms it ahead of the
//! clock, issues only below it, and stops issuing a fencing margin before its lease could end.
//! A new holder reads the last confirmed mark with its claim and starts above it.

use std::ops::RangeInclusive;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use leaf_core::{
    AcquireRequest, Clock, Error, Lease, NodeIdentity, Renewal, Result, WorkerIdRegistry,
    min_lease_ttl,
};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::{MAX_ISSUE, MonotonicLayout, NotIssued, Oracle};
use crate::generator::millis;

/// A follower asks for the claim this many times per renew period.
const FOLLOWER_ROUNDS: u32 = 4;

/// How many times a shutdown tries to release the claim.
const RELEASE_ATTEMPTS: u64 = 3;

/// How many times one request asks for a longer window before it gives up.
const WINDOW_TRIES: usize = 3;

/// The leader's timing and layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaderConfig {
    /// The IDs' layout.
    pub layout: MonotonicLayout,
    /// How far ahead of the clock a confirmed window ends (`monotonic.window_ms`): the longest
    /// the leader issues without the backend, and how far IDs may run ahead of real time.
    pub window: Duration,
    /// How often the leader renews its claim and window, and a follower asks for the claim.
    pub renew: Duration,
    /// How long before its lease could end the leader stops issuing.
    pub fencing_margin: Duration,
    /// A claim whose confirmed window is further ahead of this node's clock than this is not
    /// taken up: a clock that ran far ahead once (or a stale mark) would otherwise move every
    /// later leader's IDs there for good.
    pub max_ahead: Duration,
    /// A wall clock further ahead than this of the monotonic clock's reckoning since the last
    /// renewal is not trusted: nothing is issued from it, and no window is confirmed from it,
    /// until it comes back (as `snowflake.max_forward_step_ms`).
    pub max_forward_step: Duration,
}

impl LeaderConfig {
    /// Defaults: a 3 s window, renewals every second, a one-second fencing margin.
    pub fn new(layout: MonotonicLayout) -> Self {
        LeaderConfig {
            layout,
            window: Duration::from_secs(3),
            renew: Duration::from_secs(1),
            fencing_margin: Duration::from_secs(1),
            max_ahead: Duration::from_secs(10),
            max_forward_step: Duration::from_secs(60),
        }
    }
}

/// Why [`Leader::issue`] handed out nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Another node leads (or none yet): the request belongs there. `leader` is its identity
    /// where the registry records it with the claim.
    NotLeader {
        /// The leader's `ip:port`, when known.
        leader: Option<String>,
    },
    /// This node leads but cannot issue now: why.
    Unavailable(String),
    /// More than [`MAX_ISSUE`] IDs in one request.
    TooMany {
        /// The largest request.
        max: u64,
    },
    /// The layout's last ID was issued.
    Exhausted,
}

/// A snapshot for health checks, the console and metrics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderStatus {
    /// Whether this node holds the claim and may issue now.
    pub leader: bool,
    /// The leader's identity when another node leads and the registry records it.
    pub leader_hint: Option<String>,
    /// The end of the confirmed window (Unix ms); 0 on a follower.
    pub window_end_ms: u64,
    /// The last ID issued by this node while leading (or the floor below its first).
    pub last_id: u64,
    /// How long the lease still lets this leader issue; `None` without a lease TTL.
    pub lease_valid_for_ms: Option<u64>,
    /// The lease's TTL while leading; `None` without one, or on a follower.
    pub lease_ttl_ms: Option<u64>,
    /// Times this node became leader.
    pub elections: u64,
    /// Windows the backend confirmed.
    pub window_renewals: u64,
    /// Times this node stopped leading: its lease lost, or its fence reached.
    pub fences: u64,
    /// The last failure of a renewal or a claim, until one succeeds.
    pub last_error: Option<String>,
}

enum Run {
    Following,
    Leading(Held),
    Closed,
}

struct Held {
    lease: Lease,
    oracle: Oracle,
    /// Issuing stops at this monotonic instant (the lease's TTL from before the last renewal
    /// that reached the backend, minus the fencing margin); `None` without a TTL.
    valid_until: Option<Duration>,
    /// Whether the fence was counted already.
    fenced: bool,
    /// The confirmed window read with the claim: where this leader's IDs start.
    floor_ms: u64,
    /// The monotonic and wall clocks read together at the last renewal (or the claim): what
    /// the wall clock should say now, give or take `max_forward_step`.
    reckoning: (Duration, u64),
}

struct State {
    run: Run,
    leader_hint: Option<String>,
    last_error: Option<String>,
}

struct Inner {
    registry: Arc<dyn WorkerIdRegistry>,
    identity: NodeIdentity,
    clock: Arc<dyn Clock>,
    config: LeaderConfig,
    state: Mutex<State>,
    /// One claim, renewal or release at a time, so that windows are written in order.
    turn: tokio::sync::Mutex<()>,
    stop: Notify,
    elections: AtomicU64,
    window_renewals: AtomicU64,
    fences: AtomicU64,
}

/// One node's part in the monotonic mode. Cheap to clone: clones share it.
#[derive(Clone)]
pub struct Leader {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Leader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leader")
            .field("registry", &self.inner.registry.mode())
            .field("identity", &self.inner.identity)
            .field("leader", &self.status().leader)
            .finish_non_exhaustive()
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing panics while holding the lock; a poisoned lock still holds consistent state.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The worker ids the claim may take: a pool of one where ids are recycled; elsewhere the
    /// identity keeps the id it was given, whatever its number.
    fn max_worker_id(&self) -> u64 {
        if self.registry.capabilities().recycles {
            0
        } else {
            u64::MAX >> 1
        }
    }

    /// The wall clock, unless it ran further ahead of `reckoning` than `max_forward_step`:
    /// then `Err(the reckoned time, how far ahead it is)`.
    fn wall_clock(&self, reckoning: (Duration, u64)) -> std::result::Result<u64, (u64, u64)> {
        let (mono_then, wall_then) = reckoning;
        let reckoned =
            wall_then.saturating_add(millis(self.clock.monotonic().saturating_sub(mono_then)));
        let now = self.clock.now_ms();
        let ahead = now.saturating_sub(reckoned);
        if ahead > millis(self.config.max_forward_step) {
            Err((reckoned, ahead))
        } else {
            Ok(now)
        }
    }

    fn try_issue(&self, n: u64) -> std::result::Result<RangeInclusive<u64>, Attempt> {
        let mut g = self.lock();
        let State {
            run, leader_hint, ..
        } = &mut *g;
        let held = match run {
            Run::Closed => {
                return Err(Attempt::Refused(Refusal::Unavailable(
                    "the monotonic mode is shut down".into(),
                )));
            }
            Run::Following => {
                return Err(Attempt::Refused(Refusal::NotLeader {
                    leader: leader_hint.clone(),
                }));
            }
            Run::Leading(held) => held,
        };
        if let Some(until) = held.valid_until
            && self.clock.monotonic() >= until
        {
            if !held.fenced {
                held.fenced = true;
                self.fences.fetch_add(1, Ordering::Relaxed);
                tracing::error!(
                    "monotonic leader fenced: its lease was not renewed in time; issuing stopped \
                     until a renewal reaches the backend"
                );
            }
            return Err(Attempt::Refused(Refusal::Unavailable(
                "the monotonic leader's lease was not renewed in time (the backend is slow or \
                 unreachable)"
                    .into(),
            )));
        }
        let now = match self.wall_clock(held.reckoning) {
            Ok(now) => now,
            Err((_, ahead_ms)) => {
                return Err(Attempt::Refused(Refusal::Unavailable(format!(
                    "the wall clock jumped {ahead_ms} ms ahead of the monotonic clock; monotonic \
                     IDs wait for it to come back"
                ))));
            }
        };
        match held.oracle.issue(now, n) {
            Ok(ids) => Ok(ids),
            Err(NotIssued::NeedWindow { past_ms }) => Err(Attempt::Window(past_ms)),
            Err(NotIssued::TooMany) => Err(Attempt::Refused(Refusal::TooMany { max: MAX_ISSUE })),
            Err(NotIssued::Exhausted) => Err(Attempt::Refused(Refusal::Exhausted)),
        }
    }

    /// Asks for the claim. Call with `turn` held.
    async fn campaign(&self) -> Result<()> {
        let before = self.clock.monotonic();
        let now = self.clock.now_ms();
        let req = AcquireRequest::new(self.identity.clone(), self.max_worker_id(), now)
            // A pool of one: its mark is wherever the last leader left it, and is never skipped.
            .with_max_ahead_ms(u64::MAX)
            .with_timing(self.config.renew, self.config.fencing_margin);
        let lease = match self.registry.acquire(&req).await {
            Ok(lease) => lease,
            Err(e) => {
                // Held by another node (or the backend is away): remember who leads, if told.
                // A failed read keeps the last answer; this node's own identity (its claim from
                // before a restart, not yet expired) is no leader to forward to.
                let me = self.identity.to_string();
                let read = self.registry.holder(0).await;
                let mut g = self.lock();
                if let Ok(hint) = read {
                    g.leader_hint = hint.filter(|h| *h != me);
                }
                g.last_error = Some(e.to_string());
                return Err(e);
            }
        };
        let min = min_lease_ttl(self.config.renew, self.config.fencing_margin);
        if let Some(ttl) = lease.ttl
            && ttl <= min
        {
            self.registry.abandon(&lease).await;
            return Err(Error::Config(format!(
                "the {} registry's lease ttl ({} ms) must be above {} ms for the monotonic \
                 leader to renew within it",
                self.registry.mode(),
                millis(ttl),
                millis(min)
            )));
        }
        let confirmed = lease.prev_mark_ms.unwrap_or(0);
        let ahead = confirmed.saturating_sub(now);
        if ahead > millis(self.config.max_ahead) {
            // Given back with its mark as it was: another node, or this one once its clock
            // caught up, takes it.
            if self.registry.release(&lease, confirmed).await.is_err() {
                self.registry.abandon(&lease).await;
            }
            let why = format!(
                "the monotonic claim's confirmed window is {ahead} ms ahead of this node's clock, \
                 more than {} ms: not leading until the clock catches up (check the clocks)",
                millis(self.config.max_ahead)
            );
            tracing::error!("{why}");
            self.lock().last_error = Some(why.clone());
            return Err(Error::Unavailable(why));
        }
        tracing::info!(
            mode = self.registry.mode(),
            confirmed_window_ms = confirmed,
            "monotonic leader elected: this node holds the claim and starts above the last \
             confirmed window"
        );
        let closed = {
            let mut g = self.lock();
            let closed = matches!(g.run, Run::Closed);
            if !closed {
                g.run = Run::Leading(Held {
                    valid_until: lease
                        .ttl
                        .map(|ttl| before + ttl.saturating_sub(self.config.fencing_margin)),
                    oracle: Oracle::after(self.config.layout, confirmed),
                    lease: lease.clone(),
                    fenced: false,
                    floor_ms: confirmed,
                    reckoning: (before, now),
                });
                g.leader_hint = Some(self.identity.to_string());
            }
            closed
        };
        if closed {
            // Nothing was issued under it: the confirmed window it read is its final mark.
            if self.registry.release(&lease, confirmed).await.is_err() {
                self.registry.abandon(&lease).await;
            }
            return Ok(());
        }
        self.elections.fetch_add(1, Ordering::Relaxed);
        // The first window, before anything is issued.
        self.renew(None).await
    }

    /// Confirms a window ending `window` after the clock (or after `need`, the millisecond a
    /// request would reach) and extends the lease. Call with `turn` held.
    async fn renew(&self, need: Option<u64>) -> Result<()> {
        let (lease, window_end, floor, reckoning) = match &self.lock().run {
            Run::Leading(h) => (
                h.lease.clone(),
                h.oracle.window_end_ms(),
                h.floor_ms,
                h.reckoning,
            ),
            _ => return Ok(()),
        };
        if need.is_some_and(|past| past < window_end) {
            // Another request's renewal covered this one meanwhile.
            return Ok(());
        }
        let before = self.clock.monotonic();
        // A wall clock that jumped ahead confirms no window from where it jumped to: the
        // renewal extends the lease and the window from the reckoned time instead.
        let (now, trusted) = match self.wall_clock(reckoning) {
            Ok(now) => (now, true),
            Err((reckoned, ahead_ms)) => {
                tracing::error!(
                    ahead_ms,
                    "monotonic leader: the wall clock jumped ahead of the monotonic clock; no \
                     window is confirmed from it until it comes back"
                );
                (reckoned, false)
            }
        };
        let window = millis(self.config.window);
        // IDs never run further ahead of the clock than one window (or of the window this
        // leader started from, when its clock is behind the last one's): a burst past that
        // (more than 4,194,304 IDs a millisecond for a whole window) is refused until the
        // clock catches up, instead of pushing every later leader's start ahead.
        let limit = now.max(floor).saturating_add(window);
        if let Some(past) = need
            && past >= limit
        {
            return Err(Error::Unavailable(format!(
                "the monotonic IDs asked for would run {} ms ahead of the clock, more than \
                 monotonic.window_ms ({window}); retry",
                past.saturating_sub(now)
            )));
        }
        let mark = now
            .max(need.unwrap_or(0))
            .saturating_add(window)
            .max(window_end);
        match self.registry.renew(&lease, mark).await {
            Ok(Renewal::Ok { ttl }) => {
                let mut g = self.lock();
                if let Run::Leading(h) = &mut g.run
                    && h.lease == lease
                {
                    h.oracle.extend(mark);
                    if trusted {
                        h.reckoning = (before, now);
                    }
                    h.valid_until = ttl
                        .or(lease.ttl)
                        .map(|ttl| before + ttl.saturating_sub(self.config.fencing_margin));
                    if h.fenced {
                        h.fenced = false;
                        tracing::info!("monotonic leader renewed again; issuing resumes");
                    }
                }
                g.last_error = None;
                drop(g);
                self.window_renewals.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Ok(Renewal::LeaseLost) => {
                self.step_down(&lease, "the backend reports the claim lost")
                    .await;
                Err(Error::LeaseLost(
                    "the monotonic leader's claim was lost".into(),
                ))
            }
            Err(e) => {
                tracing::warn!(mark_ms = mark, error = %e, "monotonic window renewal failed");
                self.lock().last_error = Some(e.to_string());
                Err(e)
            }
        }
    }

    async fn step_down(&self, lease: &Lease, why: &str) {
        {
            let mut g = self.lock();
            if let Run::Leading(h) = &g.run
                && h.lease == *lease
            {
                g.run = Run::Following;
                g.leader_hint = None;
            }
        }
        self.fences.fetch_add(1, Ordering::Relaxed);
        tracing::error!("monotonic leader stepped down: {why}");
        self.registry.abandon(lease).await;
    }
}

enum Attempt {
    Refused(Refusal),
    Window(u64),
}

impl Leader {
    /// A node that has not asked for the claim yet: [`step`](Self::step) or
    /// [`spawn`](Self::spawn) does. `registry` is the claim's own, apart from the worker ids'.
    pub fn new(
        registry: Arc<dyn WorkerIdRegistry>,
        identity: NodeIdentity,
        clock: Arc<dyn Clock>,
        config: LeaderConfig,
    ) -> Leader {
        Leader {
            inner: Arc::new(Inner {
                registry,
                identity,
                clock,
                config,
                state: Mutex::new(State {
                    run: Run::Following,
                    leader_hint: None,
                    last_error: None,
                }),
                turn: tokio::sync::Mutex::new(()),
                stop: Notify::new(),
                elections: AtomicU64::new(0),
                window_renewals: AtomicU64::new(0),
                fences: AtomicU64::new(0),
            }),
        }
    }

    /// The layout of the IDs.
    pub fn layout(&self) -> MonotonicLayout {
        self.inner.config.layout
    }

    /// One round: a follower asks for the claim (and, elected, confirms its first window); the
    /// leader renews its window and lease.
    pub async fn step(&self) -> Result<()> {
        let inner = &*self.inner;
        let _turn = inner.turn.lock().await;
        let leading = match &inner.lock().run {
            Run::Closed => return Ok(()),
            Run::Following => false,
            Run::Leading(_) => true,
        };
        if leading {
            inner.renew(None).await
        } else {
            inner.campaign().await
        }
    }

    /// Spawns the loop of [`step`](Self::step)s, one every `renew` while leading and four times
    /// as often while following, until
    /// [`shutdown`](Self::shutdown) or until every handle is dropped.
    pub fn spawn(&self) -> JoinHandle<()> {
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        let period = self.inner.config.renew;
        let clock = Arc::clone(&self.inner.clock);
        tokio::spawn(async move {
            loop {
                let Some(inner) = weak.upgrade() else { return };
                if matches!(inner.lock().run, Run::Closed) {
                    return;
                }
                // Failures are kept for `status`; the next round tries again.
                let _ = Leader {
                    inner: Arc::clone(&inner),
                }
                .step()
                .await;
                // A follower asks four times as often: a claim that ends is taken within a
                // quarter of a renewal, so that a failover costs little more than the lease.
                let pause = match inner.lock().run {
                    Run::Leading(_) => period,
                    _ => period / FOLLOWER_ROUNDS,
                };
                let stop = Arc::clone(&inner);
                drop(inner);
                let mut stopped = pin!(stop.stop.notified());
                stopped.as_mut().enable();
                crate::generator::race(stopped, clock.sleep(pause)).await;
                if weak
                    .upgrade()
                    .is_none_or(|i| matches!(i.lock().run, Run::Closed))
                {
                    return;
                }
            }
        })
    }

    /// `n` IDs (1 to [`MAX_ISSUE`]), ascending, each above every ID any leader issued before
    /// this call began. Waits only for the backend to confirm a longer window when the IDs
    /// would reach it.
    pub async fn issue(&self, n: u64) -> std::result::Result<RangeInclusive<u64>, Refusal> {
        let inner = &*self.inner;
        for _ in 0..WINDOW_TRIES {
            match inner.try_issue(n) {
                Ok(ids) => return Ok(ids),
                Err(Attempt::Refused(r)) => return Err(r),
                Err(Attempt::Window(past_ms)) => {
                    let _turn = inner.turn.lock().await;
                    match inner.renew(Some(past_ms)).await {
                        Ok(()) => {}
                        Err(Error::Unavailable(why)) => return Err(Refusal::Unavailable(why)),
                        Err(e) => {
                            return Err(Refusal::Unavailable(format!(
                                "the backend did not confirm a longer window: {e}"
                            )));
                        }
                    }
                }
            }
        }
        Err(Refusal::Unavailable(
            "the window could not be extended in time".into(),
        ))
    }

    /// A snapshot of this node's part.
    pub fn status(&self) -> LeaderStatus {
        let inner = &*self.inner;
        let g = inner.lock();
        let mono = inner.clock.monotonic();
        let (leader, window_end_ms, last_id, lease_valid_for_ms, lease_ttl_ms) = match &g.run {
            Run::Leading(h) => (
                h.valid_until.is_none_or(|until| mono < until),
                h.oracle.window_end_ms(),
                h.oracle.last(),
                h.valid_until
                    .map(|until| millis(until.saturating_sub(mono))),
                h.lease.ttl.map(millis),
            ),
            _ => (false, 0, 0, None, None),
        };
        LeaderStatus {
            leader,
            leader_hint: g.leader_hint.clone(),
            window_end_ms,
            last_id,
            lease_valid_for_ms,
            lease_ttl_ms,
            elections: inner.elections.load(Ordering::Relaxed),
            window_renewals: inner.window_renewals.load(Ordering::Relaxed),
            fences: inner.fences.load(Ordering::Relaxed),
            last_error: g.last_error.clone(),
        }
    }

    /// Stops issuing and the loop and, while leading, releases the claim with a final mark just
    /// above the last ID issued, so that the next leader starts there. An error leaves the
    /// claim to expire (its mark is the last confirmed window, still above every ID issued).
    pub async fn shutdown(&self) -> Result<()> {
        let inner = &*self.inner;
        let run = std::mem::replace(&mut inner.lock().run, Run::Closed);
        inner.stop.notify_waiters();
        // A renewal in flight finishes first, so the final mark is the last write.
        let _turn = inner.turn.lock().await;
        let Run::Leading(held) = run else {
            return Ok(());
        };
        let layout = inner.config.layout;
        let final_mark = layout.ms_of(held.oracle.last()).saturating_add(1);
        // A release that fails (the backend briefly away) is tried again a few times; after
        // that the claim expires with its lease, its mark the last confirmed window.
        let mut attempt = 1;
        loop {
            match inner.registry.release(&held.lease, final_mark).await {
                Ok(()) => break,
                Err(e) if attempt < RELEASE_ATTEMPTS => {
                    tracing::warn!(attempt, error = %e, "monotonic claim release failed; retrying");
                    attempt += 1;
                    inner
                        .clock
                        .sleep(Duration::from_millis(200 * attempt))
                        .await;
                }
                Err(e) => return Err(e),
            }
        }
        tracing::info!(
            final_mark_ms = final_mark,
            "monotonic leader claim released"
        );
        Ok(())
    }
}
