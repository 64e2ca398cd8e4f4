//! The load generator: one `oha` run and what its JSON report says.

use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::Value;

use super::CONNECTIONS;

pub(super) struct Load {
    pub(super) rps: f64,
    pub(super) p50_ms: f64,
    pub(super) p99_ms: f64,
    pub(super) p999_ms: f64,
    pub(super) non_200: u64,
}

pub(super) fn oha(url: &str, seconds: u64, rate: Option<f64>) -> Result<Load> {
    oha_with(url, seconds, rate, CONNECTIONS)
}

pub(super) fn oha_with(
    url: &str,
    seconds: u64,
    rate: Option<f64>,
    connections: u32,
) -> Result<Load> {
    let mut cmd = Command::new("oha");
    cmd.args(["--no-tui", "--output-format", "json", "-c"])
        .arg(connections.to_string())
        .arg("-z")
        .arg(format!("{seconds}s"));
    if let Some(q) = rate {
        cmd.arg("-q")
            .arg(format!("{:.0}", q.max(1.0)))
            .arg("--latency-correction");
    }
    eprintln!(
        "xtask: == oha {url}{}",
        rate.map(|q| format!(" at {q:.0} req/s"))
            .unwrap_or_default()
    );
    let out = cmd.arg(url).output().context("cannot run oha")?;
    if !out.status.success() {
        bail!("oha failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let v: Value = serde_json::from_slice(&out.stdout).context("cannot parse oha's json")?;
    let pct = |key: &str| v["latencyPercentiles"][key].as_f64().unwrap_or(f64::NAN) * 1000.0;
    // What was not a 200: each status and each error oha counted, but for the requests in
    // flight when `-z` runs out, which oha cuts itself (their error names the deadline).
    let statuses = v["statusCodeDistribution"]
        .as_object()
        .into_iter()
        .flatten();
    let errors = v["errorDistribution"].as_object().into_iter().flatten();
    let not_ok: Vec<(String, u64)> = statuses
        .filter(|(code, _)| code.as_str() != "200")
        .map(|(code, n)| (format!("status {code}"), n.as_u64().unwrap_or(0)))
        .chain(
            errors
                .filter(|(what, _)| !what.contains("deadline"))
                .map(|(what, n)| (format!("error {what:?}"), n.as_u64().unwrap_or(0))),
        )
        .collect();
    let non_200 = not_ok.iter().map(|(_, n)| n).sum();
    if non_200 > 0 {
        let what: Vec<String> = not_ok.iter().map(|(w, n)| format!("{n} x {w}")).collect();
        eprintln!("xtask: == oha: {non_200} not 200: {}", what.join(", "));
    }
    Ok(Load {
        rps: v["summary"]["requestsPerSec"].as_f64().unwrap_or(0.0),
        p50_ms: pct("p50"),
        p99_ms: pct("p99"),
        p999_ms: pct("p99.9"),
        non_200,
    })
}
