//! `--grpc`: the gRPC API beside the HTTP routes, one server, one load generator
//! (`leaf-loadgen`, which speaks HTTP/1.1 and gRPC over the same number of connections with
//! one request in flight on each), one session: single IDs (`GET /api/segment/get/{tag}`
//! against `NextSegmentIds { count: 1 }`), batches (`?count=1000` against
//! `NextSegmentIds { count: 1000 }`), and streamed IDs (`StreamSegmentIds`, a million per
//! stream, chunks of the default 1000 and of 10000) against the HTTP batches. The baseline of
//! the single IDs is the transport's own: `leaf-loadgen --bare`, a hyper server on the same
//! auto builder whose only work is an atomic increment, driven the same way over HTTP/1.1 and
//! over gRPC.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use super::server::{Server, server_command};
use super::{CONNECTIONS, SEGMENT};

/// `leaf-loadgen --bare` started: the process and its address.
pub(super) fn start_bare(loadgen_bin: &Path) -> Result<(Server, String)> {
    let mut bare = Server(
        Command::new(loadgen_bin)
            .args(["--bare", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .spawn()
            .context("cannot start leaf-loadgen --bare")?,
    );
    let mut line = String::new();
    let stdout = bare.0.stdout.take().context("no stdout")?;
    BufReader::new(stdout).read_line(&mut line)?;
    Ok((bare, line.trim().to_owned()))
}

/// The connections of `--grpc-multiplexed`, and the calls in flight per gRPC connection.
const MUX_CONNECTIONS: [u32; 2] = [4, 16];
const MUX_IN_FLIGHT: [u32; 3] = [1, 4, 16];

/// `--grpc-multiplexed`: single IDs at equal connections, HTTP/1.1 (one request in flight per
/// connection, all it can) against gRPC with 1, 4 and 16 calls in flight per connection, on
/// leaf-server and on the bare transport, one session. Where gRPC meets HTTP/1.1, and whether
/// leaf-server or the transport is the limit there.
pub(super) fn compare_multiplexed(root: &Path, seconds: u64) -> Result<()> {
    let Session {
        mut server,
        dir,
        addr,
        loadgen: loadgen_bin,
    } = segment_session(root, "grpc-mux")?;
    let (bare, bare_addr) = start_bare(&loadgen_bin)?;
    let a = addr.to_string();
    loadgen(&loadgen_bin, &a, &["grpc-stream", "--count", "1000000"], 3)?;
    let mut rows = Vec::new();
    for connections in MUX_CONNECTIONS {
        for (target, label) in [(&a, "leaf-server"), (&bare_addr, "bare hyper")] {
            let http = loadgen_with(&loadgen_bin, target, &["http"], seconds, connections)?;
            let mut grpc = Vec::new();
            for k in MUX_IN_FLIGHT {
                let k = k.to_string();
                grpc.push(loadgen_with(
                    &loadgen_bin,
                    target,
                    &["grpc", "--in-flight", &k],
                    seconds,
                    connections,
                )?);
            }
            rows.push((connections, label, http, grpc));
        }
    }
    server.stop();
    std::fs::remove_dir_all(&dir).ok();
    drop(bare);

    println!();
    print!("| connections | server | HTTP/1.1 req/s |");
    for k in MUX_IN_FLIGHT {
        print!(" gRPC, {k} in flight per connection: calls/s (x HTTP/1.1), p99 ms |");
    }
    println!();
    println!("|---:|---|---:|{}", "---:|".repeat(MUX_IN_FLIGHT.len()));
    for (connections, label, http, grpc) in &rows {
        print!("| {connections} | {label} | {:.0} |", http.requests_per_s);
        for g in grpc {
            print!(
                " {:.0} ({:.2}x), {:.3} |",
                g.requests_per_s,
                g.requests_per_s / http.requests_per_s,
                g.p99_ms
            );
        }
        println!();
    }
    println!();
    for pair in rows.chunks(2) {
        let (leaf, bare) = (&pair[0], &pair[1]);
        let ratios: Vec<String> = leaf
            .3
            .iter()
            .zip(&bare.3)
            .map(|(l, b)| format!("{:.2}x", l.requests_per_s / b.requests_per_s))
            .collect();
        println!(
            "- {} connections: leaf-server / bare hyper, gRPC at {:?} in flight: {}; HTTP/1.1 {:.2}x",
            leaf.0,
            MUX_IN_FLIGHT,
            ratios.join(", "),
            leaf.2.requests_per_s / bare.2.requests_per_s
        );
    }
    println!(
        "- {seconds} s per run, errors: {}; the server, the bare transport and the load generator \
         share this machine's cores",
        rows.iter()
            .map(|r| r.2.errors + r.3.iter().map(|g| g.errors).sum::<u64>())
            .sum::<u64>()
    );
    Ok(())
}

/// One run of `leaf-loadgen`.
pub(super) struct Run {
    pub(super) requests: u64,
    pub(super) requests_per_s: f64,
    pub(super) ids_per_s: f64,
    pub(super) p50_ms: f64,
    pub(super) p99_ms: f64,
    pub(super) p999_ms: f64,
    pub(super) errors: u64,
    /// The load generator's own CPU time, in seconds (NaN if it could not tell).
    pub(super) cpu_s: f64,
}

pub(super) fn loadgen(binary: &Path, addr: &str, args: &[&str], seconds: u64) -> Result<Run> {
    loadgen_with(binary, addr, args, seconds, CONNECTIONS)
}

/// [`loadgen`] on `connections` connections.
pub(super) fn loadgen_with(
    binary: &Path,
    addr: &str,
    args: &[&str],
    seconds: u64,
    connections: u32,
) -> Result<Run> {
    eprintln!(
        "xtask: == leaf-loadgen {addr} {} ({connections} connections)",
        args.join(" ")
    );
    let out = Command::new(binary)
        .arg(addr)
        .args(args)
        .args(["--seconds", &seconds.to_string()])
        .args(["--connections", &connections.to_string()])
        .output()
        .context("cannot run leaf-loadgen")?;
    if !out.status.success() {
        bail!(
            "leaf-loadgen failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let v: Value =
        serde_json::from_slice(&out.stdout).context("cannot parse leaf-loadgen's json")?;
    let f = |k: &str| v[k].as_f64().unwrap_or(f64::NAN);
    let run = Run {
        requests: v["requests"].as_u64().unwrap_or(0),
        requests_per_s: f("requests_per_s"),
        ids_per_s: f("ids_per_s"),
        p50_ms: f("p50_ms"),
        p99_ms: f("p99_ms"),
        p999_ms: f("p999_ms"),
        errors: v["errors"].as_u64().unwrap_or(0),
        cpu_s: f("cpu_s"),
    };
    if run.errors > 0 {
        eprintln!("xtask: == leaf-loadgen: {} errors", run.errors);
    }
    Ok(run)
}

/// The release `leaf-server`, segment mode only, started for the run `run`, and the path of
/// `leaf-loadgen`, both built first.
pub(super) struct Session {
    pub(super) server: Server,
    pub(super) dir: PathBuf,
    pub(super) addr: SocketAddr,
    pub(super) loadgen: PathBuf,
}

/// Builds the release `leaf-server` and `leaf-loadgen`: their paths.
pub(super) fn release_binaries(root: &Path) -> Result<(PathBuf, PathBuf)> {
    crate::cargo(
        root,
        "build leaf-server and leaf-loadgen",
        &[
            "build",
            "--release",
            "-p",
            "leaf-server",
            "-p",
            "leaf-loadgen",
        ],
    )?;
    let release = crate::bench::target_dir(root).join("release");
    Ok((release.join("leaf-server"), release.join("leaf-loadgen")))
}

pub(super) fn segment_session(root: &Path, run: &str) -> Result<Session> {
    let (server_bin, loadgen) = release_binaries(root)?;
    let (server, dir, addr) = segment_server(&server_bin, run)?;
    Ok(Session {
        server,
        dir,
        addr,
        loadgen,
    })
}

/// `binary` started for the run `run`, segment mode only, once the segment route answers: the
/// process, its directory and address.
pub(super) fn segment_server(binary: &Path, run: &str) -> Result<(Server, PathBuf, SocketAddr)> {
    let (mut cmd, dir, addr) = server_command(binary, run)?;
    cmd.env("LEAF_SNOWFLAKE__ENABLED", "false");
    let (server, _) = Server::start(&mut cmd, "leaf-server", addr, &[SEGMENT])?;
    Ok((server, dir, addr))
}

/// The table of `results`.
pub(super) fn print_runs(results: &[(&str, Run)]) {
    println!();
    println!("| what | calls/s | IDs/s | p50 ms | p99 ms | p99.9 ms | errors |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (name, r) in results {
        println!(
            "| {name} | {:.0} | {:.0} | {:.3} | {:.3} | {:.3} | {} |",
            r.requests_per_s, r.ids_per_s, r.p50_ms, r.p99_ms, r.p999_ms, r.errors
        );
    }
}

pub(super) fn compare_grpc(root: &Path, seconds: u64) -> Result<()> {
    let Session {
        mut server,
        dir,
        addr,
        loadgen: loadgen_bin,
    } = segment_session(root, "grpc")?;
    let a = addr.to_string();
    // A warm-up that grows the tag's dynamic step, so that no measured run pays for the
    // first small segments.
    loadgen(&loadgen_bin, &a, &["grpc-stream", "--count", "1000000"], 3)?;
    loadgen(&loadgen_bin, &a, &["http", "--count", "1000"], 2)?;
    let runs = [
        ("HTTP GET /api/segment/get/{tag}", vec!["http"]),
        ("gRPC NextSegmentIds { count: 1 }", vec!["grpc"]),
        (
            "HTTP GET /v1/segment/{tag}?count=1000",
            vec!["http", "--count", "1000"],
        ),
        (
            "gRPC NextSegmentIds { count: 1000 }",
            vec!["grpc", "--count", "1000"],
        ),
        (
            "gRPC StreamSegmentIds { count: 1000000 } (chunk 1000)",
            vec!["grpc-stream", "--count", "1000000"],
        ),
        (
            "gRPC StreamSegmentIds { count: 1000000, chunk: 10000 }",
            vec!["grpc-stream", "--count", "1000000", "--chunk", "10000"],
        ),
    ];
    let mut results = Vec::new();
    for (name, args) in &runs {
        results.push((*name, loadgen(&loadgen_bin, &a, args, seconds)?));
    }
    server.stop();
    std::fs::remove_dir_all(&dir).ok();

    let (bare, bare_addr) = start_bare(&loadgen_bin)?;
    for (name, args) in [
        ("bare hyper, HTTP/1.1: an atomic increment", vec!["http"]),
        ("bare hyper, gRPC: an atomic increment", vec!["grpc"]),
    ] {
        results.push((name, loadgen(&loadgen_bin, &bare_addr, &args, seconds)?));
    }
    drop(bare);

    print_runs(&results);
    let ids = |i: usize| results[i].1.ids_per_s;
    println!();
    println!(
        "- gRPC unary single IDs / HTTP single IDs: {:.2}x (target at least 0.8x); the bare \
         transport's gRPC / HTTP/1.1: {:.2}x",
        ids(1) / ids(0),
        results[7].1.requests_per_s / results[6].1.requests_per_s
    );
    println!(
        "- leaf-server / bare hyper: HTTP/1.1 {:.2}x, gRPC {:.2}x",
        results[0].1.requests_per_s / results[6].1.requests_per_s,
        results[1].1.requests_per_s / results[7].1.requests_per_s
    );
    println!(
        "- gRPC unary count=1000 / HTTP count=1000: {:.2}x",
        ids(3) / ids(2)
    );
    println!(
        "- streamed IDs (chunk 1000) / HTTP count=1000 batches: {:.2}x (target at least 1.5x); chunk 10000: {:.2}x",
        ids(4) / ids(2),
        ids(5) / ids(2)
    );
    println!(
        "- {CONNECTIONS} connections, one call in flight on each, {seconds} s per run, snowflake \
         mode off; a stream's latency is the whole stream's"
    );
    Ok(())
}
