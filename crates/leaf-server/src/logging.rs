//! Structured logs with `tracing`: `[log] format = "text" | "json"`, `level` a filter such as
//! `info` or `info,leaf_segment=debug`. Logs go to standard error.

use tracing_subscriber::EnvFilter;

use crate::compose::config::{LogConfig, LogFormat};

/// Installs the global subscriber; an error if one is installed already or the filter is bad.
pub fn init(config: &LogConfig) -> anyhow::Result<()> {
    let filter = EnvFilter::try_new(&config.level)
        .map_err(|e| anyhow::anyhow!("log.level {:?}: {e}", config.level))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = match config.format {
        LogFormat::Text => builder.with_ansi(false).try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    result.map_err(|e| anyhow::anyhow!("cannot install the logger: {e}"))
}
