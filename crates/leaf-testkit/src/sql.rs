//! The SQL backends' tests, written once (feature `provision`): [`SqlBackend`] names a backend
//! under test and its server, [`SqlFix`] is a database of a test's own with the backend's store
//! and registries on it, and [`sql_cases`](crate::sql_cases) are the tests every SQL backend
//! runs, which [`sql_tests!`](crate::sql_tests) turns into `#[tokio::test]`s. A backend is
//! reached through its descriptor (`leaf_core::backend::Descriptor`), and its configuration is
//! written as the server reads it (serde), so that a case names the settings it changes.

use std::marker::PhantomData;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use leaf_core::backend::Descriptor;
use leaf_core::{NodeIdentity, SegmentStore, WorkerIdRegistry};
use serde_json::Value;
use tokio::sync::OnceCell;

use crate::fixture::NodeDirs;
use crate::provision::{self, Endpoint, ServerKind, SqlDatabase};
use crate::{RegistryFixture, StoreFixture};

/// A SQL backend under test: its dialect, its server, and the two statements on its identity
/// lock that tests run themselves.
pub trait SqlBackend: Send + Sync + 'static {
    /// The backend's dialect (`leaf_registry_mysql::MysqlDialect`), whose descriptor
    /// (`leaf_sql::Sql`) the tests open stores and registries with.
    type Dialect: leaf_sql::Queries;
    /// Its server ([`provision::MYSQL`]).
    const SERVER: &'static ServerKind;
    /// A query of the session (an integer) that holds `identity`'s lock: no row, or null,
    /// when none does.
    fn lock_holder(identity: &NodeIdentity) -> String;
    /// The statement that ends session `id` (and so frees its locks); it fails if it cannot.
    fn end_session(id: i64) -> String;
    /// The statement that frees the identity lock named `lock` (a dialect's `lock_name`) held
    /// by the session that runs it, which stays open.
    fn unlock(lock: &str) -> String;
}

/// The configuration type of `B`.
pub type Config<B> = <SqlDescriptor<B> as Descriptor>::Config;

/// The descriptor of `B`.
pub type SqlDescriptor<B> = leaf_sql::Sql<<B as SqlBackend>::Dialect>;

/// The defaults of `B` with `url`, then `changes` (an object of the configuration's keys).
pub fn config_of<B: SqlBackend>(url: &str, changes: Value) -> Config<B> {
    let mut config = serde_json::to_value(Config::<B>::default()).expect("a configuration");
    let (Value::Object(config_map), Value::Object(changes)) = (&mut config, changes) else {
        panic!("a configuration and its changes are objects");
    };
    config_map.insert("url".into(), url.into());
    config_map.extend(changes);
    serde_json::from_value(config).unwrap_or_else(|e| panic!("the changes do not fit: {e}"))
}

/// The URL of `B`'s default configuration with its `host:port` replaced by a closed port on
/// this host: a server that is not there.
pub fn unreachable_url<B: SqlBackend>() -> String {
    let default = serde_json::to_value(Config::<B>::default()).expect("a configuration");
    let url = default["url"].as_str().expect("a url");
    // Bound and released: nothing listens there afterwards.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    crate::identity_cases::through(url, &format!("127.0.0.1:{port}"))
}

/// `B`'s registry on `config`, its cache file in `dir`, for the leaf name `leaf`.
pub fn registry_of<B: SqlBackend>(config: &Config<B>, dir: PathBuf) -> Arc<dyn WorkerIdRegistry> {
    SqlDescriptor::<B>::open_registry(config, &dir, "leaf")
        .expect("registry")
        .worker
}

/// `B`'s registry on `dir` whose server is not there, with short timeouts.
pub fn unreachable_registry<B: SqlBackend>(dir: &std::path::Path) -> Arc<dyn WorkerIdRegistry> {
    let changes = serde_json::json!({ "connect_timeout_ms": 300, "timeout_ms": 1000 });
    registry_of::<B>(
        &config_of::<B>(&unreachable_url::<B>(), changes),
        dir.into(),
    )
}

/// `B`'s segment store on `config`.
pub async fn store_of<B: SqlBackend>(
    config: &Config<B>,
) -> leaf_core::Result<Arc<dyn SegmentStore>> {
    SqlDescriptor::<B>::open_store(config, "leaf").await
}

/// A new database on `B`'s shared server; fails the test loudly if there is no server.
pub async fn database<B: SqlBackend>() -> SqlDatabase {
    let server = provision::shared(B::SERVER).await;
    let server =
        server.unwrap_or_else(|e| panic!("no {} server for the tests: {e}", B::SERVER.name));
    database_on::<B>(&server).await
}

/// A new database on `server`, a server of `B`'s kind.
pub async fn database_on<B: SqlBackend>(server: &Endpoint) -> SqlDatabase {
    provision::sql_database_on(B::SERVER, server)
        .await
        .unwrap_or_else(|e| panic!("a database on {server:?}: {e}"))
}

/// One test's database, and `B`'s store and registries (nodes) on it.
pub struct SqlFix<B: SqlBackend> {
    /// The database.
    pub db: SqlDatabase,
    dirs: NodeDirs,
    /// `fence_on_disconnect` of the fixture's registries.
    fenced: bool,
    store: OnceCell<Arc<dyn SegmentStore>>,
    backend: PhantomData<B>,
}

impl<B: SqlBackend> SqlFix<B> {
    /// A fixture on a new database of the shared server.
    pub async fn new() -> Self {
        Self::on(database::<B>().await)
    }

    /// A fixture whose registries run with `fence_on_disconnect`.
    pub async fn fenced() -> Self {
        SqlFix {
            fenced: true,
            ..Self::new().await
        }
    }

    /// A fixture on `db`.
    pub fn on(db: SqlDatabase) -> Self {
        SqlFix {
            db,
            dirs: NodeDirs::default(),
            fenced: false,
            store: OnceCell::new(),
            backend: PhantomData,
        }
    }

    /// The defaults on the fixture's database, then `changes`.
    pub fn config(&self, changes: Value) -> Config<B> {
        config_of::<B>(&self.db.url, changes)
    }

    /// A registry on `dir` with the fixture's settings.
    pub fn registry_in(&self, dir: PathBuf) -> Arc<dyn WorkerIdRegistry> {
        let config = self.config(serde_json::json!({ "fence_on_disconnect": self.fenced }));
        registry_of::<B>(&config, dir)
    }

    /// A registry on `dir` with `config`.
    pub fn registry_with(&self, dir: PathBuf, config: &Config<B>) -> Arc<dyn WorkerIdRegistry> {
        registry_of::<B>(config, dir)
    }

    /// A new cache directory, removed with the fixture.
    pub fn new_dir(&self) -> PathBuf {
        self.dirs.new_dir()
    }

    /// The session holding `identity`'s lock, if one does.
    pub async fn lock_holder(&self, identity: &NodeIdentity) -> Option<i64> {
        self.db.scalar(&B::lock_holder(identity)).await
    }

    /// The mark `leaf_workerid_alloc` holds for `worker_id`, if it holds one.
    pub async fn stored_mark(&self, worker_id: u64) -> Option<i64> {
        let sql = format!("SELECT max_timestamp FROM leaf_workerid_alloc WHERE id = {worker_id}");
        self.db.scalar(&sql).await
    }

    /// The user of the database's URL with the password hidden, as `Debug` shows it
    /// (`root:***@`).
    pub fn hidden_password(&self) -> String {
        let url = &self.db.url;
        let user = url[url.find("://").map_or(0, |i| i + 3)..]
            .split(':')
            .next();
        format!("{}:***@", user.unwrap_or_default())
    }

    async fn connect(&self) -> Arc<dyn SegmentStore> {
        store_of::<B>(&self.config(Value::Object(Default::default())))
            .await
            .unwrap_or_else(|e| panic!("connect to {}: {e}", self.db.name))
    }
}

#[async_trait]
impl<B: SqlBackend> StoreFixture for SqlFix<B> {
    async fn store(&self) -> Arc<dyn SegmentStore> {
        self.store.get_or_init(|| self.connect()).await.clone()
    }

    async fn another_handle(&self) -> Arc<dyn SegmentStore> {
        self.connect().await
    }
}

#[async_trait]
impl<B: SqlBackend> RegistryFixture for SqlFix<B> {
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
