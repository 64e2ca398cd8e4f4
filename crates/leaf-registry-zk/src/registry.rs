//! `ZkClaims`: the `zk_normal` and `zk_recycle` workerId modes and the `temporary` peer list;
//! [`ZkRegistry`] is it with the worker-id cache file every registry keeps.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use async_trait::async_trait;
use leaf_core::{
    AcquireRequest, CachedRegistry, ClaimError, Clock, Lease, LeaseToken, NodeIdentity,
    RegistryCapabilities, Renewal, Result, SystemClock, WorkerIdClaims,
};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;
use zookeeper_client as zk;

use crate::config::{ZkConfig, validate_name};
use crate::error::bounded;
use crate::node;
use crate::recycle::{self, Pool};
use crate::session::Session;
use normal::write_forever;

mod normal;
mod recycling;

/// Which of the two ZooKeeper workerId modes a [`ZkClaims`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZkMode {
    /// `zk_normal`: Leaf's `forever` nodes; an `ip:port` keeps its worker id for ever.
    Normal,
    /// `zk_recycle`: a pool of worker ids, leased with a TTL and recycled when their owner stops
    /// renewing.
    Recycle,
}

/// The ZooKeeper workerId modes with the worker-id cache file: what the server runs.
pub type ZkRegistry = CachedRegistry<ZkClaims>;

/// The ZooKeeper side of the two workerId modes; see the crate docs for the layout and the
/// rules. [`ZkClaims::registry`] adds the cache file.
pub struct ZkClaims {
    config: ZkConfig,
    mode: ZkMode,
    /// `{root}/{name}`.
    base: String,
    file_name: String,
    session: Arc<Session>,
    /// The lease held, if any.
    lease: Mutex<Option<Held>>,
    generation: AtomicU64,
    /// `zk_normal`: the last mark the `forever` node is known to hold (0: none yet).
    confirmed: Arc<AtomicU64>,
    /// This node's `temporary` entry, left out of [`ZkClaims::peers`].
    temporary: StdMutex<Option<String>>,
    recycler: StdMutex<Option<JoinHandle<()>>>,
    clock: Arc<dyn Clock>,
}

#[derive(Debug)]
enum Held {
    Normal(NormalHeld),
    Recycle(RecycleHeld),
}

#[derive(Debug)]
struct NormalHeld {
    worker_id: u64,
    token: LeaseToken,
    forever: Arc<Forever>,
}

/// The `forever` node of a `zk_normal` lease and the background writes of its mark.
#[derive(Debug)]
struct Forever {
    identity: NodeIdentity,
    worker_id: u64,
    lock_path: String,
    forever_dir: String,
    write: Mutex<ForeverWrite>,
    in_flight: AtomicBool,
    /// Another process took this identity's live lock or node while this one was away.
    lost: AtomicBool,
    /// Where a landed write records its mark ([`WorkerIdRegistry::confirmed_mark_ms`]).
    confirmed: Arc<AtomicU64>,
}

#[derive(Debug)]
struct ForeverWrite {
    /// No write may land after the release's final mark.
    released: bool,
    /// `(path, version)` of the node; `None` after a start from the cache file, until the
    /// node is found again.
    node: Option<(String, i32)>,
    /// The mark this lease started past (the node's at the claim, the cache file's after a
    /// start from it): the generator issues nothing at or below it, so a node holding no
    /// more than it says nothing of timestamps this process could issue.
    start_mark: u64,
    /// The marks this process tried to write since its last write known to have landed (a
    /// write whose answer was lost may still land): a node holding any other mark above
    /// `start_mark` was written by another process of the identity.
    tried: Vec<u64>,
}

#[derive(Debug)]
struct RecycleHeld {
    worker_id: u64,
    token: LeaseToken,
    /// The `epoch/{id}` version of this claim: every write for it checks it.
    epoch: i32,
    /// The `inuse` node's version last written by this node.
    version: i32,
    /// The mark the id carried at the claim: renewals never write below it, so a renewal that
    /// knows less never lowers what the next owner reads.
    floor: u64,
    ttl: Duration,
    /// The claimer's identity, kept in the node by every renewal.
    owner: String,
}

/// Test hook: a `zk_recycle` claim read but not committed; see [`ZkClaims::read_claim`].
#[cfg(feature = "_test-hooks")]
#[doc(hidden)]
#[derive(Debug)]
pub struct ReadClaim(recycle::Candidate);

#[cfg(feature = "_test-hooks")]
impl ReadClaim {
    /// The mark the id carried when it was read.
    pub fn mark(&self) -> u64 {
        self.0.mark
    }
}

impl fmt::Debug for ZkClaims {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkClaims")
            .field("mode", &self.mode())
            .field("address", &self.config.address)
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

impl Drop for ZkClaims {
    fn drop(&mut self) {
        if let Some(task) = self.recycler.get_mut().ok().and_then(Option::take) {
            task.abort();
        }
    }
}

impl ZkClaims {
    /// The backend of `mode` on the ensemble of `config`, for the leaf name `name` (nodes under
    /// `{root}/{name}`). Nothing is contacted before the first claim, so this succeeds while
    /// ZooKeeper is down.
    pub fn connect(config: &ZkConfig, mode: ZkMode, name: &str) -> Result<ZkClaims> {
        config.validate()?;
        validate_name(name)?;
        let mode_name = match mode {
            ZkMode::Normal => "zk_normal",
            ZkMode::Recycle => "zk_recycle",
        };
        Ok(ZkClaims {
            config: config.clone(),
            mode,
            base: format!("{}/{name}", config.root),
            // Per mode: a worker id cached by another mode must never serve a start here.
            file_name: format!("worker-{mode_name}-{name}"),
            session: Arc::new(Session::new(config)?),
            lease: Mutex::new(None),
            generation: AtomicU64::new(0),
            confirmed: Arc::default(),
            temporary: StdMutex::default(),
            recycler: StdMutex::default(),
            clock: Arc::new(SystemClock::new()),
        })
    }

    /// This backend with its cache file in `cache_dir`: the registry the server runs.
    pub fn registry(self, cache_dir: impl Into<std::path::PathBuf>) -> ZkRegistry {
        CachedRegistry::new(self, cache_dir)
    }

    /// The start-up clock check's bound: `max_peer_skew_ms`.
    pub fn max_peer_skew_ms(&self) -> u64 {
        self.config.max_peer_skew_ms
    }

    /// The `ip:port` of every other node listed under `{root}/{name}/temporary/` (the peers of
    /// the start-up clock check).
    pub async fn peers(&self) -> Result<Vec<String>> {
        let dir = self.temporary_dir();
        let client = self.session.client().await?;
        let children = bounded(self.session.limit(), "listing the peers", async {
            match client.list_children(&dir).await {
                Ok(c) => Ok(c),
                Err(zk::Error::NoNode) => Ok(Vec::new()),
                Err(e) => Err(self.session.fail(e, &dir).await),
            }
        })
        .await?;
        let me = self.temporary.lock().expect("temporary lock").clone();
        Ok(children
            .into_iter()
            .filter(|c| Some(c) != me.as_ref())
            .collect())
    }

    /// Lists this node under `{root}/{name}/temporary/{ip}:{port}` (an ephemeral node, kept
    /// across sessions while the registry lives), for its peers' clock check.
    pub async fn register_temporary(&self, identity: &NodeIdentity) -> Result<()> {
        let path = format!("{}/{identity}", self.temporary_dir());
        let data = node::forever_data(identity, self.clock.now_ms());
        self.session.keep_ephemeral(&path, &data, false).await?;
        *self.temporary.lock().expect("temporary lock") = Some(identity.to_string());
        Ok(())
    }

    /// Test hook: ends this registry's ZooKeeper session (its ephemeral nodes go), as an expiry
    /// would.
    #[cfg(feature = "_test-hooks")]
    #[doc(hidden)]
    pub async fn end_session(&self) -> Result<()> {
        self.session.end().await
    }

    /// Test hook: who the current session is to ZooKeeper (`scheme:user`, its `whoami`),
    /// opening a session if there is none.
    #[cfg(feature = "_test-hooks")]
    #[doc(hidden)]
    pub async fn auth_users(&self) -> Result<Vec<String>> {
        let client = self.session.client().await?;
        let users = client
            .list_auth_users()
            .await
            .map_err(|e| crate::error::map_zk(e, "whoami"))?;
        Ok(users
            .iter()
            .map(|u| format!("{}:{}", u.scheme(), u.user()))
            .collect())
    }

    /// Test hook: gives this registry's ZooKeeper session up without closing it, as a client
    /// does that lost touch with a server which then keeps the session (a server restarted from
    /// its log): its ephemeral nodes stay until it expires; the next call opens a new session.
    #[cfg(feature = "_test-hooks")]
    #[doc(hidden)]
    pub async fn abandon_session(&self) {
        self.session.abandon().await
    }

    /// Test hook: ends the sessions [`abandon_session`](Self::abandon_session) gave up, as their
    /// expiry would: the server deletes their ephemeral nodes.
    #[cfg(feature = "_test-hooks")]
    #[doc(hidden)]
    pub async fn end_abandoned_sessions(&self) -> Result<()> {
        self.session.end_abandoned().await
    }

    /// Test hook: the next call of this registry's session that comes to `at` stops there; the
    /// first receiver resolves then, and the call goes on once the sender is used or dropped.
    #[cfg(feature = "_test-hooks")]
    #[doc(hidden)]
    pub fn pause_next(
        &self,
        at: crate::Pause,
    ) -> (
        tokio::sync::oneshot::Receiver<()>,
        tokio::sync::oneshot::Sender<()>,
    ) {
        self.session.pause_next(at)
    }

    /// Test hook: the first half of a `zk_recycle` claim of worker id `id` in a pool of
    /// `0..=max` (seeded first): what the claimer reads before its multi-op, which
    /// [`commit_read_claim`](Self::commit_read_claim) then commits, as a claimer that stalled in
    /// between would.
    #[cfg(feature = "_test-hooks")]
    #[doc(hidden)]
    pub async fn read_claim(&self, id: u64, max: u64) -> Result<Option<ReadClaim>> {
        let client = self.session.client().await?;
        let pool = Pool::new(&self.base, self.session.acls());
        recycle::seed(&client, &pool, max).await?;
        Ok(recycle::read_free(&client, &pool, id).await?.map(ReadClaim))
    }

    /// Test hook: commits a claim read by [`read_claim`](Self::read_claim) for `owner`;
    /// `Some(carried mark)` if it committed (the `inuse` node is then left to the recycler),
    /// `None` if the id changed since it was read.
    #[cfg(feature = "_test-hooks")]
    #[doc(hidden)]
    pub async fn commit_read_claim(&self, read: ReadClaim, owner: &str) -> Result<Option<u64>> {
        let client = self.session.client().await?;
        let pool = Pool::new(&self.base, self.session.acls());
        let claimed =
            recycle::commit_claim(&client, &pool, &read.0, owner, self.config.recycle_ttl())
                .await?;
        Ok(claimed.map(|c| c.carried_mark.unwrap_or(0)))
    }

    fn temporary_dir(&self) -> String {
        format!("{}/temporary", self.base)
    }

    fn next_token(&self) -> LeaseToken {
        LeaseToken::new(self.generation.fetch_add(1, Ordering::Relaxed) + 1)
    }

    /// Forgets the lease held in `state` locally.
    fn forget(&self, state: &mut Option<Held>) {
        if let Some(Held::Normal(n)) = state.as_ref() {
            // Later background writes see this and write nothing; one in flight may still land,
            // which only raises the mark.
            if let Ok(mut w) = n.forever.write.try_lock() {
                w.released = true;
            }
        }
        *state = None;
    }

    fn ensure_recycler(&self) {
        let mut slot = self.recycler.lock().expect("recycler lock");
        if slot.as_ref().is_some_and(|t| !t.is_finished()) {
            return;
        }
        // A quarter of the TTL (at most 1 s): an idle id comes back soon after its TTL.
        let period = (self.config.recycle_ttl() / 4)
            .clamp(Duration::from_millis(50), Duration::from_secs(1));
        *slot = Some(tokio::spawn(recycle::recycler(
            self.session.clone(),
            Pool::new(&self.base, self.session.acls()),
            period,
            self.clock.clone(),
        )));
    }
}

#[async_trait]
impl WorkerIdClaims for ZkClaims {
    fn mode(&self) -> &'static str {
        match self.mode {
            ZkMode::Normal => "zk_normal",
            ZkMode::Recycle => "zk_recycle",
        }
    }

    fn confirmed_mark_ms(&self) -> Option<u64> {
        // zk_recycle writes its node in the renewal itself: no copy lags behind.
        let m = self.confirmed.load(Ordering::Acquire);
        (self.mode == ZkMode::Normal && m > 0).then_some(m)
    }

    async fn holder(&self, worker_id: u64) -> Result<Option<String>> {
        if self.mode != ZkMode::Recycle {
            return Ok(None);
        }
        let client = self.session.client().await?;
        let path = Pool::new(&self.base, self.session.acls()).inuse_of(worker_id);
        let read = bounded(
            self.session.limit(),
            "reading who holds a worker id",
            async {
                match client.get_data(&path).await {
                    Ok((data, _)) => Ok(Some(data)),
                    Err(zk::Error::NoNode) => Ok(None),
                    Err(e) => Err(crate::error::map_zk(e, &path)),
                }
            },
        )
        .await?;
        read.map(|data| node::parse_inuse(&data, &path).map(|inuse| inuse.owner))
            .transpose()
    }

    fn capabilities(&self) -> RegistryCapabilities {
        match self.mode {
            ZkMode::Normal => RegistryCapabilities::new(false, true)
                .with_exclusive_identity(true)
                .with_confirmed_marks(self.config.fence_on_disconnect),
            ZkMode::Recycle => RegistryCapabilities::new(true, true),
        }
    }

    fn cache_file_name(&self) -> &str {
        &self.file_name
    }

    fn lease_ttl(&self) -> Option<(Duration, &'static str)> {
        (self.mode == ZkMode::Recycle)
            .then(|| (self.config.recycle_ttl(), "recycle_idle_timeout_ms"))
    }

    fn check_request(&self, req: &AcquireRequest) -> Result<()> {
        match self.mode {
            ZkMode::Recycle => self.check_pool(req),
            ZkMode::Normal => Ok(()),
        }
    }

    async fn claim(&self, req: &AcquireRequest) -> Result<Lease, ClaimError> {
        if self.mode == ZkMode::Recycle {
            // Before the claim: in a pool full of crashed nodes' ids, this recycler is the one
            // that frees them.
            self.ensure_recycler();
        }
        // A session first: only a ZooKeeper that cannot be reached at all is a reason to start
        // from the cache file; once a session is open, an error (in the live lock's wait,
        // say) is never that, or a second live process of this identity could start.
        self.session
            .client()
            .await
            .map_err(ClaimError::unreachable)?;
        let mut state = self.lease.lock().await;
        let (lease, h) = match self.mode {
            ZkMode::Normal => self.claim_normal(req).await?,
            ZkMode::Recycle => self.claim_recycle(req).await?,
        };
        *state = Some(h);
        Ok(lease)
    }

    async fn resume_offline(
        &self,
        req: &AcquireRequest,
        lease: Lease,
        cause: leaf_core::Error,
    ) -> Result<Lease> {
        if self.mode == ZkMode::Recycle {
            // Never reached: a recycling registry does not start from the cache file.
            return Err(cause);
        }
        let mut state = self.lease.lock().await;
        let (lease, h) = self.resume_normal(req, lease).await?;
        *state = Some(h);
        Ok(lease)
    }

    async fn renew(&self, lease: &Lease, mark_ms: u64) -> Result<Renewal> {
        if self.mode == ZkMode::Recycle {
            return self.renew_recycle(lease, mark_ms).await;
        }
        let state = self.lease.lock().await;
        let Some(Held::Normal(n)) = state.as_ref() else {
            return Ok(Renewal::LeaseLost);
        };
        if n.token != lease.token || n.worker_id != lease.worker_id {
            return Ok(Renewal::LeaseLost);
        }
        if n.forever.lost.load(Ordering::Acquire) || self.session.lost().is_some() {
            tracing::error!(
                worker_id = n.worker_id,
                "another live process took this identity"
            );
            return Ok(Renewal::LeaseLost);
        }
        if self.config.fence_on_disconnect {
            let forever = n.forever.clone();
            let Some(ttl) = self.confirm_forever(&forever, mark_ms).await? else {
                tracing::error!(
                    worker_id = n.worker_id,
                    "zk_normal lease lost: the identity's lock or node is another process's"
                );
                return Ok(Renewal::LeaseLost);
            };
            return Ok(Renewal::Ok { ttl: Some(ttl) });
        }
        // The cache file is the durable record: zookeeper being down never stops renewals.
        self.write_forever_in_background(&n.forever, mark_ms);
        Ok(Renewal::OK)
    }

    async fn release(&self, lease: &Lease, final_mark_ms: u64) -> Result<()> {
        if self.mode == ZkMode::Recycle {
            return self.release_recycle(lease, final_mark_ms).await;
        }
        let mut state = self.lease.lock().await;
        let Some(Held::Normal(n)) = state.as_ref() else {
            return Ok(());
        };
        if n.token != lease.token || n.worker_id != lease.worker_id {
            return Ok(());
        }
        let forever = n.forever.clone();
        {
            // Waits for a background write in flight and stops later ones, so the final mark
            // (below the last renewal's) is the one that stays.
            let mut w = forever.write.lock().await;
            w.released = true;
            let r = bounded(
                self.session.limit(),
                "the final mark",
                write_forever(&self.session, &forever, &mut w, final_mark_ms),
            )
            .await;
            if let Err(e) = r {
                // The cache file has the final mark; zookeeper keeps a later one, which only
                // makes a start elsewhere wait a little.
                tracing::warn!(worker_id = forever.worker_id, error = %e, "final mark not written to zookeeper");
            }
        }
        if let Err(e) = self.session.drop_ephemeral(&forever.lock_path).await {
            tracing::warn!(error = %e, "live lock not deleted; it goes with the session");
        }
        *state = None;
        Ok(())
    }

    async fn abandon(&self, lease: &Lease) {
        let mut state = self.lease.lock().await;
        let matches = match state.as_ref() {
            Some(Held::Normal(n)) => n.token == lease.token && n.worker_id == lease.worker_id,
            Some(Held::Recycle(r)) => r.token == lease.token && r.worker_id == lease.worker_id,
            None => false,
        };
        if matches {
            self.forget(&mut state);
        }
    }
}
