//! Every backend the commands know, one row each: the test runs on its servers (`conformance`,
//! `ci`), its server (the `LEAFTEST_*` variables, the testbed image), its allocation benchmark
//! (`bench --stores`) and how `bench-http --store` runs it. Adding a backend is one row here and
//! its image spec in `testbed/images.rs`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

use anyhow::{Result, bail};

use crate::testbed::images::{ETCD, ImageSpec, MARIADB, POSTGRES, REDIS, ZOOKEEPER};
use crate::vars;

/// One backend.
pub(crate) struct BackendRow {
    /// Its name: `--backend`, `--stores`, `--store`, `cargo xtask testbed NAME`.
    pub(crate) name: &'static str,
    /// The test runs on its servers, each a crate with features and a test target: the backend
    /// crate's tests (the conformance suite and its own), and the server's or client's tests on
    /// the same server. `ci` builds them all at once with every feature and runs each crate's,
    /// or each named target's, executables as this backend's group; a whole crate with features
    /// (leaf-server) runs once, in a group of its own, on every backend (`testbins.rs`).
    pub(crate) runs: &'static [Run],
    /// Its server, if it has one.
    pub(crate) server: Option<Server>,
    /// The crate whose `benches/allocate.rs` measures its store, if it has one.
    pub(crate) alloc_bench: Option<&'static str>,
    /// How `bench-http --store` runs leaf-server on it, if it is a store the benchmark takes.
    pub(crate) bench: Option<BenchStore>,
}

/// One `cargo test` run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Run {
    /// The crate.
    pub(crate) package: &'static str,
    /// Cargo features the run needs (`leaf-server` has a backend only with its feature).
    pub(crate) features: Option<&'static str>,
    /// One test target (`--test NAME`) rather than all of them.
    pub(crate) test: Option<&'static str>,
}

/// A backend's server for the tests.
pub(crate) struct Server {
    /// The variable naming an already running server (`leaf-testkit`'s provisioning).
    pub(crate) url_var: &'static str,
    /// The variable naming the image of its containers.
    pub(crate) image_var: &'static str,
    /// The image `cargo xtask testbed` builds (`repository:tag`), the default of the runs.
    pub(crate) image: &'static str,
    /// How that image is built.
    pub(crate) spec: &'static ImageSpec,
}

/// What `bench-http --store` needs of a store's server.
pub(crate) struct BenchStore {
    /// `docker run` options before the image, and the container's arguments after it.
    pub(crate) container: fn() -> (Vec<String>, Vec<String>),
    /// Checks a URL the caller gave in the server's `url_var`.
    pub(crate) check_url: fn(&str) -> Result<()>,
    /// Whether the server in container `id`, published on loopback `port`, serves (making
    /// what the benchmark needs in it).
    pub(crate) ready: fn(id: &str, port: &str) -> bool,
    /// The store's URL on loopback `port`.
    pub(crate) url: fn(port: &str) -> String,
    /// leaf-server's settings beyond `segment.store` and `segment.url`.
    pub(crate) server_env: &'static [(&'static str, &'static str)],
}

const fn run(package: &'static str) -> Run {
    Run {
        package,
        features: None,
        test: None,
    }
}

const fn with(package: &'static str, features: &'static str) -> Run {
    Run {
        package,
        features: Some(features),
        test: None,
    }
}

/// Every backend.
pub(crate) const BACKENDS: &[BackendRow] = &[
    BackendRow {
        name: "sqlite",
        runs: &[run("leaf-registry-local")],
        server: None,
        alloc_bench: Some("leaf-registry-local"),
        bench: None,
    },
    BackendRow {
        name: "local",
        runs: &[run("leaf-registry-local")],
        server: None,
        alloc_bench: None,
        bench: None,
    },
    BackendRow {
        name: "mysql",
        runs: &[
            run("leaf-registry-mysql"),
            // The server on the same MySQL: the router, two processes sharing one table and
            // one worker-id table, an unreachable server at start-up.
            with("leaf-server", "mysql"),
            // leaf-client's black-box scenarios on it: clients and servers sharing one
            // `leaf_alloc`, a server killed mid-run, every server down.
            Run {
                package: "leaf-client",
                features: Some("_mysql-tests"),
                test: Some("mariadb"),
            },
        ],
        server: Some(Server {
            url_var: vars::MYSQL_URL,
            image_var: vars::MYSQL_IMAGE,
            image: "leaf-testbed/mariadb:local",
            spec: &MARIADB,
        }),
        alloc_bench: Some("leaf-registry-mysql"),
        bench: Some(BenchStore {
            container: || {
                (
                    env_args(&[("MARIADB_ROOT_PASSWORD", BENCH_PASSWORD)]),
                    vec![],
                )
            },
            check_url: |url| sql_url(url, "mysql", 3306, vars::MYSQL_URL),
            // The database is made with the image's own client, which also tells when the
            // server accepts connections over TCP (the initialisation runs without networking).
            ready: |id, _| {
                let create = format!("CREATE DATABASE IF NOT EXISTS {BENCH_DATABASE}");
                let args = [
                    "mariadb",
                    "-h127.0.0.1",
                    "-uroot",
                    &format!("-p{BENCH_PASSWORD}"),
                ];
                let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
                docker_exec(&[], id, &[args, vec!["-e".into(), create]].concat())
            },
            url: |port| format!("mysql://root:{BENCH_PASSWORD}@127.0.0.1:{port}/{BENCH_DATABASE}"),
            server_env: &[],
        }),
    },
    BackendRow {
        name: "postgres",
        runs: &[
            run("leaf-registry-postgres"),
            // The server on the same PostgreSQL: two processes sharing one table and one
            // worker-id table, one identity refused, a crash, the server stopped.
            with("leaf-server", "postgres"),
        ],
        server: Some(Server {
            url_var: vars::POSTGRES_URL,
            image_var: vars::POSTGRES_IMAGE,
            image: "leaf-testbed/postgres:local",
            spec: &POSTGRES,
        }),
        alloc_bench: Some("leaf-registry-postgres"),
        bench: Some(BenchStore {
            // The official image's variables, which the testbed image reads too.
            container: || {
                let vars = [
                    ("POSTGRES_PASSWORD", BENCH_PASSWORD),
                    ("POSTGRES_DB", BENCH_DATABASE),
                ];
                (env_args(&vars), vec![])
            },
            check_url: |url| sql_url(url, "postgres", 5432, vars::POSTGRES_URL),
            // Over TCP, as the store connects: the image's initialisation runs a server
            // without networking first.
            ready: |id, _| {
                let password = env_args(&[("PGPASSWORD", BENCH_PASSWORD)]);
                let psql = [
                    "psql",
                    "-h",
                    "127.0.0.1",
                    "-U",
                    "postgres",
                    "-d",
                    BENCH_DATABASE,
                ];
                let args: Vec<String> = psql
                    .iter()
                    .chain(&["-c", "SELECT 1"])
                    .map(|a| a.to_string())
                    .collect();
                docker_exec(&password, id, &args)
            },
            url: |port| {
                format!("postgres://postgres:{BENCH_PASSWORD}@127.0.0.1:{port}/{BENCH_DATABASE}")
            },
            server_env: &[],
        }),
    },
    BackendRow {
        name: "zk",
        runs: &[
            // The ZooKeeper provisioning itself (shared server, dedicated server, ensemble).
            Run {
                package: "leaf-testkit",
                features: Some("provision"),
                test: Some("provision_zk"),
            },
            run("leaf-registry-zk"),
            // The server in both ZooKeeper modes.
            with("leaf-server", "zk-normal,zk-recycle"),
        ],
        server: Some(Server {
            url_var: vars::ZK_URL,
            image_var: vars::ZK_IMAGE,
            image: "leaf-testbed/zookeeper:local",
            spec: &ZOOKEEPER,
        }),
        alloc_bench: None,
        bench: None,
    },
    BackendRow {
        name: "redis",
        runs: &[
            run("leaf-registry-redis"),
            // The server with both modes on Redis.
            with("leaf-server", "redis"),
        ],
        server: Some(Server {
            url_var: vars::REDIS_URL,
            image_var: vars::REDIS_IMAGE,
            image: "leaf-testbed/redis:local",
            spec: &REDIS,
        }),
        alloc_bench: Some("leaf-registry-redis"),
        bench: Some(BenchStore {
            // Every write fsynced before its answer, as the store's durability guard requires;
            // both the official and the testbed image pass these to `redis-server`.
            container: || {
                let args = ["--appendonly", "yes", "--appendfsync", "always"];
                (vec![], args.map(String::from).to_vec())
            },
            check_url: |url| scheme(url, "redis://", vars::REDIS_URL, "redis://127.0.0.1:6379"),
            // `+PONG` once the server has loaded its data (`-LOADING` before).
            ready: |_, port| redis_ping(port).is_ok(),
            url: |port| format!("redis://127.0.0.1:{port}"),
            // Keys of their own on a server named by `LEAFTEST_REDIS_URL`.
            server_env: &[("LEAF_SEGMENT__REDIS__KEY_PREFIX", BENCH_KEY_PREFIX)],
        }),
    },
    BackendRow {
        name: "etcd",
        runs: &[
            run("leaf-registry-etcd"),
            // The server with both modes on etcd.
            with("leaf-server", "etcd"),
        ],
        server: Some(Server {
            url_var: vars::ETCD_URL,
            image_var: vars::ETCD_IMAGE,
            image: "leaf-testbed/etcd:local",
            spec: &ETCD,
        }),
        alloc_bench: Some("leaf-registry-etcd"),
        bench: Some(BenchStore {
            // Clients on every address of the container, advertised as the published loopback
            // port is reached (the testbed image's defaults, spelled out for the official one).
            container: || {
                let vars = [
                    ("ETCD_LISTEN_CLIENT_URLS", "http://0.0.0.0:2379"),
                    ("ETCD_ADVERTISE_CLIENT_URLS", "http://127.0.0.1:2379"),
                ];
                (env_args(&vars), vec![])
            },
            check_url: |url| scheme(url, "http://", vars::ETCD_URL, "http://127.0.0.1:2379"),
            // `{"health":"true"}` once the member has a leader.
            ready: |_, port| etcd_health(port).is_ok(),
            url: |port| format!("http://127.0.0.1:{port}"),
            // The etcd store keeps a leaf name's tags under `/{name}/`.
            server_env: &[("LEAF_NAME", BENCH_KEY_PREFIX)],
        }),
    },
];

/// leaf-server containers of the image over a ZooKeeper ensemble and an etcd cluster: killed,
/// paused, a member stopped (`cargo xtask conformance --backend cluster`).
pub(crate) const CLUSTER: Run = Run {
    package: "leaf-testkit",
    features: Some("cluster"),
    test: Some("cluster"),
};

/// The backends whose containers the cluster test runs beside the server's image.
pub(crate) const CLUSTER_NEEDS: &[&str] = &["zk", "etcd"];

/// The variable naming the leaf-server image of the cluster test.
pub(crate) const SERVER_IMAGE_VAR: &str = vars::SERVER_IMAGE;

/// The backend named `name`.
pub(crate) fn find(name: &str) -> Option<&'static BackendRow> {
    BACKENDS.iter().find(|b| b.name == name)
}

/// The names of the backends that `has` picks, joined by `sep`.
pub(crate) fn names(has: impl Fn(&BackendRow) -> bool, sep: &str) -> String {
    let names: Vec<&str> = BACKENDS.iter().filter(|b| has(b)).map(|b| b.name).collect();
    names.join(sep)
}

const BENCH_PASSWORD: &str = "leafbench";
const BENCH_DATABASE: &str = "leaf";
const BENCH_KEY_PREFIX: &str = "leafbench";

/// `-e NAME=VALUE` for each of `vars`.
fn env_args(vars: &[(&str, &str)]) -> Vec<String> {
    vars.iter()
        .flat_map(|(k, v)| ["-e".to_string(), format!("{k}={v}")])
        .collect()
}

/// Whether `docker exec OPTIONS id ARGS...` succeeds.
fn docker_exec(options: &[String], id: &str, args: &[String]) -> bool {
    Command::new("docker")
        .arg("exec")
        .args(options)
        .arg(id)
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A SQL store's URL must name an existing database.
fn sql_url(url: &str, scheme: &str, port: u16, var: &str) -> Result<()> {
    let database = url
        .split_once("://")
        .filter(|(s, _)| s.starts_with(scheme))
        .and_then(|(_, rest)| rest.split_once('/'))
        .map_or("", |(_, p)| p.split('?').next().unwrap_or(""));
    if database.is_empty() {
        bail!(
            "{var} must name an existing database for the benchmark \
             ({scheme}://user:pass@host:{port}/leafbench)"
        );
    }
    Ok(())
}

/// A URL of `var` must start with `prefix`.
fn scheme(url: &str, prefix: &str, var: &str, example: &str) -> Result<()> {
    if !url.starts_with(prefix) {
        bail!("{var} must be a {prefix} URL ({example})");
    }
    Ok(())
}

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
