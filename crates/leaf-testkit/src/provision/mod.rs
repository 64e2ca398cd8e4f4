//! Real servers for the tests: a ready endpoint per backend kind, from a container started
//! with testcontainers or from a server named by a `LEAFTEST_*_URL` variable.
//!
//! A [`ServerKind`] says how to run and reach one kind of server ([`MYSQL`], [`ZOOKEEPER`];
//! etcd is one more: an image, its variables, a readiness log line and a probe). This module
//! runs containers of any kind; each kind's module adds how a test isolates itself on it:
//!
//! - [`shared`]: the server of this test binary. With the kind's URL variable
//!   (`LEAFTEST_MYSQL_URL`, `LEAFTEST_ZK_URL`) set, that server; else one container of the image
//!   named by its image variable (`LEAFTEST_MYSQL_IMAGE`, `LEAFTEST_ZK_IMAGE`; default: the
//!   official image), started on first use and reused by every test of the process (a
//!   process-wide `tokio::sync::OnceCell`). Tests isolate themselves inside it: one database
//!   per test ([`mysql_database`], [`postgres_database`]), one ZooKeeper root per test
//!   ([`zk_namespace`]).
//! - [`dedicated`]: a container of one's own, on a fixed loopback port, that a fault test may
//!   stop and start again.
//! - [`zk_ensemble`]: three ZooKeeper containers on a Docker network of their own, each one
//!   a [`Dedicated`] that can be stopped and started.
//! - [`leaf_cluster`]: `leaf-server` containers ([`LEAF_SERVER`]) over a ZooKeeper ensemble
//!   or an etcd cluster on one network, for the tests of the server as an orchestrator runs it.
//! - [`REDIS`]: its containers take arguments (`appendonly yes`, `appendfsync always`), so its
//!   shared server is [`redis_shared`] (one key prefix per test: [`redis_namespace`]) and its
//!   own containers [`redis_dedicated`], which [`kill_server`] can also SIGKILL.
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
use testcontainers::core::wait::WaitFor;
use testcontainers::core::{ContainerPort, IntoContainerPort};
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt};
use tokio::sync::OnceCell;

mod dedicated;
mod etcd;
mod leaf_server;
mod mysql;
mod pgbouncer;
mod postgres;
mod reap;
mod redis;
mod secured_sql;
mod sql;
mod zookeeper;

pub(crate) use dedicated::Launch;
pub use dedicated::{Dedicated, dedicated, dedicated_with, dedicated_with_files};
pub use etcd::{
    ETCD, ETCD_CERTS, ETCD_SECURED, EtcdCluster, EtcdNamespace, etcd_cluster, etcd_namespace,
    etcd_namespace_on, etcd_secured,
};
pub use leaf_server::{Coordination, LEAF_SERVER, LeafCluster, get as http_get, leaf_cluster};
pub use mysql::{MYSQL, mysql_database, mysql_database_on};
pub use pgbouncer::{PGBOUNCER_VAR, PgBouncer, pgbouncer};
pub use postgres::{POSTGRES, postgres_database, postgres_database_on};
use reap::{network_name, reap_once};
pub use redis::{
    DURABLE_ARGS, REDIS, REDIS_ADMIN_PASSWORD, REDIS_ADMIN_USER, REDIS_SECURED, RedisNamespace,
    kill_server, redis_dedicated, redis_dedicated_with, redis_namespace, redis_namespace_on,
    redis_secured, redis_shared, redis_with_replica,
};
pub use secured_sql::{
    SECURED_PASSWORD, SECURED_USER, SecuredSql, secured_sql, secured_sql_own, secured_sql_started,
};
pub use sql::{MysqlDatabase, PostgresDatabase, SqlDatabase, SqlSession, with_database};
pub use zookeeper::{
    ZOOKEEPER, ZkEnsemble, ZkNamespace, zk_ensemble, zk_namespace, zk_namespace_on,
};

/// A new database, with a random name, on `server`, a SQL server of `kind` ([`MYSQL`] or
/// [`POSTGRES`]).
pub async fn sql_database_on(
    kind: &ServerKind,
    server: &Endpoint,
) -> Result<SqlDatabase, ProvisionError> {
    match kind.name {
        "mysql" => mysql_database_on(server).await,
        "postgres" => postgres_database_on(server).await,
        other => Err(ProvisionError(format!("{other} is not a SQL server"))),
    }
}

/// A TCP connection to the port of the endpoint's URL (`scheme://host:port[/...]`) opens: the
/// probe of a server that speaks TLS only, whose readiness line has been seen.
pub(crate) async fn tcp_probe(endpoint: Endpoint) -> Result<(), String> {
    let rest = endpoint
        .url
        .split_once("://")
        .map_or(endpoint.url.as_str(), |(_, rest)| rest);
    let addr = rest.split('/').next().unwrap_or(rest).to_owned();
    tokio::time::timeout(PROBE_IO_TIMEOUT, tokio::net::TcpStream::connect(addr))
        .await
        .map_err(|_| format!("no connection within {PROBE_IO_TIMEOUT:?}"))?
        .map(drop)
        .map_err(|e| e.to_string())
}

/// How long [`tcp_probe`] waits for a connection.
const PROBE_IO_TIMEOUT: Duration = Duration::from_secs(2);

/// Runs one statement on a fresh connection to the SQL server of `kind` at `server`.
pub(crate) async fn execute_on(
    kind: &ServerKind,
    server: &Endpoint,
    sql: &str,
) -> Result<(), String> {
    match kind.name {
        "mysql" => mysql::execute_sql(server.url.clone(), sql.to_owned()).await,
        "postgres" => postgres::execute_sql(server.url.clone(), sql.to_owned()).await,
        other => Err(format!("{other} is not a SQL server")),
    }
}

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
            let (container, endpoint) = on_runtime(start(kind, Launch::default()))
                .await
                .map_err(|e| e.0)?;
            Ok(Shared {
                endpoint,
                _container: Some(container),
            })
        })
        .await;
    match r {
        Ok(s) => Ok(s.endpoint.clone()),
        Err(e) => Err(unprovisioned(kind, e)),
    }
}

/// Why no server of `kind` could be had, with what to set.
fn unprovisioned(kind: &ServerKind, why: &str) -> ProvisionError {
    ProvisionError(format!(
        "{why}\n(set {}, or {} to an image Docker has)",
        kind.url_var, kind.image_var
    ))
}

/// testcontainers' Docker client.
async fn docker() -> Result<testcontainers::bollard::Docker, ProvisionError> {
    testcontainers::core::client::docker_client_instance()
        .await
        .map_err(|e| ProvisionError(format!("docker: {e}")))
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

/// Starts a container of `kind` as `launch` says and waits until it answers.
async fn start(
    kind: &'static ServerKind,
    launch: Launch,
) -> Result<(ContainerAsync<GenericImage>, Endpoint), ProvisionError> {
    let (container, endpoint) = launch_container(kind, launch).await?;
    let image = image_of(kind);
    probe_until_ready(kind, &endpoint, PROBE_TIMEOUT)
        .await
        .map_err(|e| ProvisionError(format!("{} in {image} does not answer: {e}", kind.name)))?;
    Ok((container, endpoint))
}

/// Starts a container of `kind`, its server published on `127.0.0.1` (on `launch.host_port`,
/// else an ephemeral port), and waits for its readiness line only.
async fn launch_container(
    kind: &'static ServerKind,
    launch: Launch,
) -> Result<(ContainerAsync<GenericImage>, Endpoint), ProvisionError> {
    launch_container_cmd(kind, launch, Vec::new()).await
}

/// As [`launch_container`], with `cmd` as the container's command (the image's when empty).
async fn launch_container_cmd(
    kind: &'static ServerKind,
    launch: Launch,
    cmd: Vec<String>,
) -> Result<(ContainerAsync<GenericImage>, Endpoint), ProvisionError> {
    reap_once().await;
    let host_port = launch.host_port;
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
    for (k, v) in launch.env {
        request = request.with_env_var(k, v);
    }
    if !cmd.is_empty() {
        request = request.with_cmd(cmd);
    }
    if let Some(network) = launch.network {
        request = request.with_network(network);
    }
    if let Some(name) = launch.name {
        request = request.with_container_name(name);
    }
    for (path, mode, bytes) in launch.files {
        request = request.with_copy_to(
            testcontainers::CopyTargetOptions::new(path).with_mode(mode),
            bytes,
        );
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

/// The members of a cluster of `kind` (a ZooKeeper ensemble, an etcd cluster), on a Docker
/// network of their own: member `i` (from 0) is named `{network}-{short}{i + 1}` and gets the
/// variables `env(i, names, network)`. All are started before any is waited for (a member
/// cannot answer before a quorum runs), then each until it serves. Always containers, even with
/// the kind's URL variable set: a test that stops members must own them.
pub(crate) async fn launch_cluster(
    kind: &'static ServerKind,
    short: &str,
    size: usize,
    env: impl Fn(usize, &[String], &str) -> Vec<(String, String)>,
) -> Result<Cluster, ProvisionError> {
    let network = network_name();
    let names: Vec<String> = (1..=size)
        .map(|i| format!("{network}-{short}{i}"))
        .collect();
    let mut members = Vec::with_capacity(size);
    for (i, name) in names.iter().enumerate() {
        let launch = Launch {
            host_port: None,
            network: Some(network.clone()),
            name: Some(name.clone()),
            env: env(i, &names, &network),
            files: Vec::new(),
        };
        members.push(Dedicated::launch(kind, launch).await?);
    }
    for m in &members {
        m.wait_ready().await?;
    }
    Ok(Cluster {
        members,
        names,
        network,
    })
}

/// The members of a cluster, their names (their host names on their network) and the network.
pub(crate) struct Cluster {
    pub(crate) members: Vec<Dedicated>,
    pub(crate) names: Vec<String>,
    pub(crate) network: String,
}

/// Removes every member's container and waits until they are gone.
pub(crate) async fn remove_members(members: Vec<Dedicated>) -> Result<(), ProvisionError> {
    for m in members {
        m.remove().await?;
    }
    Ok(())
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
    fn endpoints_hide_the_password() {
        let e = Endpoint {
            url: "mysql://root:leaftest@127.0.0.1:3306".into(),
        };
        let shown = format!("{e:?}");
        assert!(!shown.contains("leaftest"), "{shown}");
        assert!(shown.contains("root:***@127.0.0.1:3306"), "{shown}");
    }
}
