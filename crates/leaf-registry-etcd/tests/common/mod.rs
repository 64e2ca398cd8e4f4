//! Fixtures of the real-etcd tests: a key prefix of one's own on the test server (the one
//! `LEAFTEST_ETCD_URL` names, or a container `leaf-testkit` provisions from
//! `LEAFTEST_ETCD_IMAGE`), and registries and stores on it.

#![allow(dead_code, unreachable_pub, unused_imports)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use leaf_core::{NodeIdentity, SegmentStore, WorkerIdRegistry};
use leaf_registry_etcd::{EtcdClaims, EtcdConfig, EtcdRegistry, EtcdStore};
use leaf_testkit::fixture::NodeDirs;
pub use leaf_testkit::fixture::{now_ms, request};
use leaf_testkit::provision::{self, EtcdNamespace};
use leaf_testkit::{RegistryFixture, StoreFixture};

/// The leaf name every test uses (under its own prefix).
pub const NAME: &str = "leaf";

/// A prefix of one's own on the test server; fails the test loudly when there is no server.
pub async fn namespace() -> EtcdNamespace {
    match provision::etcd_namespace().await {
        Ok(ns) => ns,
        Err(e) => panic!("no etcd for the tests: {e}"),
    }
}

/// The configuration of the tests on `endpoints` under `prefix`: a lease TTL of 4 s (above the
/// generator's minimum of 3 s), so that an expiry takes seconds.
pub fn config(endpoints: &[String], prefix: &str) -> EtcdConfig {
    EtcdConfig {
        prefix: prefix.to_owned(),
        lease_ttl_ms: 4000,
        timeout_ms: 3000,
        ..EtcdConfig::with_endpoints(endpoints.iter().cloned())
    }
}

/// One test's namespace: a random prefix on the test server, and nodes (registries) and
/// stores in it.
pub struct EtcdFix {
    pub config: EtcdConfig,
    ns: Option<EtcdNamespace>,
    dirs: NodeDirs,
    store: tokio::sync::OnceCell<Arc<EtcdStore>>,
}

impl EtcdFix {
    pub async fn new() -> Self {
        let ns = namespace().await;
        let mut fix = Self::on(&ns.endpoints, &ns.prefix);
        fix.ns = Some(ns);
        fix
    }

    /// A fixture on a server of the test's own (a dedicated server, a cluster).
    pub fn on(endpoints: &[String], prefix: &str) -> Self {
        EtcdFix {
            config: config(endpoints, prefix),
            ns: None,
            dirs: NodeDirs::default(),
            store: tokio::sync::OnceCell::new(),
        }
    }

    pub fn new_dir(&self) -> PathBuf {
        self.dirs.new_dir()
    }

    pub fn registry_in(&self, dir: PathBuf) -> Arc<EtcdRegistry> {
        Arc::new(
            EtcdClaims::connect(&self.config, NAME)
                .expect("registry")
                .registry(dir),
        )
    }

    /// A registry with a new cache directory.
    pub fn registry(&self) -> Arc<EtcdRegistry> {
        self.registry_in(self.new_dir())
    }

    /// A new store handle (its own client); fails the test when etcd does not answer.
    pub async fn new_store(&self) -> Arc<EtcdStore> {
        match EtcdStore::connect(&self.config, NAME).await {
            Ok(s) => Arc::new(s),
            Err(e) => panic!("etcd store on {:?}: {e}", self.config.endpoints),
        }
    }
}

/// A restore of the segment rows from an older copy, written straight into etcd as a restored
/// snapshot holds them: `{prefix}/{name}/segments/{tag}`, a JSON row.
#[async_trait]
impl leaf_testkit::period_cases::RestoreFixture for EtcdFix {
    async fn restore(&self, copy: &[leaf_core::TagRecord]) {
        let mut raw = etcd_client::Client::connect(&self.config.endpoints, None)
            .await
            .expect("a raw etcd client");
        for row in copy {
            let key = format!("{}/{NAME}/segments/{}", self.config.prefix, row.tag);
            let value = serde_json::json!({
                "max_id": row.max_id,
                "step": row.step,
                "description": row.description,
            });
            raw.put(key, value.to_string(), None)
                .await
                .expect("write the row back");
        }
    }
}

#[async_trait]
impl RegistryFixture for EtcdFix {
    async fn node(&self) -> Arc<dyn WorkerIdRegistry> {
        self.dirs.node(|dir| self.registry_in(dir))
    }

    async fn restarted(&self, previous: Arc<dyn WorkerIdRegistry>) -> Arc<dyn WorkerIdRegistry> {
        self.dirs.restart(previous, |dir| self.registry_in(dir))
    }

    async fn let_expire(&self, ttl: Duration) {
        // etcd's lessor looks for expired leases every 500 ms; the rest is slack for a loaded
        // machine.
        tokio::time::sleep(ttl + Duration::from_millis(3000)).await;
    }

    fn identity(&self, i: u16) -> NodeIdentity {
        NodeIdentity::new("10.0.0.1", 8000 + i)
    }
}

#[async_trait]
impl StoreFixture for EtcdFix {
    async fn store(&self) -> Arc<dyn SegmentStore> {
        self.store.get_or_init(|| self.new_store()).await.clone()
    }

    async fn another_handle(&self) -> Arc<dyn SegmentStore> {
        self.new_store().await
    }
}

/// A TCP proxy to an etcd server that a test can freeze: while frozen, connections stay open
/// but nothing is forwarded (new ones are accepted and held too), as a paused server looks to
/// a client. Thawing closes the held connections, so that the client connects afresh.
pub struct StallingProxy {
    /// `http://127.0.0.1:{port}`, the endpoint to configure.
    pub url: String,
    frozen: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl StallingProxy {
    /// A proxy, forwarding, to the server of `url` (`http://host:port`).
    pub async fn start(url: &str) -> StallingProxy {
        let target = url.trim_start_matches("http://").to_owned();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let local = listener.local_addr().unwrap();
        let (frozen, rx) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    continue;
                };
                let (mut rx, target) = (rx.clone(), target.clone());
                tokio::spawn(async move {
                    if *rx.borrow() {
                        // Held, unanswered, until the thaw closes it.
                        let _ = rx.wait_for(|f| !*f).await;
                        return;
                    }
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await else {
                        return;
                    };
                    let froze = tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => false,
                        r = rx.wait_for(|f| *f) => r.is_ok(),
                    };
                    if froze {
                        // Keep both ends open, forward nothing, until the thaw.
                        let _ = rx.wait_for(|f| !*f).await;
                    }
                });
            }
        });
        StallingProxy {
            url: format!("http://{local}"),
            frozen,
            task,
        }
    }

    /// Stops forwarding (`true`), or forwards again (`false`).
    pub fn set_frozen(&self, frozen: bool) {
        self.frozen.send_replace(frozen);
    }
}

impl Drop for StallingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
