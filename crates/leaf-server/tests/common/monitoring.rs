//! The metrics that `deploy/monitoring/alerts.yml` and `dashboard.json` name, checked against a
//! real server's `/metrics`: a renamed metric or label fails the tests that scrape one.

use std::collections::{BTreeMap, BTreeSet};

/// The rules and the dashboard, read from the repository.
fn monitoring_files() -> Vec<(String, String)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/monitoring");
    ["alerts.yml", "dashboard.json"]
        .iter()
        .map(|f| {
            let path = format!("{dir}/{f}");
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            (f.to_string(), text)
        })
        .collect()
}

/// Every metric the files name (`leaf_...`, a histogram's `_bucket` / `_count` / `_sum` as its
/// family), with the label names their selectors put on it (`name{label="..."}`).
pub(crate) fn named_metrics() -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (_, text) in monitoring_files() {
        let bytes = text.as_bytes();
        let mut i = 0;
        while let Some(at) = text[i..].find("leaf_") {
            let start = i + at;
            i = start + 5;
            // A name starts at a word boundary (not inside `runbook_url` or a word).
            if start > 0 && (bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_') {
                continue;
            }
            let end = text[start..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .map_or(text.len(), |e| start + e);
            let mut name = text[start..end].to_string();
            for suffix in ["_bucket", "_count", "_sum"] {
                if let Some(base) = name.strip_suffix(suffix) {
                    name = base.to_string();
                }
            }
            let labels = out.entry(name).or_default();
            if text[end..].starts_with('{') {
                let close = text[end..].find('}').map_or(text.len(), |c| end + c);
                for part in text[end + 1..close].split(',') {
                    let label = part
                        .split(['=', '!', '~'])
                        .next()
                        .unwrap_or_default()
                        .trim();
                    if !label.is_empty() && !["job", "instance", "le"].contains(&label) {
                        labels.insert(label.to_string());
                    }
                }
            }
            i = end;
        }
    }
    out
}

/// Fails naming each metric of [`named_metrics`] that `scrape` has no family of (`# TYPE`),
/// and each label a selector names that none of its samples carries, but those of `elsewhere`
/// (metrics another test's scrape checks).
pub(crate) fn assert_scrape_has_named_metrics(scrape: &str, elsewhere: &[&str]) {
    let mut missing = Vec::new();
    for (name, labels) in named_metrics() {
        if elsewhere.contains(&name.as_str()) {
            continue;
        }
        if !scrape
            .lines()
            .any(|l| l == format!("# TYPE {name} {}", kind(scrape, &name)))
        {
            missing.push(format!("{name} (no family)"));
            continue;
        }
        for label in labels {
            let carried = scrape
                .lines()
                .any(|l| l.starts_with(&format!("{name}{{")) && l.contains(&format!("{label}=\"")));
            if !carried {
                missing.push(format!("{name}{{{label}}} (no sample with the label)"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "deploy/monitoring names metrics the server's /metrics lacks:\n  {}\n\n{scrape}",
        missing.join("\n  ")
    );
}

/// The type word of `name`'s `# TYPE` line, or "" if none.
fn kind<'a>(scrape: &'a str, name: &str) -> &'a str {
    let prefix = format!("# TYPE {name} ");
    scrape
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or("")
}
