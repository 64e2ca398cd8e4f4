//! `LocalClaims`: the `local` workerId mode. The worker id comes from configuration; with the
//! cache file ([`LocalRegistry`]) the time mark lives there, and the file keeps a second process
//! off the same cache directory.

use std::path::PathBuf;

use async_trait::async_trait;
use leaf_core::{
    AcquireRequest, CachedRegistry, ClaimError, Error, Lease, NodeIdentity, RegistryCapabilities,
    Renewal, Result, WorkerIdClaims,
};

use crate::config::{LocalRegistryConfig, WorkerIdFrom, hostname_ordinal};

/// The `local` workerId mode with its cache file `{cache_dir}/worker-{name}.properties`: while a
/// lease is held the file is open and its directory locked, so a second process started with
/// the same `cache_dir` refuses to start.
pub type LocalRegistry = CachedRegistry<LocalClaims>;

/// The `local` workerId mode: no shared registry, ids from `worker_id` or `work_id_map`; the
/// time mark lives in the cache file only.
#[derive(Debug)]
pub struct LocalClaims {
    config: LocalRegistryConfig,
    file_name: String,
}

impl LocalClaims {
    /// The backend for the service `name` (Leaf's `leaf.name`), its cache file named
    /// `worker-{name}`.
    pub fn new(config: LocalRegistryConfig, name: &str) -> Self {
        LocalClaims {
            config,
            file_name: format!("worker-{name}"),
        }
    }

    /// This backend with its cache file in `cache_dir`: the registry the server runs. Nothing
    /// is touched before its first `acquire`.
    pub fn registry(self, cache_dir: impl Into<PathBuf>) -> LocalRegistry {
        CachedRegistry::new(self, cache_dir)
    }

    /// The configured worker id of `identity`.
    fn worker_id_for(&self, identity: &NodeIdentity) -> Result<u64> {
        if self.config.worker_id_from == WorkerIdFrom::HostnameOrdinal {
            let host = if self.config.hostname.is_empty() {
                this_hostname()?
            } else {
                self.config.hostname.clone()
            };
            let ordinal = hostname_ordinal(&host)?;
            return ordinal
                .checked_add(self.config.worker_id_offset)
                .ok_or_else(|| {
                    Error::Config(format!(
                        "worker_id_offset: {} plus the ordinal {ordinal} of {host:?} overflows",
                        self.config.worker_id_offset
                    ))
                });
        }
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
impl WorkerIdClaims for LocalClaims {
    fn mode(&self) -> &'static str {
        "local"
    }

    fn capabilities(&self) -> RegistryCapabilities {
        RegistryCapabilities::new(false, false)
    }

    fn cache_file_name(&self) -> &str {
        &self.file_name
    }

    fn check_request(&self, req: &AcquireRequest) -> Result<()> {
        self.claimed_id(req).map(drop)
    }

    fn reclaims_in_place(&self) -> bool {
        true
    }

    async fn claim(&self, req: &AcquireRequest) -> Result<Lease, ClaimError> {
        let worker_id = self.claimed_id(req)?;
        tracing::info!(worker_id, identity = %req.identity, "local worker id acquired");
        Ok(Lease::new(worker_id, None))
    }

    async fn renew(&self, _lease: &Lease, _mark_ms: u64) -> Result<Renewal> {
        // The cache file is the whole record.
        Ok(Renewal::OK)
    }

    async fn release(&self, _lease: &Lease, _final_mark_ms: u64) -> Result<()> {
        Ok(())
    }

    async fn abandon(&self, _lease: &Lease) {}
}

impl LocalClaims {
    /// The configured id of `req.identity`, if it fits the layout.
    fn claimed_id(&self, req: &AcquireRequest) -> Result<u64> {
        let worker_id = self.worker_id_for(&req.identity)?;
        if worker_id > req.max_worker_id {
            let key = if self.config.worker_id_from == WorkerIdFrom::HostnameOrdinal {
                "worker_id_from"
            } else if self.config.work_id_map.is_empty() {
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
        Ok(worker_id)
    }
}

/// This machine's host name: the kernel's (`/proc/sys/kernel/hostname`, which a container's
/// runtime sets to the pod or container name), else `$HOSTNAME`.
fn this_hostname() -> Result<String> {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/hostname").ok();
    kernel
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()))
        .ok_or_else(|| {
            Error::Config(
                "worker_id_from: this machine's host name cannot be read (set hostname)".into(),
            )
        })
}
