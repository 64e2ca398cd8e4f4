//! `cargo xtask monitoring`: the alert rules and the dashboard of `deploy/monitoring/` checked
//! with the tools that read them: `promtool check rules` and `promtool test rules` (Debian's
//! `prometheus` package, which `.ci/run` installs) and the dashboard parsed as JSON with its
//! panels' queries present. That every metric they name exists is the server's test
//! (`crates/leaf-server/tests/blackbox/monitoring.rs`, with the other tests).

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The promtool to run: `LEAFTEST_PROMTOOL`, else the one on `PATH`.
fn promtool() -> String {
    std::env::var("LEAFTEST_PROMTOOL").unwrap_or_else(|_| "promtool".into())
}

pub(crate) fn run(root: &Path) -> Result<()> {
    let dir = root.join("deploy/monitoring");
    for args in [
        ["check", "rules", "alerts.yml"],
        ["test", "rules", "alerts.test.yml"],
    ] {
        let out = Command::new(promtool())
            .current_dir(&dir)
            .args(args)
            .output()
            .with_context(|| {
                format!(
                    "running {} (Debian's prometheus package; or set LEAFTEST_PROMTOOL)",
                    promtool()
                )
            })?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if !out.status.success() {
            bail!("promtool {}:\n{text}", args.join(" "));
        }
        eprintln!(
            "xtask monitoring: promtool {}: {}",
            args.join(" "),
            text.trim()
        );
    }
    let path = dir.join("dashboard.json");
    let text = std::fs::read_to_string(&path).with_context(|| format!("{}", path.display()))?;
    let panels = dashboard_queries(&text)?;
    eprintln!("xtask monitoring: dashboard.json: {panels} panels, each with a query");
    Ok(())
}

/// The number of panels of a Grafana dashboard, each of which must have a title and at least
/// one query (`targets[].expr`).
fn dashboard_queries(text: &str) -> Result<usize> {
    let dashboard: serde_json::Value = serde_json::from_str(text).context("dashboard.json")?;
    let panels = dashboard["panels"]
        .as_array()
        .context("dashboard.json has no panels")?;
    for (i, panel) in panels.iter().enumerate() {
        let title = panel["title"].as_str().unwrap_or_default();
        let queries = panel["targets"].as_array().map_or(0, |t| {
            t.iter()
                .filter(|q| q["expr"].as_str().is_some_and(|e| !e.is_empty()))
                .count()
        });
        if title.is_empty() || queries == 0 {
            bail!("dashboard.json: panel {i} needs a title and a query");
        }
    }
    if panels.is_empty() {
        bail!("dashboard.json has no panels");
    }
    Ok(panels.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panel_without_a_query_is_refused() {
        let ok = r#"{"panels":[{"title":"t","targets":[{"expr":"up"}]}]}"#;
        assert_eq!(dashboard_queries(ok).unwrap(), 1);
        let no_query = r#"{"panels":[{"title":"t","targets":[]}]}"#;
        assert!(dashboard_queries(no_query).is_err());
        assert!(dashboard_queries(r#"{"panels":[]}"#).is_err());
        assert!(dashboard_queries("not json").is_err());
    }

    #[test]
    fn the_repositorys_dashboard_passes() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let text = std::fs::read_to_string(root.join("deploy/monitoring/dashboard.json")).unwrap();
        assert!(dashboard_queries(&text).unwrap() >= 10);
    }
}
