//! `server.allowed_hosts`: the names a request may call this server by. A page whose name an
//! attacker points at a node (DNS rebinding) reaches it with its own name in `Host` and an
//! `Origin` that matches, so the name is the only thing that tells it apart; a listed name
//! passes, and so does an IP address or `localhost`, which no DNS answer can rebind.

use std::net::{IpAddr, Ipv6Addr};

/// One entry: its name in lower case (an IPv6 address in brackets) without a trailing dot, and
/// its port if it names one (none: any port).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    name: String,
    port: Option<u16>,
}

/// The parsed `server.allowed_hosts`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AllowedHosts {
    /// Nothing configured: every name passes.
    any: bool,
    entries: Vec<Entry>,
}

impl Default for AllowedHosts {
    fn default() -> Self {
        AllowedHosts {
            any: true,
            entries: Vec::new(),
        }
    }
}

impl AllowedHosts {
    /// The configured list; `Err` says which entry is not a `name` or `name:port`.
    pub(crate) fn parse(list: &[String]) -> Result<Self, String> {
        let entries = list
            .iter()
            .enumerate()
            .map(|(i, raw)| {
                parse_entry(raw).ok_or_else(|| {
                    format!(
                        "entry {} ({raw:?}) is not a host name, an IP address or either with \
                         :port (leaf.example, leaf.example:8080, 10.0.0.1, [::1]:8080)",
                        i + 1
                    )
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(AllowedHosts {
            any: list.is_empty(),
            entries,
        })
    }

    /// The configured list, or, when an entry is malformed (a `Config` that skipped
    /// validation), a list that admits addresses and `localhost` only: a mistake closes the
    /// node to names rather than opening it to every name.
    pub(crate) fn from_config(list: &[String]) -> Self {
        Self::parse(list).unwrap_or_else(|why| {
            tracing::error!("server.allowed_hosts: {why}; only addresses and localhost pass");
            AllowedHosts {
                any: false,
                entries: Vec::new(),
            }
        })
    }

    /// Whether nothing is configured (every `Host` passes).
    pub(crate) fn is_any(&self) -> bool {
        self.any
    }

    /// Whether a request that calls the server `host` (a `Host` value, `name[:port]`) passes:
    /// nothing is listed; or `host` is an IP address or `localhost`; or its name is listed, with
    /// its port when the entry names one. Letter case and a trailing dot do not count.
    pub(crate) fn admits(&self, host: &str) -> bool {
        if self.any {
            return true;
        }
        let Some((name, port)) = split_port(host) else {
            return false;
        };
        let name = normalise(name);
        is_address(&name) || name == "localhost" || self.listed(&name, port)
    }

    /// Whether `name` is listed for `port` (`None`: the request named no port, which only an
    /// entry without one matches), letter case and a trailing dot aside. No address passes
    /// unlisted here: this is the question "is it one of the node's own configured names".
    pub(crate) fn lists(&self, name: &str, port: Option<u16>) -> bool {
        self.listed(&normalise(name), port)
    }

    fn listed(&self, normalised: &str, port: Option<u16>) -> bool {
        self.entries
            .iter()
            .any(|e| e.name == normalised && e.port.is_none_or(|p| Some(p) == port))
    }
}

fn parse_entry(raw: &str) -> Option<Entry> {
    let (name, port) = split_port(raw)?;
    if port == Some(0) {
        return None;
    }
    let name = normalise(name);
    (is_address(&name) || is_dns_name(&name)).then_some(Entry { name, port })
}

/// Lower case, without the one trailing dot a fully qualified name may carry.
fn normalise(name: &str) -> String {
    name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase()
}

/// An IPv4 address, or an IPv6 address in brackets.
fn is_address(name: &str) -> bool {
    match name.strip_prefix('[').and_then(|n| n.strip_suffix(']')) {
        Some(v6) => v6.parse::<Ipv6Addr>().is_ok(),
        None => name.parse::<IpAddr>().is_ok_and(|ip| ip.is_ipv4()),
    }
}

/// Dot-separated labels of letters, digits, `-` and `_` (internal names use it), each 1 to 63
/// characters, 253 in all.
fn is_dns_name(name: &str) -> bool {
    let label = |l: &str| {
        (1..=63).contains(&l.len())
            && l.bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
    };
    (1..=253).contains(&name.len()) && name.split('.').all(label)
}

/// `host[:port]` split into the name (an IPv6 address keeps its brackets) and the port, if
/// any; `None` when the port is not a number.
pub(crate) fn split_port(authority: &str) -> Option<(&str, Option<u16>)> {
    let colon = match authority.rfind(':') {
        Some(i) if !authority[i..].contains(']') => i,
        _ => return Some((authority, None)),
    };
    let port = authority[colon + 1..].parse().ok()?;
    Some((&authority[..colon], Some(port)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(entries: &[&str]) -> AllowedHosts {
        AllowedHosts::parse(&entries.iter().map(|e| e.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn entry_table() {
        let check = |raw: &str, ok: bool| {
            assert_eq!(AllowedHosts::parse(&[raw.into()]).is_ok(), ok, "{raw:?}");
        };
        for good in [
            "leaf.example",
            "LEAF.example:8080",
            "leaf.example.",
            "leaf_1.internal",
            "leaf",
            "10.0.0.1",
            "10.0.0.1:80",
            "[::1]",
            "[2001:db8::1]:8080",
        ] {
            check(good, true);
        }
        for bad in [
            "",
            ".",
            "http://leaf.example",
            "leaf.example/",
            "leaf example",
            "leaf.example:x",
            "leaf.example:0",
            "leaf.example:65536",
            "user@leaf.example",
            "leaf..example",
            ".leaf.example",
            "*.example",
            "[::1",
            "[leaf]:80",
            "::1",
            &format!("{}.example", "x".repeat(64)),
        ] {
            check(bad, false);
        }
    }

    #[test]
    fn admits_table() {
        let hosts = list(&["leaf.example", "Leaf2.example:8080", "[2001:db8::1]:80"]);
        let check = |host: &str, ok: bool| assert_eq!(hosts.admits(host), ok, "{host:?}");
        for good in [
            "leaf.example",
            "LEAF.EXAMPLE",
            "leaf.example:8080",
            "leaf.example:1",
            "leaf.example.",
            "leaf.example.:8080",
            "leaf2.example:8080",
            // Addresses and localhost: nothing to rebind.
            "10.0.0.1",
            "127.0.0.1:8080",
            "[::1]:8080",
            "[2001:db8::2]",
            "localhost",
            "LocalHost:8080",
        ] {
            check(good, true);
        }
        for bad in [
            "leaf2.example",
            "leaf2.example:8081",
            "leaf.example.attacker.example",
            "attacker.leaf.example",
            "localhost.attacker.example",
            "127.0.0.1.nip.io",
            "2130706433",
            "leaf.example:x",
            "leaf.example..",
            "",
        ] {
            check(bad, false);
        }
        assert!(AllowedHosts::default().admits("anything.example"));
        assert!(AllowedHosts::default().admits(""));
        let closed = AllowedHosts::from_config(&["not a host".into()]);
        assert!(
            !closed.admits("leaf.example"),
            "a bad list closes, never opens"
        );
        assert!(closed.admits("10.0.0.1:8080"));
    }

    #[test]
    fn lists_table() {
        let hosts = list(&["leaf.example", "leaf2.example:8080", "10.0.0.1"]);
        assert!(hosts.lists("leaf.example", Some(443)));
        assert!(hosts.lists("leaf.example", None));
        assert!(hosts.lists("leaf2.example", Some(8080)));
        assert!(!hosts.lists("leaf2.example", Some(80)));
        assert!(!hosts.lists("leaf2.example", None));
        assert!(hosts.lists("10.0.0.1", Some(80)));
        assert!(
            !hosts.lists("10.0.0.2", Some(80)),
            "an address is not listed"
        );
        assert!(
            !hosts.lists("localhost", Some(80)),
            "localhost is not listed"
        );
        assert!(hosts.lists("LEAF.example.", Some(80)));
        assert!(!hosts.lists("leaf.example..", Some(80)));
    }
}
