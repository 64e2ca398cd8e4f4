//! `--http-floor [--baseline PATH]`: the single-ID route `GET /api/segment/get/{tag}` of this
//! build's release `leaf-server` beside the transport's floor, `leaf-loadgen --bare` (a hyper
//! server on the same auto builder whose only work is an atomic increment), and, with
//! `--baseline`, beside another `leaf-server` binary (e.g. one built from an earlier commit),
//! all started at once and measured in turns, [`ROUNDS`] rounds, by `leaf-loadgen` on
//! [`CONNECTIONS`] keep-alive connections. Each line: the median of its rounds' requests per
//! second, and the server's own CPU time per request (user and system, from `/proc`), which the
//! load generator sharing the cores moves less.

use std::path::{Path, PathBuf};

use anyhow::Result;

use super::CONNECTIONS;
use super::grpc::{loadgen, release_binaries, segment_server, start_bare};
use super::server::{Server, cpu_seconds};

const ROUNDS: usize = 3;

/// One server of the session: its name, process id and address.
struct Target {
    name: String,
    pid: u32,
    addr: String,
}

fn leaf_server(binary: &Path, name: &str) -> Result<(Server, PathBuf, Target)> {
    let (server, dir, addr) = segment_server(binary, name)?;
    let target = Target {
        name: format!("leaf-server ({name})"),
        pid: server.0.id(),
        addr: addr.to_string(),
    };
    Ok((server, dir, target))
}

pub(super) fn compare_floor(root: &Path, seconds: u64, baseline: Option<PathBuf>) -> Result<()> {
    let (bin, loadgen_bin) = release_binaries(root)?;
    let (bare, bare_addr) = start_bare(&loadgen_bin)?;
    let mut targets = vec![Target {
        name: "bare hyper: an atomic increment".into(),
        pid: bare.0.id(),
        addr: bare_addr,
    }];
    let mut servers = Vec::new();
    let (server, dir, target) = leaf_server(&bin, "this build")?;
    servers.push((server, dir));
    targets.push(target);
    if let Some(path) = &baseline {
        let (server, dir, target) = leaf_server(path, "baseline")?;
        servers.push((server, dir));
        targets.push(target);
    }
    // A warm-up that grows the tag's dynamic step on every leaf-server.
    for t in &targets[1..] {
        loadgen(&loadgen_bin, &t.addr, &["http", "--count", "1000"], 3)?;
    }
    let mut rates = vec![Vec::new(); targets.len()];
    let mut cpu_us = vec![Vec::new(); targets.len()];
    let mut errors = 0;
    for _ in 0..ROUNDS {
        for (i, t) in targets.iter().enumerate() {
            let before = cpu_seconds(t.pid)?;
            let run = loadgen(&loadgen_bin, &t.addr, &["http"], seconds)?;
            let spent = cpu_seconds(t.pid)? - before;
            rates[i].push(run.requests_per_s);
            cpu_us[i].push(spent * 1e6 / run.requests.max(1) as f64);
            errors += run.errors;
        }
    }
    for (mut server, dir) in servers {
        server.stop();
        std::fs::remove_dir_all(&dir).ok();
    }
    drop(bare);

    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let rows: Vec<(f64, f64)> = rates
        .iter_mut()
        .zip(cpu_us.iter_mut())
        .map(|(r, c)| (median(r), median(c)))
        .collect();
    println!();
    println!(
        "| server | req/s (median of {ROUNDS}) | x bare hyper | server CPU µs per request | x bare hyper |"
    );
    println!("|---|---:|---:|---:|---:|");
    for (t, (rate, cpu)) in targets.iter().zip(&rows) {
        println!(
            "| {} | {rate:.0} | {:.2}x | {cpu:.2} | {:.2}x |",
            t.name,
            rate / rows[0].0,
            cpu / rows[0].1
        );
    }
    println!();
    println!(
        "- this build / bare hyper: {:.2}x the requests per second (target at least 0.95x), \
         {:.2}x the CPU per request",
        rows[1].0 / rows[0].0,
        rows[1].1 / rows[0].1
    );
    if baseline.is_some() {
        println!(
            "- this build / the baseline: {:.2}x the requests per second, {:.2}x the CPU per \
             request",
            rows[1].0 / rows[2].0,
            rows[1].1 / rows[2].1
        );
    }
    println!(
        "- {CONNECTIONS} connections, one request in flight on each, {seconds} s per line per \
         round, the servers in turns; errors: {errors}; servers and load generator on this \
         machine's cores"
    );
    Ok(())
}
