//! An in-memory `WorkerIdRegistry` for the generator's tests, with fault injection, and helpers.

#![allow(dead_code, unreachable_pub)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use leaf_core::{
    AcquireRequest, Clock, Error, Lease, ManualClock, NodeIdentity, RegistryCapabilities, Renewal,
    Result, WorkerIdRegistry,
};
use leaf_snowflake::{Snowflake, SnowflakeConfig};

/// A wall time in 2023, well inside the default layout.
pub const T0: u64 = 1_700_000_000_000;

/// What survives a "restart": the marks per worker id (the cache file and registry rows).
#[derive(Debug, Default)]
pub struct Durable {
    pub marks: HashMap<u64, u64>,
    pub renewals: u64,
    pub releases: Vec<(u64, u64)>,
    /// Calls of `release`, failed ones included.
    pub release_calls: u64,
    /// Worker ids of the leases the generator abandoned.
    pub abandons: Vec<u64>,
    pub acquires: Vec<AcquireRequest>,
}

/// A registry kept in memory. Clones share everything; a new `Snowflake::start` on the same
/// registry is a process restart that finds the marks the last one wrote.
#[derive(Debug, Clone)]
pub struct MemRegistry {
    pub durable: Arc<Mutex<Durable>>,
    worker_id: Arc<AtomicU64>,
    ttl: Option<Duration>,
    fail_renew: Arc<AtomicBool>,
    fail_release: Arc<AtomicBool>,
    lose: Arc<AtomicBool>,
    /// A renewal that takes this long on this clock (advanced during the call).
    slow_renew: Arc<Mutex<Option<(ManualClock, Duration)>>>,
}

impl MemRegistry {
    /// Hands out `worker_id`, with no lease TTL (as `local`, `mysql`, `zk_normal`).
    pub fn new(worker_id: u64) -> Self {
        MemRegistry {
            durable: Arc::default(),
            worker_id: Arc::new(AtomicU64::new(worker_id)),
            ttl: None,
            fail_renew: Arc::default(),
            fail_release: Arc::default(),
            lose: Arc::default(),
            slow_renew: Arc::default(),
        }
    }

    /// Leases carry `ttl`, as in the recycling modes.
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// The worker id the next `acquire` hands out.
    pub fn set_worker_id(&self, id: u64) {
        self.worker_id.store(id, Ordering::SeqCst);
    }

    /// Makes renewals fail with a backend error (the mark is not durable).
    pub fn fail_renewals(&self, on: bool) {
        self.fail_renew.store(on, Ordering::SeqCst);
    }

    /// Makes releases fail with a backend error (the id is not given back).
    pub fn fail_releases(&self, on: bool) {
        self.fail_release.store(on, Ordering::SeqCst);
    }

    pub fn abandons(&self) -> Vec<u64> {
        self.durable.lock().unwrap().abandons.clone()
    }

    pub fn release_calls(&self) -> u64 {
        self.durable.lock().unwrap().release_calls
    }

    /// Makes renewals answer `LeaseLost`.
    pub fn lose_leases(&self, on: bool) {
        self.lose.store(on, Ordering::SeqCst);
    }

    /// Makes every renewal advance `clock` by `d` before it answers.
    pub fn slow_renewals(&self, clock: &ManualClock, d: Duration) {
        *self.slow_renew.lock().unwrap() = Some((clock.clone(), d));
    }

    pub fn set_mark(&self, worker_id: u64, mark: u64) {
        self.durable.lock().unwrap().marks.insert(worker_id, mark);
    }

    pub fn mark(&self, worker_id: u64) -> Option<u64> {
        self.durable.lock().unwrap().marks.get(&worker_id).copied()
    }

    pub fn renewals(&self) -> u64 {
        self.durable.lock().unwrap().renewals
    }

    pub fn releases(&self) -> Vec<(u64, u64)> {
        self.durable.lock().unwrap().releases.clone()
    }
}

#[async_trait]
impl WorkerIdRegistry for MemRegistry {
    fn mode(&self) -> &'static str {
        "memory"
    }

    fn capabilities(&self) -> RegistryCapabilities {
        RegistryCapabilities::new(self.ttl.is_some(), false)
    }

    async fn acquire(&self, req: &AcquireRequest) -> Result<Lease> {
        let worker_id = self.worker_id.load(Ordering::SeqCst);
        let mut d = self.durable.lock().unwrap();
        d.acquires.push(req.clone());
        let lease = Lease::new(worker_id, d.marks.get(&worker_id).copied());
        Ok(match self.ttl {
            Some(ttl) => lease.with_ttl(ttl),
            None => lease,
        })
    }

    async fn renew(&self, lease: &Lease, mark_ms: u64) -> Result<Renewal> {
        let slow = self.slow_renew.lock().unwrap().clone();
        if let Some((clock, d)) = slow {
            clock.advance(d);
        }
        if self.fail_renew.load(Ordering::SeqCst) {
            return Err(Error::backend("memory", "injected renewal failure"));
        }
        if self.lose.load(Ordering::SeqCst) {
            return Ok(Renewal::LeaseLost);
        }
        let mut d = self.durable.lock().unwrap();
        d.marks.insert(lease.worker_id, mark_ms);
        d.renewals += 1;
        Ok(Renewal::Ok { ttl: lease.ttl })
    }

    async fn release(&self, lease: &Lease, final_mark_ms: u64) -> Result<()> {
        let mut d = self.durable.lock().unwrap();
        d.release_calls += 1;
        if self.fail_release.load(Ordering::SeqCst) {
            return Err(Error::backend("memory", "injected release failure"));
        }
        d.marks.insert(lease.worker_id, final_mark_ms);
        d.releases.push((lease.worker_id, final_mark_ms));
        Ok(())
    }

    async fn abandon(&self, lease: &Lease) {
        self.durable.lock().unwrap().abandons.push(lease.worker_id);
    }
}

pub fn identity() -> NodeIdentity {
    NodeIdentity::new("10.0.0.5", 8080)
}

pub async fn start(reg: &MemRegistry, clock: &ManualClock, config: SnowflakeConfig) -> Snowflake {
    try_start(reg, clock, config)
        .await
        .expect("snowflake starts")
}

pub async fn try_start(
    reg: &MemRegistry,
    clock: &ManualClock,
    config: SnowflakeConfig,
) -> Result<Snowflake> {
    Snowflake::start(
        Arc::new(reg.clone()),
        identity(),
        Arc::new(clock.clone()),
        config,
    )
    .await
}

/// Starts on any clock.
pub async fn start_on(
    reg: &MemRegistry,
    clock: Arc<dyn Clock>,
    config: SnowflakeConfig,
) -> Result<Snowflake> {
    Snowflake::start(Arc::new(reg.clone()), identity(), clock, config).await
}

/// Bounds a future that must not hang.
pub async fn within<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(10), f)
        .await
        .expect("finished within 10 s instead of hanging")
}
