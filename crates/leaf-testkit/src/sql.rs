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

/// The lease of a leased fixture's registries ([`SqlFix::leased`]), as the other recycling
/// modes' fixtures have it.
pub const LEASE_TTL_MS: u64 = 4000;

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

/// The settings of a configuration that reaches `db` on the secured `server` as the project's
/// user: its URL (host `localhost`), the TLS mode that verifies the certificate and the host
/// name, the CA, the client certificate and the password's file.
pub fn secured_settings<B: SqlBackend>(server: &provision::SecuredSql, db: &SqlDatabase) -> Value {
    let verify = match B::SERVER.name {
        "mysql" => "verify_identity",
        _ => "verify-full",
    };
    let password_file = server.pki.path("password");
    if !password_file.exists() {
        crate::pki::put(server.pki.dir(), "password", provision::SECURED_PASSWORD);
    }
    serde_json::json!({
        "url": server.user_url(db),
        "ssl_mode": verify,
        "ca_file": server.pki.path("ca.pem"),
        "cert_file": server.pki.path("client.pem"),
        "key_file": server.pki.path("client.key"),
        "password_file": password_file,
    })
}

/// One test's database, and `B`'s store and registries (nodes) on it.
pub struct SqlFix<B: SqlBackend> {
    /// The database.
    pub db: SqlDatabase,
    dirs: NodeDirs,
    /// `fence_on_disconnect` of the fixture's registries.
    fenced: bool,
    /// Whether its registries are the monotonic leader's leased pool
    /// (`Descriptor::open_leader_registry`, `leaf_sql::SqlLeases`) rather than the workerId
    /// mode's.
    leased: bool,
    /// The settings every configuration of the fixture starts from (a secured server's user,
    /// URL and TLS files), before a case's own changes.
    secure: Option<Value>,
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

    /// A fixture on a new database of the secured server of `B`'s kind
    /// ([`provision::secured_sql`]): every configuration it makes connects as the project's
    /// user ([`provision::SECURED_USER`]), over TLS verifying the server's certificate and host
    /// name (`ca_file`), with the client certificate (`cert_file`, `key_file`) and the password
    /// read from a file (`password_file`).
    pub async fn secured() -> Self {
        let server = provision::secured_sql(B::SERVER)
            .await
            .unwrap_or_else(|e| panic!("no secured {} server for the tests: {e}", B::SERVER.name));
        Self::secured_on(server).await
    }

    /// As [`secured`](Self::secured), on `server` (one of the test's own).
    pub async fn secured_on(server: &provision::SecuredSql) -> Self {
        let db = server
            .database()
            .await
            .unwrap_or_else(|e| panic!("a database on the secured server: {e}"));
        SqlFix {
            secure: Some(secured_settings::<B>(server, &db)),
            ..Self::on(db)
        }
    }

    /// [`secured`](Self::secured), its registries with `fence_on_disconnect`.
    pub async fn secured_fenced() -> Self {
        SqlFix {
            fenced: true,
            ..Self::secured().await
        }
    }

    /// A fixture whose registries are the monotonic leader's leased pool
    /// ([`LEASE_TTL_MS`]), as `fence_on_disconnect` opens it.
    pub async fn leased() -> Self {
        Self::new().await.into_leased()
    }

    /// [`secured`](Self::secured), its registries the leased pool.
    pub async fn secured_leased() -> Self {
        Self::secured().await.into_leased()
    }

    fn into_leased(self) -> Self {
        SqlFix {
            fenced: true,
            leased: true,
            ..self
        }
    }

    /// A fixture on `db`.
    pub fn on(db: SqlDatabase) -> Self {
        SqlFix {
            db,
            dirs: NodeDirs::default(),
            fenced: false,
            leased: false,
            secure: None,
            store: OnceCell::new(),
            backend: PhantomData,
        }
    }

    /// The defaults on the fixture's database (with a secured fixture's settings), then
    /// `changes`.
    pub fn config(&self, changes: Value) -> Config<B> {
        match (&self.secure, changes) {
            (Some(Value::Object(secure)), Value::Object(changes)) => {
                let mut all = secure.clone();
                all.extend(changes);
                let url = all
                    .remove("url")
                    .and_then(|u| u.as_str().map(str::to_owned));
                config_of::<B>(url.as_deref().unwrap_or(&self.db.url), Value::Object(all))
            }
            (_, changes) => config_of::<B>(&self.db.url, changes),
        }
    }

    /// A registry on `dir` with the fixture's settings.
    pub fn registry_in(&self, dir: PathBuf) -> Arc<dyn WorkerIdRegistry> {
        if self.leased {
            let config = self.config(serde_json::json!({
                "fence_on_disconnect": true,
                "lease_ttl_ms": LEASE_TTL_MS,
            }));
            return SqlDescriptor::<B>::open_leader_registry(&config, &dir, "leaf")
                .expect("leased registry")
                .worker;
        }
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

    /// A store on `config`; panics if it does not start.
    pub async fn store_with(&self, config: &Config<B>) -> Arc<dyn SegmentStore> {
        store_of::<B>(config)
            .await
            .unwrap_or_else(|e| panic!("a store on {}: {e}", self.db.name))
    }

    /// The identity of node `i` of the fixture.
    pub fn identity_of(&self, i: u16) -> NodeIdentity {
        NodeIdentity::new("10.0.0.1", 8000 + i)
    }

    /// The path of a file of the shared secured server's certificates (`other-ca.pem`).
    pub fn secured_file(&self, name: &str) -> PathBuf {
        let server = self.secured_server();
        server.pki.path(name)
    }

    /// The URL a configuration of the fixture reaches its database at.
    pub fn config_url(&self) -> String {
        match &self.secure {
            Some(secure) => secure["url"].as_str().unwrap_or(&self.db.url).to_owned(),
            None => self.db.url.clone(),
        }
    }

    fn secured_server(&self) -> &'static provision::SecuredSql {
        assert!(self.secure.is_some(), "not a secured fixture");
        provision::secured_sql_started(B::SERVER).expect("the secured server is started")
    }

    /// Sets the password of the secured server's project user (as its administrator).
    pub async fn set_user_password(&self, password: &str) {
        let user = provision::SECURED_USER;
        let sql = match B::SERVER.name {
            "mysql" => format!("ALTER USER '{user}'@'%' IDENTIFIED BY '{password}'"),
            _ => format!("ALTER ROLE {user} PASSWORD '{password}'"),
        };
        self.db.exec(&sql).await;
    }

    /// Ends every session of the secured server's project user (as its administrator).
    pub async fn end_user_sessions(&self) {
        let user = provision::SECURED_USER;
        match B::SERVER.name {
            "mysql" => {
                let mut session = self.db.session().await;
                loop {
                    let sql = format!(
                        "SELECT MIN(ID) FROM information_schema.PROCESSLIST WHERE USER = '{user}'"
                    );
                    let Some(id) = session.scalar(&sql).await else {
                        break;
                    };
                    session.exec(&format!("KILL CONNECTION {id}")).await;
                }
            }
            _ => {
                let sql = format!(
                    "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity \
                     WHERE usename = '{user}'"
                );
                self.db.scalar(&sql).await;
            }
        }
    }

    /// How many sessions the secured server's project user has open.
    pub async fn user_sessions(&self) -> i64 {
        let user = provision::SECURED_USER;
        let sql = match B::SERVER.name {
            "mysql" => {
                format!("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = '{user}'")
            }
            _ => format!("SELECT COUNT(*) FROM pg_stat_activity WHERE usename = '{user}'"),
        };
        self.db.scalar(&sql).await.unwrap_or(0)
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

/// A restore of `leaf_alloc`'s rows from an older copy, in SQL as a restored dump would write
/// them.
#[cfg(feature = "business")]
#[async_trait]
impl<B: SqlBackend> crate::period_cases::RestoreFixture for SqlFix<B> {
    async fn restore(&self, copy: &[leaf_core::TagRecord]) {
        for row in copy {
            let sql = format!(
                "UPDATE leaf_alloc SET max_id = {}, step = {} WHERE biz_tag = '{}'",
                row.max_id,
                row.step,
                row.tag.as_str().replace('\'', "''")
            );
            self.db.exec(&sql).await;
        }
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
