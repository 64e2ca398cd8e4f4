//! Fixtures of the real-server tests: a database of one's own on the provisioned PostgreSQL
//! server, and stores and registries on it.

#![allow(dead_code, unreachable_pub)]

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use leaf_core::{NodeIdentity, SegmentStore, WorkerIdRegistry};
use leaf_registry_postgres::{PostgresBackend, PostgresConfig, PostgresStore};
use leaf_testkit::fixture::NodeDirs;
use leaf_testkit::{RegistryFixture, StoreFixture};

pub use leaf_testkit::provision;
pub use leaf_testkit::provision::PostgresDatabase;

/// A new database on the shared server; fails the test loudly if there is no server.
pub async fn database() -> PostgresDatabase {
    provision::postgres_database()
        .await
        .unwrap_or_else(|e| panic!("no PostgreSQL server for the tests: {e}"))
}

/// The settings of the tests: the defaults with the database's URL.
pub fn config(db: &PostgresDatabase) -> PostgresConfig {
    PostgresConfig::with_url(&db.url)
}

pub struct StoreFix {
    pub db: PostgresDatabase,
    store: Arc<PostgresStore>,
}

impl StoreFix {
    pub async fn new() -> Self {
        let db = database().await;
        let store = PostgresStore::connect(&config(&db))
            .await
            .unwrap_or_else(|e| panic!("connect to {}: {e}", db.name));
        StoreFix {
            db,
            store: Arc::new(store),
        }
    }
}

#[async_trait]
impl StoreFixture for StoreFix {
    async fn store(&self) -> Arc<dyn SegmentStore> {
        self.store.clone()
    }

    async fn another_handle(&self) -> Arc<dyn SegmentStore> {
        Arc::new(
            PostgresStore::connect(&config(&self.db))
                .await
                .expect("a second pool on the same database"),
        )
    }
}

pub struct RegistryFix {
    pub db: PostgresDatabase,
    dirs: NodeDirs,
    /// `fence_on_disconnect` of the fixture's registries.
    fenced: bool,
}

impl RegistryFix {
    pub async fn new() -> Self {
        RegistryFix {
            db: database().await,
            dirs: NodeDirs::default(),
            fenced: false,
        }
    }

    /// A fixture whose registries run with `fence_on_disconnect`.
    pub async fn fenced() -> Self {
        RegistryFix {
            fenced: true,
            ..Self::new().await
        }
    }

    pub fn registry_in(&self, dir: PathBuf) -> Arc<dyn WorkerIdRegistry> {
        let config = PostgresConfig {
            fence_on_disconnect: self.fenced,
            ..config(&self.db)
        };
        self.registry_with(dir, config)
    }

    /// A registry on `dir` with `config` (the database's URL in it).
    pub fn registry_with(&self, dir: PathBuf, config: PostgresConfig) -> Arc<dyn WorkerIdRegistry> {
        Arc::new(
            PostgresBackend::connect(&config, "leaf")
                .expect("registry")
                .registry(dir),
        )
    }

    pub fn new_dir(&self) -> PathBuf {
        self.dirs.new_dir()
    }

    pub fn dirs(&self) -> &NodeDirs {
        &self.dirs
    }
}

#[async_trait]
impl RegistryFixture for RegistryFix {
    async fn node(&self) -> Arc<dyn WorkerIdRegistry> {
        self.dirs.node(|dir| self.registry_in(dir))
    }

    async fn restarted(&self, previous: Arc<dyn WorkerIdRegistry>) -> Arc<dyn WorkerIdRegistry> {
        self.dirs.restart(previous, |dir| self.registry_in(dir))
    }

    fn identity(&self, i: u16) -> NodeIdentity {
        NodeIdentity::new("10.0.0.1", 8000 + i)
    }
}
