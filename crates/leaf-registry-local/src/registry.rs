//! `LocalRegistry`: the `local` workerId mode. The worker id comes from configuration; the time
//! mark lives in the cache file, which also keeps a second process off the same cache directory.

use std::path::PathBuf;

use async_trait::async_trait;
use leaf_core::{
    AcquireRequest, AsyncCacheFile, Error, HeldCache, Lease, NodeIdentity, RegistryCapabilities,
    Renewal, Result, WorkerIdRegistry,
};

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
    // Renewals and the release are serialised, so a late renewal can never overwrite the final
    // mark.
    held: HeldCache,
}

impl LocalRegistry {
    /// A registry for the service `name` (Leaf's `leaf.name`), keeping its cache file in
    /// `cache_dir`. Nothing is touched before [`acquire`](WorkerIdRegistry::acquire).
    pub fn new(config: LocalRegistryConfig, cache_dir: impl Into<PathBuf>, name: &str) -> Self {
        LocalRegistry {
            config,
            cache_dir: cache_dir.into(),
            file_name: format!("worker-{name}"),
            held: HeldCache::new(),
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
        let cache = match held.held() {
            Some((id, cache)) if id == worker_id => cache.clone(),
            Some((id, _)) => {
                return Err(Error::InvalidInput(format!(
                    "this registry already holds worker id {id}; release it first"
                )));
            }
            None => AsyncCacheFile::open(self.cache_dir.clone(), &self.file_name).await?,
        };
        let record = cache.read().await?;
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
        held.hold(worker_id, cache);
        Ok(Lease {
            worker_id,
            prev_mark_ms,
            ttl: None,
        })
    }

    async fn renew(&self, lease: &Lease, mark_ms: u64) -> Result<Renewal> {
        self.held.renew(lease.worker_id, mark_ms).await
    }

    async fn release(&self, lease: &Lease, final_mark_ms: u64) -> Result<()> {
        // Closing the file releases the directory lock.
        if !self.held.release(lease.worker_id, final_mark_ms).await? {
            tracing::debug!(worker_id = lease.worker_id, "release of a lease not held");
        }
        Ok(())
    }
}
