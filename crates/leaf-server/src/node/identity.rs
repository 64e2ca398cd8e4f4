//! The node's identity `ip:port` for the worker-id registry: `snowflake.ip`, else the first
//! non-loopback address of `snowflake.interface` (or of the machine), never silently
//! `127.0.0.1`; the port is `snowflake.port`, else the listen port.

use std::net::IpAddr;

use leaf_core::{Error, NodeIdentity, Result};

use crate::compose::config::SnowflakeSection;

/// Resolves the identity. `listen_port` is the port actually bound.
pub(crate) fn node_identity(cfg: &SnowflakeSection, listen_port: u16) -> Result<NodeIdentity> {
    let port = if cfg.port == 0 { listen_port } else { cfg.port };
    let ip = if cfg.ip.is_empty() {
        let addrs = interfaces()?;
        match pick(&addrs, &cfg.interface)? {
            Some(ip) => ip,
            None if single_local_id(cfg) => {
                // The `local` mode with one configured worker id never looks the identity up,
                // so an unknown ip cannot make two nodes share an id.
                tracing::warn!(
                    "no non-loopback address found; using 127.0.0.1 as the node's ip, which is \
                     harmless only because snowflake.mode = \"local\" with a single worker_id"
                );
                IpAddr::from([127, 0, 0, 1])
            }
            None => {
                return Err(Error::Config(format!(
                    "snowflake.ip: no non-loopback address found{}; set snowflake.ip",
                    if cfg.interface.is_empty() {
                        String::new()
                    } else {
                        format!(" on interface {:?}", cfg.interface)
                    }
                )));
            }
        }
    } else {
        cfg.ip.parse().map_err(|_| {
            Error::Config(format!("snowflake.ip: {:?} is not an ip address", cfg.ip))
        })?
    };
    Ok(NodeIdentity::new(ip.to_string(), port))
}

/// `local` mode without a `work_id_map` (whose identities must then be real).
fn single_local_id(cfg: &SnowflakeSection) -> bool {
    use figment::value::Value;
    let has_map = match cfg.backends.get("local") {
        Some(Value::Dict(_, d)) => {
            matches!(d.get("work_id_map"), Some(Value::Dict(_, m)) if !m.is_empty())
        }
        _ => false,
    };
    cfg.mode == "local" && !has_map
}

fn interfaces() -> Result<Vec<(String, IpAddr)>> {
    let list = if_addrs::get_if_addrs()
        .map_err(|e| Error::Config(format!("snowflake.ip: cannot list network interfaces: {e}")))?;
    Ok(list.into_iter().map(|i| (i.name.clone(), i.ip())).collect())
}

/// The first usable address among `addrs` (of `interface` if not empty): IPv4 before IPv6, never
/// loopback, link-local or unspecified. `Config` if `interface` names no interface.
fn pick(addrs: &[(String, IpAddr)], interface: &str) -> Result<Option<IpAddr>> {
    let candidates: Vec<IpAddr> = addrs
        .iter()
        .filter(|(name, _)| interface.is_empty() || name == interface)
        .map(|(_, ip)| *ip)
        .collect();
    if !interface.is_empty() && candidates.is_empty() {
        return Err(Error::Config(format!(
            "snowflake.interface: no interface named {interface:?} has an address"
        )));
    }
    let usable = |ip: &IpAddr| {
        !ip.is_loopback()
            && !ip.is_unspecified()
            && match ip {
                IpAddr::V4(v4) => !v4.is_link_local(),
                IpAddr::V6(v6) => !v6.is_unicast_link_local(),
            }
    };
    let v4 = candidates.iter().find(|ip| ip.is_ipv4() && usable(ip));
    let any = candidates.iter().find(|ip| usable(ip));
    Ok(v4.or(any).copied())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addrs(list: &[(&str, &str)]) -> Vec<(String, IpAddr)> {
        list.iter()
            .map(|(n, ip)| (n.to_string(), ip.parse().unwrap()))
            .collect()
    }

    #[test]
    fn pick_table() {
        let a = addrs(&[
            ("lo", "127.0.0.1"),
            ("lo", "::1"),
            ("eth0", "fe80::1"),
            ("eth0", "2001:db8::5"),
            ("eth0", "169.254.3.4"),
            ("eth1", "10.0.0.7"),
        ]);
        assert_eq!(pick(&a, "").unwrap(), Some("10.0.0.7".parse().unwrap()));
        assert_eq!(
            pick(&a, "eth0").unwrap(),
            Some("2001:db8::5".parse().unwrap())
        );
        assert_eq!(pick(&a, "lo").unwrap(), None);
        assert!(
            pick(&a, "wlan9")
                .unwrap_err()
                .to_string()
                .contains("snowflake.interface")
        );
        assert_eq!(pick(&addrs(&[("lo", "127.0.0.1")]), "").unwrap(), None);
    }

    #[test]
    fn configured_ip_and_port_win() {
        let cfg = SnowflakeSection {
            ip: "10.1.2.3".into(),
            port: 9999,
            ..SnowflakeSection::default()
        };
        assert_eq!(
            node_identity(&cfg, 8080).unwrap().to_string(),
            "10.1.2.3:9999"
        );
        let cfg = SnowflakeSection {
            ip: "10.1.2.3".into(),
            ..SnowflakeSection::default()
        };
        assert_eq!(
            node_identity(&cfg, 8080).unwrap().to_string(),
            "10.1.2.3:8080"
        );
    }

    #[test]
    fn a_missing_interface_is_an_error_not_a_fallback() {
        let cfg = SnowflakeSection {
            interface: "no-such-interface-9".into(),
            ..SnowflakeSection::default()
        };
        let e = node_identity(&cfg, 8080).unwrap_err();
        assert!(e.to_string().contains("snowflake.interface"), "{e}");
    }
}
