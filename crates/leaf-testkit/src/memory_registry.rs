//! `MemoryRegistry`: in-memory worker-id registries, the reference backends of the registry
//! conformance suite. A [`MemoryRegistryPool`] plays the shared server (ZooKeeper, etcd), each
//! [`MemoryRegistry`] a node's client of it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use leaf_core::{
    AcquireRequest, Error, Lease, RegistryCapabilities, Renewal, Result, WorkerIdRegistry,
};

/// The shared state of in-memory registries: in the non-recycling flavour each identity keeps
/// the id it was first given (as `zk_normal`); in the recycling flavour ids form a pool and
/// go back to it on release (as `zk_recycle` and `etcd`, without expiry: an id whose holder
/// crashed stays taken).
#[derive(Debug)]
pub struct MemoryRegistryPool {
    recycles: bool,
    state: Mutex<PoolState>,
}

#[derive(Debug, Default)]
struct PoolState {
    ids: BTreeMap<String, u64>,
    marks: HashMap<u64, u64>,
    holders: HashMap<u64, u64>,
    next_node: u64,
}

impl MemoryRegistryPool {
    /// An empty namespace; `recycles` picks the flavour.
    pub fn new(recycles: bool) -> Arc<Self> {
        Arc::new(MemoryRegistryPool {
            recycles,
            state: Mutex::default(),
        })
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
            held: Mutex::new(None),
        }
    }
}

/// One node's registry in a [`MemoryRegistryPool`].
#[derive(Debug)]
pub struct MemoryRegistry {
    pool: Arc<MemoryRegistryPool>,
    node: u64,
    held: Mutex<Option<u64>>,
}

impl MemoryRegistry {
    fn holds(&self, state: &PoolState, worker_id: u64) -> bool {
        *self.held.lock().expect("held lock") == Some(worker_id)
            && (!self.pool.recycles || state.holders.get(&worker_id) == Some(&self.node))
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
    }

    async fn acquire(&self, req: &AcquireRequest) -> Result<Lease> {
        let mut s = self.pool.state.lock().expect("pool lock");
        let worker_id = if self.pool.recycles {
            let free = (0..=req.max_worker_id).find(|id| !s.holders.contains_key(id));
            let id = free.ok_or_else(|| {
                Error::Unavailable(format!(
                    "every worker id up to {} is in use",
                    req.max_worker_id
                ))
            })?;
            s.holders.insert(id, self.node);
            id
        } else {
            let next = s.ids.len() as u64;
            let id = *s.ids.entry(req.identity.to_string()).or_insert(next);
            if id > req.max_worker_id {
                return Err(Error::Config(format!(
                    "worker id {id} of node {} does not fit the layout's {}",
                    req.identity, req.max_worker_id
                )));
            }
            id
        };
        *self.held.lock().expect("held lock") = Some(worker_id);
        Ok(Lease {
            worker_id,
            prev_mark_ms: s.marks.get(&worker_id).copied(),
            ttl: self.pool.recycles.then_some(Duration::from_secs(3)),
        })
    }

    async fn renew(&self, lease: &Lease, mark_ms: u64) -> Result<Renewal> {
        let mut s = self.pool.state.lock().expect("pool lock");
        if !self.holds(&s, lease.worker_id) {
            return Ok(Renewal::LeaseLost);
        }
        s.marks.insert(lease.worker_id, mark_ms);
        Ok(Renewal::Ok)
    }

    async fn release(&self, lease: &Lease, final_mark_ms: u64) -> Result<()> {
        let mut s = self.pool.state.lock().expect("pool lock");
        if self.holds(&s, lease.worker_id) {
            s.marks.insert(lease.worker_id, final_mark_ms);
            s.holders.remove(&lease.worker_id);
            *self.held.lock().expect("held lock") = None;
        }
        Ok(())
    }
}
