//! The worker-id cache file: the worker id and its time mark, kept on local disk by every
//! registry so that a node can start when its registry is down, and so that a restart knows the
//! highest timestamp it may have issued.
//!
//! Writes are atomic and durable (temporary file, fsync, rename, directory fsync), so a crash
//! mid-write leaves the previous complete file. While a [`CacheFile`] is open its directory is
//! locked: a second process with the same `cache_dir` refuses to start instead of issuing the
//! same IDs. The calls block on disk I/O; async callers use [`AsyncCacheFile`], which runs them
//! with `spawn_blocking`, and registries keep their lease over the file in a [`HeldCache`].

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::{Mutex, MutexGuard};

#[cfg(test)]
use crate::Renewal;
use crate::{AcquireRequest, Error, Lease, LeaseToken, Result};

/// What the cache file holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheRecord {
    /// The worker id last held by this node.
    pub worker_id: u64,
    /// The time mark (Unix ms): no ID with a later timestamp was issued.
    pub mark_ms: u64,
}

/// An open, locked cache file.
#[derive(Debug)]
pub struct CacheFile {
    path: PathBuf,
    tmp: PathBuf,
    dir: PathBuf,
    // Holding the open handle holds the lock; it is released when the process ends, however.
    _lock: File,
}

impl CacheFile {
    /// Opens `{dir}/{name}.properties`, creating `dir` if needed, and locks the directory for
    /// this process. `Config` if another process holds it.
    pub fn open(dir: impl AsRef<Path>, name: &str) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        fs::create_dir_all(&dir).map_err(|e| io_err(&dir, "create", e))?;
        let lock_path = dir.join(format!("{name}.lock"));
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| io_err(&lock_path, "open", e))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(Error::Config(format!(
                    "the worker id cache directory {} is in use by another process; every process needs \
                     its own cache directory",
                    dir.display()
                )));
            }
            Err(TryLockError::Error(e)) => return Err(io_err(&lock_path, "lock", e)),
        }
        Ok(CacheFile {
            path: dir.join(format!("{name}.properties")),
            tmp: dir.join(format!("{name}.properties.tmp")),
            dir,
            _lock: lock,
        })
    }

    /// The data file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The record, `None` if no file was ever written. A file that cannot be parsed is an error,
    /// never silently ignored: it would hide the mark.
    pub fn read(&self) -> Result<Option<CacheRecord>> {
        let text = match fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err(&self.path, "read", e)),
        };
        parse(&text).map(Some).ok_or_else(|| {
            Error::backend(
                "cache-file",
                format!("{} is not a worker id cache file", self.path.display()),
            )
        })
    }

    /// Replaces the record atomically and durably.
    pub fn write(&self, record: &CacheRecord) -> Result<()> {
        let text = format!(
            "# leaf worker id cache: replaced atomically; do not edit while the server runs\n\
             workerID={}\nmarkMs={}\n",
            record.worker_id, record.mark_ms
        );
        let mut f = File::create(&self.tmp).map_err(|e| io_err(&self.tmp, "create", e))?;
        f.write_all(text.as_bytes())
            .and_then(|()| f.sync_all())
            .map_err(|e| io_err(&self.tmp, "write", e))?;
        drop(f);
        fs::rename(&self.tmp, &self.path).map_err(|e| io_err(&self.path, "rename onto", e))?;
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io_err(&self.dir, "sync", e))
    }
}

/// A [`CacheFile`] for async callers: every call runs on tokio's blocking pool, so a slow disk
/// never stalls a runtime worker. Clones share one open file; the directory stays locked until
/// the last clone is dropped.
#[derive(Clone, Debug)]
pub struct AsyncCacheFile(Arc<CacheFile>);

impl AsyncCacheFile {
    /// [`CacheFile::open`] on the blocking pool: opens `{dir}/{name}.properties` and locks the
    /// directory. `Config` if another process holds it.
    pub async fn open(dir: impl Into<PathBuf>, name: &str) -> Result<Self> {
        let (dir, name) = (dir.into(), name.to_owned());
        blocking(move || CacheFile::open(dir, &name))
            .await
            .map(|file| AsyncCacheFile(Arc::new(file)))
    }

    /// The data file's path.
    pub fn path(&self) -> &Path {
        self.0.path()
    }

    /// [`CacheFile::read`] on the blocking pool.
    pub async fn read(&self) -> Result<Option<CacheRecord>> {
        let file = self.0.clone();
        blocking(move || file.read()).await
    }

    /// [`CacheFile::write`] on the blocking pool.
    pub async fn write(&self, record: CacheRecord) -> Result<()> {
        let file = self.0.clone();
        blocking(move || file.write(&record)).await
    }
}

/// Runs blocking file work off the async runtime; a panicked or cancelled task is a backend
/// error, not a panic of the caller.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::backend("cache-file", e))?
}

/// The lease a workerId registry holds over its cache file: the open (directory-locked) file,
/// and which claim holds it, if any. Every registry keeps one, so that renewing, releasing and
/// abandoning behave alike in every mode.
///
/// One async mutex serialises acquire, renewals, release and abandon, so a late renewal can
/// never overwrite the final mark, and a renewal after the release (or after `forget`) answers
/// [`Renewal::LeaseLost`]. A claim is matched by worker id *and* [`LeaseToken`].
#[derive(Debug, Default)]
pub(crate) struct HeldCache {
    held: Mutex<Held>,
}

#[derive(Debug, Default)]
struct Held {
    /// Open while this instance may use the directory: from the first acquire until a release.
    file: Option<AsyncCacheFile>,
    /// The claim that may write the file.
    holder: Option<(u64, LeaseToken)>,
    /// The highest mark a renewal of the holder wrote: later renewals never write less.
    renewed: u64,
}

impl HeldCache {
    /// Nothing held: no file is open and no directory locked.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Takes the lease's lock, for an acquire, or a release that has more to do (a server write,
    /// say) before the file is closed. Renewals and other releases wait until the guard drops.
    pub(crate) async fn lock(&self) -> HeldCacheGuard<'_> {
        HeldCacheGuard(self.held.lock().await)
    }

    #[cfg(test)]
    /// Writes `mark_ms` for `lease`: [`Renewal::OK`] once it is on disk,
    /// [`Renewal::LeaseLost`] (nothing written) when `lease` does not hold the file.
    pub(crate) async fn renew(&self, lease: &Lease, mark_ms: u64) -> Result<Renewal> {
        Ok(if self.lock().await.write_mark(lease, mark_ms).await? {
            Renewal::OK
        } else {
            Renewal::LeaseLost
        })
    }

    #[cfg(test)]
    /// Writes the final mark for `lease`, then closes the file, which unlocks the directory.
    /// `false`, with nothing written, when `lease` does not hold the file. If the write fails
    /// the file stays held, so the release can be tried again.
    pub(crate) async fn release(&self, lease: &Lease, final_mark_ms: u64) -> Result<bool> {
        let mut held = self.lock().await;
        if !held.write_final_mark(lease, final_mark_ms).await? {
            return Ok(false);
        }
        held.close();
        Ok(true)
    }

    #[cfg(test)]
    /// Forgets `lease` (if it is the holder) without writing: its later renewals and releases
    /// answer as for a lease not held. The file stays open, so the directory stays locked for
    /// this instance's next acquire.
    pub(crate) async fn forget(&self, lease: &Lease) {
        self.lock().await.forget(lease);
    }
}

/// The locked lease of a [`HeldCache`]; see [`HeldCache::lock`].
#[derive(Debug)]
pub(crate) struct HeldCacheGuard<'a>(MutexGuard<'a, Held>);

impl HeldCacheGuard<'_> {
    /// The worker id holding the file and the file, `None` when nothing is held.
    pub(crate) fn held(&self) -> Option<(u64, &AsyncCacheFile)> {
        let (worker_id, _) = self.0.holder?;
        self.0.file.as_ref().map(|f| (worker_id, f))
    }

    /// The open file (held or forgotten), or the file `dir/name` opened (and its directory
    /// locked) now. `Config` if another process holds the directory.
    pub(crate) async fn open(&mut self, dir: &Path, name: &str) -> Result<AsyncCacheFile> {
        if let Some(f) = &self.0.file {
            return Ok(f.clone());
        }
        let file = AsyncCacheFile::open(dir.to_path_buf(), name).await?;
        self.0.file = Some(file.clone());
        Ok(file)
    }

    /// For an acquire: `InvalidInput` if a lease still holds the file (release or abandon it
    /// first); else the file, opened as [`open`](Self::open) does, and what it records.
    pub(crate) async fn open_unheld(
        &mut self,
        dir: &Path,
        name: &str,
    ) -> Result<(AsyncCacheFile, Option<CacheRecord>)> {
        if let Some((id, _)) = self.held() {
            return Err(Error::InvalidInput(format!(
                "this registry already holds worker id {id}; release it first"
            )));
        }
        let file = self.open(dir, name).await?;
        let record = file.read().await?;
        Ok((file, record))
    }

    /// Records that `lease` holds `file`, replacing (and closing, if it is the last handle)
    /// whatever was open.
    pub(crate) fn hold(&mut self, lease: &Lease, file: AsyncCacheFile) {
        self.0.file = Some(file);
        self.0.holder = Some((lease.worker_id, lease.token));
        self.0.renewed = 0;
    }

    /// Whether `lease` holds the file.
    pub(crate) fn holds(&self, lease: &Lease) -> bool {
        self.0.holder == Some((lease.worker_id, lease.token)) && self.0.file.is_some()
    }

    /// The mark a renewal of `lease` records: `mark_ms`, or the highest mark an earlier
    /// renewal of the same claim wrote if that is higher. Marks only rise: a late or repeated
    /// renewal with a lower mark never lowers what is stored, here or in a registry that writes
    /// this value first. Only the release's final mark may be lower.
    pub(crate) fn renewal_mark(&self, lease: &Lease, mark_ms: u64) -> u64 {
        if self.holds(lease) {
            mark_ms.max(self.0.renewed)
        } else {
            mark_ms
        }
    }

    /// A renewal's write: `{worker_id, renewal_mark(mark_ms)}` if `lease` holds the file;
    /// `false`, with nothing written, if it does not.
    pub(crate) async fn write_mark(&mut self, lease: &Lease, mark_ms: u64) -> Result<bool> {
        let mark_ms = self.renewal_mark(lease, mark_ms);
        if !self.write_final_mark(lease, mark_ms).await? {
            return Ok(false);
        }
        self.0.renewed = mark_ms;
        Ok(true)
    }

    /// The release's write: `{worker_id, mark_ms}` as it is (the last timestamp issued, below
    /// the renewed marks), if `lease` holds the file; `false`, with nothing written, if it
    /// does not.
    pub(crate) async fn write_final_mark(&self, lease: &Lease, mark_ms: u64) -> Result<bool> {
        if !self.holds(lease) {
            return Ok(false);
        }
        let file = self.0.file.as_ref().expect("holds() checked the file");
        file.write(CacheRecord {
            worker_id: lease.worker_id,
            mark_ms,
        })
        .await?;
        Ok(true)
    }

    /// Forgets `lease` if it holds the file, keeping the file open (and the directory locked).
    pub(crate) fn forget(&mut self, lease: &Lease) {
        if self.holds(lease) {
            self.0.holder = None;
        }
    }

    /// Lets go of the file: dropping the last handle closes it and with it the directory lock.
    pub(crate) fn close(&mut self) {
        self.0.file = None;
        self.0.holder = None;
    }
}

/// The previous mark of `worker_id` from what the registry and the cache file know: the
/// highest of the two, the cache file's counting only if it was written for the same worker
/// id (a mark of 0 means none).
pub(crate) fn merge_marks(
    worker_id: u64,
    registry_mark: Option<u64>,
    cached: Option<CacheRecord>,
) -> Option<u64> {
    let cached_mark = match cached {
        Some(r) if r.worker_id == worker_id => Some(r.mark_ms),
        Some(r) => {
            tracing::warn!(
                cached = r.worker_id,
                assigned = worker_id,
                "the cache file belongs to another worker id; its mark does not apply"
            );
            None
        }
        None => None,
    };
    registry_mark
        .filter(|m| *m > 0)
        .max(cached_mark.filter(|m| *m > 0))
}

/// Starts from the cache file at `path` when the registry of `mode` cannot be reached (`cause`,
/// a retryable error): the worker id the file holds, with its mark as the previous mark, so the
/// start-up time check still applies. Every non-recycling registry falls back through here (in
/// `CachedRegistry`); a recycling one must not (its id may have been recycled meanwhile).
/// `Unavailable` when the file holds no worker id, `Config` when the cached id does not fit the
/// layout.
pub(crate) fn cached_lease(
    path: &Path,
    cached: Option<CacheRecord>,
    req: &AcquireRequest,
    mode: &str,
    cause: &Error,
) -> Result<Lease> {
    let Some(r) = cached else {
        tracing::error!(mode, path = %path.display(), error = %cause, "registry unreachable and no cached worker id");
        return Err(Error::Unavailable(format!(
            "the {mode} registry cannot be reached and the cache file holds no worker id to \
             start from"
        )));
    };
    if r.worker_id > req.max_worker_id {
        return Err(Error::Config(format!(
            "{mode} workerId mode: worker id {} of node {} (cache file) does not fit the layout, \
             whose largest worker id is {}",
            r.worker_id, req.identity, req.max_worker_id
        )));
    }
    Ok(Lease::new(
        r.worker_id,
        (r.mark_ms > 0).then_some(r.mark_ms),
    ))
}

/// The record of `{dir}/{name}.properties`, read without locking anything: a cache file of an
/// earlier version's name ([`WorkerIdClaims::legacy_cache_file_name`]). `None` when there is
/// none or it cannot be read (logged: the start goes on without its mark).
///
/// [`WorkerIdClaims::legacy_cache_file_name`]: crate::WorkerIdClaims::legacy_cache_file_name
pub(crate) async fn read_legacy(dir: PathBuf, name: String) -> Option<CacheRecord> {
    let path = dir.join(format!("{name}.properties"));
    let read = blocking(move || match fs::read_to_string(&path) {
        Ok(text) => Ok(parse(&text)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err(&path, "read", e)),
    })
    .await;
    read.unwrap_or_else(|e| {
        tracing::warn!(error = %e, "the cache file of an earlier version cannot be read; its mark does not apply");
        None
    })
}

fn parse(text: &str) -> Option<CacheRecord> {
    let (mut worker_id, mut mark_ms) = (None, None);
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (key, value) = line.split_once('=')?;
        match key.trim() {
            "workerID" => worker_id = Some(value.trim().parse().ok()?),
            "markMs" => mark_ms = Some(value.trim().parse().ok()?),
            _ => {}
        }
    }
    Some(CacheRecord {
        worker_id: worker_id?,
        mark_ms: mark_ms?,
    })
}

fn io_err(path: &Path, what: &str, e: io::Error) -> Error {
    Error::backend(
        "cache-file",
        format!("cannot {what} {}: {e}", path.display()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_missing() {
        let dir = tempfile::tempdir().unwrap();
        let c = CacheFile::open(dir.path().join("nested"), "worker").unwrap();
        assert_eq!(c.read().unwrap(), None);
        let r = CacheRecord {
            worker_id: 7,
            mark_ms: 1_700_000_000_000,
        };
        c.write(&r).unwrap();
        assert_eq!(c.read().unwrap(), Some(r));
        let r2 = CacheRecord {
            worker_id: 7,
            mark_ms: 1_700_000_001_000,
        };
        c.write(&r2).unwrap();
        assert_eq!(c.read().unwrap(), Some(r2));
        assert!(!c.tmp.exists(), "no temporary file is left behind");
    }

    #[test]
    fn second_open_of_one_directory_refuses() {
        let dir = tempfile::tempdir().unwrap();
        let first = CacheFile::open(dir.path(), "worker").unwrap();
        let err = CacheFile::open(dir.path(), "worker").unwrap_err();
        assert!(matches!(err, Error::Config(_)), "{err}");
        assert!(
            err.to_string().contains("in use by another process"),
            "{err}"
        );
        drop(first);
        CacheFile::open(dir.path(), "worker").expect("the lock goes with the holder");
    }

    #[test]
    fn garbage_is_an_error_not_a_missing_file() {
        let dir = tempfile::tempdir().unwrap();
        let c = CacheFile::open(dir.path(), "worker").unwrap();
        fs::write(c.path(), "workerID=x\n").unwrap();
        assert!(c.read().is_err());
        fs::write(c.path(), "").unwrap();
        assert!(c.read().is_err());
    }

    #[test]
    fn reads_with_comments_and_unknown_keys() {
        assert_eq!(
            parse("# c\nip=10.0.0.1\nworkerID = 3\nmarkMs=12\n"),
            Some(CacheRecord {
                worker_id: 3,
                mark_ms: 12
            })
        );
    }

    #[tokio::test]
    async fn async_file_round_trip_and_lock() {
        let dir = tempfile::tempdir().unwrap();
        let f = AsyncCacheFile::open(dir.path().join("nested"), "worker")
            .await
            .unwrap();
        assert_eq!(f.path(), dir.path().join("nested/worker.properties"));
        assert_eq!(f.read().await.unwrap(), None);
        let r = CacheRecord {
            worker_id: 4,
            mark_ms: 99,
        };
        f.clone().write(r).await.unwrap();
        assert_eq!(f.read().await.unwrap(), Some(r));
        let err = AsyncCacheFile::open(dir.path().join("nested"), "worker")
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Config(_)), "{err}");
        let clone = f.clone();
        drop(f);
        assert!(
            AsyncCacheFile::open(dir.path().join("nested"), "worker")
                .await
                .is_err(),
            "a remaining clone keeps the lock"
        );
        drop(clone);
        AsyncCacheFile::open(dir.path().join("nested"), "worker")
            .await
            .expect("the last clone takes the lock with it");
    }

    fn lease(worker_id: u64) -> Lease {
        Lease::new(worker_id, None)
    }

    #[tokio::test]
    async fn forget_keeps_the_directory_and_refuses_the_forgotten_claim() {
        let dir = tempfile::tempdir().unwrap();
        let held = HeldCache::new();
        let first = lease(3).with_token(LeaseToken::new(1));
        let file = held.lock().await.open(dir.path(), "worker").await.unwrap();
        held.lock().await.hold(&first, file);
        assert_eq!(held.renew(&first, 10).await.unwrap(), Renewal::OK);
        let other_claim = lease(3).with_token(LeaseToken::new(2));
        assert_eq!(
            held.renew(&other_claim, 11).await.unwrap(),
            Renewal::LeaseLost,
            "the same worker id under another token is another claim"
        );
        held.forget(&first).await;
        assert_eq!(held.renew(&first, 12).await.unwrap(), Renewal::LeaseLost);
        assert!(!held.release(&first, 12).await.unwrap());
        assert!(
            AsyncCacheFile::open(dir.path(), "worker").await.is_err(),
            "a forgotten lease keeps the directory locked"
        );
        // The same instance acquires again on the file it still has open.
        let mut g = held.lock().await;
        let again = g
            .open(dir.path(), "worker")
            .await
            .expect("reuses the open file");
        assert_eq!(
            again.read().await.unwrap(),
            Some(CacheRecord {
                worker_id: 3,
                mark_ms: 10
            })
        );
        g.hold(&other_claim, again);
        drop(g);
        assert_eq!(held.renew(&other_claim, 13).await.unwrap(), Renewal::OK);
    }

    #[tokio::test]
    async fn held_cache_renews_only_the_held_worker_id() {
        let dir = tempfile::tempdir().unwrap();
        let held = HeldCache::new();
        assert_eq!(held.renew(&lease(3), 10).await.unwrap(), Renewal::LeaseLost);
        let file = AsyncCacheFile::open(dir.path(), "worker").await.unwrap();
        {
            let mut g = held.lock().await;
            assert!(g.held().is_none());
            g.hold(&lease(3), file.clone());
            let (id, f) = g.held().unwrap();
            assert_eq!((id, f.path()), (3, file.path()));
        }
        assert_eq!(held.renew(&lease(3), 20).await.unwrap(), Renewal::OK);
        let on_disk = Some(CacheRecord {
            worker_id: 3,
            mark_ms: 20,
        });
        assert_eq!(file.read().await.unwrap(), on_disk);
        assert_eq!(held.renew(&lease(4), 30).await.unwrap(), Renewal::LeaseLost);
        assert_eq!(
            file.read().await.unwrap(),
            on_disk,
            "a lost lease writes nothing"
        );
    }

    #[tokio::test]
    async fn release_writes_the_final_mark_and_unlocks() {
        let dir = tempfile::tempdir().unwrap();
        let held = HeldCache::new();
        let file = AsyncCacheFile::open(dir.path(), "worker").await.unwrap();
        let path = file.path().to_path_buf();
        held.lock().await.hold(&lease(5), file);
        held.renew(&lease(5), 50).await.unwrap();
        assert!(
            !held.release(&lease(6), 1).await.unwrap(),
            "not the held worker id"
        );
        assert!(AsyncCacheFile::open(dir.path(), "worker").await.is_err());
        assert!(held.release(&lease(5), 40).await.unwrap());
        assert_eq!(held.renew(&lease(5), 60).await.unwrap(), Renewal::LeaseLost);
        assert!(
            !held.release(&lease(5), 70).await.unwrap(),
            "released once only"
        );
        let reopened = AsyncCacheFile::open(dir.path(), "worker")
            .await
            .expect("the release unlocks the directory");
        assert_eq!(reopened.path(), path);
        assert_eq!(
            reopened.read().await.unwrap(),
            Some(CacheRecord {
                worker_id: 5,
                mark_ms: 40
            }),
            "the final mark stays, even below the last renewal's"
        );
    }

    #[tokio::test]
    async fn renewals_never_lower_the_mark_and_a_new_claim_starts_afresh() {
        let dir = tempfile::tempdir().unwrap();
        let held = HeldCache::new();
        let file = AsyncCacheFile::open(dir.path(), "worker").await.unwrap();
        held.lock().await.hold(&lease(3), file.clone());
        let read = || async { file.read().await.unwrap().unwrap().mark_ms };
        assert_eq!(held.renew(&lease(3), 50).await.unwrap(), Renewal::OK);
        assert_eq!(held.lock().await.renewal_mark(&lease(3), 40), 50);
        assert_eq!(held.renew(&lease(3), 40).await.unwrap(), Renewal::OK);
        assert_eq!(read().await, 50, "a lower renewal kept the higher mark");
        assert_eq!(held.renew(&lease(3), 60).await.unwrap(), Renewal::OK);
        assert_eq!(read().await, 60);
        let mut g = held.lock().await;
        assert_eq!(
            g.renewal_mark(&lease(9), 10),
            10,
            "not the holder: as asked"
        );
        assert!(g.write_final_mark(&lease(3), 55).await.unwrap());
        assert_eq!(read().await, 55, "the final mark may be lower");
        g.hold(&lease(4), file.clone());
        assert!(g.write_mark(&lease(4), 20).await.unwrap());
        assert_eq!(read().await, 20, "a new claim starts from its own marks");
    }

    #[tokio::test]
    async fn guard_write_then_close_keeps_others_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let held = Arc::new(HeldCache::new());
        held.lock().await.hold(
            &lease(2),
            AsyncCacheFile::open(dir.path(), "worker").await.unwrap(),
        );
        let mut g = held.lock().await;
        assert!(g.write_mark(&lease(2), 7).await.unwrap());
        assert!(!g.write_mark(&lease(9), 8).await.unwrap());
        let renewer = tokio::spawn({
            let held = held.clone();
            async move { held.renew(&lease(2), 100).await }
        });
        tokio::task::yield_now().await;
        assert!(!renewer.is_finished(), "a renewal waits for the guard");
        g.close();
        drop(g);
        assert_eq!(renewer.await.unwrap().unwrap(), Renewal::LeaseLost);
        let f = AsyncCacheFile::open(dir.path(), "worker").await.unwrap();
        assert_eq!(
            f.read().await.unwrap(),
            Some(CacheRecord {
                worker_id: 2,
                mark_ms: 7
            })
        );
    }
}
