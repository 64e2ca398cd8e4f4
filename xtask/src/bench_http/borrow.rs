//! `--borrow`: snowflake with milliseconds borrowed ahead of the clock
//! (`snowflake.max_borrow_ms`, the default 300) beside the same binary with it off (`0`, as Leaf
//! waits for the clock), two servers on their embedded default in one session:
//!
//! - single IDs (`/api/snowflake/get/x`), `leaf-loadgen` on [`CONNECTIONS`] connections: must
//!   be unchanged, since single IDs never spend a millisecond's sequence;
//! - batches (`count=10000`), sustained for the run: bounded by the layout's ceiling either
//!   way, since a lead of at most `max_borrow_ms` adds that much to a run of seconds;
//! - bursts: [`BURST_IDS`] IDs, less than the lead allows, as [`BURST_THREADS`] clients asking
//!   `count=10000` at once, after a pause that lets any lead drain; the burst's IDs per second
//!   from the first request sent to the last answer, the median of [`BURSTS`], and the furthest
//!   any ID's time was ahead of the clock when its answer arrived.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};

use super::CONNECTIONS;
use super::grpc::{Run, loadgen, print_runs, release_binaries};
use super::server::{Server, get, server_command};

const BURST_IDS: usize = 1_000_000;
const BURST_THREADS: usize = 4;
const BURST_BATCH: usize = 10_000;
const BURSTS: usize = 7;
/// Twitter's epoch and the default layout's 22 bits below the timestamp.
const EPOCH_MS: u64 = 1_288_834_974_657;
const TIMESTAMP_SHIFT: u32 = 22;
/// The layout's ceiling: 4,096 IDs a millisecond.
const CEILING: f64 = 4_096_000.0;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// One burst on `addr`: (IDs per second, the furthest an ID's time was ahead of the clock when
/// its answer arrived, in ms).
fn burst(addr: SocketAddr) -> Result<(f64, i64)> {
    let per_thread = BURST_IDS / BURST_THREADS / BURST_BATCH;
    let start = Instant::now();
    let threads: Vec<_> = (0..BURST_THREADS)
        .map(|_| {
            std::thread::spawn(move || -> Result<i64> {
                let mut lead = i64::MIN;
                for _ in 0..per_thread {
                    let (status, body) = get(addr, &format!("/v1/snowflake?count={BURST_BATCH}"))?;
                    let answered = now_ms();
                    if status != 200 {
                        bail!("{status} {body}");
                    }
                    // The IDs ascend: the last is the furthest ahead.
                    let last: i64 = body
                        .trim_end_matches([']', '}', '\n'])
                        .rsplit(',')
                        .next()
                        .and_then(|n| n.trim().parse().ok())
                        .with_context(|| format!("no IDs in {}", &body[..body.len().min(80)]))?;
                    let time = (last as u64 >> TIMESTAMP_SHIFT) + EPOCH_MS;
                    lead = lead.max(time as i64 - answered as i64);
                }
                Ok(lead)
            })
        })
        .collect();
    let mut lead = i64::MIN;
    for t in threads {
        let l = t
            .join()
            .map_err(|_| anyhow::anyhow!("a burst thread panicked"))??;
        lead = lead.max(l);
    }
    let seconds = start.elapsed().as_secs_f64();
    Ok((
        (per_thread * BURST_THREADS * BURST_BATCH) as f64 / seconds,
        lead,
    ))
}

/// [`BURSTS`] bursts on `addr`, each after a pause longer than any lead: the median rate and the
/// largest lead.
fn bursts(addr: SocketAddr) -> Result<(f64, i64)> {
    let mut rates = Vec::new();
    let mut lead = i64::MIN;
    for _ in 0..BURSTS {
        std::thread::sleep(Duration::from_millis(800));
        let (rate, l) = burst(addr)?;
        rates.push(rate);
        lead = lead.max(l);
    }
    rates.sort_by(f64::total_cmp);
    Ok((rates[BURSTS / 2], lead))
}

fn node(
    bin: &Path,
    name: &str,
    max_borrow_ms: &str,
) -> Result<(Server, std::path::PathBuf, SocketAddr)> {
    let (mut cmd, dir, addr) = server_command(bin, name)?;
    cmd.env("LEAF_SNOWFLAKE__MAX_BORROW_MS", max_borrow_ms);
    let (server, _) = Server::start(&mut cmd, name, addr, &["/api/snowflake/get/x"])?;
    Ok((server, dir, addr))
}

pub(super) fn compare_borrow(root: &Path, seconds: u64) -> Result<()> {
    let (bin, loadgen_bin) = release_binaries(root)?;
    let (mut off, off_dir, off_addr) = node(&bin, "borrow-off", "0")?;
    let (mut on, on_dir, on_addr) = node(&bin, "borrow-on", "300")?;
    let (a, b) = (off_addr.to_string(), on_addr.to_string());
    let one = ["http", "--path", "/api/snowflake/get/x"];
    let batch = [
        "http",
        "--path",
        "/v1/snowflake?count=10000",
        "--count",
        "10000",
    ];
    // Warm-up: connections and the first marks.
    loadgen(&loadgen_bin, &a, &one, 2)?;
    loadgen(&loadgen_bin, &b, &one, 2)?;
    let results: Vec<(&str, Run)> = vec![
        (
            "single IDs, max_borrow_ms = 0 (baseline)",
            loadgen(&loadgen_bin, &a, &one, seconds)?,
        ),
        (
            "single IDs, max_borrow_ms = 300",
            loadgen(&loadgen_bin, &b, &one, seconds)?,
        ),
        (
            "count=10000 sustained, max_borrow_ms = 0 (baseline)",
            loadgen(&loadgen_bin, &a, &batch, seconds)?,
        ),
        (
            "count=10000 sustained, max_borrow_ms = 300",
            loadgen(&loadgen_bin, &b, &batch, seconds)?,
        ),
    ];
    eprintln!("xtask: == bursts of {BURST_IDS} IDs, {BURSTS} on each server");
    let (off_rate, off_lead) = bursts(off_addr)?;
    let (on_rate, on_lead) = bursts(on_addr)?;
    off.stop();
    on.stop();
    std::fs::remove_dir_all(&off_dir).ok();
    std::fs::remove_dir_all(&on_dir).ok();

    print_runs(&results);
    let ids = |i: usize| results[i].1.ids_per_s;
    println!();
    println!(
        "| bursts of {BURST_IDS} IDs ({BURST_THREADS} clients, count={BURST_BATCH}) | IDs/s (median of {BURSTS}) | x the 4.096M ceiling | furthest ahead of the clock at the answer |"
    );
    println!("|---|---:|---:|---:|");
    for (name, rate, lead) in [
        ("max_borrow_ms = 0 (baseline)", off_rate, off_lead),
        ("max_borrow_ms = 300", on_rate, on_lead),
    ] {
        println!(
            "| {name} | {rate:.0} | {:.2}x | {lead} ms |",
            rate / CEILING
        );
    }
    println!();
    println!(
        "- single IDs, borrowing on / off: {:.3}x (target: unchanged)",
        ids(1) / ids(0)
    );
    println!(
        "- sustained count=10000: {:.2}x / {:.2}x the ceiling (off / on): a lead of at most 300 ms \
         adds at most that much to a {seconds} s run",
        ids(2) / CEILING,
        ids(3) / CEILING
    );
    println!(
        "- bursts: {:.2}x the ceiling with borrowing (target at least 2x), {:.2}x without; IDs at \
         most {on_lead} ms ahead of the clock (bound 300 ms)",
        on_rate / CEILING,
        off_rate / CEILING
    );
    println!(
        "- {CONNECTIONS} connections for the loadgen runs, one request in flight on each, {seconds} s \
         per run; two release servers on the embedded default and the clients on this machine"
    );
    Ok(())
}
