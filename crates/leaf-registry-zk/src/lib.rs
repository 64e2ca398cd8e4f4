#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod config;
mod error;
mod node;
mod recycle;
mod registry;
mod session;

pub use config::ZkConfig;
#[cfg(feature = "_test-hooks")]
#[doc(hidden)]
pub use registry::ReadClaim;
pub use registry::{ZkClaims, ZkMode, ZkRegistry};
#[cfg(feature = "_test-hooks")]
#[doc(hidden)]
pub use session::Pause;

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use leaf_core::backend::{Descriptor, PeerDirectory, Registry};
use leaf_core::{NodeIdentity, Result};

/// The registry of `mode` on the ensemble of `config`, its cache file in `cache_dir`, for the
/// leaf name `name` (nodes under `{root}/{name}`), with its peer directory. Nothing is
/// contacted before its first `acquire`.
fn open(config: &ZkConfig, mode: ZkMode, cache_dir: &Path, name: &str) -> Result<Registry> {
    let registry = Arc::new(ZkClaims::connect(config, mode, name)?.registry(cache_dir));
    Ok(Registry {
        worker: registry.clone(),
        peers: Some(Arc::new(Peers(registry))),
    })
}

/// The `zk_normal` workerId mode (`snowflake.mode = "zk_normal"`, `[snowflake.zk]`), for
/// `leaf-server`'s composition.
#[derive(Debug)]
pub struct ZkNormal;

/// The `zk_recycle` workerId mode (`snowflake.mode = "zk_recycle"`, `[snowflake.zk]`), for
/// `leaf-server`'s composition.
#[derive(Debug)]
pub struct ZkRecycle;

#[async_trait]
impl Descriptor for ZkNormal {
    type Config = ZkConfig;
    const TABLE: &'static str = "zk";
    const MODE: Option<&'static str> = Some("zk_normal");

    fn validate(config: &ZkConfig) -> Result<()> {
        config.validate()
    }

    fn open_registry(config: &ZkConfig, cache_dir: &Path, name: &str) -> Result<Registry> {
        open(config, ZkMode::Normal, cache_dir, name)
    }

    /// With `fence_on_disconnect`, the `zk_recycle` pool on the same ensemble (leased for
    /// `recycle_idle_timeout_ms`, which a leader fences itself on; its mode reads
    /// `zk_recycle`); without it `zk_normal`'s own registry, which the monotonic mode refuses.
    fn open_leader_registry(config: &ZkConfig, cache_dir: &Path, name: &str) -> Result<Registry> {
        let mode = match config.fence_on_disconnect {
            true => ZkMode::Recycle,
            false => ZkMode::Normal,
        };
        open(config, mode, cache_dir, name)
    }
}

#[async_trait]
impl Descriptor for ZkRecycle {
    type Config = ZkConfig;
    const TABLE: &'static str = "zk";
    const MODE: Option<&'static str> = Some("zk_recycle");

    fn validate(config: &ZkConfig) -> Result<()> {
        config.validate()
    }

    fn open_registry(config: &ZkConfig, cache_dir: &Path, name: &str) -> Result<Registry> {
        open(config, ZkMode::Recycle, cache_dir, name)
    }
}

/// Leaf's `temporary` nodes: the running peers of the leaf name, as a registry lists them.
struct Peers(Arc<ZkRegistry>);

#[async_trait]
impl PeerDirectory for Peers {
    async fn peers(&self) -> Result<Vec<String>> {
        self.0.backend().peers().await
    }
    async fn register(&self, identity: &NodeIdentity) -> Result<()> {
        self.0.backend().register_temporary(identity).await
    }
    fn max_skew_ms(&self) -> u64 {
        self.0.backend().max_peer_skew_ms()
    }
}
