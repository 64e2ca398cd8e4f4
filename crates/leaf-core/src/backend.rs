//! [`Descriptor`]: what a backend crate tells `leaf-server` to be composed with one line: the names
//! that choose it (`segment.store = "…"`, `snowflake.mode = "…"`), its table
//! (`[segment.<table>]`, `[snowflake.<table>]`) and configuration type, how that is validated,
//! and how its store and its workerId mode are opened. A crate with two modes on one table (the
//! ZooKeeper modes) has one descriptor per mode.
//!
//! The server erases the type ([`Descriptor::Config`]) behind an object-safe twin of its own, so
//! that the backends are a plain list of unit values, one `cfg`-gated line each.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use serde::Serialize;
use serde::de::DeserializeOwned;

pub use crate::PeerDirectory;
use crate::{Error, Result, SegmentStore, StoreCapabilities, WorkerIdRegistry};

/// A backend crate's descriptor: a unit type the server names once. See the module docs.
#[async_trait]
pub trait Descriptor: Send + Sync + 'static {
    /// Its configuration: one table of the server's configuration, read with serde (unknown
    /// keys refused); its `Default` are the documented defaults and the keys a `LEAF_` variable
    /// may name.
    type Config: DeserializeOwned + Serialize + Default + Clone + Send + Sync + 'static;

    /// The table's name in `[segment]` and `[snowflake]` (`mysql`, `zk`).
    const TABLE: &'static str;

    /// The value of `segment.store` that chooses its segment store; `None` if it has none.
    const STORE: Option<&'static str> = None;

    /// The value of `snowflake.mode` that chooses its workerId mode; `None` if it has none.
    const MODE: Option<&'static str> = None;

    /// The keys of [`Config`](Self::Config) that only the workerId mode takes: the segment
    /// store's table refuses them, naming the section.
    const MODE_ONLY_KEYS: &'static [&'static str] = &[];

    /// `Config` naming the field if a value cannot work.
    fn validate(config: &Self::Config) -> Result<()>;

    /// What the store of `config` can do (asked before it is opened).
    fn store_capabilities(config: &Self::Config) -> StoreCapabilities {
        let _ = config;
        StoreCapabilities::new(false, false)
    }

    /// Opens the segment store of `config` for the leaf name `name`. Only called when
    /// [`STORE`](Self::STORE) is set.
    async fn open_store(config: &Self::Config, name: &str) -> Result<Arc<dyn SegmentStore>> {
        let _ = (config, name);
        Err(Error::Config(format!(
            "{} has no segment store",
            Self::TABLE
        )))
    }

    /// The workerId mode's registry on `config`, its cache file in `cache_dir`, for the leaf
    /// name `name`. Nothing is contacted before its first `acquire`. Only called when
    /// [`MODE`](Self::MODE) is set.
    fn open_registry(config: &Self::Config, cache_dir: &Path, name: &str) -> Result<Registry> {
        let _ = (config, cache_dir, name);
        Err(Error::Config(format!(
            "{} has no workerId mode",
            Self::TABLE
        )))
    }

    /// The registry of the monotonic mode's leader claim on `config` (a pool of one under the
    /// leaf name `name`, its cache file in `cache_dir`): the workerId mode's own registry by
    /// default, which serves it where that recycles worker ids under leases. A mode whose ids
    /// are held without a lease opens a leased pool of its backend here instead where its
    /// configuration allows (`fence_on_disconnect`); otherwise its own registry, and the server
    /// refuses the monotonic mode. Only called when [`MODE`](Self::MODE) is set.
    fn open_leader_registry(
        config: &Self::Config,
        cache_dir: &Path,
        name: &str,
    ) -> Result<Registry> {
        Self::open_registry(config, cache_dir, name)
    }
}

/// A workerId mode's registry, and its peer directory where the mode keeps one.
pub struct Registry {
    /// Where the worker id comes from.
    pub worker: Arc<dyn WorkerIdRegistry>,
    /// The running peers, in the modes that list them.
    pub peers: Option<Arc<dyn PeerDirectory>>,
}

impl Registry {
    /// A registry that lists no peers.
    pub fn without_peers(worker: Arc<dyn WorkerIdRegistry>) -> Self {
        Registry {
            worker,
            peers: None,
        }
    }
}
