//! Fixtures of the real-ZooKeeper tests: a root of one's own on the test server (the one
//! `LEAFTEST_ZK_URL` names, or a container `leaf-testkit` provisions from `LEAFTEST_ZK_IMAGE`),
//! and registries on it.

#![allow(dead_code, unreachable_pub, unused_imports)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use leaf_core::{NodeIdentity, WorkerIdRegistry};
use leaf_registry_zk::{ZkClaims, ZkConfig, ZkMode, ZkRegistry};
use leaf_testkit::RegistryFixture;
use leaf_testkit::fixture::NodeDirs;
pub use leaf_testkit::fixture::{now_ms, request};
use zookeeper_client as zk;

/// The leaf name every test uses (under its own root).
pub const NAME: &str = "leaf";

/// The server of the tests (one per test binary); fails the test loudly when there is none.
pub async fn zk_url() -> String {
    match leaf_testkit::provision::shared(&leaf_testkit::provision::ZOOKEEPER).await {
        Ok(server) => server.url,
        Err(e) => panic!("no ZooKeeper for the tests: {e}"),
    }
}

/// A client of the test server; fails the test loudly when it does not answer.
pub async fn raw_client() -> zk::Client {
    let url = zk_url().await;
    let connect = zk::Client::connector()
        .with_session_timeout(Duration::from_secs(10))
        .with_fail_eagerly()
        .connect(&url);
    match tokio::time::timeout(Duration::from_secs(10), connect).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => panic!("ZooKeeper at {url} does not answer: {e}"),
        Err(_) => panic!("ZooKeeper at {url} did not answer within 10 s"),
    }
}

/// One test's namespace: a random root on the test server, and nodes (registries) in it.
pub struct ZkFix {
    pub config: ZkConfig,
    pub mode: ZkMode,
    dirs: NodeDirs,
}

impl ZkFix {
    pub async fn new(mode: ZkMode) -> Self {
        Self::with_config(mode, |_| {}).await
    }

    /// A fixture whose configuration `tweak` adjusts (a shorter session timeout, a TTL).
    pub async fn with_config(mode: ZkMode, tweak: impl FnOnce(&mut ZkConfig)) -> Self {
        // Fails loudly now, rather than as a start from the cache file later.
        drop(raw_client().await);
        let mut config = ZkConfig {
            root: format!("/leaftest-{:016x}", fastrand::u64(..)),
            // Short enough that a refused second holder (which waits out a crashed
            // predecessor's session) and an expiring lease take seconds, not tens of them;
            // above the generator's minimum TTL of 3 s.
            session_timeout_ms: 4000,
            recycle_idle_timeout_ms: 4000,
            ..ZkConfig::with_address(zk_url().await)
        };
        tweak(&mut config);
        ZkFix {
            config,
            mode,
            dirs: NodeDirs::default(),
        }
    }

    /// `{root}/{NAME}`.
    pub fn base(&self) -> String {
        format!("{}/{NAME}", self.config.root)
    }

    pub fn new_dir(&self) -> PathBuf {
        self.dirs.new_dir()
    }

    pub fn registry_in(&self, dir: PathBuf) -> Arc<ZkRegistry> {
        Arc::new(
            ZkClaims::connect(&self.config, self.mode, NAME)
                .map(|b| b.registry(dir))
                .expect("registry"),
        )
    }

    /// A registry with a new cache directory.
    pub fn registry(&self) -> Arc<ZkRegistry> {
        self.registry_in(self.new_dir())
    }
}

#[async_trait]
impl RegistryFixture for ZkFix {
    async fn node(&self) -> Arc<dyn WorkerIdRegistry> {
        self.dirs.node(|dir| self.registry_in(dir))
    }

    async fn restarted(&self, previous: Arc<dyn WorkerIdRegistry>) -> Arc<dyn WorkerIdRegistry> {
        self.dirs.restart(previous, |dir| self.registry_in(dir))
    }

    async fn let_expire(&self, ttl: Duration) {
        // The recycler polls every quarter TTL (at most 1 s): it first sees the last version
        // up to one poll late and recycles up to one poll after the TTL; the rest is slack for
        // a loaded machine.
        tokio::time::sleep(ttl + Duration::from_millis(5000)).await;
    }

    fn identity(&self, i: u16) -> NodeIdentity {
        NodeIdentity::new("10.0.0.1", 8000 + i)
    }
}

pub use leaf_testkit::proxy::Proxy;

/// A proxy, up, to the first server of the test server's address, that a test can take down
/// (every connection cut, new ones closed at once) and bring back, as a ZooKeeper outage would
/// look to a registry.
pub async fn proxy() -> Proxy {
    let url = zk_url().await;
    let first = url.split(',').next().unwrap().split('/').next().unwrap();
    Proxy::start(first).await
}
