//! `cargo xtask`: the commands CI runs, so that a person can run the same thing.
//!
//! - `cargo xtask ci`: format check, clippy with `-D warnings`, the conformance suite on
//!   provisioned servers, every other test, the Python client's test of the gRPC API.
//! - `cargo xtask bench [--quick] [--stores LIST]`: the criterion benchmarks and one summary
//!   table; with `--stores`, the segment stores' allocation benchmark.
//! - `cargo xtask image`: the `leaf-server:local` container image, from Debian packages.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

mod backends;
mod bench;
mod bench_http;
mod conformance;
mod disk;
mod housekeeping;
mod image;
mod monitoring;
mod python;
mod testbed;
mod testbins;
// The variables' names, shared with leaf-testkit's provisioning: one file, no dependency.
#[path = "../../crates/leaf-testkit/src/vars.rs"]
#[allow(dead_code, unreachable_pub)]
mod vars;

/// The usage text; the backends' names come from [`backends::BACKENDS`].
fn usage() -> String {
    let stores = backends::names(|b| b.alloc_bench.is_some(), ",");
    let http = backends::names(|b| b.bench.is_some(), "|");
    let all = backends::names(|_| true, ", ");
    let images = backends::names(|b| b.server.is_some(), ", ");
    format!(
        "usage: cargo xtask <command>

commands:
  ci              fmt --check, clippy --all-features -D warnings, the monitoring rules, one build of
                  every test with every feature run in groups (conformance, the server, the
                  cluster, the rest), the doc tests, the Python client's test of the gRPC API,
                  the server's black-box tests with default features, and a check that the run
                  left no Docker object behind
  bench [--quick] run the criterion benchmarks and print the summary table
  bench [--quick] --stores {stores}
                  the segment stores' allocation benchmark, one after the other, on
                  provisioned servers (the testbed images), and a table of the means
  bench-http [SECONDS] [--store {http}]... [--snowflake-load [--server PATH]] [--grpc]
             [--formatted] [--tls] [--monotonic] [--borrow] [--grpc-multiplexed]
             [--http-floor [--baseline PATH]]
                  the release leaf-server under oha: req/s, latency, batches, RSS, start-up;
                  with --store (repeatable): segment mode on SQLite beside those stores;
                  with --snowflake-load: segment latency alone and under snowflake batches;
                  with --grpc: the gRPC API beside the HTTP routes, both from leaf-loadgen;
                  with --formatted: a business tag's IDs beside a plain tag's (leaf-loadgen);
                  with --tls: HTTPS and gRPC over TLS beside plaintext, and the handshake's cost;
                  with --monotonic: monotonic IDs on the leader and through followers (with and
                  without coalescing) beside snowflake IDs, three servers on one Redis;
                  with --borrow: snowflake borrowing ahead of the clock beside it off: single
                  IDs, sustained batches and bursts past the 4.096M IDs/s ceiling;
                  with --grpc-multiplexed: gRPC with several calls in flight per connection
                  beside HTTP/1.1 at equal connections, on leaf-server and the bare transport;
                  with --http-floor: the single-ID route beside the bare transport (and
                  --baseline, another leaf-server binary), req/s and server CPU per request
  conformance [--backend NAME]
                  run the backend crates' tests on provisioned servers ({all}, cluster)
  monitoring      promtool check and test of deploy/monitoring's alert rules, and its dashboard
  python          the Python client's test of the gRPC API against the leaf-server binary, in a
                  virtual environment of clients/python/requirements.txt (made when missing)
  testbed [--force] [BACKEND...]
                  build the servers' test images locally from Debian packages (needs root):
                  {images}
  image [--features F] [--tag T]
                  build the leaf-server image (leaf-server:local) from Debian packages and the
                  release binary, as the Dockerfile would where no registry is reachable"
    )
}

fn main() {
    if let Err(e) = run() {
        eprintln!("xtask: {e:#}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = workspace_root();
    match args.first().map(String::as_str) {
        Some("ci") => ci(&root),
        Some("bench") => bench::run(&root, &args[1..]),
        Some("bench-http") => bench_http::run(&root, &args[1..]),
        Some("conformance") => conformance::run(&root, &args[1..]),
        Some("testbed") => testbed::run(&root, &args[1..]),
        Some("image") => image::run(&root, &args[1..]),
        Some("python") => python::run(&root),
        Some("monitoring") => monitoring::run(&root),
        Some("-h" | "--help" | "help") => {
            println!("{}", usage());
            Ok(())
        }
        Some(other) => bail!("unknown command {other:?}\n{}", usage()),
        None => bail!("no command given\n{}", usage()),
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the workspace root")
        .to_path_buf()
}

fn ci(root: &Path) -> Result<()> {
    // What Docker holds before the run: at its end, nothing of the run's may be left.
    let before = housekeeping::Objects::now()?;
    // The servers' test images (built from Debian packages where one is missing: minutes of
    // downloads and unpacking, little CPU) are made while the compilers run.
    let images = std::thread::spawn({
        let root = root.to_path_buf();
        move || conformance::server_env_for_ci(&root)
    });
    // A failed step still waits for the images: an image build cut off mid-way could leave
    // its root's mounts behind.
    let compiled = (|| -> Result<testbins::Build> {
        cargo(root, "format check", &["fmt", "--all", "--", "--check"])?;
        cargo(
            root,
            "clippy",
            &[
                "clippy",
                "--workspace",
                "--all-targets",
                "--all-features",
                "--",
                "-D",
                "warnings",
            ],
        )?;
        pure_formatting(root)?;
        monitoring::run(root)?;
        // Every test executable is built once, with every feature, and run in groups on the
        // provisioned servers (testbins.rs says why); the cluster's image takes the debug server
        // binary of that build rather than a release build of its own.
        testbins::build(root)
    })();
    let images = images
        .join()
        .map_err(|_| anyhow::anyhow!("the thread building the test images panicked"))?;
    let build = compiled?;
    let mut env = images?;
    conformance::server_image(root, &mut env, Some(&build.server))?;
    let tests = testbins::run(root, &build, &env);
    // The doc tests read the libraries of the same build (same features, same packages).
    let docs = cargo_with_env(
        root,
        "doc tests",
        &[
            "test",
            "--workspace",
            "--doc",
            "--all-features",
            "--no-fail-fast",
        ],
        &env,
    );
    tests?;
    docs?;
    python::run_with(root, &build.server)?;
    // The server as built by default (sqlite + local): its black-box tests ask for every mode
    // that build leaves out (the one build above has them all). After the Python test, which
    // runs the one build's binary, since this replaces it.
    cargo(
        root,
        "default features",
        &["test", "-p", "leaf-server", "--test", "blackbox"],
    )?;
    housekeeping::check_nothing_left(&before)?;
    println!("xtask ci: all steps passed");
    Ok(())
}

/// ARCHITECTURE.md's rule for `leaf-format`: pure formatting, no tokio among its dependencies
/// (a `--workspace` build unifies features, so only the crate's own tree can tell).
fn pure_formatting(root: &Path) -> Result<()> {
    let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .current_dir(root)
        .args([
            "tree",
            "-p",
            "leaf-format",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .output()
        .context("cargo tree")?;
    if !out.status.success() {
        bail!(
            "cargo tree -p leaf-format: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let tree = String::from_utf8_lossy(&out.stdout);
    if let Some(line) = tree.lines().find(|l| l.starts_with("tokio ")) {
        bail!("leaf-format depends on {line}: it must stay pure formatting (ARCHITECTURE.md)");
    }
    eprintln!("xtask: leaf-format's dependencies hold no tokio");
    Ok(())
}

/// Runs `cargo ARGS` in the workspace root, logging the step and its duration.
pub(crate) fn cargo(root: &Path, step: &str, args: &[&str]) -> Result<()> {
    cargo_with_env(root, step, args, &[])
}

/// [`cargo`] with extra environment variables, shown in the log line.
pub(crate) fn cargo_with_env(
    root: &Path,
    step: &str,
    args: &[&str],
    env: &[(String, String)],
) -> Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let shown: String = env.iter().map(|(k, v)| format!("{k}={v} ")).collect();
    eprintln!("xtask: == {step}: {shown}cargo {}", args.join(" "));
    let started = Instant::now();
    let wall = std::time::SystemTime::now();
    let status = Command::new(&cargo)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(root)
        .status()
        .with_context(|| format!("cannot run {cargo}"))?;
    let elapsed = started.elapsed().as_secs_f64();
    // A test step's executables are read by no later step: in CI they go at once.
    let pruned = if disk::pruning() && args.first() == Some(&"test") {
        format!(
            ", {} MB of its test binaries removed",
            disk::prune_linked(root, wall) >> 20
        )
    } else {
        String::new()
    };
    eprintln!(
        "xtask: == {step}: {} in {elapsed:.1} s (disk: {} free{pruned})",
        if status.success() { "ok" } else { "FAILED" },
        disk::free(root).as_deref().unwrap_or("?"),
    );
    if !status.success() {
        bail!("{step} failed ({status})");
    }
    Ok(())
}
