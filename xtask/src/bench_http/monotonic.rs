//! `--monotonic`: monotonic IDs beside snowflake IDs in one session, driven by `leaf-loadgen`
//! with the same connections (one request in flight on each). Three release servers with the
//! `redis` feature share one Redis (`LEAFTEST_REDIS_URL`, else a container of the testbed
//! image, as `--store redis` provisions it), `snowflake.mode = "redis"`: the first started
//! leads; the second follows with coalescing, the third with `monotonic.coalesce = false`.
//! Single IDs and `count=1000` batches on the leader's node, through each follower, and
//! snowflake IDs on the leader's node as the baseline; then the followers' metrics: requests
//! per call to the leader.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::CONNECTIONS;
use super::grpc::{Run, loadgen, print_runs};
use super::server::{Server, get, server_command};
use super::store::{Store, StoreServer};

/// One node of the session: its process, directory and address.
struct Node {
    server: Server,
    dir: PathBuf,
    addr: SocketAddr,
}

fn node(bin: &Path, name: &str, redis: &str, extra: &[(&str, &str)]) -> Result<Node> {
    let (mut cmd, dir, addr) = server_command(bin, name)?;
    cmd.env("LEAF_SNOWFLAKE__MODE", "redis")
        .env("LEAF_SNOWFLAKE__IP", "127.0.0.1")
        .env("LEAF_SNOWFLAKE__REDIS__URL", redis)
        .env(
            "LEAF_SNOWFLAKE__REDIS__KEY_PREFIX",
            format!("leafbench{}", std::process::id()),
        )
        .envs(extra.iter().copied());
    let (server, _) = Server::start(&mut cmd, name, addr, &["/v1/monotonic"])?;
    Ok(Node { server, dir, addr })
}

/// `leaf_monotonic_forwarded_requests_total / leaf_monotonic_forwarded_calls_total` of `addr`.
fn requests_per_call(addr: SocketAddr) -> Result<f64> {
    let (_, text) = get(addr, "/metrics")?;
    let value = |name: &str| -> Result<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .with_context(|| format!("{name} missing from {addr}'s /metrics"))
    };
    let calls = value("leaf_monotonic_forwarded_calls_total ")?;
    Ok(value("leaf_monotonic_forwarded_requests_total ")? / calls.max(1.0))
}

pub(super) fn compare_monotonic(root: &Path, seconds: u64) -> Result<()> {
    crate::cargo(
        root,
        "build leaf-server (redis) and leaf-loadgen",
        &[
            "build",
            "--release",
            "-p",
            "leaf-server",
            "--features",
            "leaf-server/redis",
            "-p",
            "leaf-loadgen",
        ],
    )?;
    let release = crate::bench::target_dir(root).join("release");
    let (bin, loadgen_bin) = (release.join("leaf-server"), release.join("leaf-loadgen"));
    let redis = StoreServer::provision(Store::parse("redis").context("the redis store")?)?;
    let mut leader = node(&bin, "monotonic-leader", &redis.url, &[])?;
    let mut follower = node(&bin, "monotonic-follower", &redis.url, &[])?;
    let mut single = node(
        &bin,
        "monotonic-uncoalesced",
        &redis.url,
        &[("LEAF_MONOTONIC__COALESCE", "false")],
    )?;
    let (l, f, u) = (
        leader.addr.to_string(),
        follower.addr.to_string(),
        single.addr.to_string(),
    );
    let one = |path: &'static str| vec!["http", "--path", path];
    let batch = |path: &'static str| vec!["http", "--path", path, "--count", "1000"];
    let runs: Vec<(&str, &str, Vec<&str>)> = vec![
        (
            "snowflake, single IDs (baseline)",
            &l,
            one("/api/snowflake/get/x"),
        ),
        (
            "monotonic, single IDs, on the leader",
            &l,
            one("/api/monotonic/get"),
        ),
        (
            "monotonic, single IDs, through a follower",
            &f,
            one("/api/monotonic/get"),
        ),
        (
            "monotonic, single IDs, through a follower without coalescing",
            &u,
            one("/api/monotonic/get"),
        ),
        (
            "snowflake, count=1000 (baseline)",
            &l,
            batch("/v1/snowflake?count=1000"),
        ),
        (
            "monotonic, count=1000, on the leader",
            &l,
            batch("/v1/monotonic?count=1000"),
        ),
        (
            "monotonic, count=1000, through a follower",
            &f,
            batch("/v1/monotonic?count=1000"),
        ),
    ];
    // Warm-up: connections, the forwarders' links, the windows.
    for addr in [&l, &f, &u] {
        loadgen(&loadgen_bin, addr, &one("/api/monotonic/get"), 2)?;
    }
    let mut results: Vec<(&str, Run)> = Vec::new();
    for (name, addr, args) in &runs {
        results.push((*name, loadgen(&loadgen_bin, addr, args, seconds)?));
    }
    let (coalesced, uncoalesced) = (
        requests_per_call(follower.addr)?,
        requests_per_call(single.addr)?,
    );
    for n in [&mut leader, &mut follower, &mut single] {
        n.server.stop();
        std::fs::remove_dir_all(&n.dir).ok();
    }
    let origin = redis.origin.clone();
    drop(redis);

    print_runs(&results);
    let ids = |i: usize| results[i].1.ids_per_s;
    println!();
    println!(
        "- monotonic on the leader / snowflake, single IDs: {:.2}x (target at least 0.9x)",
        ids(1) / ids(0)
    );
    println!(
        "- monotonic through a follower / snowflake on its node, single IDs: {:.2}x (target at \
         least 0.5x); without coalescing {:.2}x",
        ids(2) / ids(0),
        ids(3) / ids(0)
    );
    println!(
        "- monotonic / snowflake, count=1000: {:.2}x on the leader, {:.2}x through a follower \
         (target at least 0.8x)",
        ids(5) / ids(4),
        ids(6) / ids(4)
    );
    println!(
        "- requests per call to the leader over the session: {coalesced:.2} with coalescing, \
         {uncoalesced:.2} without"
    );
    println!(
        "- {CONNECTIONS} connections, one request in flight on each, {seconds} s per run; three \
         release servers and the load generator on this machine, snowflake.mode = \"redis\" on \
         {origin}"
    );
    Ok(())
}
