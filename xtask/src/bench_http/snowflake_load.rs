//! `--snowflake-load`: the segment route at a fixed rate, alone and under snowflake batches.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Result;

use super::oha::oha_with;
use super::server::{Server, server_command};
use super::{SEGMENT, SNOWFLAKE_BATCH};

/// The fixed rate of the segment route in `--snowflake-load`: far below what it sustains, so
/// its latency shows waiting on the server, not saturation.
const PROBE_RATE: f64 = 500.0;
/// Connections of the segment probe and of the snowflake batch load.
const PROBE_CONNECTIONS: u32 = 8;
const LOAD_CONNECTIONS: u32 = 2;

/// The segment route at [`PROBE_RATE`], unloaded and then while [`LOAD_CONNECTIONS`] clients
/// loop snowflake batches.
pub(super) fn under_snowflake_load(
    root: &Path,
    seconds: u64,
    server: Option<PathBuf>,
) -> Result<()> {
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
