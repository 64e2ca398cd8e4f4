//! `LocalRegistry`: the `local` workerId mode. The worker id comes from configuration; the time
//! mark lives in the cache file, which also keeps a second process off the same cache directory.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use leaf_core::{
    AcquireRequest, CacheFile, CacheRecord, Error, Lease, NodeIdentity, RegistryCapabilities,
    Renewal, Result, WorkerIdRegistry,
};
use tokio::sync::Mutex;

use crate::config::LocalRegistryConfig;

/// The `local` workerId mode: no shared registry, ids from `worker_id` or `work_id_map`.
///
/// While a lease is held the cache file `{cache_dir}/worker-{name}.properties` is open and its
/// directory locked, so a second process started with the same `cache_dir` refuses to start.
#[derive(Debug)]
pub struct LocalRegistry {
    config: LocalRegistryConfig,
    cache_dir: PathBuf,
    file_name: String,
    // A tokio mutex: renewals and the release are serialised, so a late renewal can never
    // overwrite the final mark.
    held: Mutex<Option<Held>>,
}

#[derive(Debug)]
struct Held {
    worker_id: u64,
    cache: Arc<CacheFile>,
}

impl LocalRegistry {
    /// A registry for the service `name` (Leaf's `leaf.name`), keeping its cache file in
    /// `cache_dir`. Nothing is touched before [`acquire`](WorkerIdRegistry::acquire).
    pub fn new(config: LocalRegistryConfig, cache_dir: impl Into<PathBuf>, name: &str) -> Self {
        LocalRegistry {
            config,
            cache_dir: cache_dir.into(),
            file_name: format!("worker-{name}"),
            held: Mutex::new(None),
        }
    }

    /// The configured worker id of `identity`.
    fn worker_id_for(&self, identity: &NodeIdentity) -> Result<u64> {
        let map = &self.config.work_id_map;
        if map.is_empty() {
            return Ok(self.config.worker_id);
        }
        let key = identity.to_string();
        let id = *map.get(&key).ok_or_else(|| {
            Error::Config(format!(
                "node {key} has no worker id in snowflake.local.work_id_map (it lists {})",
                map.keys().cloned().collect::<Vec<_>>().join(", ")
            ))
        })?;
        // Two nodes with one id would issue the same IDs: refuse the whole map.
        if let Some((other, _)) = map.iter().find(|(k, v)| **v == id && **k != key) {
            return Err(Error::Config(format!(
                "snowflake.local.work_id_map gives worker id {id} to both {key} and {other}"
            )));
        }
        Ok(id)
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::backend("cache-file", e))?
}

#[async_trait]
impl WorkerIdRegistry for LocalRegistry {
    fn mode(&self) -> &'static str {
        "local"
    }

    fn capabilities(&self) -> RegistryCapabilities {
        RegistryCapabilities::new(false, false)
    }

    async fn acquire(&self, req: &AcquireRequest) -> Result<Lease> {
        let worker_id = self.worker_id_for(&req.identity)?;
        if worker_id > req.max_worker_id {
            let key = if self.config.work_id_map.is_empty() {
                "snowflake.local.worker_id"
            } else {
                "snowflake.local.work_id_map"
            };
            return Err(Error::Config(format!(
                "{key}: worker id {worker_id} of node {} does not fit the layout, whose largest \
                 worker id is {}",
                req.identity, req.max_worker_id
            )));
        }
        let mut held = self.held.lock().await;
        let cache = match &*held {
            Some(h) if h.worker_id == worker_id => h.cache.clone(),
            Some(h) => {
                return Err(Error::InvalidInput(format!(
                    "this registry already holds worker id {}; release it first",
                    h.worker_id
                )));
            }
            None => {
                let (dir, name) = (self.cache_dir.clone(), self.file_name.clone());
                Arc::new(blocking(move || CacheFile::open(dir, &name)).await?)
            }
        };
        let reader = cache.clone();
        let record = blocking(move || reader.read()).await?;
        let prev_mark_ms = match record {
            Some(r) if r.worker_id == worker_id => Some(r.mark_ms),
            Some(r) => {
                tracing::warn!(
                    cached = r.worker_id,
                    configured = worker_id,
                    "the cache file belongs to another worker id; its mark does not apply"
                );
                None
            }
            None => None,
        };
        tracing::info!(worker_id, ?prev_mark_ms, identity = %req.identity, "local worker id acquired");
        *held = Some(Held { worker_id, cache });
        Ok(Lease {
            worker_id,
            prev_mark_ms,
            ttl: None,
        })
    }

    async fn renew(&self, lease: &Lease, mark_ms: u64) -> Result<Renewal> {
        let held = self.held.lock().await;
        let Some(h) = held.as_ref().filter(|h| h.worker_id == lease.worker_id) else {
            return Ok(Renewal::LeaseLost);
        };
        let (cache, worker_id) = (h.cache.clone(), h.worker_id);
        blocking(move || cache.write(&CacheRecord { worker_id, mark_ms })).await?;
        Ok(Renewal::Ok)
    }

    async fn release(&self, lease: &Lease, final_mark_ms: u64) -> Result<()> {
        let mut held = self.held.lock().await;
        let Some(h) = held.as_ref().filter(|h| h.worker_id == lease.worker_id) else {
            tracing::debug!(worker_id = lease.worker_id, "release of a lease not held");
            return Ok(());
        };
        let (cache, worker_id) = (h.cache.clone(), h.worker_id);
        blocking(move || {
            cache.write(&CacheRecord {
                worker_id,
                mark_ms: final_mark_ms,
            })
        })
        .await?;
        // Dropping the last handle closes the file and with it the directory lock.
        *held = None;
        Ok(())
    }
}
