//! The worker-id cache file: the worker id and its time mark, kept on local disk by every
//! registry so that a node can start when its registry is down, and so that a restart knows the
//! highest timestamp it may have issued.
//!
//! Writes are atomic and durable (temporary file, fsync, rename, directory fsync), so a crash
//! mid-write leaves the previous complete file. While a [`CacheFile`] is open its directory is
//! locked: a second process with the same `cache_dir` refuses to start instead of issuing the
//! same IDs. The calls block on disk I/O; async callers run them with `spawn_blocking`.

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::{Error, Result};

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
                    "snowflake.cache_dir {} is in use by another process; every process needs \
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
}
