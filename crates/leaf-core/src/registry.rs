//! `WorkerIdRegistry`: where snowflake mode gets its worker id, under the lease contract that
//! every workerId mode (`local`, `mysql`, `zk_normal`, `zk_recycle`, `etcd`) meets.
//!
//! The contract, from the generator's side:
//! 1. [`acquire`](WorkerIdRegistry::acquire) returns a [`Lease`]: the worker id, the highest
//!    time mark known for it (registry and cache file), and in recycling modes the lease TTL.
//!    The generator issues no timestamp at or below that mark.
//! 2. Every `mark_renew_ms` the generator calls [`renew`](WorkerIdRegistry::renew) with a mark
//!    ahead of what it issues. `Renewal::Ok` means the mark is durable (cache file fsynced, and
//!    in recycling modes the registry written, conditional on the version last seen) and the
//!    lease extended. The generator never issues a timestamp above the last durable mark.
//! 3. Fencing (recycling modes): the caller reads its monotonic clock *before* `renew`; on `Ok`
//!    it may issue until that instant + TTL - a safety margin, and nothing after.
//!    `Renewal::LeaseLost` stops it at once.
//! 4. [`release`](WorkerIdRegistry::release) at graceful shutdown records the last timestamp
//!    actually issued, so a clean restart does not wait.

use std::fmt::{self, Debug};
use std::time::Duration;

use async_trait::async_trait;

use crate::Result;

/// A node's identity: `ip:port`, as in Leaf.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeIdentity {
    /// The node's address (never silently `127.0.0.1`: the server resolves it from config).
    pub ip: String,
    /// The node's port.
    pub port: u16,
}

impl NodeIdentity {
    /// An identity from its parts.
    pub fn new(ip: impl Into<String>, port: u16) -> Self {
        NodeIdentity {
            ip: ip.into(),
            port,
        }
    }
}

impl fmt::Display for NodeIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.ip, self.port)
    }
}

impl Debug for NodeIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// What the generator asks a registry for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcquireRequest {
    /// Who asks.
    pub identity: NodeIdentity,
    /// The largest worker id the layout can encode; a registry never returns a larger one.
    pub max_worker_id: u64,
    /// The caller's wall clock, Unix milliseconds.
    pub now_ms: u64,
    /// A recycled id whose mark is further ahead of `now_ms` than this is handed back and
    /// another one is claimed, rather than making the node wait (another machine's clock ran fast).
    pub max_ahead_ms: u64,
}

/// A worker id held by this node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The worker id.
    pub worker_id: u64,
    /// The highest time mark known for this worker id (Unix ms), from the registry and the
    /// cache file; `None` if the id was never used. The first timestamp issued is above it.
    pub prev_mark_ms: Option<u64>,
    /// The lease's time to live, in recycling modes; `None` where the id is never taken away.
    pub ttl: Option<Duration>,
}

/// The outcome of a renewal that reached the registry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Renewal {
    /// The mark is durable and the lease (if any) extended.
    Ok,
    /// The lease is gone (recycled, expired, or written by someone else): stop issuing with it.
    LeaseLost,
}

/// What a registry does beyond the required methods; the conformance suite picks cases by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RegistryCapabilities {
    /// Worker ids return to a pool when their lease ends (`zk_recycle`, `etcd`).
    pub recycles: bool,
    /// Distinct identities get distinct ids by themselves (a shared registry). `false` for
    /// `local`, where the ids come from configuration.
    pub assigns_distinct_ids: bool,
}

impl RegistryCapabilities {
    /// Capabilities with the given flags.
    pub const fn new(recycles: bool, assigns_distinct_ids: bool) -> Self {
        RegistryCapabilities {
            recycles,
            assigns_distinct_ids,
        }
    }
}

/// A source of worker ids under the lease contract of the module docs.
#[async_trait]
pub trait WorkerIdRegistry: Send + Sync + Debug {
    /// The workerId mode, as configured (`local`, `mysql`, `zk_normal`, `zk_recycle`, `etcd`).
    fn mode(&self) -> &'static str;

    /// What the registry can do.
    fn capabilities(&self) -> RegistryCapabilities;

    /// Claims a worker id for `req.identity`. In non-recycling modes the same identity always
    /// gets the same id. Fails with `Config` if the id does not fit `req.max_worker_id`.
    async fn acquire(&self, req: &AcquireRequest) -> Result<Lease>;

    /// Durably records `mark_ms` for the lease's worker id and extends the lease. Errors mean the
    /// mark may not be durable (retry later); `Renewal::LeaseLost` means the id is gone.
    async fn renew(&self, lease: &Lease, mark_ms: u64) -> Result<Renewal>;

    /// Records the final mark (the last timestamp issued) and gives the id up: a recycling
    /// registry returns it to the pool, every registry unlocks its cache file.
    async fn release(&self, lease: &Lease, final_mark_ms: u64) -> Result<()>;
}
