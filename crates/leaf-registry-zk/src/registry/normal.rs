//! `zk_normal`: Leaf's `forever` nodes, the live lock per identity, and the mark copied to
//! the node in the background.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use leaf_core::{AcquireRequest, Error, Lease, NodeIdentity, Result};
use tokio::sync::Mutex;
use zookeeper_client::{self as zk, Acls, CreateMode};

use super::{Forever, ForeverWrite, Held, NormalHeld, ZkClaims};
use crate::error::{bounded, map_zk};
use crate::node::{self};
use crate::session::{Claim, Session, ensure_dir};

pub(super) fn too_large(worker_id: u64, identity: &NodeIdentity, max: u64, source: &str) -> Error {
    Error::Config(format!(
        "zk_normal workerId mode: worker id {worker_id} of node {identity} ({source}) does not \
         fit the layout, whose largest worker id is {max}; widen the layout's worker bits"
    ))
}

/// What the `forever` lookup found.
pub(super) struct Found {
    worker_id: u64,
    prev_mark_ms: Option<u64>,
    path: String,
    version: i32,
}

impl ZkClaims {
    pub(super) fn lock_path(&self, identity: &NodeIdentity) -> String {
        format!("{}/forever-lock/{identity}", self.base)
    }

    pub(super) fn forever_dir(&self) -> String {
        format!("{}/forever", self.base)
    }

    /// `fence_on_disconnect`: the lease's TTL, the session timeout the server granted (or the
    /// configured one before any session); `Config` if the caller could not renew within it.
    pub(super) async fn fence_ttl(&self, req: &AcquireRequest) -> Result<Duration> {
        let ttl = self.session.granted_timeout().await;
        if ttl <= req.min_ttl() {
            return Err(Error::Config(format!(
                "session_timeout_ms {} (granted {} ms) must be above {} ms with \
                 fence_on_disconnect, the generator's renew period plus fencing margin plus \
                 latency allowance",
                self.config.session_timeout_ms,
                ttl.as_millis(),
                req.min_ttl().as_millis()
            )));
        }
        Ok(ttl)
    }

    /// `fence_on_disconnect`: a renewal counts once zookeeper confirmed, after the caller's
    /// instant, that this node's session holds the identity's live lock, and the mark is in
    /// the `forever` node (a quorum write). The granted session timeout, `None` if the lease
    /// is lost (another process took the identity, or the lease was released).
    pub(super) async fn confirm_forever(
        &self,
        forever: &Forever,
        mark_ms: u64,
    ) -> Result<Option<Duration>> {
        let mut w = forever.write.lock().await;
        if w.released {
            return Ok(None);
        }
        let data = node::forever_data(&forever.identity, self.clock.now_ms());
        bounded(self.session.limit(), "the lease renewal", async {
            // Re-creates the lock in a new session if the last one expired and nobody took it.
            let claim = self
                .session
                .keep_ephemeral(&forever.lock_path, &data, true)
                .await?;
            if claim == Claim::HeldByOther {
                forever.lost.store(true, Ordering::Release);
                return Ok(None);
            }
            // Marks only rise: never below the mark this lease started past.
            let mark_ms = mark_ms.max(w.start_mark);
            write_forever(&self.session, forever, &mut w, mark_ms).await?;
            if forever.lost.load(Ordering::Acquire) || w.node.is_none() {
                return Ok(None);
            }
            Ok(Some(self.session.granted_timeout().await))
        })
        .await
    }

    /// Takes the identity's live lock (an ephemeral node), waiting up to a session timeout for
    /// a crashed predecessor's to go; `AlreadyExists` naming the identity if a live process
    /// keeps it.
    pub(super) async fn take_live_lock(&self, identity: &NodeIdentity) -> Result<()> {
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
    pub(super) async fn find_or_create_forever(&self, identity: &NodeIdentity) -> Result<Found> {
        let dir = self.forever_dir();
        let client = self.session.client().await?;
        let limit = self.session.limit();
        bounded(limit, "the forever node lookup", async {
            let acls = self.session.acls();
            ensure_dir(&client, &dir, &acls).await?;
            let path = match find_forever(&client, &dir, identity).await? {
                Some(path) => path,
                None => {
                    let prefix = format!("{dir}/{identity}-");
                    let options = CreateMode::PersistentSequential.with_acls(Acls::new(&acls));
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

    /// The `Forever` of a lease of `worker_id` for `identity`; `node` is `None` after a start
    /// from the cache file, until the node is found again.
    fn forever(
        &self,
        identity: &NodeIdentity,
        worker_id: u64,
        node: Option<(String, i32)>,
        start_mark: Option<u64>,
    ) -> Arc<Forever> {
        Arc::new(Forever {
            identity: identity.clone(),
            worker_id,
            lock_path: self.lock_path(identity),
            forever_dir: self.forever_dir(),
            write: Mutex::new(ForeverWrite {
                released: false,
                node,
                start_mark: start_mark.unwrap_or(0),
                tried: Vec::new(),
            }),
            in_flight: AtomicBool::new(false),
            confirmed: self.confirmed.clone(),
            lost: AtomicBool::new(false),
        })
    }

    pub(super) async fn claim_normal(&self, req: &AcquireRequest) -> Result<(Lease, Held)> {
        let identity = &req.identity;
        // A previous lease's confirmation says nothing about this one's.
        self.confirmed.store(0, Ordering::Release);
        // The live lock before the lookup: two first starts of one identity never both create
        // a sequential node.
        self.take_live_lock(identity).await?;
        let found = self.find_or_create_forever(identity).await?;
        let worker_id = found.worker_id;
        if worker_id > req.max_worker_id {
            return Err(too_large(
                worker_id,
                identity,
                req.max_worker_id,
                "zookeeper forever node",
            ));
        }
        let mut lease = Lease::new(worker_id, found.prev_mark_ms).with_token(self.next_token());
        if self.config.fence_on_disconnect {
            lease = lease.with_ttl(self.fence_ttl(req).await?);
        }
        tracing::info!(worker_id, prev_mark_ms = ?found.prev_mark_ms, %identity, ttl = ?lease.ttl, "zk_normal worker id acquired");
        let normal = NormalHeld {
            worker_id,
            token: lease.token,
            forever: self.forever(
                identity,
                worker_id,
                Some((found.path, found.version)),
                found.prev_mark_ms,
            ),
        };
        Ok((lease, Held::Normal(normal)))
    }

    /// ZooKeeper is down at start-up and the node starts from its cache file (`lease`). Once
    /// ZooKeeper answers, the background mark write takes the live lock and finds the node
    /// again; with `fence_on_disconnect`, nothing is issued until zookeeper confirms the lock.
    pub(super) async fn resume_normal(
        &self,
        req: &AcquireRequest,
        lease: Lease,
    ) -> Result<(Lease, Held)> {
        let mut lease = lease.with_token(self.next_token());
        if self.config.fence_on_disconnect {
            lease = lease.with_ttl(self.fence_ttl(req).await?);
        }
        let normal = NormalHeld {
            worker_id: lease.worker_id,
            token: lease.token,
            forever: self.forever(&req.identity, lease.worker_id, None, lease.prev_mark_ms),
        };
        Ok((lease, Held::Normal(normal)))
    }

    /// Writes the mark to the `forever` node in the background (the cache file is the durable
    /// record in `zk_normal`, so ZooKeeper being down never stops renewals), unless a write is
    /// in flight: the next renewal carries a later mark anyway.
    pub(super) fn write_forever_in_background(&self, forever: &Arc<Forever>, mark_ms: u64) {
        if forever.in_flight.swap(true, Ordering::AcqRel) {
            return;
        }
        let (session, forever) = (self.session.clone(), forever.clone());
        tokio::spawn(async move {
            let mut w = forever.write.lock().await;
            if !w.released {
                let limit = session.limit();
                // Marks only rise: never below the mark this lease started past.
                let mark_ms = mark_ms.max(w.start_mark);
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
pub(super) async fn find_forever(
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
/// first takes the live lock and finds the node again. A node holding a mark above the one
/// this lease started past, other than one this process tried to write, was written by another
/// process of this identity: nothing is written and the lease is marked lost.
pub(super) async fn write_forever(
    session: &Session,
    forever: &Forever,
    w: &mut ForeverWrite,
    mark_ms: u64,
) -> Result<()> {
    let client = session.client().await?;
    // Bounded: a lost write can only be one of the last few (writes are serialised), and a
    // mark forgotten here only makes its node look foreign, which stops, never duplicates.
    if w.tried.len() >= MAX_TRIED {
        w.tried.remove(0);
    }
    w.tried.push(mark_ms);
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
        let Some(version) = read_own_forever(&client, forever, &path, w).await? else {
            return Ok(());
        };
        w.node = Some((path, version));
    }
    let (path, version) = w.node.clone().expect("set above");
    let data = node::forever_data(&forever.identity, mark_ms);
    let stat = match client.set_data(&path, &data, Some(version)).await {
        Ok(stat) => stat,
        // An earlier write landed without this node learning its version (the live lock
        // keeps other writers of this identity out while it is held): write over it, unless
        // it is another process's.
        Err(zk::Error::BadVersion) => {
            let Some(version) = read_own_forever(&client, forever, &path, w).await? else {
                return Ok(());
            };
            client
                .set_data(&path, &data, Some(version))
                .await
                .map_err(|e| map_zk(e, &path))?
        }
        Err(e) => return Err(session.fail(e, &path).await),
    };
    w.node = Some((path, stat.version));
    w.tried.clear();
    forever.confirmed.store(mark_ms, Ordering::Release);
    Ok(())
}

/// How many unconfirmed marks [`write_forever`] remembers.
const MAX_TRIED: usize = 64;

/// The `forever` node's version, if what it holds can be this process's own: a mark not above
/// the one this lease started past, or one this process tried to write. `None`, with the lease
/// marked lost, if another process of this identity wrote it: that process ran while this
/// one's session was gone, and this one's generator knows nothing of the timestamps it issued
/// (even below this process's own next mark: the two clocks may differ by seconds).
async fn read_own_forever(
    client: &zk::Client,
    forever: &Forever,
    path: &str,
    w: &ForeverWrite,
) -> Result<Option<i32>> {
    let (data, stat) = client.get_data(path).await.map_err(|e| map_zk(e, path))?;
    match node::forever_prev_mark(&data, path)? {
        Some(stored) if stored > w.start_mark && !w.tried.contains(&stored) => {
            tracing::error!(
                %path,
                stored_mark_ms = stored,
                start_mark_ms = w.start_mark,
                "another process of this identity wrote its mark; stopping"
            );
            forever.lost.store(true, Ordering::Release);
            Ok(None)
        }
        _ => Ok(Some(stat.version)),
    }
}
