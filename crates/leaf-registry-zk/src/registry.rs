//! `ZkRegistry`: the `zk_normal` and `zk_recycle` workerId modes, the `temporary` peer list,
//! and the worker-id cache file as every registry keeps it.

use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use async_trait::async_trait;
use leaf_core::cache_file::{merge_marks, start_from_cache};
use leaf_core::{
    AcquireRequest, AsyncCacheFile, CacheRecord, Clock, Error, HeldCache, HeldCacheGuard, Lease,
    LeaseToken, NodeIdentity, RegistryCapabilities, Renewal, Result, SystemClock, WorkerIdRegistry,
};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;
use zookeeper_client::{self as zk, Acls, CreateMode};

use crate::config::{ZkConfig, validate_name};
use crate::error::{bounded, map_zk};
use crate::node::{self, InUse};
use crate::recycle::{self, Pool};
use crate::session::{Claim, Session, ensure_dir};

/// Which of the two ZooKeeper workerId modes a [`ZkRegistry`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZkMode {
    /// `zk_normal`: Leaf's `forever` nodes; an `ip:port` keeps its worker id for ever.
    Normal,
    /// `zk_recycle`: a pool of worker ids, leased with a TTL and recycled when their owner stops
    /// renewing.
    Recycle,
}

/// The ZooKeeper workerId modes; see the crate docs for the layout and the rules.
pub struct ZkRegistry {
    config: ZkConfig,
    mode: ZkMode,
    /// `{root}/{name}`.
    base: String,
    cache_dir: PathBuf,
    file_name: String,
    session: Arc<Session>,
    held: HeldCache,
    /// The lease held, if any. Locked before `held` by every call.
    lease: Mutex<Option<Held>>,
    generation: AtomicU64,
    /// `zk_normal`: the last mark the `forever` node is known to hold (0: none yet).
    confirmed: Arc<AtomicU64>,
    /// This node's `temporary` entry, left out of [`ZkRegistry::peers`].
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
}

#[derive(Debug)]
struct RecycleHeld {
    worker_id: u64,
    token: LeaseToken,
    /// The `epoch/{id}` version of this claim: every write for it checks it.
    epoch: i32,
    /// The `inuse` node's version last written by this node.
    version: i32,
    ttl: Duration,
    /// The claimer's identity, kept in the node by every renewal.
    owner: String,
}

impl fmt::Debug for ZkRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkRegistry")
            .field("mode", &self.mode())
            .field("address", &self.config.address)
            .field("base", &self.base)
            .field("cache_dir", &self.cache_dir)
            .finish_non_exhaustive()
    }
}

impl Drop for ZkRegistry {
    fn drop(&mut self) {
        if let Some(task) = self.recycler.get_mut().ok().and_then(Option::take) {
            task.abort();
        }
    }
}

impl ZkRegistry {
    /// A registry of `mode` on the ensemble of `config`, for the leaf name `name` (nodes under
    /// `{root}/{name}`), keeping its cache file in `cache_dir`. Nothing is contacted before
    /// [`acquire`](WorkerIdRegistry::acquire), so this succeeds while ZooKeeper is down.
    pub fn connect(
        config: &ZkConfig,
        mode: ZkMode,
        cache_dir: PathBuf,
        name: &str,
    ) -> Result<ZkRegistry> {
        config.validate()?;
        validate_name(name)?;
        let mode_name = match mode {
            ZkMode::Normal => "zk_normal",
            ZkMode::Recycle => "zk_recycle",
        };
        Ok(ZkRegistry {
            config: config.clone(),
            mode,
            base: format!("{}/{name}", config.root),
            cache_dir,
            // Per mode: a worker id cached by another mode must never serve a start here.
            file_name: format!("worker-{mode_name}-{name}"),
            session: Arc::new(Session::new(&config.address, config.session_timeout())),
            held: HeldCache::new(),
            lease: Mutex::new(None),
            generation: AtomicU64::new(0),
            confirmed: Arc::default(),
            temporary: StdMutex::default(),
            recycler: StdMutex::default(),
            clock: Arc::new(SystemClock::new()),
        })
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

    fn temporary_dir(&self) -> String {
        format!("{}/temporary", self.base)
    }

    fn next_token(&self) -> LeaseToken {
        LeaseToken::new(self.generation.fetch_add(1, Ordering::Relaxed) + 1)
    }

    /// Forgets `lease` (held in `state`) locally; its cache file stays open, and the directory
    /// locked, for this instance's next acquire.
    async fn forget(&self, state: &mut Option<Held>, lease: &Lease) {
        if let Some(Held::Normal(n)) = state.as_ref() {
            // Later background writes see this and write nothing; one in flight may still land,
            // which only raises the mark.
            if let Ok(mut w) = n.forever.write.try_lock() {
                w.released = true;
            }
        }
        *state = None;
        self.held.forget(lease).await;
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
            Pool::new(&self.base),
            period,
            self.clock.clone(),
        )));
    }
}

fn too_large(worker_id: u64, identity: &NodeIdentity, max: u64, source: &str) -> Error {
    Error::Config(format!(
        "zk_normal workerId mode: worker id {worker_id} of node {identity} ({source}) does not \
         fit the layout, whose largest worker id is {max}; widen the layout's worker bits"
    ))
}

// ---- zk_normal ----

/// What the `forever` lookup found.
struct Found {
    worker_id: u64,
    prev_mark_ms: Option<u64>,
    path: String,
    version: i32,
}

impl ZkRegistry {
    fn lock_path(&self, identity: &NodeIdentity) -> String {
        format!("{}/forever-lock/{identity}", self.base)
    }

    fn forever_dir(&self) -> String {
        format!("{}/forever", self.base)
    }

    /// Takes the identity's live lock (an ephemeral node), waiting up to a session timeout for
    /// a crashed predecessor's to go; `AlreadyExists` naming the identity if a live process
    /// keeps it.
    async fn take_live_lock(&self, identity: &NodeIdentity) -> Result<()> {
        let path = self.lock_path(identity);
        let data = node::forever_data(identity, self.clock.now_ms());
        // A crashed process's lock stays until its session expires.
        let patience = self.config.session_timeout() + Duration::from_secs(2);
        let start = self.clock.monotonic();
        loop {
            if self.session.keep_ephemeral(&path, &data, true).await? == Claim::Held {
                return Ok(());
            }
            if self.clock.monotonic().saturating_sub(start) >= patience {
                return Err(Error::AlreadyExists(format!(
                    "worker identity {identity} is in use by another live process (zookeeper \
                     node {path}); every process needs its own ip:port"
                )));
            }
            self.clock.sleep(Duration::from_millis(250)).await;
        }
    }

    /// The `forever` node of `identity` (Java Leaf's or ours), created if there is none. The
    /// live lock is held, so no other process of this identity runs this concurrently.
    async fn find_or_create_forever(&self, identity: &NodeIdentity) -> Result<Found> {
        let dir = self.forever_dir();
        let client = self.session.client().await?;
        let limit = self.session.limit();
        bounded(limit, "the forever node lookup", async {
            ensure_dir(&client, &dir).await?;
            let path = match find_forever(&client, &dir, identity).await? {
                Some(path) => path,
                None => {
                    let prefix = format!("{dir}/{identity}-");
                    let options = CreateMode::PersistentSequential.with_acls(Acls::anyone_all());
                    let (_, seq) = client
                        .create(&prefix, &node::forever_data(identity, 0), &options)
                        .await
                        .map_err(|e| map_zk(e, &prefix))?;
                    format!("{prefix}{seq}")
                }
            };
            let (data, stat) = client.get_data(&path).await.map_err(|e| map_zk(e, &path))?;
            let child = path.rsplit('/').next().unwrap_or_default();
            let worker_id = node::forever_seq(child, identity).ok_or_else(|| {
                Error::backend(
                    crate::error::BACKEND,
                    format!("{path} has no sequence number"),
                )
            })?;
            Ok(Found {
                worker_id,
                prev_mark_ms: node::forever_prev_mark(&data, &path)?,
                path,
                version: stat.version,
            })
        })
        .await
    }

    async fn acquire_normal(
        &self,
        req: &AcquireRequest,
        held: &mut HeldCacheGuard<'_>,
        cache: AsyncCacheFile,
        cached: Option<CacheRecord>,
    ) -> Result<(Lease, Held)> {
        let identity = &req.identity;
        // A previous lease's confirmation says nothing about this one's.
        self.confirmed.store(0, Ordering::Release);
        // The live lock before the lookup: two first starts of one identity never both create
        // a sequential node.
        let looked_up = match self.take_live_lock(identity).await {
            Ok(()) => self.find_or_create_forever(identity).await,
            Err(e) => Err(e),
        };
        let forever = |worker_id, node| {
            Arc::new(Forever {
                identity: identity.clone(),
                worker_id,
                lock_path: self.lock_path(identity),
                forever_dir: self.forever_dir(),
                write: Mutex::new(ForeverWrite {
                    released: false,
                    node,
                }),
                in_flight: AtomicBool::new(false),
                confirmed: self.confirmed.clone(),
                lost: AtomicBool::new(false),
            })
        };
        let found = match looked_up {
            Ok(found) => found,
            // ZooKeeper is down: start from the cache file, mark included, so the start-up
            // time check still applies. Once ZooKeeper answers, the background mark write takes
            // the live lock and finds the node again.
            Err(e) if e.is_retryable() => {
                let lease = start_from_cache(held, cache, cached, req, "zk_normal", &e).await?;
                let normal = NormalHeld {
                    worker_id: lease.worker_id,
                    token: lease.token,
                    forever: forever(lease.worker_id, None),
                };
                return Ok((lease, Held::Normal(normal)));
            }
            Err(e) => return Err(e),
        };
        let worker_id = found.worker_id;
        if worker_id > req.max_worker_id {
            return Err(too_large(
                worker_id,
                identity,
                req.max_worker_id,
                "zookeeper forever node",
            ));
        }
        let prev_mark_ms = merge_marks(worker_id, found.prev_mark_ms, cached);
        // The cache file learns the worker id now, so that a start while ZooKeeper is down
        // finds it; the mark stays the highest known.
        cache
            .write(CacheRecord {
                worker_id,
                mark_ms: prev_mark_ms.unwrap_or(0),
            })
            .await?;
        let lease = Lease::new(worker_id, prev_mark_ms).with_token(self.next_token());
        tracing::info!(worker_id, ?prev_mark_ms, %identity, "zk_normal worker id acquired");
        held.hold(&lease, cache);
        let normal = NormalHeld {
            worker_id,
            token: lease.token,
            forever: forever(worker_id, Some((found.path, found.version))),
        };
        Ok((lease, Held::Normal(normal)))
    }

    /// Writes the mark to the `forever` node in the background (the cache file is the durable
    /// record in `zk_normal`, so ZooKeeper being down never stops renewals), unless a write is
    /// in flight: the next renewal carries a later mark anyway.
    fn write_forever_in_background(&self, forever: &Arc<Forever>, mark_ms: u64) {
        if forever.in_flight.swap(true, Ordering::AcqRel) {
            return;
        }
        let (session, forever) = (self.session.clone(), forever.clone());
        tokio::spawn(async move {
            let mut w = forever.write.lock().await;
            if !w.released {
                let limit = session.limit();
                let r = bounded(
                    limit,
                    "the mark update",
                    write_forever(&session, &forever, &mut w, mark_ms),
                )
                .await;
                if let Err(e) = r {
                    tracing::debug!(worker_id = forever.worker_id, error = %e, "mark not written to zookeeper; the cache file has it");
                }
            }
            drop(w);
            forever.in_flight.store(false, Ordering::Release);
        });
    }
}

/// The `forever` child of `identity`, the lowest sequence if (after a race of Java Leaf
/// processes) there are several.
async fn find_forever(
    client: &zk::Client,
    dir: &str,
    identity: &NodeIdentity,
) -> Result<Option<String>> {
    let children = client
        .list_children(dir)
        .await
        .map_err(|e| map_zk(e, dir))?;
    let mut mine: Vec<(u64, &String)> = children
        .iter()
        .filter_map(|c| node::forever_seq(c, identity).map(|s| (s, c)))
        .collect();
    mine.sort();
    if mine.len() > 1 {
        tracing::warn!(%identity, nodes = mine.len(), "several forever nodes for one identity; using the lowest sequence");
    }
    Ok(mine.first().map(|(_, c)| format!("{dir}/{c}")))
}

/// One mark write to the `forever` node, version-checked; after a start from the cache file it
/// first takes the live lock and finds the node again.
async fn write_forever(
    session: &Session,
    forever: &Forever,
    w: &mut ForeverWrite,
    mark_ms: u64,
) -> Result<()> {
    let client = session.client().await?;
    if w.node.is_none() {
        if session
            .keep_ephemeral(
                &forever.lock_path,
                &node::forever_data(&forever.identity, mark_ms),
                true,
            )
            .await?
            == Claim::HeldByOther
        {
            tracing::error!(identity = %forever.identity, "another live process holds this identity's lock; stopping");
            forever.lost.store(true, Ordering::Release);
            return Ok(());
        }
        let Some(path) = find_forever(&client, &forever.forever_dir, &forever.identity).await?
        else {
            tracing::warn!(identity = %forever.identity, "no forever node for this identity; the cache file keeps the mark");
            return Ok(());
        };
        let child = path.rsplit('/').next().unwrap_or_default();
        if node::forever_seq(child, &forever.identity) != Some(forever.worker_id) {
            tracing::error!(%path, worker_id = forever.worker_id, "the identity's forever node is not the cached worker id's; stopping");
            forever.lost.store(true, Ordering::Release);
            return Ok(());
        }
        let (_, stat) = client.get_data(&path).await.map_err(|e| map_zk(e, &path))?;
        w.node = Some((path, stat.version));
    }
    let (path, version) = w.node.clone().expect("set above");
    let data = node::forever_data(&forever.identity, mark_ms);
    let stat = match client.set_data(&path, &data, Some(version)).await {
        Ok(stat) => stat,
        // An earlier write landed without this node learning its version (the live lock
        // keeps other writers of this identity out): write over it.
        Err(zk::Error::BadVersion) => {
            let (_, stat) = client.get_data(&path).await.map_err(|e| map_zk(e, &path))?;
            client
                .set_data(&path, &data, Some(stat.version))
                .await
                .map_err(|e| map_zk(e, &path))?
        }
        Err(e) => return Err(session.fail(e, &path).await),
    };
    w.node = Some((path, stat.version));
    forever.confirmed.store(mark_ms, Ordering::Release);
    Ok(())
}

// ---- zk_recycle ----

/// The largest pool `zk_recycle` seeds: 14 worker bits, sixteen times Leaf's default.
const MAX_POOL_ID: u64 = (1 << 14) - 1;

impl ZkRegistry {
    /// What `zk_recycle` refuses before touching anything: a TTL the caller cannot renew in
    /// time, a pool too large to keep in ZooKeeper.
    fn check_recycle(&self, req: &AcquireRequest) -> Result<Duration> {
        let ttl = self.config.recycle_ttl();
        if ttl <= req.min_ttl() {
            return Err(Error::Config(format!(
                "recycle_idle_timeout_ms {} must be above {} ms, the generator's renew period \
                 plus fencing margin plus latency allowance",
                ttl.as_millis(),
                req.min_ttl().as_millis()
            )));
        }
        if req.max_worker_id > MAX_POOL_ID {
            return Err(Error::Config(format!(
                "zk_recycle workerId mode keeps one zookeeper node per worker id, and the layout \
                 allows {} of them; narrow the layout's worker bits to at most {} ids",
                req.max_worker_id + 1,
                MAX_POOL_ID + 1
            )));
        }
        Ok(ttl)
    }

    async fn acquire_recycle(
        &self,
        req: &AcquireRequest,
        held: &mut HeldCacheGuard<'_>,
        cache: AsyncCacheFile,
        cached: Option<CacheRecord>,
    ) -> Result<(Lease, Held)> {
        let ttl = self.check_recycle(req)?;
        // No start from the cache file here: the cached id may have been recycled meanwhile.
        let client = self.session.client().await?;
        let pool = Pool::new(&self.base);
        let limit = self.session.limit();
        bounded(
            limit,
            "seeding the worker id pool",
            recycle::seed(&client, &pool, req.max_worker_id),
        )
        .await?;
        let owner = req.identity.to_string();
        let claimed = bounded(
            limit,
            "claiming a worker id",
            recycle::claim(
                &client,
                &pool,
                req.max_worker_id,
                &owner,
                ttl,
                req.now_ms,
                req.max_ahead_ms,
            ),
        )
        .await?;
        let worker_id = claimed.id;
        let prev_mark_ms = merge_marks(worker_id, claimed.carried_mark, cached);
        let lease = Lease::new(worker_id, prev_mark_ms)
            .with_ttl(ttl)
            .with_token(LeaseToken::new(claimed.stat.czxid as u64));
        let written = cache
            .write(CacheRecord {
                worker_id,
                mark_ms: prev_mark_ms.unwrap_or(0),
            })
            .await;
        if let Err(e) = written {
            // Not started: the id goes back now rather than after its TTL.
            let back = bounded(limit, "returning the worker id", async {
                recycle::give_back(
                    &client,
                    &pool,
                    worker_id,
                    claimed.epoch,
                    claimed.stat.version,
                    prev_mark_ms.unwrap_or(0),
                )
                .await
            })
            .await;
            if let Err(b) = back {
                tracing::warn!(worker_id, error = %b, "claimed id not returned; the recycler will");
            }
            return Err(e);
        }
        tracing::info!(worker_id, ?prev_mark_ms, identity = %req.identity, ttl_ms = ttl.as_millis() as u64, "zk_recycle worker id claimed");
        held.hold(&lease, cache);
        let recycle = RecycleHeld {
            worker_id,
            token: lease.token,
            epoch: claimed.epoch,
            version: claimed.stat.version,
            ttl,
            owner,
        };
        Ok((lease, Held::Recycle(recycle)))
    }

    /// The `inuse` node after a version mismatch: `Some(version)` if it is still this claim's
    /// (an earlier write of ours landed unseen), `None` if it is gone or another claim's.
    async fn own_version(
        &self,
        client: &zk::Client,
        path: &str,
        token: LeaseToken,
    ) -> Result<Option<i32>> {
        match client.get_data(path).await {
            Ok((_, stat)) if stat.czxid as u64 == token.get() => Ok(Some(stat.version)),
            Ok(_) | Err(zk::Error::NoNode) => Ok(None),
            Err(e) => Err(self.session.fail(e, path).await),
        }
    }

    async fn renew_recycle(&self, lease: &Lease, mark_ms: u64) -> Result<Renewal> {
        let mut state = self.lease.lock().await;
        let Some(Held::Recycle(r)) = state.as_mut().filter(|h| matches!(h, Held::Recycle(r) if r.token == lease.token && r.worker_id == lease.worker_id)) else {
            return Ok(Renewal::LeaseLost);
        };
        let (id, token, ttl, epoch, version) = (r.worker_id, r.token, r.ttl, r.epoch, r.version);
        let owner = r.owner.clone();
        let pool = Pool::new(&self.base);
        let path = pool.inuse_of(id);
        let data = node::to_json(&InUse {
            owner,
            ttl_ms: ttl.as_millis() as u64,
            mark: mark_ms,
        });
        let client = self.session.client().await?;
        let written = bounded(self.session.limit(), "the lease renewal", async {
            let fail = |e| self.session.fail(e, &path);
            match recycle::write_claim(&client, &pool, id, epoch, version, &data).await {
                Ok(recycle::Written::At(v)) => Ok(Some(v)),
                Ok(recycle::Written::Lost) => Ok(None),
                Ok(recycle::Written::OtherVersion) => {
                    let Some(v) = self.own_version(&client, &path, token).await? else {
                        return Ok(None);
                    };
                    match recycle::write_claim(&client, &pool, id, epoch, v, &data).await {
                        Ok(recycle::Written::At(v)) => Ok(Some(v)),
                        Ok(_) => Ok(None),
                        Err(e) => Err(fail(e).await),
                    }
                }
                Err(e) => Err(fail(e).await),
            }
        })
        .await?;
        let Some(v) = written else {
            tracing::warn!(
                worker_id = id,
                "the worker id's lease is gone (recycled or taken)"
            );
            self.forget(&mut state, lease).await;
            return Ok(Renewal::LeaseLost);
        };
        r.version = v;
        if !self.held.lock().await.write_mark(lease, mark_ms).await? {
            return Ok(Renewal::LeaseLost);
        }
        Ok(Renewal::Ok { ttl: Some(ttl) })
    }

    async fn release_recycle(&self, lease: &Lease, final_mark_ms: u64) -> Result<()> {
        let mut state = self.lease.lock().await;
        let Some(Held::Recycle(r)) = state.as_ref().filter(|h| matches!(h, Held::Recycle(r) if r.token == lease.token && r.worker_id == lease.worker_id)) else {
            tracing::debug!(worker_id = lease.worker_id, "release of a lease not held");
            return Ok(());
        };
        let (id, token, epoch, version) = (r.worker_id, r.token, r.epoch, r.version);
        let pool = Pool::new(&self.base);
        let client = self.session.client().await?;
        bounded(self.session.limit(), "returning the worker id", async {
            if recycle::give_back(&client, &pool, id, epoch, version, final_mark_ms).await? {
                return Ok(());
            }
            // Still this claim at another version (a renewal landed unanswered): return it at
            // that version; otherwise it is gone already.
            if let Some(v) = self.own_version(&client, &pool.inuse_of(id), token).await? {
                recycle::give_back(&client, &pool, id, epoch, v, final_mark_ms).await?;
            }
            Ok(())
        })
        .await?;
        if !self.held.release(lease, final_mark_ms).await? {
            tracing::debug!(worker_id = id, "cache file not held at release");
        }
        *state = None;
        tracing::info!(
            worker_id = id,
            final_mark_ms,
            "zk_recycle worker id returned to the pool"
        );
        Ok(())
    }
}

#[async_trait]
impl WorkerIdRegistry for ZkRegistry {
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

    fn capabilities(&self) -> RegistryCapabilities {
        match self.mode {
            ZkMode::Normal => RegistryCapabilities::new(false, true).with_exclusive_identity(true),
            ZkMode::Recycle => RegistryCapabilities::new(true, true),
        }
    }

    async fn acquire(&self, req: &AcquireRequest) -> Result<Lease> {
        if self.mode == ZkMode::Recycle {
            self.check_recycle(req)?;
            // Before the claim: in a pool full of crashed nodes' ids, this recycler is the one
            // that frees them.
            self.ensure_recycler();
        }
        let mut state = self.lease.lock().await;
        let mut held = self.held.lock().await;
        // The cache directory's lock first: a second process on it must not start at all.
        let (cache, cached) = held.open_unheld(&self.cache_dir, &self.file_name).await?;
        let (lease, h) = match self.mode {
            ZkMode::Normal => self.acquire_normal(req, &mut held, cache, cached).await?,
            ZkMode::Recycle => self.acquire_recycle(req, &mut held, cache, cached).await?,
        };
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
        if !self.held.lock().await.write_mark(lease, mark_ms).await? {
            return Ok(Renewal::LeaseLost);
        }
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
        let mut held = self.held.lock().await;
        if !held.write_mark(lease, final_mark_ms).await? {
            return Ok(());
        }
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
        held.close();
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
            self.forget(&mut state, lease).await;
        }
    }
}
