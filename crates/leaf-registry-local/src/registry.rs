//! `LocalRegistry`: the `local` workerId mode. The worker id comes from configuration; the time
//! mark lives in the cache file, which also keeps a second process off the same cache directory.

use std::path::PathBuf;

use async_trait::async_trait;
use leaf_core::cache_file::merge_marks;
use leaf_core::{
    AcquireRequest, Error, HeldCache, Lease, NodeIdentity, RegistryCapabilities, Renewal, Result,
    WorkerIdRegistry,
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
                "work_id_map: node {key} has no worker id in it (it lists {})",
                map.keys().cloned().collect::<Vec<_>>().join(", ")
            ))
        })?;
        // Two nodes with one id would issue the same IDs: refuse the whole map.
        if let Some((other, _)) = map.iter().find(|(k, v)| **v == id && **k != key) {
            return Err(Error::Config(format!(
                "work_id_map gives worker id {id} to both {key} and {other}"
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
                "worker_id"
            } else {
                "work_id_map"
            };
            return Err(Error::Config(format!(
                "{key}: worker id {worker_id} of node {} does not fit the layout, whose largest \
                 worker id is {}",
                req.identity, req.max_worker_id
            )));
        }
        let mut held = self.held.lock().await;
        if let Some((id, _)) = held.held().filter(|(id, _)| *id != worker_id) {
            return Err(Error::InvalidInput(format!(
                "this registry already holds worker id {id}; release it first"
            )));
        }
        let cache = held.open(&self.cache_dir, &self.file_name).await?;
        let prev_mark_ms = merge_marks(worker_id, None, cache.read().await?);
        tracing::info!(worker_id, ?prev_mark_ms, identity = %req.identity, "local worker id acquired");
        let lease = Lease::new(worker_id, prev_mark_ms);
        held.hold(&lease, cache);
        Ok(lease)
    }

    async fn renew(&self, lease: &Lease, mark_ms: u64) -> Result<Renewal> {
        self.held.renew(lease, mark_ms).await
    }

    async fn release(&self, lease: &Lease, final_mark_ms: u64) -> Result<()> {
        // Closing the file releases the directory lock.
        if !self.held.release(lease, final_mark_ms).await? {
            tracing::debug!(worker_id = lease.worker_id, "release of a lease not held");
        }
        Ok(())
    }

    async fn abandon(&self, lease: &Lease) {
        self.held.forget(lease).await;
    }
}
