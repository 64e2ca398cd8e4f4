//! Real servers for the tests: a ready endpoint per backend kind, from a container started
//! with testcontainers or from a server named by a `LEAFTEST_*_URL` variable.
//!
//! A [`ServerKind`] says how to run and reach one kind of server (MySQL now; ZooKeeper and etcd
//! are more `ServerKind`s: an image, its variables, a readiness log line and a probe):
//!
//! - [`shared`]: the server of this test binary. With `LEAFTEST_MYSQL_URL` (the kind's URL
//!   variable) set, that server; else one container of the image named by `LEAFTEST_MYSQL_IMAGE`
//!   (default: the official image), started on first use and reused by every test of the
//!   process (a process-wide `tokio::sync::OnceCell`). Tests isolate themselves inside it (one
//!   database per test: [`mysql_database`]).
//! - [`dedicated`]: a container of one's own, on a fixed loopback port, that a fault test may
//!   stop and start again.
//!
//! Nothing is ever skipped: a server that cannot be provisioned or reached fails the test with
//! a message saying what to set. Containers publish their port on `127.0.0.1` only. A shared
//! container outlives its tests (nothing drops a static); it carries the test process's id in
//! a label, and containers of processes that have ended are removed the next time a process of
//! this host starts one (and by `cargo xtask conformance`).

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use testcontainers::bollard::models::{HostConfig, PortBinding};
use testcontainers::bollard::query_parameters::{ListContainersOptions, RemoveContainerOptions};
use testcontainers::core::wait::WaitFor;
use testcontainers::core::{ContainerPort, IntoContainerPort};
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt};
use tokio::sync::OnceCell;

/// Label keys on every container started here.
const LABEL_PID: &str = "org.leaf-rs.testkit.pid";
const LABEL_HOST: &str = "org.leaf-rs.testkit.host";
const LABEL_KIND: &str = "org.leaf-rs.testkit.kind";

/// How long a container may take to log its readiness line.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(120);
/// How long the probe keeps trying after the readiness line (or after a restart).
const PROBE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the probe tries a server named by a URL variable, which should be running already.
const URL_PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// A readiness probe: succeeds once the server answers real requests.
pub type Probe = fn(Endpoint) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;

/// How to run and reach one kind of server.
pub struct ServerKind {
    /// The kind, for messages and labels (`mysql`).
    pub name: &'static str,
    /// The variable naming an already running server (`LEAFTEST_MYSQL_URL`).
    pub url_var: &'static str,
    /// The variable naming the container image (`LEAFTEST_MYSQL_IMAGE`).
    pub image_var: &'static str,
    /// The image when the variable is unset: the official one.
    pub default_image: &'static str,
    /// The server's port inside the container.
    pub port: u16,
    /// The container's environment.
    pub env: &'static [(&'static str, &'static str)],
    /// A line the server logs once it accepts clients.
    pub ready_log: &'static str,
    /// The endpoint URL of a container's server, from the host port it is published on.
    pub url: fn(port: u16) -> String,
    /// Succeeds once the server answers.
    pub probe: Probe,
    shared: OnceCell<Result<Shared, String>>,
}

impl fmt::Debug for ServerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerKind")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Where a server answers.
#[derive(Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The server's URL (`mysql://root:leaftest@127.0.0.1:32768`), credentials included.
    pub url: String,
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Test credentials only, but the habit of never printing a password holds here too.
        let shown = match (self.url.find("://"), self.url.rfind('@')) {
            (Some(s), Some(at)) if at > s => match self.url[s + 3..at].find(':') {
                Some(c) => format!("{}***{}", &self.url[..s + 3 + c + 1], &self.url[at..]),
                None => self.url.clone(),
            },
            _ => self.url.clone(),
        };
        f.debug_struct("Endpoint").field("url", &shown).finish()
    }
}

/// Why a server could not be provisioned; the message says what to set or run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProvisionError(pub String);

impl fmt::Display for ProvisionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ProvisionError {}

struct Shared {
    endpoint: Endpoint,
    // Held so that the container lives as long as the process.
    _container: Option<ContainerAsync<GenericImage>>,
}

/// The runtime every Docker call runs on: testcontainers' client (and the shared container)
/// outlive the runtime of the test that started them, which ends with that test.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("leaf-testkit-provision")
            .enable_all()
            .build()
            .expect("cannot build the provisioning runtime")
    })
}

async fn on_runtime<T: Send + 'static>(
    f: impl Future<Output = Result<T, ProvisionError>> + Send + 'static,
) -> Result<T, ProvisionError> {
    runtime()
        .spawn(f)
        .await
        .map_err(|e| ProvisionError(format!("provisioning task failed: {e}")))?
}

/// The image a kind's containers run: its variable, else its official image.
pub fn image_of(kind: &ServerKind) -> String {
    std::env::var(kind.image_var)
        .ok()
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| kind.default_image.to_string())
}

/// The server every test of this process shares (see the module docs).
pub async fn shared(kind: &'static ServerKind) -> Result<Endpoint, ProvisionError> {
    let r = kind
        .shared
        .get_or_init(|| async move {
            if let Some(url) = std::env::var(kind.url_var)
                .ok()
                .filter(|u| !u.trim().is_empty())
            {
                let endpoint = Endpoint { url };
                probe_until_ready(kind, &endpoint, URL_PROBE_TIMEOUT)
                    .await
                    .map_err(|e| {
                        format!(
                            "{}: the server named by {} does not answer: {e}",
                            kind.name, kind.url_var
                        )
                    })?;
                return Ok(Shared {
                    endpoint,
                    _container: None,
                });
            }
            let (container, endpoint) = on_runtime(start(kind, None)).await.map_err(|e| e.0)?;
            Ok(Shared {
                endpoint,
                _container: Some(container),
            })
        })
        .await;
    match r {
        Ok(s) => Ok(s.endpoint.clone()),
        Err(e) => Err(ProvisionError(e.clone())),
    }
}

/// A container of one's own, published on a fixed loopback port so that it keeps its address
/// across [`stop`](Dedicated::stop) and [`start`](Dedicated::start). Always a container, even
/// with the URL variable set: a test that stops a server must own it.
pub async fn dedicated(kind: &'static ServerKind) -> Result<Dedicated, ProvisionError> {
    let port = free_port()?;
    let (container, endpoint) = on_runtime(start(kind, Some(port))).await?;
    Ok(Dedicated {
        kind,
        endpoint,
        container: Some(container),
    })
}

/// A container owned by one test; removed by [`remove`](Dedicated::remove), or in the
/// background when dropped.
pub struct Dedicated {
    kind: &'static ServerKind,
    endpoint: Endpoint,
    container: Option<ContainerAsync<GenericImage>>,
}

impl fmt::Debug for Dedicated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dedicated")
            .field("kind", &self.kind.name)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl Dedicated {
    /// Where the server answers (the same before and after a restart).
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    fn container(&self) -> Result<&ContainerAsync<GenericImage>, ProvisionError> {
        self.container
            .as_ref()
            .ok_or_else(|| ProvisionError("the container was removed".into()))
    }

    /// Stops the server (SIGTERM, then SIGKILL after `grace`).
    pub async fn stop(&self, grace: Duration) -> Result<(), ProvisionError> {
        let id = self.container()?.id().to_string();
        let secs = i32::try_from(grace.as_secs()).unwrap_or(i32::MAX);
        on_runtime(async move {
            let docker = testcontainers::core::client::docker_client_instance()
                .await
                .map_err(|e| ProvisionError(format!("docker: {e}")))?;
            docker
                .stop_container(
                    &id,
                    Some(
                        testcontainers::bollard::query_parameters::StopContainerOptions {
                            t: Some(secs),
                            signal: None,
                        },
                    ),
                )
                .await
                .map_err(|e| ProvisionError(format!("cannot stop container {id}: {e}")))
        })
        .await
    }

    /// Starts the stopped server again and waits until it answers.
    pub async fn start(&self) -> Result<(), ProvisionError> {
        let id = self.container()?.id().to_string();
        on_runtime(async move {
            let docker = testcontainers::core::client::docker_client_instance()
                .await
                .map_err(|e| ProvisionError(format!("docker: {e}")))?;
            docker
                .start_container(&id, None)
                .await
                .map_err(|e| ProvisionError(format!("cannot start container {id}: {e}")))
        })
        .await?;
        probe_until_ready(self.kind, &self.endpoint, PROBE_TIMEOUT)
            .await
            .map_err(|e| ProvisionError(format!("{} did not come back: {e}", self.kind.name)))
    }

    /// Removes the container and waits until it is gone.
    pub async fn remove(mut self) -> Result<(), ProvisionError> {
        match self.container.take() {
            Some(c) => {
                on_runtime(async move {
                    c.rm()
                        .await
                        .map_err(|e| ProvisionError(format!("cannot remove the container: {e}")))
                })
                .await
            }
            None => Ok(()),
        }
    }
}

impl Drop for Dedicated {
    fn drop(&mut self) {
        if let Some(c) = self.container.take() {
            runtime().spawn(async move {
                let _ = c.rm().await;
            });
        }
    }
}

fn free_port() -> Result<u16, ProvisionError> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| ProvisionError(format!("no free loopback port: {e}")))
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}

/// Starts a container of `kind`, published on `127.0.0.1:{host_port}` (an ephemeral port when
/// `None`), and waits until it answers.
async fn start(
    kind: &'static ServerKind,
    host_port: Option<u16>,
) -> Result<(ContainerAsync<GenericImage>, Endpoint), ProvisionError> {
    reap_once().await;
    let image = image_of(kind);
    let (name, tag) = split_image(&image);
    let port: ContainerPort = kind.port.tcp();
    let binding = format!("{}/tcp", kind.port);
    let mut request = GenericImage::new(name, tag)
        .with_exposed_port(port)
        .with_wait_for(WaitFor::message_on_either_std(kind.ready_log))
        .with_startup_timeout(STARTUP_TIMEOUT)
        .with_label(LABEL_PID, std::process::id().to_string())
        .with_label(LABEL_HOST, hostname())
        .with_label(LABEL_KIND, kind.name)
        .with_host_config_modifier(move |hc: &mut HostConfig| {
            // Loopback only: a test database is never reachable from the network.
            hc.publish_all_ports = Some(false);
            hc.port_bindings = Some(HashMap::from([(
                binding.clone(),
                Some(vec![PortBinding {
                    host_ip: Some("127.0.0.1".into()),
                    host_port: Some(host_port.map(|p| p.to_string()).unwrap_or_default()),
                }]),
            )]));
        });
    for (k, v) in kind.env {
        request = request.with_env_var(*k, *v);
    }
    let container = request.start().await.map_err(|e| {
        let mut msg = format!("{}: cannot start a container of {image}: {e}", kind.name);
        let text = e.to_string();
        if text.contains("too new") {
            // Over tcp:// bollard sends versioned requests; over the unix socket it does not.
            msg.push_str(
                "\nthe Docker Engine at DOCKER_HOST is older than testcontainers' API 1.53: \
                 use the local unix socket (unset DOCKER_HOST) or a newer Engine",
            );
        } else if text.contains("pull") || text.contains("No such image") {
            msg.push_str(&format!(
                "\nno registry reachable? build the image locally with `cargo xtask testbed` \
                 and set {}=leaf-testbed/... as it prints",
                kind.image_var
            ));
        }
        msg.push_str(&format!(
            "\nor point the tests at a running server with {}",
            kind.url_var
        ));
        ProvisionError(msg)
    })?;
    let port = container
        .get_host_port_ipv4(port)
        .await
        .map_err(|e| ProvisionError(format!("{}: no published port: {e}", kind.name)))?;
    let endpoint = Endpoint {
        url: (kind.url)(port),
    };
    probe_until_ready(kind, &endpoint, PROBE_TIMEOUT)
        .await
        .map_err(|e| ProvisionError(format!("{} in {image} does not answer: {e}", kind.name)))?;
    Ok((container, endpoint))
}

fn split_image(image: &str) -> (String, String) {
    let slash = image.rfind('/').map_or(0, |i| i + 1);
    match image[slash..].rfind(':') {
        Some(c) => (
            image[..slash + c].to_string(),
            image[slash + c + 1..].to_string(),
        ),
        None => (image.to_string(), "latest".to_string()),
    }
}

async fn probe_until_ready(
    kind: &ServerKind,
    endpoint: &Endpoint,
    timeout: Duration,
) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    loop {
        match (kind.probe)(endpoint.clone()).await {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() >= deadline => {
                return Err(format!("no answer within {} s: {e}", timeout.as_secs()));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

/// Removes, once per process, the containers of this host's test processes that have ended.
async fn reap_once() {
    static REAPED: OnceCell<()> = OnceCell::const_new();
    REAPED
        .get_or_init(|| async {
            let Ok(docker) = testcontainers::core::client::docker_client_instance().await else {
                return;
            };
            let filters = HashMap::from([("label".to_string(), vec![LABEL_PID.to_string()])]);
            let Ok(list) = docker
                .list_containers(Some(ListContainersOptions {
                    all: true,
                    filters: Some(filters),
                    ..Default::default()
                }))
                .await
            else {
                return;
            };
            let host = hostname();
            for c in list {
                let labels = c.labels.unwrap_or_default();
                let owner_gone = labels.get(LABEL_HOST) == Some(&host)
                    && labels
                        .get(LABEL_PID)
                        .is_some_and(|pid| !std::path::Path::new("/proc").join(pid).exists());
                if let (true, Some(id)) = (owner_gone, c.id) {
                    let _ = docker
                        .remove_container(
                            &id,
                            Some(RemoveContainerOptions {
                                force: true,
                                v: true,
                                ..Default::default()
                            }),
                        )
                        .await;
                }
            }
        })
        .await;
}

/// MySQL: the official `mariadb` image (or `LEAFTEST_MYSQL_IMAGE`, e.g. the local
/// `leaf-testbed/mariadb:local`), or the server of `LEAFTEST_MYSQL_URL`.
pub static MYSQL: ServerKind = ServerKind {
    name: "mysql",
    url_var: "LEAFTEST_MYSQL_URL",
    image_var: "LEAFTEST_MYSQL_IMAGE",
    default_image: "mariadb:11",
    port: 3306,
    env: &[("MARIADB_ROOT_PASSWORD", MYSQL_PASSWORD)],
    // The official image logs "port: 0" for its initialisation server first.
    ready_log: "port: 3306",
    url: |port| format!("mysql://root:{MYSQL_PASSWORD}@127.0.0.1:{port}"),
    probe: |endpoint| Box::pin(mysql_probe(endpoint)),
    shared: OnceCell::const_new(),
};

const MYSQL_PASSWORD: &str = "leaftest";

async fn mysql_probe(endpoint: Endpoint) -> Result<(), String> {
    use sqlx::Connection;
    let mut conn = sqlx::mysql::MySqlConnection::connect(&endpoint.url)
        .await
        .map_err(|e| e.to_string())?;
    sqlx::query("SELECT 1")
        .execute(&mut conn)
        .await
        .map_err(|e| e.to_string())?;
    conn.close().await.map_err(|e| e.to_string())
}

/// A database of one's own on a MySQL server, dropped (in the background) with this value.
pub struct MysqlDatabase {
    /// The database's name (`leaftest_...`).
    pub name: String,
    /// The URL of the database, credentials included.
    pub url: String,
    server: Endpoint,
}

impl fmt::Debug for MysqlDatabase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MysqlDatabase")
            .field("name", &self.name)
            .field("server", &self.server)
            .finish()
    }
}

/// A new database on the shared MySQL server.
pub async fn mysql_database() -> Result<MysqlDatabase, ProvisionError> {
    let server = shared(&MYSQL).await?;
    mysql_database_on(&server).await
}

/// A new database, with a random name, on the server at `server`.
pub async fn mysql_database_on(server: &Endpoint) -> Result<MysqlDatabase, ProvisionError> {
    use sqlx::Connection;
    let name = format!(
        "leaftest_{}_{:012x}",
        std::process::id(),
        fastrand::u64(..) >> 16
    );
    let mut conn = sqlx::mysql::MySqlConnection::connect(&server.url)
        .await
        .map_err(|e| ProvisionError(format!("mysql at {server:?}: {e}")))?;
    // The name is made above from digits and letters only.
    let ddl = format!("CREATE DATABASE `{name}` CHARACTER SET utf8mb4");
    sqlx::query(sqlx::AssertSqlSafe(ddl))
        .execute(&mut conn)
        .await
        .map_err(|e| ProvisionError(format!("mysql: cannot create database {name}: {e}")))?;
    conn.close().await.ok();
    Ok(MysqlDatabase {
        url: with_database(&server.url, &name),
        name,
        server: server.clone(),
    })
}

impl Drop for MysqlDatabase {
    fn drop(&mut self) {
        let (url, name) = (self.server.url.clone(), self.name.clone());
        runtime().spawn(async move {
            use sqlx::Connection;
            if let Ok(mut conn) = sqlx::mysql::MySqlConnection::connect(&url).await {
                let ddl = format!("DROP DATABASE IF EXISTS `{name}`");
                let _ = sqlx::query(sqlx::AssertSqlSafe(ddl))
                    .execute(&mut conn)
                    .await;
                let _ = conn.close().await;
            }
        });
    }
}

/// `url` with its path replaced by `/{database}` (the query string kept).
pub fn with_database(url: &str, database: &str) -> String {
    let (base, query) = match url.find('?') {
        Some(q) => (&url[..q], &url[q..]),
        None => (url, ""),
    };
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let base = match base[authority_start..].find('/') {
        Some(slash) => &base[..authority_start + slash],
        None => base,
    };
    format!("{base}/{database}{query}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_names_split_at_the_tag() {
        let check = |image: &str, name: &str, tag: &str| {
            assert_eq!(
                split_image(image),
                (name.to_string(), tag.to_string()),
                "{image}"
            );
        };
        check("mariadb:11", "mariadb", "11");
        check(
            "leaf-testbed/mariadb:local",
            "leaf-testbed/mariadb",
            "local",
        );
        check("registry:5000/mariadb", "registry:5000/mariadb", "latest");
        check(
            "registry:5000/x/mariadb:10.11",
            "registry:5000/x/mariadb",
            "10.11",
        );
    }

    #[test]
    fn database_urls() {
        let check = |url: &str, expect: &str| assert_eq!(with_database(url, "db1"), expect);
        check(
            "mysql://root:pw@127.0.0.1:3306",
            "mysql://root:pw@127.0.0.1:3306/db1",
        );
        check(
            "mysql://root:pw@127.0.0.1:3306/",
            "mysql://root:pw@127.0.0.1:3306/db1",
        );
        check(
            "mysql://u@h/leaf?ssl-mode=disabled",
            "mysql://u@h/db1?ssl-mode=disabled",
        );
    }

    #[test]
    fn endpoints_hide_the_password() {
        let e = Endpoint {
            url: "mysql://root:leaftest@127.0.0.1:3306".into(),
        };
        let shown = format!("{e:?}");
        assert!(!shown.contains("leaftest"), "{shown}");
        assert!(shown.contains("root:***@127.0.0.1:3306"), "{shown}");
    }
}
