//! `WorkerIdRegistry`: where snowflake mode gets its worker id, and the lease contract every
//! workerId mode meets (on the trait).

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

/// Allowance for a renewal's round trip (and one slow answer), on top of the renew period and
/// the fencing margin, when judging whether a lease TTL leaves the holder time to renew.
pub const LEASE_LATENCY_ALLOWANCE: Duration = Duration::from_secs(1);

/// The smallest TTL a lease may have for a holder that renews every `renew_period` and stops
/// issuing `fencing_margin` before the TTL runs out: a TTL must be strictly above this.
///
/// With a smaller one the holder self-fences part of every period: its validity (TTL minus
/// margin, counted from before a renewal) ends before the next renewal's answer arrives.
pub fn min_lease_ttl(renew_period: Duration, fencing_margin: Duration) -> Duration {
    renew_period
        .saturating_add(fencing_margin)
        .saturating_add(LEASE_LATENCY_ALLOWANCE)
}

/// What the generator asks a registry for. Build it with [`AcquireRequest::new`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
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
    /// How often the caller renews the lease.
    pub renew_period: Duration,
    /// How long before the end of the TTL the caller stops issuing.
    pub fencing_margin: Duration,
}

impl AcquireRequest {
    /// A request for `identity` at wall-clock time `now_ms`, with the generator's defaults:
    /// `max_ahead_ms` 10 s, renewal every second, a fencing margin of one second.
    pub fn new(identity: NodeIdentity, max_worker_id: u64, now_ms: u64) -> Self {
        AcquireRequest {
            identity,
            max_worker_id,
            now_ms,
            max_ahead_ms: 10_000,
            renew_period: Duration::from_secs(1),
            fencing_margin: Duration::from_secs(1),
        }
    }

    /// With `max_ahead_ms` set.
    pub fn with_max_ahead_ms(mut self, max_ahead_ms: u64) -> Self {
        self.max_ahead_ms = max_ahead_ms;
        self
    }

    /// With the caller's renew period and fencing margin, which bound the TTL a recycling
    /// registry may grant.
    pub fn with_timing(mut self, renew_period: Duration, fencing_margin: Duration) -> Self {
        self.renew_period = renew_period;
        self.fencing_margin = fencing_margin;
        self
    }

    /// The TTL a recycling registry must exceed for this caller: see [`min_lease_ttl`].
    pub fn min_ttl(&self) -> Duration {
        min_lease_ttl(self.renew_period, self.fencing_margin)
    }
}

/// The opaque identity of one claim of a worker id: what tells this claim from an earlier or
/// later claim of the same id (a znode's creation zxid, an etcd lease id, a Redis claim token,
/// a row version). Registries that never recycle may leave it [`LeaseToken::NONE`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct LeaseToken(u64);

impl LeaseToken {
    /// No token: the worker id alone identifies the claim.
    pub const NONE: LeaseToken = LeaseToken(0);

    /// A token from the registry's own value.
    pub const fn new(value: u64) -> Self {
        LeaseToken(value)
    }

    /// The registry's value.
    pub const fn get(self) -> u64 {
        self.0
    }
}

/// A worker id held by this node. Built by registries with [`Lease::new`] and the `with_`
/// methods, so that fields can be added without breaking them.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Lease {
    /// The worker id.
    pub worker_id: u64,
    /// The highest time mark known for this worker id (Unix ms), from the registry and the
    /// cache file; `None` if the id was never used. The first timestamp issued is above it.
    pub prev_mark_ms: Option<u64>,
    /// The lease's time to live, in recycling modes; `None` where the id is never taken away.
    pub ttl: Option<Duration>,
    /// Which claim of `worker_id` this is; renew, release and abandon compare it.
    pub token: LeaseToken,
}

impl Lease {
    /// A lease on `worker_id` with no TTL and no token.
    pub fn new(worker_id: u64, prev_mark_ms: Option<u64>) -> Self {
        Lease {
            worker_id,
            prev_mark_ms,
            ttl: None,
            token: LeaseToken::NONE,
        }
    }

    /// With a TTL (recycling modes).
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// With the claim's token.
    pub fn with_token(mut self, token: LeaseToken) -> Self {
        self.token = token;
        self
    }
}

/// A recycling pool's answer when a claim found no id: `far_ahead` is the first free id it
/// skipped and its mark, further ahead of the claimer's clock (`now_ms`) than `max_ahead_ms`;
/// `None` when every id of `0..=max` is in use.
pub fn no_free_worker_id(max: u64, far_ahead: Option<(u64, u64)>, now_ms: u64) -> crate::Error {
    crate::Error::Unavailable(match far_ahead {
        Some((id, mark)) => format!(
            "no free worker id in 0..={max} is usable now: worker id {id} carries mark {mark}, \
             more than max_ahead_ms ahead of this clock ({now_ms}); another machine's clock ran \
             fast"
        ),
        None => format!(
            "every worker id in 0..={max} is in use; one comes back when its owner stops or \
             after its lease ttl"
        ),
    })
}

/// What a recycling backend keeps of the claim it holds: the worker id, the claim's token and
/// the TTL it granted. Renewals, the release and `abandon` act only for a lease of this claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeldClaim {
    /// The worker id.
    pub worker_id: u64,
    /// The claim's token.
    pub token: LeaseToken,
    /// The TTL granted.
    pub ttl: Duration,
}

impl HeldClaim {
    /// Whether `lease` is this claim.
    pub fn is(&self, lease: &Lease) -> bool {
        self.worker_id == lease.worker_id && self.token == lease.token
    }

    /// Forgets the claim held in `slot` if `lease` is it: what `abandon` does.
    pub fn forget(slot: &mut Option<HeldClaim>, lease: &Lease) {
        if slot.as_ref().is_some_and(|h| h.is(lease)) {
            *slot = None;
        }
    }
}

/// The outcome of a renewal that reached the registry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Renewal {
    /// The mark is durable and the lease (if any) extended by `ttl`, counted from before the
    /// call; `None` where the id is never taken away.
    Ok {
        /// The TTL actually granted.
        ttl: Option<Duration>,
    },
    /// The lease is gone (recycled, expired, or written by someone else): stop issuing with it.
    LeaseLost,
}

impl Renewal {
    /// A successful renewal of a lease without TTL.
    pub const OK: Renewal = Renewal::Ok { ttl: None };

    /// Whether the renewal succeeded.
    pub fn is_ok(&self) -> bool {
        matches!(self, Renewal::Ok { .. })
    }
}

/// What a registry does beyond the required methods; the conformance suite picks cases by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RegistryCapabilities {
    /// Worker ids return to a pool when their lease ends (`zk_recycle`, `etcd`, `redis`).
    pub recycles: bool,
    /// Distinct identities get distinct ids by themselves (a shared registry). `false` for
    /// `local`, where the ids come from configuration.
    pub assigns_distinct_ids: bool,
    /// A non-recycling registry that holds each identity exclusively while its node runs: a
    /// second live process with the same `ip:port` fails to acquire (`mysql`'s user lock,
    /// `zk_normal`'s ephemeral node). `false` for `local` (no shared server to ask) and for
    /// recycling modes (an identity holds no id of its own there).
    pub exclusive_identity: bool,
    /// A renewal answers `Ok` only once the registry's server holds its mark, so that a node
    /// of the same id with no cache file (another machine) reads it there: the recycling modes,
    /// and the `mysql`, `postgres` and `zk_normal` modes with `fence_on_disconnect`. Without
    /// it the cache file is the durable record and the server's copy may lag it.
    pub confirms_marks: bool,
}

impl RegistryCapabilities {
    /// Capabilities with the given flags, no exclusive identity, and marks confirmed by the
    /// server exactly in recycling modes.
    pub const fn new(recycles: bool, assigns_distinct_ids: bool) -> Self {
        RegistryCapabilities {
            recycles,
            assigns_distinct_ids,
            exclusive_identity: false,
            confirms_marks: recycles,
        }
    }

    /// With `exclusive_identity` set.
    pub const fn with_exclusive_identity(mut self, exclusive: bool) -> Self {
        self.exclusive_identity = exclusive;
        self
    }

    /// With `confirms_marks` set.
    pub const fn with_confirmed_marks(mut self, confirms: bool) -> Self {
        self.confirms_marks = confirms;
        self
    }
}

/// A source of worker ids, under the lease contract that every workerId mode (`local`,
/// `mysql`, `zk_normal`, `zk_recycle`, `etcd`, `redis`) meets.
///
/// The contract, from the generator's side:
/// 1. [`acquire`](WorkerIdRegistry::acquire) returns a [`Lease`]: the worker id, the highest
///    time mark known for it (registry and cache file), in recycling modes the lease TTL, and a
///    token naming this claim. The generator issues no timestamp at or below that mark. The
///    request carries the caller's renew period and fencing margin; a recycling registry grants
///    a TTL above [`min_lease_ttl`] of them, and stores it with the lease so that whoever
///    recycles the id uses the owner's TTL, not its own configuration.
/// 2. Every `mark_renew_ms` the generator calls [`renew`](WorkerIdRegistry::renew) with a mark
///    ahead of what it issues. `Renewal::Ok` means the mark is durable (cache file fsynced, and
///    in recycling modes the registry written, conditional on the version last seen and on the
///    lease's token) and the lease extended by the TTL it carries. The generator never issues a
///    timestamp above the last durable mark.
/// 3. Fencing (recycling modes): the caller reads its monotonic clock *before* `renew`; on `Ok`
///    it may issue until that instant + the granted TTL - a safety margin, and nothing after.
///    `Renewal::LeaseLost` stops it at once, and the caller
///    [`abandon`](WorkerIdRegistry::abandon)s the lease (as after any failed start) before it
///    acquires another.
/// 4. Marks only rise: a renewal never lowers the stored mark, in the registry or the cache
///    file; only the final mark may be lower.
/// 5. [`release`](WorkerIdRegistry::release) at graceful shutdown records the last timestamp
///    actually issued, so a clean restart does not wait. A failed release may be retried.
#[async_trait]
pub trait WorkerIdRegistry: Send + Sync + Debug {
    /// The workerId mode, as configured (`local`, `mysql`, `zk_normal`, `zk_recycle`, `etcd`,
    /// `redis`).
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
    /// registry returns it to the pool, every registry unlocks its cache file. On an error
    /// nothing is given up and the caller may call it again.
    async fn release(&self, lease: &Lease, final_mark_ms: u64) -> Result<()>;

    /// The last mark the shared registry confirmed, where it keeps a copy written apart from the
    /// durable one (the `mysql` mode writes its row in the background); `None` where there is
    /// no such copy or nothing was confirmed yet. Its lag behind the durable mark is a metric.
    fn confirmed_mark_ms(&self) -> Option<u64> {
        None
    }

    /// The identity (`ip:port`) that holds `worker_id` now, where the registry records it with
    /// the claim: how the monotonic mode's followers find their leader. `None` where it keeps
    /// no such record or nobody holds the id.
    async fn holder(&self, worker_id: u64) -> Result<Option<String>> {
        let _ = worker_id;
        Ok(None)
    }

    /// Forgets `lease` locally, without reaching any server: after `LeaseLost`, or when a start
    /// fails after `acquire`. Later renewals and releases of it answer as for a lease not
    /// held; the cache directory stays locked by this instance, and the next `acquire` on it
    /// works. A recycling registry's server-side claim simply expires.
    async fn abandon(&self, lease: &Lease);
}

/// A registry that lists the running nodes of its leaf name, for the start-up peer clock
/// check (`leaf_snowflake::peers`): the ZooKeeper modes, with Leaf's `temporary` nodes.
#[async_trait]
pub trait PeerDirectory: Send + Sync {
    /// The `ip:port` of every other running node.
    async fn peers(&self) -> Result<Vec<String>>;
    /// Lists this node for the others (once its clock passed the check).
    async fn register(&self, identity: &NodeIdentity) -> Result<()>;
    /// How far this node's clock may be from its peers' average, in milliseconds.
    fn max_skew_ms(&self) -> u64;
}
