//! `cargo xtask bench-http`: the release `leaf-server` on its embedded default under `oha`, on
//! this machine: single-ID throughput and latency with 32 connections, p99.9 at a fixed rate of
//! half the maximum, `count=1000` batches, RSS idle and under load, and start-up to first ID.
//!
//! `cargo xtask bench-http --store mysql|redis|etcd`: segment mode on SQLite and on the chosen
//! store, one after the other in one session, with one binary built with the store's feature,
//! single IDs and `count=1000` batches each. The store's server is the one of its
//! `LEAFTEST_*_URL`, else a container of its `LEAFTEST_*_IMAGE` (default: the image
//! `cargo xtask testbed` builds) started here on a loopback port and removed at the end:
//!
//! - `mysql`: `LEAFTEST_MYSQL_URL` (a URL naming an existing database), else
//!   `LEAFTEST_MYSQL_IMAGE`, default `leaf-testbed/mariadb:local`.
//! - `redis`: `LEAFTEST_REDIS_URL` (`redis://host:port`, a server with `appendonly yes` and
//!   `appendfsync always`, as the store requires), else `LEAFTEST_REDIS_IMAGE`, default
//!   `leaf-testbed/redis:local`, started with those two settings. The server's keys go under
//!   the prefix `leafbench` (`segment.redis.key_prefix`) and stay there.
//!
//! `cargo xtask bench-http --snowflake-load [--server PATH]`: the segment route at a fixed rate,
//! alone and while two clients loop snowflake batches (`count=10000`), with the snowflake layout
//! 41 + 5 + 7 bits unless `LEAF_SNOWFLAKE__*_BITS` say otherwise: a generator that holds a
//! runtime thread while it waits for the next millisecond shows here as segment latency.
//! `--server` runs a binary built elsewhere (e.g. an older commit) instead of building one.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::Value;

const CONNECTIONS: u32 = 32;
const SEGMENT: &str = "/api/segment/get/leaf-segment-test";
const SNOWFLAKE: &str = "/api/snowflake/get/x";
const BATCH: &str = "/v1/segment/leaf-segment-test?count=1000";
const SNOWFLAKE_BATCH: &str = "/v1/snowflake?count=10000";
/// The fixed rate of the segment route in `--snowflake-load`: far below what it sustains, so
/// its latency shows waiting on the server, not saturation.
const PROBE_RATE: f64 = 500.0;
/// Connections of the segment probe and of the snowflake batch load.
const PROBE_CONNECTIONS: u32 = 8;
const LOAD_CONNECTIONS: u32 = 2;

struct Load {
    rps: f64,
    p50_ms: f64,
    p99_ms: f64,
    p999_ms: f64,
    non_200: u64,
}

/// `bench-http [SECONDS] [--store sqlite|mysql|redis|etcd] [--snowflake-load [--server PATH]]`.
pub(crate) fn run(root: &Path, args: &[String]) -> Result<()> {
    let mut seconds = 10;
    let mut store = "sqlite".to_string();
    let mut snowflake_load = false;
    let mut server: Option<PathBuf> = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--store" => {
                store = it
                    .next()
                    .context("--store needs sqlite, mysql, redis or etcd")?
                    .clone();
            }
            "--snowflake-load" => snowflake_load = true,
            "--server" => {
                server = Some(
                    it.next()
                        .context("--server needs the path of a leaf-server binary")?
                        .into(),
                );
            }
            other => match other.strip_prefix("--store=") {
                Some(s) => store = s.to_string(),
                None => {
                    seconds = other.parse().with_context(|| {
                        format!("bench-http takes a number of seconds: {other:?}")
                    })?;
                }
            },
        }
    }
    if Command::new("oha").arg("--version").output().is_err() {
        bail!("oha is not installed: cargo install oha --locked");
    }
    if snowflake_load {
        return under_snowflake_load(root, seconds, server);
    }
    if server.is_some() {
        bail!("--server goes with --snowflake-load");
    }
    if store == "sqlite" {
        return run_default(root, seconds);
    }
    match Store::parse(&store) {
        Some(other) => compare_stores(root, seconds, other),
        None => {
            bail!(
                "--store {store:?}: sqlite (the default run), mysql, redis or etcd (SQLite beside it)"
            )
        }
    }
}

fn run_default(root: &Path, seconds: u64) -> Result<()> {
    crate::cargo(
        root,
        "build leaf-server",
        &["build", "--release", "-p", "leaf-server"],
    )?;
    let binary = crate::bench::target_dir(root).join("release/leaf-server");
    let dir = std::env::temp_dir().join(format!("leaf-bench-http-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let addr = free_addr()?;

    let started = Instant::now();
    let mut server = Server(
        Command::new(&binary)
            .current_dir(&dir)
            .env("LEAF_SERVER__LISTEN", addr.to_string())
            .env("LEAF_LOG__LEVEL", "warn")
            .stdout(Stdio::null())
            .spawn()
            .with_context(|| format!("cannot start {}", binary.display()))?,
    );
    let first_id = loop {
        if get(addr, SEGMENT).is_ok_and(|(status, _)| status == 200) {
            break started.elapsed();
        }
        if started.elapsed() > Duration::from_secs(30) {
            bail!("leaf-server gave no ID within 30 s");
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    let pid = server.0.id();
    std::thread::sleep(Duration::from_secs(1));
    let rss_idle = rss_kib(pid)?;

    let peak = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, done) = (peak.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                if let Ok(kib) = rss_kib(pid) {
                    peak.fetch_max(kib, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };

    let url = |path: &str| format!("http://{addr}{path}");
    let segment = oha(&url(SEGMENT), seconds, None)?;
    let snowflake = oha(&url(SNOWFLAKE), seconds, None)?;
    let segment_fixed = oha(&url(SEGMENT), seconds, Some(segment.rps / 2.0))?;
    let snowflake_fixed = oha(&url(SNOWFLAKE), seconds, Some(snowflake.rps / 2.0))?;
    let batch = oha(&url(BATCH), seconds, None)?;
    done.store(true, Ordering::Relaxed);
    sampler.join().ok();
    server.stop();
    std::fs::remove_dir_all(&dir).ok();

    println!();
    println!("| what | req/s | p50 ms | p99 ms | p99.9 ms | non-200 |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (name, l) in [
        (
            format!("segment single ID, {CONNECTIONS} connections"),
            &segment,
        ),
        (
            format!("snowflake single ID, {CONNECTIONS} connections"),
            &snowflake,
        ),
        (
            format!("segment at {:.0} req/s (half)", segment.rps / 2.0),
            &segment_fixed,
        ),
        (
            format!("snowflake at {:.0} req/s (half)", snowflake.rps / 2.0),
            &snowflake_fixed,
        ),
        ("segment count=1000 batches".to_string(), &batch),
    ] {
        println!(
            "| {name} | {:.0} | {:.3} | {:.3} | {:.3} | {} |",
            l.rps, l.p50_ms, l.p99_ms, l.p999_ms, l.non_200
        );
    }
    println!();
    println!("- batch IDs/s: {:.0}", batch.rps * 1000.0);
    println!("- start to first segment ID: {} ms", first_id.as_millis());
    println!("- RSS idle: {:.1} MB", rss_idle as f64 / 1024.0);
    println!(
        "- RSS peak under load: {:.1} MB",
        peak.load(Ordering::Relaxed) as f64 / 1024.0
    );
    Ok(())
}

/// Segment mode on SQLite and then on `other`, same binary (built with `other`'s feature),
/// same load: single IDs and batches.
fn compare_stores(root: &Path, seconds: u64, other: Store) -> Result<()> {
    let feature = other.spec().name;
    crate::cargo(
        root,
        &format!("build leaf-server with {feature}"),
        &[
            "build",
            "--release",
            "-p",
            "leaf-server",
            "--features",
            feature,
        ],
    )?;
    let binary = crate::bench::target_dir(root).join("release/leaf-server");
    let backend = StoreServer::provision(other)?;
    eprintln!(
        "xtask: == {feature} at {} ({})",
        redact(&backend.url),
        backend.origin
    );
    let mut rows = Vec::new();
    for (store, url) in [("sqlite", None), (feature, Some(backend.url.as_str()))] {
        let (mut cmd, dir, addr) = server_command(&binary, store)?;
        cmd.env("LEAF_SNOWFLAKE__ENABLED", "false");
        if let Some(url) = url {
            cmd.env("LEAF_SEGMENT__STORE", feature)
                .env("LEAF_SEGMENT__URL", url)
                .envs(other.server_env().iter().copied());
        }
        let (mut server, first_id) = Server::start(
            &mut cmd,
            &format!("leaf-server on {store}"),
            addr,
            &[SEGMENT],
        )?;
        let url = |path: &str| format!("http://{addr}{path}");
        let single = oha(&url(SEGMENT), seconds, None)?;
        let batch = oha(&url(BATCH), seconds, None)?;
        let loads = get(addr, "/metrics")
            .ok()
            .and_then(|(_, body)| segment_loads(&body));
        server.stop();
        std::fs::remove_dir_all(&dir).ok();
        rows.push((store, single, batch, loads, first_id));
    }
    drop(backend);

    println!();
    println!(
        "| store | single ID req/s | p50 ms | p99 ms | p99.9 ms | count=1000 req/s | IDs/s | batch p99 ms | non-200 | segment loads | first ID ms |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (store, single, batch, loads, first_id) in &rows {
        println!(
            "| {store} | {:.0} | {:.3} | {:.3} | {:.3} | {:.0} | {:.0} | {:.3} | {} | {} | {} |",
            single.rps,
            single.p50_ms,
            single.p99_ms,
            single.p999_ms,
            batch.rps,
            batch.rps * 1000.0,
            batch.p99_ms,
            single.non_200 + batch.non_200,
            loads.map_or_else(|| "-".to_string(), |n| n.to_string()),
            first_id.as_millis(),
        );
    }
    println!();
    println!("- {CONNECTIONS} connections, {seconds} s per run, snowflake mode off");
    println!("- segment loads: allocations from the store during the run (the dynamic step grows");
    println!("  under load, so a store is asked less and less often)");
    Ok(())
}

/// The segment route at [`PROBE_RATE`], unloaded and then while [`LOAD_CONNECTIONS`] clients
/// loop snowflake batches.
fn under_snowflake_load(root: &Path, seconds: u64, server: Option<PathBuf>) -> Result<()> {
    let binary = match server {
        Some(path) => path,
        None => {
            crate::cargo(
                root,
                "build leaf-server",
                &["build", "--release", "-p", "leaf-server"],
            )?;
            crate::bench::target_dir(root).join("release/leaf-server")
        }
    };
    let (mut cmd, dir, addr) = server_command(&binary, "sfload")?;
    let mut layout = Vec::new();
    for (key, default) in [("TIMESTAMP", 41), ("WORKER", 5), ("SEQUENCE", 7)] {
        let var = format!("LEAF_SNOWFLAKE__{key}_BITS");
        match std::env::var(&var) {
            Ok(v) => layout.push(v),
            Err(_) => {
                cmd.env(&var, default.to_string());
                layout.push(default.to_string());
            }
        }
    }
    let (mut server, _) =
        Server::start(&mut cmd, "leaf-server", addr, &[SEGMENT, SNOWFLAKE_BATCH])?;
    let url = |path: &str| format!("http://{addr}{path}");
    let alone = oha_with(&url(SEGMENT), seconds, Some(PROBE_RATE), PROBE_CONNECTIONS)?;
    // The load starts first and ends last, so the whole probe runs under it.
    let load = {
        let url = url(SNOWFLAKE_BATCH);
        std::thread::spawn(move || oha_with(&url, seconds + 2, None, LOAD_CONNECTIONS))
    };
    std::thread::sleep(Duration::from_secs(1));
    let loaded = oha_with(&url(SEGMENT), seconds, Some(PROBE_RATE), PROBE_CONNECTIONS);
    let load = load
        .join()
        .map_err(|_| anyhow::anyhow!("the snowflake load thread panicked"))?;
    server.stop();
    std::fs::remove_dir_all(&dir).ok();
    let (loaded, load) = (loaded?, load?);

    println!();
    println!("| segment route at {PROBE_RATE:.0} req/s | p50 ms | p99 ms | p99.9 ms | non-200 |");
    println!("|---|---:|---:|---:|---:|");
    for (name, l) in [
        ("alone".to_string(), &alone),
        (
            format!("while {LOAD_CONNECTIONS} clients loop snowflake count=10000"),
            &loaded,
        ),
    ] {
        println!(
            "| {name} | {:.3} | {:.3} | {:.3} | {} |",
            l.p50_ms, l.p99_ms, l.p999_ms, l.non_200
        );
    }
    println!();
    println!(
        "- snowflake layout {} bits; the batch load: {:.0} req/s, {:.0} IDs/s, p99 {:.3} ms, {} non-200",
        layout.join(" + "),
        load.rps,
        load.rps * 10_000.0,
        load.p99_ms,
        load.non_200
    );
    println!("- {PROBE_CONNECTIONS} probe connections, {seconds} s per run");
    Ok(())
}

/// `leaf_segment_loads_total{tag="leaf-segment-test",result="ok"}` from the metrics page.
fn segment_loads(metrics: &str) -> Option<u64> {
    metrics.lines().find_map(|l| {
        l.strip_prefix("leaf_segment_loads_total{tag=\"leaf-segment-test\",result=\"ok\"} ")
            .and_then(|v| v.trim().parse::<f64>().ok())
            .map(|v| v as u64)
    })
}

/// The URL with its password hidden, for messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => match url[s + 3..at].find(':') {
            Some(c) => format!("{}***{}", &url[..s + 3 + c + 1], &url[at..]),
            None => url.to_string(),
        },
        _ => url.to_string(),
    }
}

/// A store that segment mode can run on beside the embedded SQLite.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Store {
    Mysql,
    Redis,
    Etcd,
}

/// What the benchmark needs to know of a store's server.
struct Spec {
    /// The cargo feature that builds the store into `leaf-server`, its `segment.store` value
    /// and its name in the table.
    name: &'static str,
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
    const ALL: [Store; 3] = [Store::Mysql, Store::Redis, Store::Etcd];

    fn parse(name: &str) -> Option<Store> {
        Store::ALL.into_iter().find(|s| s.spec().name == name)
    }

    fn spec(self) -> &'static Spec {
        match self {
            Store::Mysql => &Spec {
                name: "mysql",
                url_var: "LEAFTEST_MYSQL_URL",
                image_var: "LEAFTEST_MYSQL_IMAGE",
                default_image: "leaf-testbed/mariadb:local",
                port: 3306,
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
            Store::Mysql => {
                let path = url
                    .split_once("://")
                    .and_then(|(_, rest)| rest.split_once('/'))
                    .map(|(_, p)| p.split('?').next().unwrap_or(""))
                    .unwrap_or("");
                if path.is_empty() {
                    bail!(
                        "LEAFTEST_MYSQL_URL must name an existing database for the benchmark \
                         (mysql://user:pass@host:3306/leafbench)"
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
            Store::Redis => format!("redis://127.0.0.1:{port}"),
            Store::Etcd => format!("http://127.0.0.1:{port}"),
        })
    }

    /// The server's settings beyond `segment.store` and `segment.url`.
    fn server_env(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Store::Mysql => &[],
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
struct StoreServer {
    url: String,
    origin: String,
    container: Option<String>,
}

impl StoreServer {
    fn provision(store: Store) -> Result<StoreServer> {
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

/// The command that runs `binary` in a fresh temporary directory (named after `run`) on a free
/// loopback address, logging warnings only.
fn server_command(binary: &Path, run: &str) -> Result<(Command, PathBuf, SocketAddr)> {
    let dir = std::env::temp_dir().join(format!("leaf-bench-http-{run}-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let addr = free_addr()?;
    let mut cmd = Command::new(binary);
    cmd.current_dir(&dir)
        .env("LEAF_SERVER__LISTEN", addr.to_string())
        .env("LEAF_LOG__LEVEL", "warn")
        .stdout(Stdio::null());
    Ok((cmd, dir, addr))
}

/// Kills the server if the run fails half-way.
struct Server(Child);

impl Server {
    /// Starts `cmd` and waits until every path of `ready` answers 200; also gives how long
    /// that took.
    fn start(
        cmd: &mut Command,
        what: &str,
        addr: SocketAddr,
        ready: &[&str],
    ) -> Result<(Server, Duration)> {
        let started = Instant::now();
        let mut server = Server(
            cmd.spawn()
                .with_context(|| format!("cannot start {what}"))?,
        );
        while !ready
            .iter()
            .all(|path| get(addr, path).is_ok_and(|(status, _)| status == 200))
        {
            if let Some(status) = server.0.try_wait()? {
                bail!("{what} exited: {status}");
            }
            if started.elapsed() > Duration::from_secs(30) {
                bail!("{what} gave no ID within 30 s");
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok((server, started.elapsed()))
    }

    fn stop(&mut self) {
        // SIGTERM lets it write its final mark; the temporary directory goes anyway.
        let _ = Command::new("kill").arg(self.0.id().to_string()).status();
        let _ = self.0.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn oha(url: &str, seconds: u64, rate: Option<f64>) -> Result<Load> {
    oha_with(url, seconds, rate, CONNECTIONS)
}

fn oha_with(url: &str, seconds: u64, rate: Option<f64>, connections: u32) -> Result<Load> {
    let mut cmd = Command::new("oha");
    cmd.args(["--no-tui", "--output-format", "json", "-c"])
        .arg(connections.to_string())
        .arg("-z")
        .arg(format!("{seconds}s"));
    if let Some(q) = rate {
        cmd.arg("-q")
            .arg(format!("{:.0}", q.max(1.0)))
            .arg("--latency-correction");
    }
    eprintln!(
        "xtask: == oha {url}{}",
        rate.map(|q| format!(" at {q:.0} req/s"))
            .unwrap_or_default()
    );
    let out = cmd.arg(url).output().context("cannot run oha")?;
    if !out.status.success() {
        bail!("oha failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let v: Value = serde_json::from_slice(&out.stdout).context("cannot parse oha's json")?;
    let pct = |key: &str| v["latencyPercentiles"][key].as_f64().unwrap_or(f64::NAN) * 1000.0;
    let non_200 = v["statusCodeDistribution"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(code, _)| code.as_str() != "200")
                .filter_map(|(_, n)| n.as_u64())
                .sum()
        })
        .unwrap_or(0)
        // The requests in flight when `-z` runs out are cut by oha itself, not failed.
        + v["errorDistribution"]
            .as_object()
            .map(|m| {
                m.iter()
                    .filter(|(what, _)| !what.contains("deadline"))
                    .filter_map(|(_, n)| n.as_u64())
                    .sum()
            })
            .unwrap_or(0);
    Ok(Load {
        rps: v["summary"]["requestsPerSec"].as_f64().unwrap_or(0.0),
        p50_ms: pct("p50"),
        p99_ms: pct("p99"),
        p999_ms: pct("p99.9"),
        non_200,
    })
}

fn free_addr() -> Result<SocketAddr> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// One HTTP/1.1 GET with `Connection: close`: (status, body).
fn get(addr: SocketAddr, path: &str) -> Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(200))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .context("no status line")?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

fn rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .context("no VmRSS")
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
