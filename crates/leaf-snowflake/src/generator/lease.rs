//! The lease side of the generator: start-up, the renewer, re-acquiring a lost worker id and
//! the release at shutdown.

use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leaf_core::{
    AcquireRequest, Clock, Error, LEASE_LATENCY_ALLOWANCE, Lease, NodeIdentity, Renewal, Result,
    WorkerIdRegistry, min_lease_ttl,
};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::state::{ClockCheck, GenState, Params, Reckoning, Run, closed_error};
use super::wait::race;
use super::{Inner, Snowflake, millis};
use crate::SnowflakeConfig;

impl Inner {
    pub(super) fn acquire_request(&self, now_ms: u64) -> AcquireRequest {
        acquire_request(&self.config, self.identity.clone(), now_ms)
    }

    /// Reads both clocks and checks the wall clock against the reckoning (logging and counting
    /// a jump): `(monotonic, wall, trusted)`.
    fn read_clock(&self) -> (Duration, u64, bool) {
        let mono = self.clock.monotonic();
        let now = self.clock.now_ms();
        let max_step_ms = millis(self.config.max_forward_step);
        let check = self.lock().check_clock(now, mono, max_step_ms);
        match check {
            ClockCheck::Trusted => {}
            ClockCheck::Resumed => {
                tracing::info!(
                    now_ms = now,
                    "snowflake resumes: the wall clock is back within the monotonic clock's reckoning"
                );
            }
            ClockCheck::Jumped { ahead_ms } => {
                self.clock_jumps_total.fetch_add(1, Ordering::Relaxed);
                tracing::error!(
                    ahead_ms,
                    max_forward_step_ms = max_step_ms,
                    now_ms = now,
                    "snowflake stopped: the wall clock jumped ahead of the monotonic clock; no \
                     time mark is written from it until it comes back (a restart trusts it)"
                );
                // Requests waiting for a mark fail now instead of at their deadline.
                self.renewed.notify_waiters();
            }
            ClockCheck::StillAhead { .. } => {}
        }
        let trusted = matches!(check, ClockCheck::Trusted | ClockCheck::Resumed);
        (mono, now, trusted)
    }

    /// Acquires a new worker id after the last one was lost.
    pub(super) async fn reacquire(&self) -> Result<Lease> {
        let req = self.acquire_request(self.clock.now_ms());
        let lease = match self.registry.acquire(&req).await {
            Ok(lease) => lease,
            Err(e) => {
                tracing::warn!(error = %e, "snowflake could not acquire a new worker id");
                return Err(e);
            }
        };
        if let Err(e) = check_lease(&lease, &self.config, self.registry.mode()) {
            // Unusable: forgotten locally, so that no later renew or release of it succeeds.
            self.registry.abandon(&lease).await;
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
    pub(super) fn log_clock_gap(&self) {
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

    pub(super) fn is_closed(&self) -> bool {
        matches!(self.lock().run, Run::Closed)
    }
}

/// What the generator asks its registry for at `now_ms`.
fn acquire_request(
    config: &SnowflakeConfig,
    identity: NodeIdentity,
    now_ms: u64,
) -> AcquireRequest {
    AcquireRequest::new(identity, config.layout.max_worker_id(), now_ms)
        .with_max_ahead_ms(millis(config.max_startup_wait))
        .with_timing(config.mark_renew, config.fencing_margin)
}

/// Checks what the generator needs from a lease the registry returned.
fn check_lease(lease: &Lease, config: &SnowflakeConfig, mode: &str) -> Result<()> {
    let layout = &config.layout;
    if lease.worker_id > layout.max_worker_id() {
        return Err(Error::Config(format!(
            "worker id {} from the {mode} registry does not fit the layout's {} worker bits \
             (largest worker id {})",
            lease.worker_id,
            layout.worker_bits(),
            layout.max_worker_id()
        )));
    }
    // With a shorter TTL the generator would fence itself for part of every renew period.
    let min = min_lease_ttl(config.mark_renew, config.fencing_margin);
    if let Some(ttl) = lease.ttl
        && ttl <= min
    {
        return Err(Error::Config(format!(
            "the {mode} registry's lease ttl ({} ms) must be above mark_renew ({} ms) + \
             fencing_margin ({} ms) + {} ms for a renewal's round trip ({} ms)",
            millis(ttl),
            millis(config.mark_renew),
            millis(config.fencing_margin),
            millis(LEASE_LATENCY_ALLOWANCE),
            millis(min)
        )));
    }
    Ok(())
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
        let params = Params::new(&layout, config.random_start, millis(config.max_borrow));
        let mode = registry.mode();
        let req = acquire_request(&config, identity.clone(), now);
        let lease = registry.acquire(&req).await?;
        if let Err(e) = check_lease(&lease, &config, mode) {
            registry.abandon(&lease).await;
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
        // A (re)start trusts the clock as it is: the reckoning starts from it.
        let reckoning = Reckoning::new(now, clock.monotonic());
        let state = GenState::new(lease.clone(), &params, reckoning);
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
                clock_jumps_total: AtomicU64::new(0),
            }),
        };
        match sf.renew_once().await {
            Ok(Renewal::Ok { .. }) => {}
            // `renew_once` abandoned the lease.
            Ok(Renewal::LeaseLost) => {
                return Err(Error::LeaseLost(format!(
                    "the {mode} registry took worker id {} back before its first mark",
                    lease.worker_id
                )));
            }
            Err(e) => {
                // Not released: a release can fail too and leave the id claimed by this
                // instance; abandoning is local, and nothing was issued under the lease.
                sf.inner.registry.abandon(&lease).await;
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
    /// plus the granted TTL minus `fencing_margin`. `Renewal::LeaseLost` stops issuing at once
    /// and abandons the lease.
    ///
    /// A wall clock further ahead of the monotonic clock's reckoning than `max_forward_step`
    /// is not trusted: issuing stops, no worker id is claimed with it, and the renewal keeps
    /// the previous mark (extending the lease only).
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
            let (_, _, trusted) = inner.read_clock();
            if !trusted {
                return Err(inner.lock().halted_error());
            }
            inner.reacquire().await?
        } else {
            lease
        };
        // Fencing counts from before the call: the lease may have been extended at any moment
        // after this.
        let (before, now, _) = inner.read_clock();
        let mark = inner
            .lock()
            .next_mark(now, millis(inner.config.mark_window));
        let result = inner.registry.renew(&lease, mark).await;
        let worker_id = lease.worker_id;
        match result {
            Ok(Renewal::Ok { ttl: granted }) => {
                {
                    let mut g = inner.lock();
                    if !matches!(g.run, Run::Running) || g.lease != lease {
                        return Ok(Renewal::Ok { ttl: granted });
                    }
                    g.durable_mark = g.durable_mark.max(mark);
                    // The TTL this renewal granted, counted from before the call.
                    g.valid_until = granted
                        .or(lease.ttl)
                        .map(|ttl| before + ttl.saturating_sub(inner.config.fencing_margin));
                    if g.renew_error.take().is_some() {
                        tracing::info!(worker_id, mark_ms = mark, "snowflake mark renewed again");
                    }
                }
                inner.renewed.notify_waiters();
                inner.log_clock_gap();
                Ok(Renewal::Ok { ttl: granted })
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
                inner.registry.abandon(&lease).await;
                Ok(Renewal::LeaseLost)
            }
            Err(e) => {
                tracing::warn!(worker_id, mark_ms = mark, error = %e, "snowflake mark renewal failed");
                inner.lock().renew_error = Some(e.to_string());
                Err(e)
            }
        }
    }

    /// Stops issuing, stops the renewer, and releases the worker id with the last timestamp
    /// actually issued (or the previous mark if none) as its final mark, so that a clean
    /// restart does not wait (but for a lead of borrowed milliseconds, at most `max_borrow`). When the release fails its error is returned and the next call
    /// tries it again; once released (or lost), later calls do nothing.
    pub async fn shutdown(&self) -> Result<()> {
        let inner = &*self.inner;
        let first = {
            let mut g = inner.lock();
            !matches!(std::mem::replace(&mut g.run, Run::Closed), Run::Closed)
        };
        if first {
            inner.stop.notify_waiters();
            inner.renewed.notify_waiters();
        }
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
        // On failure `held` stays set, so the next call tries again.
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
