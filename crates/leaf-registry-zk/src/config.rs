//! Configuration of the ZooKeeper workerId modes (`[snowflake.zk]`): where the ensemble is, the
//! session timeout, the recycling idle timeout, the root of Leaf's nodes and the peer clock check.

use std::time::Duration;

use leaf_core::{Error, Result};
use serde::{Deserialize, Serialize};

/// How to reach ZooKeeper and how the `zk_normal` / `zk_recycle` modes use it.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ZkConfig {
    /// The ensemble, as ZooKeeper's connect string: `host:port[,host:port...]` (Leaf's
    /// `leaf.zk.list`). Default `"127.0.0.1:2181"`.
    pub address: String,
    /// The session timeout to negotiate, in milliseconds (the server clamps it into its
    /// `2..=20 × tickTime`). It bounds every call too: one that takes longer fails with
    /// `Unavailable`. A crashed node's live lock (`zk_normal`) disappears after it. Default `10000`.
    pub session_timeout_ms: u64,
    /// `zk_recycle`: the TTL of a worker id's lease, in milliseconds. The owner stores it in its
    /// node; any node's recycler returns the id to the pool once its node went unchanged that
    /// long. It must be at least the generator's minimum (renew period + fencing margin +
    /// latency allowance). Default `10000`.
    pub recycle_idle_timeout_ms: u64,
    /// The root of Leaf's nodes (Leaf's `/snowflake`); the nodes of a leaf name live under
    /// `{root}/{name}`. Default `"/snowflake"`.
    pub root: String,
    /// The peer clock check: snowflake mode stays off when this node's clock is further than
    /// this from the average of its peers', in milliseconds. Default `5000`.
    pub max_peer_skew_ms: u64,
    /// `zk_normal`: stop issuing when ZooKeeper has not confirmed this node's live lock for the
    /// session timeout minus the generator's fencing margin, and resume once the session (or a
    /// new one holding the lock) is confirmed. Each renewal then confirms the lock and writes
    /// the mark to the `forever` node before it counts. Off (Leaf's behaviour), a node keeps
    /// serving through a ZooKeeper outage, and a partition longer than the session timeout lets
    /// a second process of the same identity take the worker id while this one still issues.
    /// Default `false`.
    pub fence_on_disconnect: bool,
}

impl Default for ZkConfig {
    fn default() -> Self {
        ZkConfig {
            address: "127.0.0.1:2181".into(),
            session_timeout_ms: 10_000,
            recycle_idle_timeout_ms: 10_000,
            root: "/snowflake".into(),
            max_peer_skew_ms: 5000,
            fence_on_disconnect: false,
        }
    }
}

impl ZkConfig {
    /// The defaults with `address`.
    pub fn with_address(address: impl Into<String>) -> Self {
        ZkConfig {
            address: address.into(),
            ..ZkConfig::default()
        }
    }

    /// `Config`, naming the field, if a value cannot work.
    pub fn validate(&self) -> Result<()> {
        if self.address.trim().is_empty() {
            return Err(Error::Config(
                "address must name at least one host:port".into(),
            ));
        }
        const HOUR_MS: u64 = 3_600_000;
        leaf_core::check_bounds(&[
            // ZooKeeper grants at least 2 ticks (4 s with its default tickTime).
            (
                "session_timeout_ms",
                self.session_timeout_ms,
                1_000,
                HOUR_MS,
            ),
            (
                "recycle_idle_timeout_ms",
                self.recycle_idle_timeout_ms,
                1,
                24 * HOUR_MS,
            ),
            ("max_peer_skew_ms", self.max_peer_skew_ms, 0, 24 * HOUR_MS),
        ])?;
        let root = &self.root;
        let bad_root = !root.starts_with('/')
            || root.len() < 2
            || root.ends_with('/')
            || root.contains("//")
            || root.split('/').any(|seg| seg == "." || seg == "..");
        if bad_root {
            return Err(Error::Config(format!(
                "root {root:?} must be an absolute zookeeper path such as \"/snowflake\", \
                 without a trailing slash"
            )));
        }
        Ok(())
    }

    pub(crate) fn session_timeout(&self) -> Duration {
        Duration::from_millis(self.session_timeout_ms.max(1))
    }

    pub(crate) fn recycle_ttl(&self) -> Duration {
        Duration::from_millis(self.recycle_idle_timeout_ms)
    }
}

/// Whether `name` can be one path segment: the leaf name of `{root}/{name}`.
pub(crate) fn validate_name(name: &str) -> Result<()> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') {
        return Err(Error::Config(format!(
            "the leaf name {name:?} must be one zookeeper path segment (not empty, no '/')"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_number_is_bounded_and_named() {
        leaf_testkit::config::assert_bounds::<ZkConfig>(
            ZkConfig::validate,
            &[
                ("session_timeout_ms", 1_000, 3_600_000),
                ("recycle_idle_timeout_ms", 1, 86_400_000),
                ("max_peer_skew_ms", 0, 86_400_000),
            ],
            &[],
        );
    }

    #[test]
    fn defaults_match_the_documented_ones() {
        let c = ZkConfig::default();
        assert_eq!(c.address, "127.0.0.1:2181");
        assert_eq!(c.session_timeout_ms, 10_000);
        assert_eq!(c.recycle_idle_timeout_ms, 10_000);
        assert_eq!(c.root, "/snowflake");
        assert_eq!(c.max_peer_skew_ms, 5000);
        assert!(!c.fence_on_disconnect);
        c.validate().unwrap();
    }

    #[test]
    fn deserialises_partial_and_refuses_unknown_keys() {
        let c: ZkConfig =
            serde_json::from_str(r#"{"address": "zk1:2181,zk2:2181", "root": "/leaf"}"#).unwrap();
        assert_eq!(c.address, "zk1:2181,zk2:2181");
        assert_eq!(c.root, "/leaf");
        assert_eq!(c.session_timeout_ms, 10_000);
        assert!(serde_json::from_str::<ZkConfig>(r#"{"adress": "x"}"#).is_err());
    }

    #[test]
    fn validation_names_the_field() {
        let check = |c: ZkConfig, field: &str| {
            let e = c.validate().unwrap_err();
            assert!(
                matches!(&e, Error::Config(m) if m.starts_with(field)),
                "{field}: {e}"
            );
        };
        let d = ZkConfig::default;
        check(
            ZkConfig {
                address: " ".into(),
                ..d()
            },
            "address",
        );
        check(
            ZkConfig {
                session_timeout_ms: 0,
                ..d()
            },
            "session_timeout_ms",
        );
        check(
            ZkConfig {
                recycle_idle_timeout_ms: 0,
                ..d()
            },
            "recycle_idle_timeout_ms",
        );
        for root in ["snowflake", "/", "/a/", "/a//b", "/a/../b", ""] {
            check(
                ZkConfig {
                    root: root.into(),
                    ..d()
                },
                "root",
            );
        }
        ZkConfig {
            root: "/a/b".into(),
            ..d()
        }
        .validate()
        .unwrap();
    }

    #[test]
    fn names_are_one_segment() {
        validate_name("leaf").unwrap();
        for bad in ["", ".", "..", "a/b"] {
            assert!(validate_name(bad).is_err(), "{bad:?}");
        }
    }
}
