//! The conformance suite against the SQLite store and the local registry.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use leaf_core::{NodeIdentity, SegmentStore, WorkerIdRegistry};
use leaf_registry_local::{LocalClaims, LocalRegistryConfig, SqliteStore};
use leaf_testkit::fixture::NodeDirs;
use leaf_testkit::{RegistryFixture, StoreFixture};
use tempfile::TempDir;

/// A fresh database file per test.
struct SqliteFixture {
    dir: TempDir,
    store: Arc<dyn SegmentStore>,
}

impl SqliteFixture {
    async fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Arc::new(connect(&dir).await);
        SqliteFixture { dir, store }
    }
}

async fn connect(dir: &TempDir) -> SqliteStore {
    let url = format!("sqlite://{}", dir.path().join("db/leaf.db").display());
    SqliteStore::connect_url(&url).await.expect("connect")
}

#[async_trait]
impl StoreFixture for SqliteFixture {
    async fn store(&self) -> Arc<dyn SegmentStore> {
        self.store.clone()
    }
    async fn another_handle(&self) -> Arc<dyn SegmentStore> {
        Arc::new(connect(&self.dir).await)
    }
}

leaf_testkit::store_conformance!(
    sqlite,
    async { SqliteFixture::new().await },
    durable = true,
    multi_process = true,
);

/// A restore of the rows from an older copy, in SQL on the database file as a restored backup
/// holds them.
#[async_trait]
impl leaf_testkit::period_cases::RestoreFixture for SqliteFixture {
    async fn restore(&self, copy: &[leaf_core::TagRecord]) {
        use sqlx::Connection;
        let path = self.dir.path().join("db/leaf.db");
        let mut raw = sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display()))
            .await
            .expect("a raw SQLite connection");
        for row in copy {
            sqlx::query("UPDATE leaf_alloc SET max_id = ?, step = ? WHERE biz_tag = ?")
                .bind(row.max_id)
                .bind(row.step)
                .bind(row.tag.as_str())
                .execute(&mut raw)
                .await
                .expect("write the row back");
        }
        raw.close().await.expect("close");
    }
}

leaf_testkit::period_conformance!(sqlite_periods, async { SqliteFixture::new().await });

/// An in-memory SQLite database: one process, gone with the pool.
struct SqliteMemoryFixture(Arc<dyn SegmentStore>);

#[async_trait]
impl StoreFixture for SqliteMemoryFixture {
    async fn store(&self) -> Arc<dyn SegmentStore> {
        self.0.clone()
    }
    async fn another_handle(&self) -> Arc<dyn SegmentStore> {
        self.0.clone()
    }
}

leaf_testkit::store_conformance!(
    sqlite_memory,
    async {
        let store = SqliteStore::connect_url("sqlite::memory:")
            .await
            .expect("connect");
        SqliteMemoryFixture(Arc::new(store))
    },
    durable = false,
    multi_process = false,
);

/// Nodes of the local mode: each its own cache directory under one temporary root, all with
/// one `work_id_map` for `identity(1..=8)`.
struct LocalFixture {
    root: TempDir,
    map: BTreeMap<String, u64>,
    next: Mutex<u32>,
    dirs: NodeDirs,
}

impl LocalFixture {
    fn new() -> Self {
        let map = (1..=8)
            .map(|i| (identity(i).to_string(), 10 + u64::from(i)))
            .collect();
        LocalFixture {
            root: tempfile::tempdir().expect("temp dir"),
            map,
            next: Mutex::new(0),
            dirs: NodeDirs::default(),
        }
    }

    fn registry(&self, dir: std::path::PathBuf) -> Arc<dyn WorkerIdRegistry> {
        let config = LocalRegistryConfig {
            worker_id: 0,
            work_id_map: self.map.clone(),
            ..Default::default()
        };
        let node: Arc<dyn WorkerIdRegistry> =
            Arc::new(LocalClaims::new(config, "leaf").registry(&dir));
        self.dirs.remember(&node, dir);
        node
    }
}

fn identity(i: u16) -> NodeIdentity {
    NodeIdentity::new(format!("10.2.{}.{}", i / 256, i % 256), 8080)
}

#[async_trait]
impl RegistryFixture for LocalFixture {
    async fn node(&self) -> Arc<dyn WorkerIdRegistry> {
        let n = {
            let mut next = self.next.lock().expect("counter");
            *next += 1;
            *next
        };
        self.registry(self.root.path().join(format!("node-{n}")))
    }
    async fn restarted(&self, previous: Arc<dyn WorkerIdRegistry>) -> Arc<dyn WorkerIdRegistry> {
        let dir = self.dirs.take(previous);
        self.registry(dir)
    }
    fn identity(&self, i: u16) -> NodeIdentity {
        identity(i)
    }
}

leaf_testkit::registry_conformance!(
    local,
    async { LocalFixture::new() },
    recycles = false,
    assigns_distinct_ids = false,
    exclusive_identity = false,
    confirms_marks = false,
);
