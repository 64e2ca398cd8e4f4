//! The fixture traits: how a backend hands the conformance suite fresh, isolated instances.
//!
//! A fixture is made once per test and owns that test's namespace (a database, a temporary
//! directory, a ZooKeeper root, an etcd prefix): nothing one test writes is seen by another.
//! Fixtures of real servers provision (or connect to) the server in their constructor.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use leaf_core::{AcquireRequest, NodeIdentity, SegmentStore, WorkerIdRegistry};

/// The wall clock, Unix milliseconds: what a test gives a registry as "now".
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// An acquire request for `identity` at the current time.
pub fn request(identity: NodeIdentity, max_worker_id: u64) -> AcquireRequest {
    AcquireRequest::new(identity, max_worker_id, now_ms())
}

/// Provides segment stores over one namespace.
#[async_trait]
pub trait StoreFixture: Send + Sync {
    /// The store under test. Every call returns a handle to the same namespace; a fixture may
    /// return the same handle each time.
    async fn store(&self) -> Arc<dyn SegmentStore>;

    /// A second, independent handle to the SAME namespace: a second connection pool, a second
    /// client, as a second server process would have. A store without
    /// `capabilities().multi_process` may return the same handle as [`store`](Self::store).
    async fn another_handle(&self) -> Arc<dyn SegmentStore>;
}

/// Provides worker-id registries (one per node) sharing one namespace.
#[async_trait]
pub trait RegistryFixture: Send + Sync {
    /// A new node's registry, with its own new cache directory, sharing one namespace with
    /// the fixture's other nodes.
    async fn node(&self) -> Arc<dyn WorkerIdRegistry>;

    /// The node that ran `previous` started again: a new registry on the same cache directory
    /// and the same configuration, as after a restart of its process. The fixture drops
    /// `previous` first, so a lease that was not released is a crash; the caller passes the
    /// only handle it has.
    async fn restarted(&self, previous: Arc<dyn WorkerIdRegistry>) -> Arc<dyn WorkerIdRegistry>;

    /// Lets a lease of `ttl` expire: the time passes, as the registry's recycler sees it, for a
    /// lease that is not renewed. By default a real sleep of `ttl` plus 1.5 s (the recycler's
    /// polling slack); an in-memory fixture advances its clock instead.
    async fn let_expire(&self, ttl: Duration) {
        tokio::time::sleep(ttl + Duration::from_millis(1500)).await;
    }

    /// The clock of the time [`let_expire`](Self::let_expire) passes: the system's by default,
    /// the pool's own for an in-memory fixture. What holds a lease reads it, so that a holder
    /// sees its lease's end when the registry does.
    fn clock(&self) -> Arc<dyn leaf_core::Clock> {
        Arc::new(leaf_core::SystemClock::new())
    }

    /// The identity of node `i`. For a registry that does not assign ids itself
    /// (`assigns_distinct_ids == false`, the `local` mode), the fixture configures distinct
    /// ids for `identity(1..=8)` and for no other identity.
    fn identity(&self, i: u16) -> NodeIdentity;
}

/// The nodes' cache directories of a registry fixture: temporary directories that live as
/// long as the fixture, each remembered with its node for [`RegistryFixture::restarted`].
/// [`node`](Self::node) and [`restart`](Self::restart) are a fixture's two methods, given how
/// the fixture makes a registry on a directory.
#[derive(Debug, Default)]
pub struct NodeDirs {
    nodes: Mutex<Vec<(Weak<dyn WorkerIdRegistry>, PathBuf)>>,
    temp: Mutex<Vec<tempfile::TempDir>>,
}

impl NodeDirs {
    /// A new temporary directory, removed with this value.
    pub fn new_dir(&self) -> PathBuf {
        let dir = tempfile::tempdir().expect("temporary directory");
        let path = dir.path().to_path_buf();
        self.temp
            .lock()
            .expect("temporary directories lock")
            .push(dir);
        path
    }

    /// A new node: `make` on a new directory, remembered for its restart.
    pub fn node(
        &self,
        make: impl FnOnce(PathBuf) -> Arc<dyn WorkerIdRegistry>,
    ) -> Arc<dyn WorkerIdRegistry> {
        let dir = self.new_dir();
        let node = make(dir.clone());
        self.remember(&node, dir);
        node
    }

    /// `previous` restarted: dropped, then `make` on its directory (see [`take`](Self::take)).
    pub fn restart(
        &self,
        previous: Arc<dyn WorkerIdRegistry>,
        make: impl FnOnce(PathBuf) -> Arc<dyn WorkerIdRegistry>,
    ) -> Arc<dyn WorkerIdRegistry> {
        let dir = self.take(previous);
        let node = make(dir.clone());
        self.remember(&node, dir);
        node
    }

    /// Records that `node` keeps its cache in `dir`.
    pub fn remember(&self, node: &Arc<dyn WorkerIdRegistry>, dir: PathBuf) {
        self.nodes
            .lock()
            .expect("node list lock")
            .push((Arc::downgrade(node), dir));
    }

    /// The directory of `previous`, after dropping it. Panics (a broken test, not a backend
    /// failure) if `previous` is unknown or still shared: a live clone would keep its cache
    /// file locked, and the restart would not be one.
    pub fn take(&self, previous: Arc<dyn WorkerIdRegistry>) -> PathBuf {
        assert_eq!(
            Arc::strong_count(&previous),
            1,
            "restart a node only through its last handle"
        );
        let dir = self
            .nodes
            .lock()
            .expect("node list lock")
            .iter()
            // The `Weak` keeps the allocation, so an address is never reused while listed.
            .find(|(w, _)| std::ptr::addr_eq(w.as_ptr(), Arc::as_ptr(&previous)))
            .map(|(_, d)| d.clone())
            .expect("the node was made by this fixture");
        drop(previous);
        dir
    }
}
