//! `--store`: segment mode on SQLite and on other stores, one binary, the same load.

use std::path::Path;

use anyhow::Result;

use super::oha::oha;
use super::server::{Server, get, server_command};
use super::store::{Store, StoreServer, redact};
use super::{BATCH, CONNECTIONS, SEGMENT};

/// Segment mode on SQLite and then on each of `others`, in one session, same binary (built
/// with the stores' features), same load: single IDs and batches.
pub(super) fn compare_stores(root: &Path, seconds: u64, others: &[Store]) -> Result<()> {
    let features: Vec<&str> = others.iter().map(|s| s.name()).collect();
    let features = features.join(",");
    crate::cargo(
        root,
        &format!("build leaf-server with {features}"),
        &[
            "build",
            "--release",
            "-p",
            "leaf-server",
            "--features",
            &features,
        ],
    )?;
    let binary = crate::bench::target_dir(root).join("release/leaf-server");
    let mut backends = Vec::new();
    for other in others {
        let backend = StoreServer::provision(*other)?;
        eprintln!(
            "xtask: == {} at {} ({})",
            other.name(),
            redact(&backend.url),
            backend.origin
        );
        backends.push((*other, backend));
    }
    let mut rows = Vec::new();
    let runs = std::iter::once(("sqlite", None)).chain(
        backends
            .iter()
            .map(|(store, backend)| (store.name(), Some((*store, backend.url.as_str())))),
    );
    for (name, on) in runs {
        let (mut cmd, dir, addr) = server_command(&binary, name)?;
        cmd.env("LEAF_SNOWFLAKE__ENABLED", "false");
        if let Some((store, url)) = on {
            cmd.env("LEAF_SEGMENT__STORE", name)
                .env("LEAF_SEGMENT__URL", url)
                .envs(store.server_env().iter().copied());
        }
        let (mut server, first_id) = Server::start(
            &mut cmd,
            &format!("leaf-server on {name}"),
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
        rows.push((name, single, batch, loads, first_id));
    }
    drop(backends);

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

/// `leaf_segment_loads_total{tag="leaf-segment-test",result="ok"}` from the metrics page.
fn segment_loads(metrics: &str) -> Option<u64> {
    metrics.lines().find_map(|l| {
        l.strip_prefix("leaf_segment_loads_total{tag=\"leaf-segment-test\",result=\"ok\"} ")
            .and_then(|v| v.trim().parse::<f64>().ok())
            .map(|v| v as u64)
    })
}
