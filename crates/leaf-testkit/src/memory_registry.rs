//! `MemoryRegistry`: in-memory worker-id registries, the reference backends of the registry
//! conformance suite. A [`MemoryRegistryPool`] plays the shared server (ZooKeeper, etcd), each
//! [`MemoryRegistry`] a node's client of it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use leaf_core::{
    AcquireRequest, Clock, Error, Lease, LeaseToken, ManualClock, RegistryCapabilities, Renewal,
    Result, WorkerIdRegistry,
};

/// The TTL a recycling pool grants when the caller's timing allows it.
const DEFAULT_TTL: Duration = Duration::from_secs(4);

/// The shared state of in-memory registries: in the non-recycling flavour each identity keeps
/// the id it was first given and holds it exclusively while a node has it (as `zk_normal`); in
/// the recycling flavour ids form a pool, go back to it on release, and expire when their
/// holder stops renewing for the lease's TTL (as `zk_recycle` and `etcd`), judged by the
/// pool's own clock.
#[derive(Debug)]
pub struct MemoryRegistryPool {
    recycles: bool,
    clock: ManualClock,
    state: Mutex<PoolState>,
}

#[derive(Debug, Default)]
struct PoolState {
    ids: BTreeMap<String, u64>,
    marks: HashMap<u64, u64>,
    claims: HashMap<u64, Claim>,
    next_node: u64,
    next_token: u64,
}

type NodeIdentityText = Arc<str>;

/// Who holds a worker id, under which token, and (recycling) until when.
#[derive(Debug, Clone)]
struct Claim {
    node: u64,
    identity: NodeIdentityText,
    token: LeaseToken,
    ttl: Duration,
    renewed_at: Duration,
}

impl MemoryRegistryPool {
    /// An empty namespace; `recycles` picks the flavour. Its clock starts at the current time
    /// and moves only through [`clock`](Self::clock).
    pub fn new(recycles: bool) -> Arc<Self> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        Arc::new(MemoryRegistryPool {
            recycles,
            clock: ManualClock::new(now),
            state: Mutex::default(),
        })
    }

    /// The pool's clock: advancing it past a lease's TTL expires the lease.
    pub fn clock(&self) -> &ManualClock {
        &self.clock
    }

    /// A new node's registry in this namespace.
    pub fn node(self: &Arc<Self>) -> MemoryRegistry {
        let node = {
            let mut s = self.state.lock().expect("pool lock");
            s.next_node += 1;
            s.next_node
        };
        MemoryRegistry {
            pool: self.clone(),
            node,
        }
    }

    fn expired(&self, claim: &Claim) -> bool {
        self.recycles && self.clock.monotonic() >= claim.renewed_at + claim.ttl
    }
}

/// One node's registry in a [`MemoryRegistryPool`].
#[derive(Debug)]
pub struct MemoryRegistry {
    pool: Arc<MemoryRegistryPool>,
    node: u64,
}

impl MemoryRegistry {
    fn holds(&self, state: &PoolState, lease: &Lease) -> bool {
        state
            .claims
            .get(&lease.worker_id)
            .is_some_and(|c| c.node == self.node && c.token == lease.token && !self.pool.expired(c))
    }
}

#[async_trait]
impl WorkerIdRegistry for MemoryRegistry {
    fn mode(&self) -> &'static str {
        if self.pool.recycles {
            "memory_recycle"
        } else {
            "memory"
        }
    }

    fn capabilities(&self) -> RegistryCapabilities {
        RegistryCapabilities::new(self.pool.recycles, true)
            .with_exclusive_identity(!self.pool.recycles)
            .with_confirmed_marks(true)
    }

    async fn acquire(&self, req: &AcquireRequest) -> Result<Lease> {
        let mut s = self.pool.state.lock().expect("pool lock");
        let pool = &self.pool;
        let ttl = DEFAULT_TTL.max(req.min_ttl() + Duration::from_millis(500));
        let worker_id = if pool.recycles {
            let usable = |s: &PoolState, id: &u64| {
                let free = s.claims.get(id).is_none_or(|c| pool.expired(c));
                // An id whose mark is far ahead of this node's clock is left for later.
                let near = s
                    .marks
                    .get(id)
                    .is_none_or(|m| *m <= req.now_ms.saturating_add(req.max_ahead_ms));
                free && near
            };
            (0..=req.max_worker_id)
                .find(|id| usable(&s, id))
                .ok_or_else(|| {
                    Error::Unavailable(format!(
                        "every worker id up to {} is in use or marked far ahead",
                        req.max_worker_id
                    ))
                })?
        } else {
            let next = s.ids.len() as u64;
            let id = *s.ids.entry(req.identity.to_string()).or_insert(next);
            if id > req.max_worker_id {
                return Err(Error::Config(format!(
                    "worker id {id} of node {} does not fit the layout's {}",
                    req.identity, req.max_worker_id
                )));
            }
            if let Some(c) = s.claims.get(&id)
                && c.node != self.node
            {
                return Err(Error::AlreadyExists(format!(
                    "node identity {} is held by another live node",
                    req.identity
                )));
            }
            id
        };
        s.next_token += 1;
        let token = LeaseToken::new(s.next_token);
        s.claims.insert(
            worker_id,
            Claim {
                node: self.node,
                identity: req.identity.to_string().into(),
                token,
                ttl,
                renewed_at: pool.clock.monotonic(),
            },
        );
        let lease = Lease::new(worker_id, s.marks.get(&worker_id).copied()).with_token(token);
        Ok(if pool.recycles {
            lease.with_ttl(ttl)
        } else {
            lease
        })
    }

    async fn renew(&self, lease: &Lease, mark_ms: u64) -> Result<Renewal> {
        let mut s = self.pool.state.lock().expect("pool lock");
        if !self.holds(&s, lease) {
            return Ok(Renewal::LeaseLost);
        }
        let now = self.pool.clock.monotonic();
        let claim = s.claims.get_mut(&lease.worker_id).expect("held");
        claim.renewed_at = now;
        let ttl = self.pool.recycles.then_some(claim.ttl);
        let mark = s.marks.entry(lease.worker_id).or_insert(0);
        *mark = (*mark).max(mark_ms);
        Ok(Renewal::Ok { ttl })
    }

    async fn release(&self, lease: &Lease, final_mark_ms: u64) -> Result<()> {
        let mut s = self.pool.state.lock().expect("pool lock");
        if self.holds(&s, lease) {
            s.marks.insert(lease.worker_id, final_mark_ms);
            s.claims.remove(&lease.worker_id);
        }
        Ok(())
    }

    async fn holder(&self, worker_id: u64) -> Result<Option<String>> {
        let s = self.pool.state.lock().expect("pool lock");
        Ok(s.claims
            .get(&worker_id)
            .filter(|c| !self.pool.expired(c))
            .map(|c| c.identity.to_string()))
    }

    async fn abandon(&self, lease: &Lease) {
        let mut s = self.pool.state.lock().expect("pool lock");
        // The pool (the "server") is not told in recycling mode: the claim expires. A
        // non-recycling node keeps its identity, as a live process keeps its ephemeral node.
        if self.holds(&s, lease)
            && let Some(c) = s.claims.get_mut(&lease.worker_id)
        {
            c.token = LeaseToken::NONE;
        }
    }
}

impl Drop for MemoryRegistry {
    /// A dropped node is a process that ended: a non-recycling identity is free again (its
    /// ephemeral node or session lock is gone); a recycling claim waits for its TTL.
    fn drop(&mut self) {
        if self.pool.recycles {
            return;
        }
        if let Ok(mut s) = self.pool.state.lock() {
            s.claims.retain(|_, c| c.node != self.node);
        }
    }
}
