//! The stores `--store` can compare: what each needs, and its server, named or started here.

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::backends::{self, BackendRow, BenchStore, Server};

/// A store that segment mode can run on beside the embedded SQLite: a backend with a
/// [`BenchStore`].
#[derive(Clone, Copy)]
pub(super) struct Store(&'static BackendRow);

impl PartialEq for Store {
    fn eq(&self, other: &Self) -> bool {
        self.0.name == other.0.name
    }
}

impl Store {
    pub(super) fn parse(name: &str) -> Option<Store> {
        backends::find(name)
            .filter(|b| b.bench.is_some() && b.server.is_some())
            .map(Store)
    }

    /// The names `--store` takes, besides `sqlite`.
    pub(super) fn known() -> String {
        backends::names(|b| b.bench.is_some() && b.server.is_some(), ", ")
    }

    /// The cargo feature that builds the store into `leaf-server`, its `segment.store` value
    /// and its name in the table.
    pub(super) fn name(self) -> &'static str {
        self.0.name
    }

    fn server(self) -> &'static Server {
        self.0
            .server
            .as_ref()
            .expect("a store of the benchmark has a server")
    }

    fn bench(self) -> &'static BenchStore {
        self.0.bench.as_ref().expect("a store of the benchmark")
    }

    /// The server's settings beyond `segment.store` and `segment.url`.
    pub(super) fn server_env(self) -> &'static [(&'static str, &'static str)] {
        self.bench().server_env
    }
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
        let (server, bench) = (store.server(), store.bench());
        let url_var = server.url_var;
        if let Ok(url) = std::env::var(url_var)
            && !url.trim().is_empty()
        {
            (bench.check_url)(&url)?;
            return Ok(StoreServer {
                url,
                origin: url_var.into(),
                container: None,
            });
        }
        let image_var = server.image_var;
        let image = std::env::var(image_var)
            .ok()
            .filter(|i| !i.trim().is_empty())
            .unwrap_or_else(|| server.image.into());
        let (options, args) = (bench.container)();
        let out = Command::new("docker")
            .args(["run", "-d", "--rm", "-p"])
            .arg(format!("127.0.0.1::{}", server.spec.port))
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
                store.name(),
            );
        }
        let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
        // From here on, dropping the value removes the container.
        let mut provisioned = StoreServer {
            url: String::new(),
            origin: format!("container {} of {image}", &id[..id.len().min(12)]),
            container: Some(id.clone()),
        };
        let out = Command::new("docker")
            .args(["port", &id, &format!("{}/tcp", server.spec.port)])
            .output()?;
        let port = String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|l| l.trim().rsplit_once(':').map(|(_, p)| p.to_string()))
            .context("docker port gave no published port")?;
        let deadline = Instant::now() + Duration::from_secs(120);
        while !(bench.ready)(&id, &port) {
            if Instant::now() > deadline {
                bail!(
                    "{} was not ready within 120 s (in {})",
                    store.name(),
                    provisioned.origin
                );
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        provisioned.url = (bench.url)(&port);
        Ok(provisioned)
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
        for name in ["mysql", "postgres", "redis", "etcd"] {
            assert_eq!(Store::parse(name).map(Store::name), Some(name));
        }
        assert!(Store::parse("sqlite").is_none());
        assert!(Store::parse("zk").is_none());
        assert_eq!(Store::known(), "mysql, postgres, redis, etcd");
    }

    #[test]
    fn urls_of_running_servers() {
        let check = |store: &str, url: &str| (Store::parse(store).unwrap().bench().check_url)(url);
        assert!(check("mysql", "mysql://u:p@h:3306/leaf").is_ok());
        assert!(check("mysql", "mysql://u:p@h:3306").is_err());
        assert!(check("postgres", "postgres://u:p@h:5432/leaf").is_ok());
        assert!(check("postgres", "postgres://u:p@h:5432").is_err());
        assert!(check("postgres", "mysql://u:p@h:3306/leaf").is_err());
        assert!(check("redis", "redis://127.0.0.1:6379").is_ok());
        assert!(check("redis", "mysql://h:3306/x").is_err());
        assert!(check("etcd", "http://127.0.0.1:2379").is_ok());
        assert!(check("etcd", "https://127.0.0.1:2379").is_err());
    }

    #[test]
    fn passwords_are_hidden() {
        assert_eq!(redact("mysql://root:pw@h:1/db"), "mysql://root:***@h:1/db");
        assert_eq!(redact("redis://:pw@h:1"), "redis://:***@h:1");
        assert_eq!(redact("redis://h:1"), "redis://h:1");
    }
}
