//! The stores `--store` can compare: what each needs, and its server, named or started here.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// A store that segment mode can run on beside the embedded SQLite.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Store {
    Mysql,
    Postgres,
    Redis,
    Etcd,
}

/// What the benchmark needs to know of a store's server.
pub(super) struct Spec {
    /// The cargo feature that builds the store into `leaf-server`, its `segment.store` value
    /// and its name in the table.
    pub(super) name: &'static str,
    /// The variable naming a running server, as `leaf-testkit`'s provisioning reads it.
    url_var: &'static str,
    /// The variable naming the image of the container, and its default (the image
    /// `cargo xtask testbed` builds).
    image_var: &'static str,
    default_image: &'static str,
    /// The server's port in the container.
    port: u16,
}

impl Store {
    const ALL: [Store; 4] = [Store::Mysql, Store::Postgres, Store::Redis, Store::Etcd];

    pub(super) fn parse(name: &str) -> Option<Store> {
        Store::ALL.into_iter().find(|s| s.spec().name == name)
    }

    pub(super) fn spec(self) -> &'static Spec {
        match self {
            Store::Mysql => &Spec {
                name: "mysql",
                url_var: "LEAFTEST_MYSQL_URL",
                image_var: "LEAFTEST_MYSQL_IMAGE",
                default_image: "leaf-testbed/mariadb:local",
                port: 3306,
            },
            Store::Postgres => &Spec {
                name: "postgres",
                url_var: "LEAFTEST_POSTGRES_URL",
                image_var: "LEAFTEST_POSTGRES_IMAGE",
                default_image: "leaf-testbed/postgres:local",
                port: 5432,
            },
            Store::Redis => &Spec {
                name: "redis",
                url_var: "LEAFTEST_REDIS_URL",
                image_var: "LEAFTEST_REDIS_IMAGE",
                default_image: "leaf-testbed/redis:local",
                port: 6379,
            },
            Store::Etcd => &Spec {
                name: "etcd",
                url_var: "LEAFTEST_ETCD_URL",
                image_var: "LEAFTEST_ETCD_IMAGE",
                default_image: "leaf-testbed/etcd:local",
                port: 2379,
            },
        }
    }

    /// `docker run` options before the image, and the container's arguments after it.
    fn container_args(self) -> (Vec<String>, Vec<String>) {
        match self {
            Store::Mysql => (
                vec![
                    "-e".into(),
                    format!("MARIADB_ROOT_PASSWORD={BENCH_PASSWORD}"),
                ],
                vec![],
            ),
            // The official image's variables, which the testbed image reads too.
            Store::Postgres => (
                [
                    "-e".to_string(),
                    format!("POSTGRES_PASSWORD={BENCH_PASSWORD}"),
                    "-e".to_string(),
                    format!("POSTGRES_DB={BENCH_DATABASE}"),
                ]
                .to_vec(),
                vec![],
            ),
            // Every write fsynced before its answer, as the store's durability guard requires;
            // both the official and the testbed image pass these to `redis-server`.
            Store::Redis => (
                vec![],
                ["--appendonly", "yes", "--appendfsync", "always"]
                    .map(String::from)
                    .to_vec(),
            ),
            // Clients on every address of the container, advertised as the published loopback
            // port is reached (the testbed image's defaults, spelled out for the official one).
            Store::Etcd => (
                [
                    "-e",
                    "ETCD_LISTEN_CLIENT_URLS=http://0.0.0.0:2379",
                    "-e",
                    "ETCD_ADVERTISE_CLIENT_URLS=http://127.0.0.1:2379",
                ]
                .map(String::from)
                .to_vec(),
                vec![],
            ),
        }
    }

    /// Checks a URL given by the store's [`Spec::url_var`].
    fn check_url(self, url: &str) -> Result<()> {
        match self {
            // The SQL stores write into a database that must exist.
            Store::Mysql | Store::Postgres => {
                let spec = self.spec();
                let database = url
                    .split_once("://")
                    .filter(|(scheme, _)| scheme.starts_with(spec.name))
                    .and_then(|(_, rest)| rest.split_once('/'))
                    .map_or("", |(_, p)| p.split('?').next().unwrap_or(""));
                if database.is_empty() {
                    bail!(
                        "{} must name an existing database for the benchmark \
                         ({}://user:pass@host:{}/leafbench)",
                        spec.url_var,
                        spec.name,
                        spec.port
                    );
                }
            }
            Store::Redis => {
                if !url.starts_with("redis://") {
                    bail!("LEAFTEST_REDIS_URL must be a redis:// URL (redis://127.0.0.1:6379)");
                }
            }
            Store::Etcd => {
                if !url.starts_with("http://") {
                    bail!("LEAFTEST_ETCD_URL must be an http:// URL (http://127.0.0.1:2379)");
                }
            }
        }
        Ok(())
    }

    /// Waits until the server in container `id`, published on loopback `port`, serves; gives
    /// the store's URL.
    fn ready(self, id: &str, port: &str) -> Result<String> {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let ok = match self {
                // The database is made with the image's own client, which also tells when the
                // server accepts connections over TCP (the image's initialisation runs without
                // networking).
                Store::Mysql => Command::new("docker")
                    .args(["exec", id, "mariadb", "-h127.0.0.1", "-uroot"])
                    .arg(format!("-p{BENCH_PASSWORD}"))
                    .arg("-e")
                    .arg(format!("CREATE DATABASE IF NOT EXISTS {BENCH_DATABASE}"))
                    .output()
                    .is_ok_and(|o| o.status.success()),
                // Over TCP, as the store connects: the image's initialisation runs a server
                // without networking first.
                Store::Postgres => Command::new("docker")
                    .args(["exec", "-e"])
                    .arg(format!("PGPASSWORD={BENCH_PASSWORD}"))
                    .args([id, "psql", "-h", "127.0.0.1", "-U", "postgres", "-d"])
                    .args([BENCH_DATABASE, "-c", "SELECT 1"])
                    .output()
                    .is_ok_and(|o| o.status.success()),
                // `+PONG` once the server has loaded its data (`-LOADING` before).
                Store::Redis => redis_ping(port).is_ok(),
                // `{"health":"true"}` once the member has a leader.
                Store::Etcd => etcd_health(port).is_ok(),
            };
            if ok {
                break;
            }
            if Instant::now() > deadline {
                bail!("{} was not ready within 120 s", self.spec().name);
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        Ok(match self {
            Store::Mysql => {
                format!("mysql://root:{BENCH_PASSWORD}@127.0.0.1:{port}/{BENCH_DATABASE}")
            }
            Store::Postgres => {
                format!("postgres://postgres:{BENCH_PASSWORD}@127.0.0.1:{port}/{BENCH_DATABASE}")
            }
            Store::Redis => format!("redis://127.0.0.1:{port}"),
            Store::Etcd => format!("http://127.0.0.1:{port}"),
        })
    }

    /// The server's settings beyond `segment.store` and `segment.url`.
    pub(super) fn server_env(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Store::Mysql | Store::Postgres => &[],
            // Keys of their own on a server named by `LEAFTEST_REDIS_URL`.
            Store::Redis => &[("LEAF_SEGMENT__REDIS__KEY_PREFIX", BENCH_KEY_PREFIX)],
            // The etcd store keeps a leaf name's tags under `/{name}/`.
            Store::Etcd => &[("LEAF_NAME", BENCH_KEY_PREFIX)],
        }
    }
}

const BENCH_PASSWORD: &str = "leafbench";
const BENCH_DATABASE: &str = "leaf";
const BENCH_KEY_PREFIX: &str = "leafbench";

/// `PING` over a fresh connection to the loopback `port`: `+PONG` back or an error.
fn redis_ping(port: &str) -> Result<()> {
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.write_all(b"PING\r\n")?;
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf)?;
    let answer = String::from_utf8_lossy(&buf[..n]);
    if !answer.starts_with("+PONG") {
        bail!("PING: {}", answer.trim());
    }
    Ok(())
}

/// `GET /health` over a fresh connection to the loopback `port`: etcd's `"health":"true"` or an
/// error.
fn etcd_health(port: &str) -> Result<()> {
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut answer = String::new();
    s.read_to_string(&mut answer)?;
    if !answer.contains("\"health\":\"true\"") {
        bail!("/health: {}", answer.lines().last().unwrap_or("").trim());
    }
    Ok(())
}

/// The server of a store for the benchmark: named by the store's `LEAFTEST_*_URL`, or a
/// container of ours on a loopback port (removed when dropped).
pub(super) struct StoreServer {
    pub(super) url: String,
    pub(super) origin: String,
    container: Option<String>,
}

impl StoreServer {
    pub(super) fn provision(store: Store) -> Result<StoreServer> {
        let spec = store.spec();
        let url_var = spec.url_var;
        if let Ok(url) = std::env::var(url_var)
            && !url.trim().is_empty()
        {
            store.check_url(&url)?;
            return Ok(StoreServer {
                url,
                origin: url_var.into(),
                container: None,
            });
        }
        let image_var = spec.image_var;
        let image = std::env::var(image_var)
            .ok()
            .filter(|i| !i.trim().is_empty())
            .unwrap_or_else(|| spec.default_image.into());
        let (options, args) = store.container_args();
        let out = Command::new("docker")
            .args(["run", "-d", "--rm", "-p"])
            .arg(format!("127.0.0.1::{}", spec.port))
            .args(options)
            .args(["--label", "org.leaf-rs.bench=1"])
            .arg(&image)
            .args(args)
            .output()
            .with_context(|| format!("cannot run docker (or set {url_var})"))?;
        if !out.status.success() {
            bail!(
                "docker run {image} failed: {}\n(build it with `cargo xtask testbed {}`, or \
                 set {image_var} or {url_var})",
                String::from_utf8_lossy(&out.stderr).trim(),
                spec.name,
            );
        }
        let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
        // From here on, dropping the value removes the container.
        let mut server = StoreServer {
            url: String::new(),
            origin: format!("container {} of {image}", &id[..id.len().min(12)]),
            container: Some(id.clone()),
        };
        let out = Command::new("docker")
            .args(["port", &id, &format!("{}/tcp", spec.port)])
            .output()?;
        let port = String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|l| l.trim().rsplit_once(':').map(|(_, p)| p.to_string()))
            .context("docker port gave no published port")?;
        server.url = store
            .ready(&id, &port)
            .with_context(|| format!("in {}", server.origin))?;
        Ok(server)
    }
}

impl Drop for StoreServer {
    fn drop(&mut self) {
        if let Some(id) = self.container.take() {
            let _ = Command::new("docker")
                .args(["rm", "-f", "-v", &id])
                .output();
        }
    }
}

/// The URL with its password hidden, for messages.
pub(super) fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => match url[s + 3..at].find(':') {
            Some(c) => format!("{}***{}", &url[..s + 3 + c + 1], &url[at..]),
            None => url.to_string(),
        },
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stores_by_name() {
        for store in Store::ALL {
            assert_eq!(Store::parse(store.spec().name), Some(store));
        }
        assert_eq!(Store::parse("redis"), Some(Store::Redis));
        assert_eq!(Store::parse("sqlite"), None);
    }

    #[test]
    fn urls_of_running_servers() {
        assert!(Store::Mysql.check_url("mysql://u:p@h:3306/leaf").is_ok());
        assert!(Store::Mysql.check_url("mysql://u:p@h:3306").is_err());
        assert!(
            Store::Postgres
                .check_url("postgres://u:p@h:5432/leaf")
                .is_ok()
        );
        assert!(Store::Postgres.check_url("postgres://u:p@h:5432").is_err());
        assert!(
            Store::Postgres
                .check_url("mysql://u:p@h:3306/leaf")
                .is_err()
        );
        assert!(Store::Redis.check_url("redis://127.0.0.1:6379").is_ok());
        assert!(Store::Redis.check_url("mysql://h:3306/x").is_err());
        assert!(Store::Etcd.check_url("http://127.0.0.1:2379").is_ok());
        assert!(Store::Etcd.check_url("https://127.0.0.1:2379").is_err());
    }

    #[test]
    fn passwords_are_hidden() {
        assert_eq!(redact("mysql://root:pw@h:1/db"), "mysql://root:***@h:1/db");
        assert_eq!(redact("redis://:pw@h:1"), "redis://:***@h:1");
        assert_eq!(redact("redis://h:1"), "redis://h:1");
    }
}
