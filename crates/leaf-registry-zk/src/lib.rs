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
pub use registry::{ZkBackend, ZkMode, ZkRegistry};
#[cfg(feature = "_test-hooks")]
#[doc(hidden)]
pub use session::Pause;

/// The registry of `mode` on the ensemble of `config`, its cache file in `cache_dir`, for the
/// leaf name `name` (nodes under `{root}/{name}`). Nothing is contacted before its first
/// `acquire`; [`ZkRegistry::backend`] lists the peers.
pub fn open_registry(
    config: &ZkConfig,
    mode: ZkMode,
    cache_dir: &std::path::Path,
    name: &str,
) -> leaf_core::Result<std::sync::Arc<ZkRegistry>> {
    Ok(std::sync::Arc::new(
        ZkBackend::connect(config, mode, name)?.registry(cache_dir),
    ))
}
