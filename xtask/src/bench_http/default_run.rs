//! The default run: the release `leaf-server` on its embedded default, single IDs and batches
//! under `oha`, RSS idle and under load, start-up to first ID.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::oha::oha;
use super::server::{Server, free_addr, get, rss_kib};
use super::{BATCH, CONNECTIONS, SEGMENT, SNOWFLAKE};

pub(super) fn run_default(root: &Path, seconds: u64) -> Result<()> {
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
