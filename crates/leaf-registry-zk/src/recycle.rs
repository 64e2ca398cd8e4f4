//! `zk_recycle`'s pool: `{root}/{name}/recycle/notuse/{id}` holds the free worker ids with the
//! last mark of their previous owner, `inuse/{id}` the claimed ones with owner, TTL and mark.
//! Every move between the two is one version-checked multi-op, so an id is in exactly one of
//! them at any time, and the recycler that returns a silent owner's id judges silence by its own
//! monotonic clock only.
//!
//! `epoch/{id}` fences claims: every claim bumps its version in the claim's multi-op, from the
//! version read before `notuse/{id}`, and every later write for that claim (renewal, release,
//! recycling) checks it. A node version alone
//! cannot tell two claims apart (each new `inuse` node starts at version 0), so without it a
//! paused owner, or a recycler that read the node just before it was recycled and claimed again,
//! could write over the next claim, and a claimer that read `notuse/{id}` before another claim
//! and give-back of the id could commit with the mark it read, below the other owner's.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use leaf_core::{Clock, Error, Result};
use zookeeper_client::{self as zk, Acls, CreateMode, MultiWriteError, Stat};

use crate::error::{bounded, map_zk};
use crate::node::{self, InUse, NotUse};
use crate::session::{Session, ensure_dir};

/// The paths of one pool, and the ACL of the nodes created in it.
#[derive(Clone, Debug)]
pub(crate) struct Pool {
    pub(crate) notuse: String,
    pub(crate) inuse: String,
    pub(crate) epoch: String,
    acls: Arc<[zk::Acl]>,
}

impl Pool {
    pub(crate) fn new(base: &str, acls: Arc<[zk::Acl]>) -> Self {
        Pool {
            notuse: format!("{base}/recycle/notuse"),
            inuse: format!("{base}/recycle/inuse"),
            epoch: format!("{base}/recycle/epoch"),
            acls,
        }
    }

    /// How the pool's nodes are created: persistent, with the configured ACL.
    fn persistent(&self) -> zk::CreateOptions<'_> {
        CreateMode::Persistent.with_acls(Acls::new(&self.acls))
    }

    pub(crate) fn notuse_of(&self, id: u64) -> String {
        format!("{}/{id}", self.notuse)
    }

    pub(crate) fn inuse_of(&self, id: u64) -> String {
        format!("{}/{id}", self.inuse)
    }

    pub(crate) fn epoch_of(&self, id: u64) -> String {
        format!("{}/{id}", self.epoch)
    }
}

/// A multi-op whose operation was refused for want of rights (this client's identity is not
/// in the node's or its parent's ACL) is no race lost to another claimer: a failed request, so
/// that it surfaces as the `auth` error it is rather than as an id taken or a lease lost.
fn refused(e: MultiWriteError) -> MultiWriteError {
    match e {
        MultiWriteError::OperationFailed {
            source: source @ (zk::Error::NoAuth | zk::Error::InvalidAcl),
            ..
        } => MultiWriteError::RequestFailed { source },
        other => other,
    }
}

/// How many missing ids one multi-op seeds.
const SEED_BATCH: usize = 128;

/// Creates `notuse/{id}` for every id in `0..=max` that is in neither directory. Each creation
/// is a multi-op that also creates and deletes `inuse/{id}`, so it fails, changing nothing, if
/// the id is claimed meanwhile: an id never lands in both directories.
pub(crate) async fn seed(client: &zk::Client, pool: &Pool, max: u64) -> Result<()> {
    ensure_dir(client, &pool.notuse, &pool.acls).await?;
    ensure_dir(client, &pool.inuse, &pool.acls).await?;
    ensure_dir(client, &pool.epoch, &pool.acls).await?;
    let free = node::to_json(&NotUse { mark: 0 });
    // Nodes starting together race to seed the same ids: a batch that fails is listed again
    // (the winner's batch is all there by then), and only after that one id at a time.
    for _ in 0..3 {
        let missing = missing_ids(client, pool, max).await?;
        if missing.is_empty() {
            return Ok(());
        }
        let mut all_in = true;
        for chunk in missing.chunks(SEED_BATCH) {
            let mut w = client.new_multi_writer();
            for id in chunk {
                add_seed(&mut w, pool, *id, &free)?;
            }
            match w.commit().await.map_err(refused) {
                Ok(_) => {}
                Err(MultiWriteError::OperationFailed { .. }) => all_in = false,
                Err(MultiWriteError::RequestFailed { source }) => {
                    return Err(map_zk(source, &pool.notuse));
                }
            }
        }
        if all_in {
            return Ok(());
        }
    }
    for id in missing_ids(client, pool, max).await? {
        let mut w = client.new_multi_writer();
        add_seed(&mut w, pool, id, &free)?;
        match w.commit().await.map_err(refused) {
            // Failed: seeded or claimed meanwhile.
            Ok(_) | Err(MultiWriteError::OperationFailed { .. }) => {}
            Err(MultiWriteError::RequestFailed { source }) => {
                return Err(map_zk(source, &pool.notuse));
            }
        }
    }
    Ok(())
}

/// The ids of `0..=max` in neither directory.
async fn missing_ids(client: &zk::Client, pool: &Pool, max: u64) -> Result<Vec<u64>> {
    let present: BTreeSet<u64> = list_ids(client, &pool.notuse)
        .await?
        .into_iter()
        .chain(list_ids(client, &pool.inuse).await?)
        .collect();
    Ok((0..=max).filter(|id| !present.contains(id)).collect())
}

fn add_seed(w: &mut zk::MultiWriter<'_>, pool: &Pool, id: u64, free: &[u8]) -> Result<()> {
    let inuse = pool.inuse_of(id);
    w.add_create(&inuse, &[], &pool.persistent())
        .and_then(|()| w.add_delete(&inuse, None))
        .and_then(|()| w.add_create(&pool.notuse_of(id), free, &pool.persistent()))
        .map_err(|e| map_zk(e, &inuse))
}

/// The numeric children of `dir`.
pub(crate) async fn list_ids(client: &zk::Client, dir: &str) -> Result<Vec<u64>> {
    let children = client
        .list_children(dir)
        .await
        .map_err(|e| map_zk(e, dir))?;
    Ok(children.iter().filter_map(|c| c.parse().ok()).collect())
}

/// A claimed id: `inuse/{id}` created at `stat`, with the mark the id carried.
#[derive(Debug)]
pub(crate) struct Claimed {
    pub(crate) id: u64,
    pub(crate) stat: Stat,
    /// The version of `epoch/{id}` this claim set.
    pub(crate) epoch: i32,
    pub(crate) carried_mark: Option<u64>,
}

/// A free id as a claimer read it: `epoch/{id}` at `epoch`, then `notuse/{id}` at `version`
/// with `mark`.
#[derive(Debug, Clone)]
pub(crate) struct Candidate {
    pub(crate) id: u64,
    epoch: i32,
    version: i32,
    pub(crate) mark: u64,
}

/// Reads `epoch/{id}` (creating it if missing), then `notuse/{id}`; `None` if the id is not
/// free. The epoch comes first: a claim and give-back after it, which re-creates `notuse/{id}`
/// at the same version with another mark, bumps it, so the commit fails.
pub(crate) async fn read_free(
    client: &zk::Client,
    pool: &Pool,
    id: u64,
) -> Result<Option<Candidate>> {
    let epoch_path = pool.epoch_of(id);
    let mut epoch = None;
    for _ in 0..2 {
        match client.check_stat(&epoch_path).await {
            Ok(Some(stat)) => {
                epoch = Some(stat.version);
                break;
            }
            Ok(None) => create_epoch(client, pool, id).await?,
            Err(e) => return Err(map_zk(e, &epoch_path)),
        }
    }
    // Deleted again between its creation and the read: only by hand; try another id.
    let Some(epoch) = epoch else { return Ok(None) };
    let path = pool.notuse_of(id);
    let (data, stat) = match client.get_data(&path).await {
        Ok(d) => d,
        Err(zk::Error::NoNode) => return Ok(None),
        Err(e) => return Err(map_zk(e, &path)),
    };
    Ok(Some(Candidate {
        id,
        epoch,
        version: stat.version,
        mark: node::parse_notuse(&data, &path)?.mark,
    }))
}

/// Claims `candidate` for `owner` in one multi-op: deletes `notuse/{id}` at the version read,
/// bumps `epoch/{id}` from the version read before it, and creates `inuse/{id}` with the owner,
/// the TTL and the carried mark. `None` if the id changed since it was read (claimed, or
/// claimed and given back with another mark).
pub(crate) async fn commit_claim(
    client: &zk::Client,
    pool: &Pool,
    candidate: &Candidate,
    owner: &str,
    ttl: Duration,
) -> Result<Option<Claimed>> {
    let (id, mark) = (candidate.id, candidate.mark);
    let (path, inuse) = (pool.notuse_of(id), pool.inuse_of(id));
    let data = node::to_json(&InUse {
        owner: owner.to_owned(),
        ttl_ms: ttl.as_millis() as u64,
        mark,
    });
    let mut w = client.new_multi_writer();
    w.add_delete(&path, Some(candidate.version))
        .and_then(|()| w.add_set_data(&pool.epoch_of(id), &[], Some(candidate.epoch)))
        .and_then(|()| w.add_create(&inuse, &data, &pool.persistent()))
        .map_err(|e| map_zk(e, &inuse))?;
    match w.commit().await.map_err(refused) {
        Ok(results) => {
            let mut results = results.into_iter().skip(1);
            let epoch = match results.next() {
                Some(zk::MultiWriteResult::SetData { stat }) => stat.version,
                _ => return Err(unexpected(&inuse)),
            };
            let stat = match results.next() {
                Some(zk::MultiWriteResult::Create { stat, .. }) if !stat.is_invalid() => stat,
                // Some servers answer a multi's create without its stat: read it.
                _ => {
                    client
                        .get_data(&inuse)
                        .await
                        .map_err(|e| map_zk(e, &inuse))?
                        .1
                }
            };
            Ok(Some(Claimed {
                id,
                stat,
                epoch,
                carried_mark: (mark > 0).then_some(mark),
            }))
        }
        Err(MultiWriteError::OperationFailed { .. }) => Ok(None),
        Err(MultiWriteError::RequestFailed { source }) => Err(map_zk(source, &inuse)),
    }
}

/// Claims a free id `<= max` for `owner`: reads it with [`read_free`] (after `sync`), then
/// commits the claim with [`commit_claim`]. A concurrent claimer makes the multi-op fail and the next
/// id is tried. Ids whose mark is more than `max_ahead_ms` ahead of `now_ms` are left in the
/// pool.
pub(crate) async fn claim(
    client: &zk::Client,
    pool: &Pool,
    max: u64,
    owner: &str,
    ttl: Duration,
    now_ms: u64,
    max_ahead_ms: u64,
) -> Result<Claimed> {
    client
        .sync(&pool.notuse)
        .await
        .map_err(|e| map_zk(e, &pool.notuse))?;
    let mut free: Vec<u64> = list_ids(client, &pool.notuse)
        .await?
        .into_iter()
        .filter(|id| *id <= max)
        .collect();
    // Concurrent starters try the ids in different orders, so they rarely collide.
    fastrand::shuffle(&mut free);
    let mut too_far_ahead = None;
    for id in free {
        // A failed commit reads the id again: it may have been claimed and given back since.
        for _ in 0..3 {
            let Some(candidate) = read_free(client, pool, id).await? else {
                break;
            };
            let mark = candidate.mark;
            if mark > now_ms.saturating_add(max_ahead_ms) {
                tracing::warn!(
                    worker_id = id,
                    mark_ms = mark,
                    now_ms,
                    "a free worker id's mark is far ahead of this clock; claiming another"
                );
                too_far_ahead = Some((id, mark));
                break;
            }
            if let Some(claimed) = commit_claim(client, pool, &candidate, owner, ttl).await? {
                return Ok(claimed);
            }
        }
    }
    Err(leaf_core::no_free_worker_id(max, too_far_ahead, now_ms))
}

/// Creates `epoch/{id}` if it is missing (at version 0: no claim yet).
async fn create_epoch(client: &zk::Client, pool: &Pool, id: u64) -> Result<()> {
    let path = pool.epoch_of(id);
    match client.create(&path, &[], &pool.persistent()).await {
        Ok(_) | Err(zk::Error::NodeExists) => Ok(()),
        Err(e) => Err(map_zk(e, &path)),
    }
}

fn unexpected(path: &str) -> Error {
    Error::backend(
        crate::error::BACKEND,
        format!("zookeeper answered a multi-op on {path} with unexpected results"),
    )
}

/// Moves `inuse/{id}` back to `notuse/{id}` with `mark`, if the claim is still the one of
/// `epoch` and its node still at `version`. `Ok(false)` if not (renewed, recycled, released,
/// claimed again).
pub(crate) async fn give_back(
    client: &zk::Client,
    pool: &Pool,
    id: u64,
    epoch: i32,
    version: i32,
    mark: u64,
) -> Result<bool> {
    let inuse = pool.inuse_of(id);
    let mut w = client.new_multi_writer();
    w.add_check_version(&pool.epoch_of(id), epoch)
        .and_then(|()| w.add_delete(&inuse, Some(version)))
        .and_then(|()| {
            w.add_create(
                &pool.notuse_of(id),
                &node::to_json(&NotUse { mark }),
                &pool.persistent(),
            )
        })
        .map_err(|e| map_zk(e, &inuse))?;
    match w.commit().await.map_err(refused) {
        Ok(_) => Ok(true),
        Err(MultiWriteError::OperationFailed { .. }) => Ok(false),
        Err(MultiWriteError::RequestFailed { source }) => Err(map_zk(source, &inuse)),
    }
}

/// What a renewal's write found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Written {
    /// Written; the node's new version.
    At(i32),
    /// The claim is still this one (same epoch) but the node is at another version: an earlier
    /// write of this owner landed without its answer.
    OtherVersion,
    /// The claim is gone: recycled, or claimed again.
    Lost,
}

/// Writes `data` to `inuse/{id}` if the claim is still the one of `epoch` and the node at
/// `version`, in one multi-op.
pub(crate) async fn write_claim(
    client: &zk::Client,
    pool: &Pool,
    id: u64,
    epoch: i32,
    version: i32,
    data: &[u8],
) -> std::result::Result<Written, zk::Error> {
    let inuse = pool.inuse_of(id);
    let mut w = client.new_multi_writer();
    w.add_check_version(&pool.epoch_of(id), epoch)?;
    w.add_set_data(&inuse, data, Some(version))?;
    match w.commit().await.map_err(refused) {
        Ok(results) => match results.into_iter().nth(1) {
            Some(zk::MultiWriteResult::SetData { stat }) => Ok(Written::At(stat.version)),
            _ => Err(zk::Error::UnexpectedError(format!(
                "no setData result for {inuse}"
            ))),
        },
        Err(MultiWriteError::OperationFailed {
            index: 1,
            source: zk::Error::BadVersion,
        }) => Ok(Written::OtherVersion),
        Err(MultiWriteError::OperationFailed { .. }) => Ok(Written::Lost),
        Err(MultiWriteError::RequestFailed { source }) => Err(source),
    }
}

/// What the recycler saw of one `inuse` node.
#[derive(Debug, Clone, Copy)]
struct Seen {
    czxid: i64,
    version: i32,
    since: Duration,
}

/// The recycler's memory: when, by its own monotonic clock, it first saw each `inuse` node at
/// its current version. A node is stale once it stayed at one version for its stored TTL as
/// this recycler observed it; wall clocks are never compared.
#[derive(Debug, Default)]
pub(crate) struct Staleness {
    seen: HashMap<u64, Seen>,
}

impl Staleness {
    /// Records that `inuse/{id}` (created at `czxid`) is at `version` at monotonic time `now`;
    /// `true` if it has been at that version for at least `ttl`.
    pub(crate) fn observe(
        &mut self,
        id: u64,
        czxid: i64,
        version: i32,
        ttl: Duration,
        now: Duration,
    ) -> bool {
        let seen = self.seen.entry(id).or_insert(Seen {
            czxid,
            version,
            since: now,
        });
        if seen.czxid != czxid || seen.version != version {
            *seen = Seen {
                czxid,
                version,
                since: now,
            };
        }
        now.saturating_sub(seen.since) >= ttl
    }

    /// Forgets the ids not in `present`.
    pub(crate) fn retain(&mut self, present: &BTreeSet<u64>) {
        self.seen.retain(|id, _| present.contains(id));
    }

    /// Forgets everything: after a round that could not see the pool, nothing observed before
    /// it counts (owners could not renew either; they get a full TTL again).
    pub(crate) fn clear(&mut self) {
        self.seen.clear();
    }
}

/// The recycler: every `period`, looks at every `inuse` node and returns those that went
/// unchanged for their stored TTL. Runs until aborted.
pub(crate) async fn recycler(
    session: Arc<Session>,
    pool: Pool,
    period: Duration,
    clock: Arc<dyn Clock>,
) {
    let mut staleness = Staleness::default();
    loop {
        clock.sleep(period).await;
        let round = bounded(
            session.limit(),
            "a recycling round",
            recycle_round(&session, &pool, &mut staleness, &*clock),
        )
        .await;
        if let Err(e) = round {
            tracing::debug!(error = %e, "recycling round failed; observations start over");
            staleness.clear();
        }
    }
}

async fn recycle_round(
    session: &Session,
    pool: &Pool,
    staleness: &mut Staleness,
    clock: &dyn Clock,
) -> Result<()> {
    let client = session.client().await?;
    let ids: BTreeSet<u64> = match list_ids(&client, &pool.inuse).await {
        Ok(ids) => ids.into_iter().collect(),
        Err(Error::NotFound(_)) => BTreeSet::new(),
        Err(e) => return Err(e),
    };
    staleness.retain(&ids);
    for id in ids {
        // The epoch before the node: a claim made after this read fails the recycling's check.
        let epoch = match client.check_stat(&pool.epoch_of(id)).await {
            Ok(Some(stat)) => stat.version,
            Ok(None) => continue,
            Err(e) => return Err(map_zk(e, &pool.epoch_of(id))),
        };
        let path = pool.inuse_of(id);
        let (data, stat) = match client.get_data(&path).await {
            Ok(d) => d,
            Err(zk::Error::NoNode) => continue,
            Err(e) => return Err(map_zk(e, &path)),
        };
        let Ok(inuse) = node::parse_inuse(&data, &path) else {
            tracing::warn!(%path, "an inuse node without leaf's data; left alone");
            continue;
        };
        let ttl = Duration::from_millis(inuse.ttl_ms);
        if staleness.observe(id, stat.czxid, stat.version, ttl, clock.monotonic())
            && give_back(&client, pool, id, epoch, stat.version, inuse.mark).await?
        {
            tracing::info!(
                worker_id = id,
                owner = %inuse.owner,
                mark_ms = inuse.mark,
                ttl_ms = inuse.ttl_ms,
                "recycled a worker id whose owner stopped renewing"
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(10);

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn stale_only_after_a_whole_ttl_at_one_version() {
        let mut s = Staleness::default();
        // (czxid, version, now_ms, stale?)
        let steps = [
            (1, 0, 0, false),
            (1, 0, 9_999, false),
            (1, 1, 9_999, false), // renewed: the count starts again
            (1, 1, 19_998, false),
            (1, 1, 19_999, true),
            (2, 1, 20_000, false), // recycled and claimed again: a new node
            (2, 1, 30_000, true),
        ];
        for (czxid, version, now, stale) in steps {
            assert_eq!(
                s.observe(7, czxid, version, TTL, ms(now)),
                stale,
                "czxid {czxid} version {version} at {now}"
            );
        }
    }

    #[test]
    fn each_node_its_own_ttl_and_forgetting_restarts_the_count() {
        let mut s = Staleness::default();
        assert!(!s.observe(1, 1, 0, ms(3000), ms(0)));
        assert!(!s.observe(2, 2, 0, TTL, ms(0)));
        assert!(s.observe(1, 1, 0, ms(3000), ms(3000)));
        assert!(!s.observe(2, 2, 0, TTL, ms(3000)));
        s.retain(&BTreeSet::from([2]));
        assert!(
            !s.observe(1, 1, 0, ms(3000), ms(4000)),
            "forgotten: seen anew"
        );
        s.clear();
        assert!(!s.observe(2, 2, 0, TTL, ms(10_000)), "cleared: seen anew");
        assert!(s.observe(2, 2, 0, TTL, ms(20_000)));
    }

    #[test]
    fn paths() {
        let p = Pool::new("/snowflake/leaf", Arc::from(Vec::new()));
        assert_eq!(p.notuse_of(3), "/snowflake/leaf/recycle/notuse/3");
        assert_eq!(p.inuse_of(3), "/snowflake/leaf/recycle/inuse/3");
        assert_eq!(p.epoch_of(3), "/snowflake/leaf/recycle/epoch/3");
    }
}
