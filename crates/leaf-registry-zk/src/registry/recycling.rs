//! `zk_recycle`: claiming, renewing and returning an id of the pool.

use leaf_core::{AcquireRequest, Error, Lease, LeaseToken, Renewal, Result};
use zookeeper_client as zk;

use super::{Held, RecycleHeld, ZkClaims};
use crate::error::bounded;
use crate::node::{self, InUse};
use crate::recycle::{self, Pool};

/// The largest pool `zk_recycle` seeds: 14 worker bits, sixteen times Leaf's default.
pub(super) const MAX_POOL_ID: u64 = (1 << 14) - 1;

impl ZkClaims {
    /// What `zk_recycle` refuses before touching anything (the TTL is the caller's check): a
    /// pool too large to keep in ZooKeeper.
    pub(super) fn check_pool(&self, req: &AcquireRequest) -> Result<()> {
        if req.max_worker_id > MAX_POOL_ID {
            return Err(Error::Config(format!(
                "zk_recycle workerId mode keeps one zookeeper node per worker id, and the layout \
                 allows {} of them; narrow the layout's worker bits to at most {} ids",
                req.max_worker_id + 1,
                MAX_POOL_ID + 1
            )));
        }
        Ok(())
    }

    pub(super) async fn claim_recycle(&self, req: &AcquireRequest) -> Result<(Lease, Held)> {
        let ttl = self.config.recycle_ttl();
        let client = self.session.client().await?;
        let pool = Pool::new(&self.base, self.session.acls());
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
        let lease = Lease::new(worker_id, claimed.carried_mark)
            .with_ttl(ttl)
            .with_token(LeaseToken::new(claimed.stat.czxid as u64));
        tracing::info!(worker_id, carried_mark_ms = ?claimed.carried_mark, identity = %req.identity, ttl_ms = ttl.as_millis() as u64, "zk_recycle worker id claimed");
        let recycle = RecycleHeld {
            worker_id,
            token: lease.token,
            epoch: claimed.epoch,
            version: claimed.stat.version,
            floor: claimed.carried_mark.unwrap_or(0),
            ttl,
            owner,
        };
        Ok((lease, Held::Recycle(recycle)))
    }

    /// The `inuse` node after a version mismatch: `Some(version)` if it is still this claim's
    /// (an earlier write of ours landed unseen), `None` if it is gone or another claim's.
    pub(super) async fn own_version(
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

    pub(super) async fn renew_recycle(&self, lease: &Lease, mark_ms: u64) -> Result<Renewal> {
        let mut state = self.lease.lock().await;
        let Some(Held::Recycle(r)) = state.as_mut().filter(|h| matches!(h, Held::Recycle(r) if r.token == lease.token && r.worker_id == lease.worker_id)) else {
            return Ok(Renewal::LeaseLost);
        };
        let (id, token, ttl, epoch, version) = (r.worker_id, r.token, r.ttl, r.epoch, r.version);
        let owner = r.owner.clone();
        let pool = Pool::new(&self.base, self.session.acls());
        let path = pool.inuse_of(id);
        // Marks only rise: never below what the id carried when this node claimed it.
        let data = node::to_json(&InUse {
            owner,
            ttl_ms: ttl.as_millis() as u64,
            mark: mark_ms.max(r.floor),
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
            self.forget(&mut state);
            return Ok(Renewal::LeaseLost);
        };
        r.version = v;
        Ok(Renewal::Ok { ttl: Some(ttl) })
    }

    pub(super) async fn release_recycle(&self, lease: &Lease, final_mark_ms: u64) -> Result<()> {
        let mut state = self.lease.lock().await;
        let Some(Held::Recycle(r)) = state.as_ref().filter(|h| matches!(h, Held::Recycle(r) if r.token == lease.token && r.worker_id == lease.worker_id)) else {
            tracing::debug!(worker_id = lease.worker_id, "release of a lease not held");
            return Ok(());
        };
        let (id, token, epoch, version) = (r.worker_id, r.token, r.epoch, r.version);
        let pool = Pool::new(&self.base, self.session.acls());
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
        *state = None;
        tracing::info!(
            worker_id = id,
            final_mark_ms,
            "zk_recycle worker id returned to the pool"
        );
        Ok(())
    }
}
