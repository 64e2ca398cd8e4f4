//! The `leaf-server` binary: reads the configuration, sets up logging, serves until SIGINT or
//! SIGTERM; or, as `leaf-server probe`, asks a running server whether it is healthy; or, as
//! `leaf-server store raise`, raises the segment store's counters after a restore.

use std::process::ExitCode;
use std::time::Duration;

use leaf_server::cli::{Args, Probe, USAGE};
use leaf_server::{config, logging, server};

/// mimalloc, not glibc's allocator: a request's allocations (hyper's buffers, axum's boxed
/// services and futures, the answer) freed on another worker thread kept glibc's malloc,
/// free and consolidation at about 12% of the server's CPU per single-ID request (BENCHMARKS.md,
/// "HTTP at the transport's floor").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let args = match Args::parse(std::env::args_os().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("leaf-server: {e}");
            return ExitCode::from(2);
        }
    };
    if args.help {
        print!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    if args.version {
        println!("{}", leaf_server::cli::version_text());
        return ExitCode::SUCCESS;
    }
    if let Some(probe) = &args.probe {
        return run_probe(probe, &args);
    }
    let loaded = match load(&args) {
        Ok(l) => l,
        Err(code) => return code,
    };
    if let Some(raise) = &args.raise {
        return run_store_raise(&loaded.config, raise);
    }
    if args.check_config {
        for w in &loaded.warnings {
            eprintln!("leaf-server: warning: {w}");
        }
        println!("configuration ok");
        return ExitCode::SUCCESS;
    }
    if let Err(e) = logging::init(&loaded.config.log) {
        eprintln!("leaf-server: {e:#}");
        return ExitCode::from(2);
    }
    let runtime = match runtime(tokio::runtime::Builder::new_multi_thread()) {
        Ok(r) => r,
        Err(code) => return code,
    };
    match runtime.block_on(server::run(loaded)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("start-up failed: {e:#}");
            eprintln!("leaf-server: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The runtime of `builder` with every driver, or the exit code of one that cannot start.
fn runtime(mut builder: tokio::runtime::Builder) -> Result<tokio::runtime::Runtime, ExitCode> {
    builder.enable_all().build().map_err(|e| {
        eprintln!("leaf-server: cannot start the runtime: {e}");
        ExitCode::FAILURE
    })
}

/// `leaf-server store raise`: 0 when every planned row was raised (or, with `--dry-run`,
/// planned), 1 otherwise, with the reason.
fn run_store_raise(config: &config::Config, raise: &leaf_server::cli::Raise) -> ExitCode {
    let runtime = match runtime(tokio::runtime::Builder::new_current_thread()) {
        Ok(r) => r,
        Err(code) => return code,
    };
    let mut out = std::io::stdout().lock();
    match runtime.block_on(leaf_server::store_raise::run(config, raise, &mut out)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("leaf-server store raise: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The configuration of `args`, or the exit code of a configuration that cannot be loaded.
fn load(args: &Args) -> Result<config::Loaded, ExitCode> {
    // Variables that are not Unicode cannot be configuration; they are passed over.
    let env = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.to_string_lossy().into_owned())));
    config::load(args.config.as_deref(), env).map_err(|e| {
        eprintln!("leaf-server: {e}");
        ExitCode::from(2)
    })
}

/// `leaf-server probe`: 0 when the server answers 200, 1 otherwise (2: no configuration to
/// find it by).
fn run_probe(probe: &Probe, args: &Args) -> ExitCode {
    let url = match &probe.url {
        Some(url) => url.clone(),
        None => match load(args) {
            Ok(l) => {
                leaf_server::probe::base_url(l.config.server.listen, l.config.server.tls.enabled())
            }
            Err(code) => return code,
        },
    };
    match leaf_server::probe::probe(&url, probe.ready, Duration::from_secs(3)) {
        Ok(status) => {
            println!("leaf-server probe: {status}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("leaf-server probe: {e}");
            ExitCode::FAILURE
        }
    }
}
