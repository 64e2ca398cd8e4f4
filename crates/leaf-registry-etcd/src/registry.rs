//! `EtcdClaims`: the `etcd` workerId mode. Worker ids are claimed under an etcd lease, kept
//! by renewals, recycled by etcd when a lease expires; each id's mark outlives its leases.
//! [`EtcdRegistry`] is it with the worker-id cache file.

use std::collections::BTreeSet;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{Client, Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse};
use leaf_core::{
    AcquireRequest, CachedRegistry, ClaimError, Error, Lease, LeaseToken, RegistryCapabilities,
    Renewal, Result, WorkerIdClaims,
};
use serde::Serialize;
use tokio::sync::Mutex;

use crate::client::Conn;
use crate::config::EtcdConfig;
use crate::error::{BACKEND, is_lease_gone, map_etcd};

/// How many leases `acquire` is granted, each lost before its claim (expired or revoked),
/// before it gives up with `Unavailable` for the caller to retry later.
const CLAIM_LEASES: usize = 3;

/// How many times a mark write is sent when it finds the mark changed by an earlier write of
/// its own claim (one whose answer was lost): each try learns the current revision, so a second
/// conflict needs yet another unseen write landing in between.
const MARK_WRITE_TRIES: usize = 3;

/// The `etcd` workerId mode with the worker-id cache file: what the server runs.
pub type EtcdRegistry = CachedRegistry<EtcdClaims>;

/// The etcd side of the `etcd` workerId mode; see the crate docs for the keys and the
/// transactions.
pub struct EtcdClaims {
    config: EtcdConfig,
    /// `{prefix}/{name}`.
    base: String,
    file_name: String,
    conn: Conn,
    /// The claim held, if any.
    lease: Mutex<Option<Claim>>,
    /// How many granted leases `acquire` revokes before claiming; see
    /// [`revoke_granted_leases`](Self::revoke_granted_leases).
    #[cfg(feature = "_test-hooks")]
    revoke_granted: std::sync::atomic::AtomicU32,
}

/// One claim of a worker id: the etcd lease that `workers/{id}` is attached to, and what this
/// claim knows of `marks/{id}`.
#[derive(Clone, Copy, Debug)]
struct Claim {
    worker_id: u64,
    lease_id: i64,
    /// The `mod_revision` of `marks/{id}` as this claim last wrote or read it (0: no key, as
    /// etcd compares a missing key). Every mark write requires it unchanged, so that a write
    /// whose answer was lost cannot land after a later one and lower the mark.
    mark_rev: i64,
    /// The highest mark stored for this claim (at the claim, then by its renewals): a renewal
    /// never writes less (marks only rise); only the release's final mark may be lower.
    renewed: u64,
}

impl Claim {
    fn is(&self, lease: &Lease) -> bool {
        self.worker_id == lease.worker_id && LeaseToken::new(self.lease_id as u64) == lease.token
    }
}

/// The value of `workers/{id}`: who holds it, for operators; nothing reads it back.
#[derive(Serialize)]
struct Owner<'a> {
    owner: String,
    ttl_ms: u64,
    mode: &'a str,
}

impl fmt::Debug for EtcdClaims {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdClaims")
            .field("endpoints", &self.config.endpoints)
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

/// What a claim found.
struct Claimed {
    worker_id: u64,
    mark: Option<u64>,
    /// The `mod_revision` of `marks/{id}` read by the claim (0: no key).
    mark_rev: i64,
}

/// How a claim with one lease ended.
enum ClaimOutcome {
    Claimed(Claimed),
    /// The lease was gone (expired or revoked) when the claim's put came: nothing was claimed.
    LeaseGone,
}

/// What a mark write settles for when it finds the mark changed by an unseen write of its
/// own claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MarkWrite {
    /// A renewal's: a stored mark at least as high is as good as its own (marks only rise).
    Renewal,
    /// The release's final mark, the last timestamp issued: written as it is, even below the
    /// stored mark, so that a clean restart needs no wait.
    Final,
}

impl EtcdClaims {
    /// The backend on the cluster of `config`, for the leaf name `name` (keys under
    /// `{prefix}/{name}/`). Nothing is contacted before the first claim, so this succeeds while
    /// etcd is down.
    pub fn connect(config: &EtcdConfig, name: &str) -> Result<EtcdClaims> {
        config.validate()?;
        let base = config.base(name)?;
        Ok(EtcdClaims {
            config: config.clone(),
            base,
            // Per mode: a worker id cached by another mode must never serve a start here.
            file_name: format!("worker-etcd-{name}"),
            conn: Conn::new(config),
            lease: Mutex::new(None),
            #[cfg(feature = "_test-hooks")]
            revoke_granted: std::sync::atomic::AtomicU32::new(0),
        })
    }

    /// This backend with its cache file in `cache_dir`: the registry the server runs.
    pub fn registry(self, cache_dir: impl Into<PathBuf>) -> EtcdRegistry {
        CachedRegistry::new(self, cache_dir)
    }

    fn workers_dir(&self) -> String {
        format!("{}/workers/", self.base)
    }

    fn worker_key(&self, id: u64) -> String {
        format!("{}/workers/{id}", self.base)
    }

    fn mark_key(&self, id: u64) -> String {
        format!("{}/marks/{id}", self.base)
    }

    /// Revokes `lease_id`, logging a failure (the lease then simply expires).
    async fn revoke_quietly(&self, client: &Client, lease_id: i64) {
        let mut c = client.clone();
        if let Err(e) = self
            .conn
            .call("revoking a lease", c.lease_revoke(lease_id))
            .await
        {
            tracing::debug!(lease_id, error = %e, "lease not revoked; it expires by itself");
        }
    }

    /// Claims the lowest free id whose mark is not too far ahead, under `lease_id`.
    async fn claim_with(
        &self,
        client: &Client,
        req: &AcquireRequest,
        lease_id: i64,
        ttl: Duration,
    ) -> Result<ClaimOutcome> {
        let mut c = client.clone();
        let listed = self
            .conn
            .call(
                "listing the claimed worker ids",
                c.get(
                    self.workers_dir(),
                    Some(GetOptions::new().with_prefix().with_keys_only()),
                ),
            )
            .await?;
        let dir = self.workers_dir();
        let taken: BTreeSet<u64> = listed
            .kvs()
            .iter()
            .filter_map(|kv| kv.key_str().ok()?.strip_prefix(&dir)?.parse().ok())
            .collect();
        let owner = serde_json::to_string(&Owner {
            owner: req.identity.to_string(),
            ttl_ms: ttl.as_millis() as u64,
            mode: "etcd",
        })
        .unwrap_or_default();
        let mut ahead: Option<(u64, u64)> = None;
        for id in (0..=req.max_worker_id).filter(|id| !taken.contains(id)) {
            let (worker, mark_key) = (self.worker_key(id), self.mark_key(id));
            let txn = Txn::new()
                .when([Compare::create_revision(
                    worker.clone(),
                    CompareOp::Equal,
                    0,
                )])
                .and_then([
                    TxnOp::put(
                        worker.clone(),
                        owner.clone(),
                        Some(PutOptions::new().with_lease(lease_id)),
                    ),
                    TxnOp::get(mark_key.clone(), None),
                ]);
            let what = "claiming a worker id";
            let resp = leaf_core::bounded(BACKEND, self.conn.timeout(), what, async {
                match c.txn(txn).await {
                    Ok(r) => Ok(Some(r)),
                    // etcd refuses a put under a lease it no longer knows ("requested lease not
                    // found"): the lease expired since its grant, a new one can still claim.
                    Err(e) if is_lease_gone(&e) => Ok(None),
                    Err(e) => Err(map_etcd(e, what)),
                }
            })
            .await?;
            let Some(resp) = resp else {
                return Ok(ClaimOutcome::LeaseGone);
            };
            if !resp.succeeded() {
                continue; // taken meanwhile
            }
            let read = resp.op_responses().into_iter().find_map(|r| match r {
                TxnOpResponse::Get(g) => Some(g),
                _ => None,
            });
            let mark = read
                .as_ref()
                .map(|g| parse_mark(g.kvs(), &mark_key))
                .transpose()?
                .flatten();
            let mark_rev = read
                .as_ref()
                .and_then(|g| g.kvs().first())
                .map_or(0, |kv| kv.mod_revision());
            if let Some(m) = mark.filter(|m| *m > req.now_ms.saturating_add(req.max_ahead_ms)) {
                // Another machine's clock ran fast: give the id back and try the next one.
                tracing::warn!(
                    worker_id = id,
                    mark = m,
                    now_ms = req.now_ms,
                    "worker id's mark is too far ahead of this node's clock; skipping it"
                );
                let back = Txn::new()
                    .when([Compare::lease(worker.clone(), CompareOp::Equal, lease_id)])
                    .and_then([TxnOp::delete(worker, None)]);
                self.conn.call("returning a worker id", c.txn(back)).await?;
                ahead = ahead.max(Some((m, id)));
                continue;
            }
            return Ok(ClaimOutcome::Claimed(Claimed {
                worker_id: id,
                mark,
                mark_rev,
            }));
        }
        let max = req.max_worker_id;
        Err(match ahead {
            Some((mark, id)) => Error::Unavailable(format!(
                "every free worker id in 0..={max} has a mark too far ahead of this node's \
                 clock (worker id {id}: {} ms ahead); check the clocks",
                mark.saturating_sub(req.now_ms)
            )),
            None => Error::Unavailable(format!(
                "every worker id in 0..={max} is in use; one comes back when its owner stops or \
                 after its lease expires"
            )),
        })
    }

    /// One keep-alive of `lease_id`, sent now: the TTL etcd granted, `None` if the lease is gone.
    async fn keep_alive(&self, client: &Client, lease_id: i64) -> Result<Option<Duration>> {
        let mut c = client.clone();
        let what = "the lease keep-alive";
        leaf_core::bounded(crate::error::BACKEND, self.conn.timeout(), what, async {
            // The client sends one keep-alive and checks its answer; a second one reports the
            // TTL. Both are sent after the caller's instant, so either answer may count.
            let (mut keeper, mut stream) = match c.lease_keep_alive(lease_id).await {
                Ok(s) => s,
                Err(e) if is_lease_gone(&e) => return Ok(None),
                Err(e) => return Err(crate::error::map_etcd(e, what)),
            };
            keeper
                .keep_alive()
                .await
                .map_err(|e| crate::error::map_etcd(e, what))?;
            match stream.message().await {
                Ok(Some(resp)) if resp.ttl() > 0 => {
                    Ok(Some(Duration::from_secs(resp.ttl() as u64)))
                }
                Ok(Some(_)) => Ok(None),
                Ok(None) => Err(Error::Unavailable("etcd cannot be reached".into())),
                Err(e) if is_lease_gone(&e) => Ok(None),
                Err(e) => Err(crate::error::map_etcd(e, what)),
            }
        })
        .await
    }

    /// Writes `mark_ms` to `marks/{id}` if `workers/{id}` is still under the claim's lease and
    /// the mark unchanged since the claim last saw it: the mark then stored, `None` when the
    /// key is not under the lease (expired, or another claim's). `claim.mark_rev` follows what
    /// the writes learn.
    ///
    /// A changed mark under this claim's lease was written by this claim (an earlier write
    /// whose answer was lost, landed since): a renewal keeps it if it is at least `mark_ms`,
    /// else writes over it, as the release's final mark does, comparing the new revision.
    async fn write_mark(
        &self,
        client: &Client,
        claim: &mut Claim,
        mark_ms: u64,
        kind: MarkWrite,
    ) -> Result<Option<u64>> {
        let mut c = client.clone();
        let mark_key = self.mark_key(claim.worker_id);
        for _ in 0..MARK_WRITE_TRIES {
            let resp = self
                .conn
                .call("the mark write", c.txn(self.mark_txn(claim, mark_ms)))
                .await?;
            if resp.succeeded() {
                // A transaction's writes all take its revision, the one its header reports;
                // without one, the next write finds the key changed and reads it.
                claim.mark_rev = resp.header().map_or(0, |h| h.revision());
                return Ok(Some(mark_ms));
            }
            let read: Vec<_> = resp
                .op_responses()
                .into_iter()
                .filter_map(|r| match r {
                    TxnOpResponse::Get(g) => Some(g),
                    _ => None,
                })
                .collect();
            let [worker, mark] = read.as_slice() else {
                return Err(Error::backend(
                    BACKEND,
                    "a failed mark write did not answer with the worker and mark keys",
                ));
            };
            let ours = worker
                .kvs()
                .first()
                .is_some_and(|kv| kv.lease() == claim.lease_id);
            if !ours {
                return Ok(None);
            }
            claim.mark_rev = mark.kvs().first().map_or(0, |kv| kv.mod_revision());
            let stored = parse_mark(mark.kvs(), &mark_key)?;
            tracing::debug!(
                worker_id = claim.worker_id,
                ?stored,
                mark_ms,
                "the mark changed since this claim last wrote it (an earlier write landed late)"
            );
            if let Some(stored) = stored.filter(|m| kind == MarkWrite::Renewal && *m >= mark_ms) {
                return Ok(Some(stored));
            }
        }
        Err(Error::Unavailable(
            "the worker id's mark kept changing under this node's writes".into(),
        ))
    }

    /// `If(lease(workers/{id}) == L and mod_revision(marks/{id}) == R) Then(put marks/{id})
    /// Else(get workers/{id}, get marks/{id})`. The put is never under a lease: the mark
    /// outlives every owner.
    fn mark_txn(&self, claim: &Claim, mark_ms: u64) -> Txn {
        let (worker, mark) = (
            self.worker_key(claim.worker_id),
            self.mark_key(claim.worker_id),
        );
        Txn::new()
            .when([
                Compare::lease(worker.clone(), CompareOp::Equal, claim.lease_id),
                Compare::mod_revision(mark.clone(), CompareOp::Equal, claim.mark_rev),
            ])
            .and_then([TxnOp::put(mark.clone(), mark_ms.to_string(), None)])
            .or_else([TxnOp::get(worker, None), TxnOp::get(mark, None)])
    }

    /// Test hook: the transaction a renewal of `lease` with `mark_ms` would send now for its
    /// mark write, built and not sent (`None` if the lease is not held), so that a test can
    /// send it later, as a write whose answer was lost lands late.
    #[cfg(feature = "_test-hooks")]
    #[doc(hidden)]
    pub async fn mark_write_txn(&self, lease: &Lease, mark_ms: u64) -> Option<Txn> {
        let state = self.lease.lock().await;
        let claim = state.filter(|c| c.is(lease))?;
        Some(self.mark_txn(&claim, mark_ms.max(claim.renewed)))
    }

    /// Test hook: `acquire` revokes the next `n` leases it is granted before claiming with
    /// them, as if each expired between the grant and the claim.
    #[cfg(feature = "_test-hooks")]
    #[doc(hidden)]
    pub fn revoke_granted_leases(&self, n: u32) {
        self.revoke_granted
            .store(n, std::sync::atomic::Ordering::Relaxed);
    }

    /// Test hook: revokes `lease_id` if [`revoke_granted_leases`](Self::revoke_granted_leases)
    /// asked for it.
    #[cfg(feature = "_test-hooks")]
    async fn revoke_if_asked(&self, client: &Client, lease_id: i64) -> Result<()> {
        use std::sync::atomic::Ordering;
        let asked = self
            .revoke_granted
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        if asked.is_ok() {
            let mut c = client.clone();
            self.conn
                .call("revoking a lease (test hook)", c.lease_revoke(lease_id))
                .await?;
        }
        Ok(())
    }
}

/// The mark in `marks/{id}` (`None` if the key does not exist); a value that is not a number is
/// an error, never silently ignored: it would hide the mark.
fn parse_mark(kvs: &[etcd_client::KeyValue], key: &str) -> Result<Option<u64>> {
    let Some(kv) = kvs.first() else {
        return Ok(None);
    };
    let text = std::str::from_utf8(kv.value()).unwrap_or_default();
    text.trim().parse::<u64>().map(Some).map_err(|_| {
        Error::backend(
            crate::error::BACKEND,
            format!("{key} holds {text:?}, not a mark in unix milliseconds"),
        )
    })
}

#[async_trait]
impl WorkerIdClaims for EtcdClaims {
    fn mode(&self) -> &'static str {
        "etcd"
    }

    async fn holder(&self, worker_id: u64) -> Result<Option<String>> {
        let client = self.conn.client().await?;
        let mut c = client.clone();
        let key = self.worker_key(worker_id);
        let read = self
            .conn
            .call("reading who holds a worker id", c.get(key.clone(), None))
            .await?;
        Ok(read.kvs().first().and_then(|kv| {
            serde_json::from_slice::<serde_json::Value>(kv.value())
                .ok()?
                .get("owner")?
                .as_str()
                .map(str::to_owned)
        }))
    }

    fn capabilities(&self) -> RegistryCapabilities {
        RegistryCapabilities::new(true, true)
    }

    fn cache_file_name(&self) -> &str {
        &self.file_name
    }

    fn lease_ttl(&self) -> Option<(Duration, &'static str)> {
        Some((
            Duration::from_millis(self.config.lease_ttl_ms),
            "lease_ttl_ms",
        ))
    }

    async fn claim(&self, req: &AcquireRequest) -> Result<Lease, ClaimError> {
        let ttl = Duration::from_millis(self.config.lease_ttl_ms);
        let mut state = self.lease.lock().await;
        let client = self.conn.client().await?;
        let mut c = client.clone();
        let mut granted_leases = 0;
        let (lease_id, ttl, claimed) = loop {
            let granted = self
                .conn
                .call(
                    "granting a lease",
                    c.lease_grant(self.config.lease_ttl_s(), None),
                )
                .await?;
            granted_leases += 1;
            let lease_id = granted.id();
            // What etcd counts down is what the caller fences on (etcd may raise a TTL below
            // its minimum, never lower one).
            let ttl = match granted.ttl() {
                t if t > 0 => Duration::from_secs(t as u64),
                _ => ttl,
            };
            #[cfg(feature = "_test-hooks")]
            self.revoke_if_asked(&client, lease_id).await?;
            match self.claim_with(&client, req, lease_id, ttl).await {
                Ok(ClaimOutcome::Claimed(claimed)) => break (lease_id, ttl, claimed),
                // A pause longer than the TTL between grant and claim: nothing was claimed,
                // a fresh lease may well get through.
                Ok(ClaimOutcome::LeaseGone) if granted_leases < CLAIM_LEASES => {
                    tracing::warn!(
                        lease_id,
                        "the lease expired before its claim; granting another"
                    );
                }
                Ok(ClaimOutcome::LeaseGone) => {
                    return Err(Error::Unavailable(
                        "etcd leases expired before they could claim a worker id".into(),
                    )
                    .into());
                }
                Err(e) => {
                    // What this lease claimed (an answer lost, say) comes back now, not after
                    // the TTL.
                    self.revoke_quietly(&client, lease_id).await;
                    return Err(e.into());
                }
            }
        };
        let worker_id = claimed.worker_id;
        let lease = Lease::new(worker_id, claimed.mark)
            .with_ttl(ttl)
            .with_token(LeaseToken::new(lease_id as u64));
        tracing::info!(worker_id, mark_ms = ?claimed.mark, identity = %req.identity, lease_id, ttl_ms = ttl.as_millis() as u64, "etcd worker id claimed");
        *state = Some(Claim {
            worker_id,
            lease_id,
            mark_rev: claimed.mark_rev,
            renewed: claimed.mark.unwrap_or(0),
        });
        Ok(lease)
    }

    async fn renew(&self, lease: &Lease, mark_ms: u64) -> Result<Renewal> {
        let mut state = self.lease.lock().await;
        let Some(mut claim) = state.filter(|c| c.is(lease)) else {
            return Ok(Renewal::LeaseLost);
        };
        let client = self.conn.client().await?;
        let granted = self.keep_alive(&client, claim.lease_id).await?;
        let kept = match granted {
            Some(ttl) => {
                let mark_ms = mark_ms.max(claim.renewed);
                let written = self
                    .write_mark(&client, &mut claim, mark_ms, MarkWrite::Renewal)
                    .await;
                if let Ok(Some(stored)) = written {
                    claim.renewed = stored;
                }
                // What the write learnt (the revision) is kept even when it failed.
                *state = Some(claim);
                written?.map(|_| ttl)
            }
            None => None,
        };
        let Some(ttl) = kept else {
            tracing::warn!(
                worker_id = claim.worker_id,
                lease_id = claim.lease_id,
                "the worker id's lease is gone (expired or revoked)"
            );
            *state = None;
            return Ok(Renewal::LeaseLost);
        };
        Ok(Renewal::Ok { ttl: Some(ttl) })
    }

    async fn release(&self, lease: &Lease, final_mark_ms: u64) -> Result<()> {
        let mut state = self.lease.lock().await;
        let Some(mut claim) = state.filter(|c| c.is(lease)) else {
            tracing::debug!(worker_id = lease.worker_id, "release of a lease not held");
            return Ok(());
        };
        let client = self.conn.client().await?;
        let written = self
            .write_mark(&client, &mut claim, final_mark_ms, MarkWrite::Final)
            .await;
        *state = Some(claim);
        if written?.is_none() {
            // Expired meanwhile: the last renewed mark (above every timestamp issued) stays.
            tracing::warn!(
                worker_id = claim.worker_id,
                "the lease expired before the release; the final mark was not written"
            );
        }
        let mut c = client.clone();
        match self
            .conn
            .call("revoking the lease", c.lease_revoke(claim.lease_id))
            .await
        {
            Ok(_) | Err(Error::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
        *state = None;
        tracing::info!(
            worker_id = claim.worker_id,
            final_mark_ms,
            "etcd worker id released"
        );
        Ok(())
    }

    async fn abandon(&self, lease: &Lease) {
        let mut state = self.lease.lock().await;
        if state.is_some_and(|c| c.is(lease)) {
            *state = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leaf_core::{NodeIdentity, WorkerIdRegistry};

    fn backend(ttl_ms: u64) -> EtcdClaims {
        let config = EtcdConfig {
            lease_ttl_ms: ttl_ms,
            ..EtcdConfig::default()
        };
        EtcdClaims::connect(&config, "leaf").unwrap()
    }

    #[test]
    fn keys_follow_the_layout() {
        let r = backend(10_000);
        assert_eq!(r.worker_key(3), "/leaf/workers/3");
        assert_eq!(r.mark_key(3), "/leaf/marks/3");
        assert_eq!(r.workers_dir(), "/leaf/workers/");
    }

    #[tokio::test]
    async fn a_ttl_the_caller_cannot_renew_in_time_is_config_naming_the_field() {
        let req = AcquireRequest::new(NodeIdentity::new("10.0.0.1", 8080), 1023, 0);
        let dir = tempfile::tempdir().unwrap();
        // Refused before etcd (here, none) is contacted.
        let e = backend(3000)
            .registry(dir.path())
            .acquire(&req)
            .await
            .unwrap_err();
        assert!(
            matches!(&e, Error::Config(m) if m.starts_with("lease_ttl_ms")),
            "{e}"
        );
        assert_eq!(
            backend(4000).lease_ttl(),
            Some((Duration::from_secs(4), "lease_ttl_ms"))
        );
    }

    #[test]
    fn bad_names_are_refused() {
        let e = EtcdClaims::connect(&EtcdConfig::default(), "a/b").unwrap_err();
        assert!(matches!(e, Error::Config(_)), "{e}");
    }
}
