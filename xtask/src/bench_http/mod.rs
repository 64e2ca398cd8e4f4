//! `cargo xtask bench-http`: the release `leaf-server` on its embedded default under `oha`, on
//! this machine: single-ID throughput and latency with 32 connections, p99.9 at a fixed rate of
//! half the maximum, `count=1000` batches, RSS idle and under load, and start-up to first ID.
//!
//! `cargo xtask bench-http --store mysql|postgres|redis|etcd` (repeated for several): segment
//! mode on SQLite and on each chosen store, one after the other in one session, with one binary
//! built with the stores' features, single IDs and `count=1000` batches each. The store's server is
//! the one of its backend's `LEAFTEST_*_URL` (a SQL URL naming an existing database; a Redis
//! with `appendonly yes` and `appendfsync always`, as the store requires), else a container of
//! its `LEAFTEST_*_IMAGE` (default: the image `cargo xtask testbed` builds), started here on a
//! loopback port and removed at the end; the names are the backends' rows in `crate::backends`.
//! On Redis the server's keys go under the prefix `leafbench` (`segment.redis.key_prefix`) and
//! stay there.
//!
//! `cargo xtask bench-http --snowflake-load [--server PATH]`: the segment route at a fixed rate,
//! alone and while two clients loop snowflake batches (`count=10000`), with the snowflake layout
//! 41 + 5 + 7 bits unless `LEAF_SNOWFLAKE__*_BITS` say otherwise: a generator that holds a
//! runtime thread while it waits for the next millisecond shows here as segment latency.
//! `--server` runs a binary built elsewhere (e.g. an older commit) instead of building one.
//!
//! `cargo xtask bench-http --grpc`: the gRPC API against the HTTP routes on one server, both
//! driven by `leaf-loadgen` (`xtask/loadgen`) with the same connections and concurrency
//! (`oha` is not needed for it).
//!
//! `cargo xtask bench-http --http-floor [--baseline PATH]`: the single-ID route beside the
//! bare transport (and another leaf-server binary), in turns, by requests per second and by
//! the server's CPU per request (`floor.rs`).
//!
//! `cargo xtask bench-http --grpc-multiplexed`: single IDs at equal connections, HTTP/1.1
//! against gRPC with several calls in flight per connection, on leaf-server and on the bare
//! transport (`grpc.rs`).
//!
//! `cargo xtask bench-http --formatted`: a business tag's formatted IDs beside a plain tag's
//! on one server, by `leaf-loadgen` as well (`formatted.rs`).
//!
//! `cargo xtask bench-http --monotonic`: monotonic IDs on the leader and through followers
//! (with and without coalescing) beside snowflake IDs, three servers on one Redis, by
//! `leaf-loadgen` (`monotonic.rs`).
//!
//! `cargo xtask bench-http --borrow`: snowflake with milliseconds borrowed ahead of the clock
//! beside the same binary with it off: single IDs, sustained batches and bursts, by
//! `leaf-loadgen` and plain HTTP clients (`borrow.rs`; `oha` is not needed for it).
//!
//! `cargo xtask bench-http --tls`: TLS on the port beside plaintext in one session, two
//! servers of one binary, HTTP/1.1 and gRPC, steady state and new connections, by
//! `leaf-loadgen` (`tls.rs`; `oha` is not needed for it).

mod borrow;
mod compare;
mod default_run;
mod floor;
mod formatted;
mod grpc;
mod monotonic;
mod oha;
mod server;
mod snowflake_load;
mod store;
mod tls;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use compare::compare_stores;
use default_run::run_default;
use snowflake_load::under_snowflake_load;
use store::Store;

const CONNECTIONS: u32 = 32;
const SEGMENT: &str = "/api/segment/get/leaf-segment-test";
const SNOWFLAKE: &str = "/api/snowflake/get/x";
const BATCH: &str = "/v1/segment/leaf-segment-test?count=1000";
const SNOWFLAKE_BATCH: &str = "/v1/snowflake?count=10000";

/// `bench-http [SECONDS] [--store NAME]... [--snowflake-load [--server PATH]] [--grpc]
/// [--formatted] [--tls] [--monotonic] [--borrow] [--grpc-multiplexed]
/// [--http-floor [--baseline PATH]]`, NAME being `sqlite` or a backend row's store that the benchmark takes.
pub(crate) fn run(root: &Path, args: &[String]) -> Result<()> {
    let mut seconds = 10;
    let mut stores: Vec<String> = Vec::new();
    let mut snowflake_load = false;
    let mut server: Option<PathBuf> = None;
    let mut grpc = false;
    let mut formatted = false;
    let mut tls = false;
    let mut monotonic = false;
    let mut borrow = false;
    let mut multiplexed = false;
    let mut floor = false;
    let mut baseline: Option<PathBuf> = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--store" => {
                let names = Store::known();
                stores.push(
                    it.next()
                        .with_context(|| format!("--store needs sqlite or one of {names}"))?
                        .clone(),
                );
            }
            "--snowflake-load" => snowflake_load = true,
            "--grpc" => grpc = true,
            "--formatted" => formatted = true,
            "--tls" => tls = true,
            "--monotonic" => monotonic = true,
            "--borrow" => borrow = true,
            "--grpc-multiplexed" => multiplexed = true,
            "--http-floor" => floor = true,
            "--baseline" => {
                baseline = Some(
                    it.next()
                        .context("--baseline needs the path of a leaf-server binary")?
                        .into(),
                );
            }
            "--server" => {
                server = Some(
                    it.next()
                        .context("--server needs the path of a leaf-server binary")?
                        .into(),
                );
            }
            other => match other.strip_prefix("--store=") {
                Some(s) => stores.push(s.to_string()),
                None => {
                    seconds = other.parse().with_context(|| {
                        format!("bench-http takes a number of seconds: {other:?}")
                    })?;
                }
            },
        }
    }
    if floor {
        return floor::compare_floor(root, seconds, baseline);
    }
    if baseline.is_some() {
        bail!("--baseline goes with --http-floor");
    }
    if multiplexed {
        return grpc::compare_multiplexed(root, seconds);
    }
    if grpc {
        return grpc::compare_grpc(root, seconds);
    }
    if formatted {
        return formatted::compare_formatted(root, seconds);
    }
    if tls {
        return tls::compare_tls(root, seconds);
    }
    if monotonic {
        return monotonic::compare_monotonic(root, seconds);
    }
    if borrow {
        return borrow::compare_borrow(root, seconds);
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
    // SQLite is always measured first; `--store sqlite` alone is the default run.
    stores.retain(|s| s != "sqlite");
    if stores.is_empty() {
        return run_default(root, seconds);
    }
    let mut others = Vec::new();
    for name in &stores {
        match Store::parse(name) {
            Some(s) if !others.contains(&s) => others.push(s),
            Some(_) => {}
            None => bail!(
                "--store {name:?}: sqlite (the default run), or one of {} (SQLite beside them)",
                Store::known()
            ),
        }
    }
    compare_stores(root, seconds, &others)
}
