//! [`CachedRegistry`]: the cache-file half of the lease contract, written once, around a
//! [`WorkerIdClaims`] that talks to its server only.
//!
//! Every workerId mode keeps the same local record: the cache directory locked while the node
//! runs (a second process on it refuses to start), the worker id and its time mark read at
//! `acquire` and merged with what the backend knows, written and fsynced at every renewal
//! (that write is what makes a mark durable), and the last timestamp issued written at a
//! graceful release. A recycling backend's TTL is checked against the caller's timing before
//! anything is contacted, and a non-recycling backend whose server cannot be reached at all at
//! start-up ([`ClaimError::Unreachable`]) may start from the file, under the same start-up time
//! check; a claim that reached its server never does. The backends keep only what differs: how
//! an id is claimed, renewed and given back on their server.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use async_trait::async_trait;

use crate::cache_file::{HeldCache, cached_lease, merge_marks, read_legacy};
use crate::{
    AcquireRequest, CacheRecord, Error, Lease, RegistryCapabilities, Renewal, Result,
    WorkerIdRegistry,
};

/// Why a claim failed: whether the backend's server was reached at all.
#[derive(Debug)]
pub enum ClaimError {
    /// No connection to the server could be made (refused, timed out, no route, a name that
    /// does not resolve). The only failure after which a non-recycling mode may start from its
    /// cache file (Leaf's weak dependency on its server), and only if the backend agrees
    /// ([`WorkerIdClaims::resume_offline`]).
    Unreachable(Error),
    /// Anything else: the server was reached and the claim failed there (a lock another
    /// session holds, a wait that ran out, a refused query), or it was refused before any
    /// server was asked. Never a start from the cache file.
    Failed(Error),
}

impl ClaimError {
    /// The error itself.
    pub fn into_error(self) -> Error {
        match self {
            ClaimError::Unreachable(e) | ClaimError::Failed(e) => e,
        }
    }

    /// `e` as [`Unreachable`](ClaimError::Unreachable) if it is retryable (an outage), else
    /// as [`Failed`](ClaimError::Failed) (refused credentials are a mistake, not an outage).
    pub fn unreachable(e: Error) -> Self {
        if e.is_retryable() {
            ClaimError::Unreachable(e)
        } else {
            ClaimError::Failed(e)
        }
    }
}

impl From<Error> for ClaimError {
    fn from(e: Error) -> Self {
        ClaimError::Failed(e)
    }
}

impl fmt::Display for ClaimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClaimError::Unreachable(e) | ClaimError::Failed(e) => fmt::Display::fmt(e, f),
        }
    }
}

/// The server side of a workerId mode: what [`CachedRegistry`] calls, between its own reads and
/// writes of the cache file. The contract is [`WorkerIdRegistry`]'s, less the cache file:
/// marks are never lowered by `renew` (the caller passes a mark already raised to the claim's
/// highest), conditional writes are conditioned on something that changes at every claim, and
/// every call is bounded in time.
#[async_trait]
pub trait WorkerIdClaims: Send + Sync + fmt::Debug {
    /// The workerId mode, as configured (`local`, `zk_normal`, ...).
    fn mode(&self) -> &'static str;

    /// What the backend can do; see [`RegistryCapabilities`].
    fn capabilities(&self) -> RegistryCapabilities;

    /// The cache file's name in the cache directory (without extension); distinct per mode
    /// where a worker id cached by one mode must never serve a start in another.
    fn cache_file_name(&self) -> &str;

    /// A name this mode's cache file had in an earlier version. At a start that reached the
    /// backend, that file is read (never written, never locked) for its time mark only, which
    /// counts when it is for the worker id the backend assigned: a mark an earlier build kept
    /// there is not lost by the upgrade. Never used at a start from the cache file, since the
    /// old name may be another mode's. `None` by default.
    fn legacy_cache_file_name(&self) -> Option<&str> {
        None
    }

    /// In recycling modes, the lease TTL the backend grants and the name of the field that sets
    /// it: a TTL the caller cannot renew within is refused with `Config` before anything is
    /// contacted. `None` where the backend checks its own (or grants none).
    fn lease_ttl(&self) -> Option<(Duration, &'static str)> {
        None
    }

    /// What the backend refuses before anything is touched, the cache directory included: a
    /// request it can never serve (an identity it has no id for, a layout too wide for its
    /// pool). Default: nothing.
    fn check_request(&self, req: &AcquireRequest) -> Result<()> {
        let _ = req;
        Ok(())
    }

    /// Whether claiming again while a lease is held gives the same id without reaching any
    /// server (`local`): an `acquire` on the registry then hands the held id back, with the
    /// file's mark, instead of refusing. Default `false`.
    fn reclaims_in_place(&self) -> bool {
        false
    }

    /// Claims a worker id for `req.identity`: the lease, its `prev_mark_ms` as the backend
    /// knows it (the cache file's is merged in by the caller). A failure says whether the
    /// server was reached ([`ClaimError`]); `?` on an [`Error`] makes it
    /// [`Failed`](ClaimError::Failed).
    async fn claim(&self, req: &AcquireRequest) -> Result<Lease, ClaimError>;

    /// A non-recycling backend's server could not be reached (`claim` failed with
    /// [`ClaimError::Unreachable`] `cause`) and the cache file holds `lease` (its worker id and
    /// mark): the backend either prepares to find its server again (to take its identity lock
    /// on the first renewal that reaches it, say) and the node starts from the file, or refuses
    /// (a fence that needs the server for every mark). The default refuses with `cause`, as a
    /// recycling backend must: its id may have been recycled meanwhile.
    async fn resume_offline(
        &self,
        req: &AcquireRequest,
        lease: Lease,
        cause: Error,
    ) -> Result<Lease> {
        let _ = (req, lease);
        Err(cause)
    }

    /// Writes `mark_ms` for `lease` to the server (where it keeps one) and extends the lease.
    async fn renew(&self, lease: &Lease, mark_ms: u64) -> Result<Renewal>;

    /// Records the final mark on the server and gives the id up there. On an error nothing is
    /// given up and the call may be repeated.
    async fn release(&self, lease: &Lease, final_mark_ms: u64) -> Result<()>;

    /// Forgets `lease` locally, without reaching the server.
    async fn abandon(&self, lease: &Lease);

    /// See [`WorkerIdRegistry::confirmed_mark_ms`].
    fn confirmed_mark_ms(&self) -> Option<u64> {
        None
    }

    /// See [`WorkerIdRegistry::holder`].
    async fn holder(&self, worker_id: u64) -> Result<Option<String>> {
        let _ = worker_id;
        Ok(None)
    }
}

/// A [`WorkerIdRegistry`] made of a [`WorkerIdClaims`] and the worker-id cache file in
/// `cache_dir`; see the module docs.
pub struct CachedRegistry<B> {
    backend: B,
    cache_dir: PathBuf,
    /// Serialises acquire, renewals, release and abandon, so that a late renewal never writes
    /// after the final mark.
    held: HeldCache,
}

impl<B: WorkerIdClaims> CachedRegistry<B> {
    /// `backend` with its cache file in `cache_dir`. Nothing is touched before the first
    /// [`acquire`](WorkerIdRegistry::acquire).
    pub fn new(backend: B, cache_dir: impl Into<PathBuf>) -> Self {
        CachedRegistry {
            backend,
            cache_dir: cache_dir.into(),
            held: HeldCache::new(),
        }
    }

    /// The backend, for what only it offers (a peer list, test hooks).
    pub fn backend(&self) -> &B {
        &self.backend
    }

    fn check_ttl(&self, req: &AcquireRequest) -> Result<()> {
        match self.backend.lease_ttl() {
            Some((ttl, field)) if ttl <= req.min_ttl() => Err(Error::Config(format!(
                "{field} {} must be above {} ms, the generator's renew period plus fencing \
                 margin plus latency allowance",
                ttl.as_millis(),
                req.min_ttl().as_millis()
            ))),
            _ => Ok(()),
        }
    }
}

impl<B: WorkerIdClaims> fmt::Debug for CachedRegistry<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CachedRegistry")
            .field("backend", &self.backend)
            .field("cache_dir", &self.cache_dir)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl<B: WorkerIdClaims> WorkerIdRegistry for CachedRegistry<B> {
    fn mode(&self) -> &'static str {
        self.backend.mode()
    }

    fn capabilities(&self) -> RegistryCapabilities {
        self.backend.capabilities()
    }

    async fn acquire(&self, req: &AcquireRequest) -> Result<Lease> {
        self.check_ttl(req)?;
        self.backend.check_request(req)?;
        let mut held = self.held.lock().await;
        if self.backend.reclaims_in_place()
            && let Some((id, file)) = held.held().map(|(id, f)| (id, f.clone()))
        {
            let claimed = self
                .backend
                .claim(req)
                .await
                .map_err(ClaimError::into_error)?;
            if claimed.worker_id == id {
                let prev_mark_ms = merge_marks(id, claimed.prev_mark_ms, file.read().await?);
                let lease = Lease {
                    prev_mark_ms,
                    ..claimed
                };
                held.hold(&lease, file);
                return Ok(lease);
            }
        }
        // The cache directory's lock first: a second process on it must not start at all.
        let (cache, cached) = held
            .open_unheld(&self.cache_dir, self.backend.cache_file_name())
            .await?;
        let claimed = match self.backend.claim(req).await {
            Ok(lease) => lease,
            // Only a server that could not be reached at all: once a claim reached it, a lock
            // another session holds or a wait that ran out means another live process may
            // hold this identity, and starting from the file would issue its IDs.
            Err(ClaimError::Unreachable(e)) if !self.backend.capabilities().recycles => {
                let lease = cached_lease(cache.path(), cached, req, self.backend.mode(), &e)?;
                let cause = e.to_string();
                let lease = self.backend.resume_offline(req, lease, e).await?;
                tracing::warn!(
                    mode = self.backend.mode(),
                    worker_id = lease.worker_id,
                    mark_ms = ?lease.prev_mark_ms,
                    error = %cause,
                    "registry unreachable: starting from the worker id cache file"
                );
                held.hold(&lease, cache);
                return Ok(lease);
            }
            Err(e) => return Err(e.into_error()),
        };
        let worker_id = claimed.worker_id;
        let mut prev_mark_ms = merge_marks(worker_id, claimed.prev_mark_ms, cached);
        if let Some(old) = self.backend.legacy_cache_file_name() {
            let legacy = read_legacy(self.cache_dir.clone(), old.to_owned()).await;
            prev_mark_ms = merge_marks(worker_id, prev_mark_ms, legacy);
        }
        let lease = Lease {
            prev_mark_ms,
            ..claimed
        };
        // The file learns the worker id now, so that a start while the server is down finds
        // it; the mark stays the highest known.
        let written = cache
            .write(CacheRecord {
                worker_id,
                mark_ms: prev_mark_ms.unwrap_or(0),
            })
            .await;
        if let Err(e) = written {
            // Not started: the id goes back now (a recycled one rather than after its TTL).
            if let Err(b) = self
                .backend
                .release(&lease, prev_mark_ms.unwrap_or(0))
                .await
            {
                tracing::warn!(worker_id, error = %b, "claimed worker id not given back");
            }
            return Err(e);
        }
        held.hold(&lease, cache);
        Ok(lease)
    }

    async fn renew(&self, lease: &Lease, mark_ms: u64) -> Result<Renewal> {
        let mut held = self.held.lock().await;
        if !held.holds(lease) {
            return Ok(Renewal::LeaseLost);
        }
        let mark_ms = held.renewal_mark(lease, mark_ms);
        match self.backend.renew(lease, mark_ms).await? {
            Renewal::LeaseLost => {
                held.forget(lease);
                Ok(Renewal::LeaseLost)
            }
            renewed => {
                held.write_mark(lease, mark_ms).await?;
                Ok(renewed)
            }
        }
    }

    async fn release(&self, lease: &Lease, final_mark_ms: u64) -> Result<()> {
        let mut held = self.held.lock().await;
        if !held.holds(lease) {
            tracing::debug!(worker_id = lease.worker_id, "release of a lease not held");
            return Ok(());
        }
        self.backend.release(lease, final_mark_ms).await?;
        held.write_final_mark(lease, final_mark_ms).await?;
        // Closing the file releases the directory lock.
        held.close();
        Ok(())
    }

    fn confirmed_mark_ms(&self) -> Option<u64> {
        self.backend.confirmed_mark_ms()
    }

    async fn holder(&self, worker_id: u64) -> Result<Option<String>> {
        self.backend.holder(worker_id).await
    }

    async fn abandon(&self, lease: &Lease) {
        let mut held = self.held.lock().await;
        self.backend.abandon(lease).await;
        held.forget(lease);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::{AsyncCacheFile, NodeIdentity};

    /// A backend that records what it is asked and answers as told.
    #[derive(Debug, Default)]
    struct Fake {
        recycles: bool,
        ttl: Option<Duration>,
        /// The claim's answer: a mark, a failure on the server (`Ok(Err)`), or no server
        /// reached (`Err`).
        claim: Mutex<Option<Result<Result<Option<u64>>>>>,
        calls: Mutex<Vec<String>>,
        lose: Mutex<bool>,
    }

    impl Fake {
        fn log(&self, call: String) {
            self.calls.lock().unwrap().push(call);
        }
        fn calls(&self) -> Vec<String> {
            self.calls.lock().unwrap().clone()
        }
    }

    #[async_trait]
    impl WorkerIdClaims for Fake {
        fn mode(&self) -> &'static str {
            "fake"
        }
        fn capabilities(&self) -> RegistryCapabilities {
            RegistryCapabilities::new(self.recycles, true)
        }
        fn cache_file_name(&self) -> &str {
            "worker-fake"
        }
        fn lease_ttl(&self) -> Option<(Duration, &'static str)> {
            self.ttl.map(|t| (t, "lease_ttl_ms"))
        }
        async fn claim(&self, _req: &AcquireRequest) -> Result<Lease, ClaimError> {
            self.log("claim".into());
            let answer = self.claim.lock().unwrap().take().unwrap_or(Ok(Ok(None)));
            match answer {
                Ok(Ok(mark)) => Ok(Lease::new(7, mark)),
                Ok(Err(e)) => Err(ClaimError::Failed(e)),
                Err(e) => Err(ClaimError::Unreachable(e)),
            }
        }
        async fn resume_offline(
            &self,
            _req: &AcquireRequest,
            lease: Lease,
            _cause: Error,
        ) -> Result<Lease> {
            self.log(format!("resume {:?}", lease.prev_mark_ms));
            Ok(lease)
        }
        async fn renew(&self, _lease: &Lease, mark_ms: u64) -> Result<Renewal> {
            self.log(format!("renew {mark_ms}"));
            Ok(if *self.lose.lock().unwrap() {
                Renewal::LeaseLost
            } else {
                Renewal::OK
            })
        }
        async fn release(&self, _lease: &Lease, final_mark_ms: u64) -> Result<()> {
            self.log(format!("release {final_mark_ms}"));
            Ok(())
        }
        async fn abandon(&self, _lease: &Lease) {
            self.log("abandon".into());
        }
    }

    fn req() -> AcquireRequest {
        AcquireRequest::new(NodeIdentity::new("10.0.0.1", 8080), 1023, 1_000)
    }

    async fn cached(dir: &std::path::Path) -> Option<CacheRecord> {
        let f = AsyncCacheFile::open(dir, "worker-fake")
            .await
            .expect("the directory is free");
        f.read().await.unwrap()
    }

    #[tokio::test]
    async fn a_lease_merges_the_cached_mark_and_every_renewal_writes_the_highest() {
        let dir = tempfile::tempdir().unwrap();
        let fake = Fake::default();
        *fake.claim.lock().unwrap() = Some(Ok(Ok(Some(500))));
        let r = CachedRegistry::new(fake, dir.path());
        let lease = r.acquire(&req()).await.unwrap();
        assert_eq!((lease.worker_id, lease.prev_mark_ms), (7, Some(500)));
        let e = AsyncCacheFile::open(dir.path(), "worker-fake")
            .await
            .unwrap_err();
        assert!(
            matches!(e, Error::Config(_)),
            "the directory is locked: {e}"
        );
        assert_eq!(r.renew(&lease, 900).await.unwrap(), Renewal::OK);
        // A late, lower renewal reaches the backend raised, and the file keeps the highest.
        assert_eq!(r.renew(&lease, 800).await.unwrap(), Renewal::OK);
        r.release(&lease, 850).await.unwrap();
        assert_eq!(
            r.backend().calls(),
            ["claim", "renew 900", "renew 900", "release 850"]
        );
        assert_eq!(
            cached(dir.path()).await,
            Some(CacheRecord {
                worker_id: 7,
                mark_ms: 850
            }),
            "the final mark, and the directory unlocked"
        );

        // A restart: the cached mark is above what the backend knows.
        let fake = Fake::default();
        *fake.claim.lock().unwrap() = Some(Ok(Ok(Some(100))));
        let r = CachedRegistry::new(fake, dir.path());
        assert_eq!(r.acquire(&req()).await.unwrap().prev_mark_ms, Some(850));
    }

    #[tokio::test]
    async fn only_an_unreachable_backend_starts_from_the_file_and_never_a_recycling_one() {
        let dir = tempfile::tempdir().unwrap();
        let down = || Some(Err(Error::Unavailable("down".into())));
        // No file yet: nothing to start from.
        let fake = Fake::default();
        *fake.claim.lock().unwrap() = down();
        let e = CachedRegistry::new(fake, dir.path())
            .acquire(&req())
            .await
            .unwrap_err();
        assert!(matches!(e, Error::Unavailable(_)), "{e}");
        AsyncCacheFile::open(dir.path(), "worker-fake")
            .await
            .unwrap()
            .write(CacheRecord {
                worker_id: 7,
                mark_ms: 600,
            })
            .await
            .unwrap();
        let fake = Fake::default();
        *fake.claim.lock().unwrap() = down();
        let r = CachedRegistry::new(fake, dir.path());
        let lease = r.acquire(&req()).await.unwrap();
        assert_eq!((lease.worker_id, lease.prev_mark_ms), (7, Some(600)));
        assert_eq!(r.backend().calls(), ["claim", "resume Some(600)"]);
        drop(r);
        // A claim that reached the server and failed there (a lock another session holds, a
        // wait that ran out) never does, retryable or not.
        for failure in [
            Error::Unavailable("the lock wait ran out".into()),
            Error::AlreadyExists("held".into()),
        ] {
            let fake = Fake::default();
            *fake.claim.lock().unwrap() = Some(Ok(Err(failure)));
            let r = CachedRegistry::new(fake, dir.path());
            let e = r.acquire(&req()).await.unwrap_err();
            assert!(
                matches!(&e, Error::Unavailable(m) | Error::AlreadyExists(m)
                    if m == "the lock wait ran out" || m == "held"),
                "{e}"
            );
            assert_eq!(r.backend().calls(), ["claim"], "no start from the file");
        }
        // A recycling backend never does: its id may have been recycled meanwhile.
        let fake = Fake {
            recycles: true,
            ..Fake::default()
        };
        *fake.claim.lock().unwrap() = down();
        let e = CachedRegistry::new(fake, dir.path())
            .acquire(&req())
            .await
            .unwrap_err();
        assert!(matches!(&e, Error::Unavailable(m) if m == "down"), "{e}");
    }

    #[tokio::test]
    async fn a_ttl_the_caller_cannot_renew_within_is_refused_before_the_backend() {
        let dir = tempfile::tempdir().unwrap();
        let fake = Fake {
            recycles: true,
            ttl: Some(req().min_ttl()),
            ..Fake::default()
        };
        let r = CachedRegistry::new(fake, dir.path());
        let e = r.acquire(&req()).await.unwrap_err();
        assert!(
            matches!(&e, Error::Config(m) if m.starts_with("lease_ttl_ms 3000 must be above")),
            "{e}"
        );
        assert!(r.backend().calls().is_empty(), "the backend was asked");
    }

    #[tokio::test]
    async fn a_lost_lease_is_forgotten_and_abandon_keeps_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let r = CachedRegistry::new(Fake::default(), dir.path());
        let lease = r.acquire(&req()).await.unwrap();
        *r.backend().lose.lock().unwrap() = true;
        assert_eq!(r.renew(&lease, 900).await.unwrap(), Renewal::LeaseLost);
        assert_eq!(
            r.renew(&lease, 901).await.unwrap(),
            Renewal::LeaseLost,
            "not asked again"
        );
        r.release(&lease, 900).await.unwrap();
        r.abandon(&lease).await;
        assert_eq!(r.backend().calls(), ["claim", "renew 900", "abandon"]);
        assert!(
            AsyncCacheFile::open(dir.path(), "worker-fake")
                .await
                .is_err(),
            "the directory stays locked for this instance's next acquire"
        );
        *r.backend().lose.lock().unwrap() = false;
        let again = r.acquire(&req()).await.unwrap();
        assert_eq!(r.renew(&again, 950).await.unwrap(), Renewal::OK);
    }
}
