//! `cargo xtask bench-http`: the release `leaf-server` on its embedded default under `oha`, on
//! this machine: single-ID throughput and latency with 32 connections, p99.9 at a fixed rate of
//! half the maximum, `count=1000` batches, RSS idle and under load, and start-up to first ID.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
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

struct Load {
    rps: f64,
    p50_ms: f64,
    p99_ms: f64,
    p999_ms: f64,
    non_200: u64,
}

pub(crate) fn run(root: &Path, seconds: u64) -> Result<()> {
    if Command::new("oha").arg("--version").output().is_err() {
        bail!("oha is not installed: cargo install oha --locked");
    }
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

/// Kills the server if the run fails half-way.
struct Server(Child);

impl Server {
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
    let mut cmd = Command::new("oha");
    cmd.args(["--no-tui", "--output-format", "json", "-c"])
        .arg(CONNECTIONS.to_string())
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
        + v["errorDistribution"]
            .as_object()
            .map(|m| m.values().filter_map(Value::as_u64).sum())
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
