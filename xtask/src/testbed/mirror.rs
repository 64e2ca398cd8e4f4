//! The Debian mirror to build from, read from this machine's apt configuration.

use std::fs;
use std::path::PathBuf;

use anyhow::{Context, Result};

/// The Debian mirror of the host's apt configuration.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Mirror {
    pub(crate) uri: String,
    pub(crate) suite: String,
    pub(crate) keyring: Option<String>,
}

impl Mirror {
    /// Reads `/etc/apt/sources.list.d/*.sources` (deb822) and `/etc/apt/sources.list`, and
    /// picks the entry of the host's release (`VERSION_CODENAME`).
    pub(super) fn from_host() -> Result<Self> {
        let os = fs::read_to_string("/etc/os-release").unwrap_or_default();
        let codename = os
            .lines()
            .find_map(|l| l.strip_prefix("VERSION_CODENAME="))
            .map(|v| v.trim_matches('"').to_string())
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| "bookworm".into());
        let mut texts = Vec::new();
        if let Ok(dir) = fs::read_dir("/etc/apt/sources.list.d") {
            let mut paths: Vec<PathBuf> = dir.filter_map(|e| e.ok().map(|e| e.path())).collect();
            paths.sort();
            for p in paths {
                if p.extension().is_some_and(|e| e == "sources") {
                    texts.push((true, fs::read_to_string(&p).unwrap_or_default()));
                } else if p.extension().is_some_and(|e| e == "list") {
                    texts.push((false, fs::read_to_string(&p).unwrap_or_default()));
                }
            }
        }
        if let Ok(t) = fs::read_to_string("/etc/apt/sources.list") {
            texts.push((false, t));
        }
        texts
            .iter()
            .find_map(|(deb822, t)| {
                if *deb822 {
                    parse_deb822(t, &codename)
                } else {
                    parse_one_line(t, &codename)
                }
            })
            .with_context(|| {
                format!(
                    "no `deb` source for {codename} in /etc/apt/sources.list.d/*.sources or \
                     /etc/apt/sources.list; add the Debian mirror there"
                )
            })
    }
}

/// The first deb822 stanza of type `deb` that lists `suite`.
fn parse_deb822(text: &str, suite: &str) -> Option<Mirror> {
    for stanza in text.split("\n\n") {
        let field = |name: &str| {
            stanza.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim().eq_ignore_ascii_case(name)).then(|| v.trim().to_string())
            })
        };
        let enabled = field("Enabled").is_none_or(|v| v != "no");
        let is_deb = field("Types").is_some_and(|t| t.split_whitespace().any(|t| t == "deb"));
        let has_suite = field("Suites").is_some_and(|s| s.split_whitespace().any(|s| s == suite));
        if enabled && is_deb && has_suite {
            let uri = field("URIs")?.split_whitespace().next()?.to_string();
            return Some(Mirror {
                uri,
                suite: suite.to_string(),
                keyring: field("Signed-By").filter(|k| k.starts_with('/')),
            });
        }
    }
    None
}

/// The first one-line `deb URI SUITE ...` entry for `suite`.
fn parse_one_line(text: &str, suite: &str) -> Option<Mirror> {
    text.lines().find_map(|l| {
        let mut words = l.split_whitespace();
        if words.next()? != "deb" {
            return None;
        }
        let mut uri = words.next()?;
        let mut keyring = None;
        if uri.starts_with('[') {
            // Options: `[signed-by=/path arch=amd64]`.
            let mut opts = vec![uri];
            while !opts.last()?.ends_with(']') {
                opts.push(words.next()?);
            }
            keyring = opts
                .iter()
                .find_map(|o| o.trim_matches(['[', ']']).strip_prefix("signed-by="))
                .map(str::to_string);
            uri = words.next()?;
        }
        (words.next()? == suite).then(|| Mirror {
            uri: uri.to_string(),
            suite: suite.to_string(),
            keyring,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deb822_picks_the_release_stanza() {
        let text = "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n\
                    Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n\
                    Types: deb\nURIs: http://mirror.example/debian-security\n\
                    Suites: bookworm-security\nComponents: main\n";
        assert_eq!(
            parse_deb822(text, "bookworm"),
            Some(Mirror {
                uri: "http://mirror.example/debian".into(),
                suite: "bookworm".into(),
                keyring: Some("/usr/share/keyrings/debian-archive-keyring.gpg".into()),
            })
        );
        assert_eq!(parse_deb822(text, "trixie"), None);
        let disabled = "Enabled: no\nTypes: deb\nURIs: http://m/debian\nSuites: bookworm\n";
        assert_eq!(parse_deb822(disabled, "bookworm"), None);
    }

    #[test]
    fn one_line_sources_with_and_without_options() {
        let check = |text: &str, expect: Option<(&str, Option<&str>)>| {
            let got = parse_one_line(text, "bookworm");
            assert_eq!(
                got.as_ref().map(|m| (m.uri.as_str(), m.keyring.as_deref())),
                expect,
                "{text}"
            );
        };
        check(
            "deb http://m/debian bookworm main",
            Some(("http://m/debian", None)),
        );
        check(
            "# c\ndeb-src http://s/debian bookworm main\ndeb [arch=amd64 signed-by=/k.gpg] http://m/debian bookworm main",
            Some(("http://m/debian", Some("/k.gpg"))),
        );
        check("deb http://m/debian bookworm-updates main", None);
    }
}
