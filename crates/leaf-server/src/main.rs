//! The `leaf-server` binary: reads the configuration, sets up logging, serves until SIGINT or
//! SIGTERM.

use std::process::ExitCode;

use leaf_server::cli::{Args, USAGE};
use leaf_server::{config, logging, server};

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
        println!("leaf-server {}", env!("CARGO_PKG_VERSION"));
        return ExitCode::SUCCESS;
    }
    // Variables that are not Unicode cannot be configuration; they are passed over.
    let env = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.to_string_lossy().into_owned())));
    let loaded = match config::load(args.config.as_deref(), env) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("leaf-server: {e}");
            return ExitCode::from(2);
        }
    };
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
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("leaf-server: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
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
