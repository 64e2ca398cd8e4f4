//! Configuration of the `local` workerId mode and of the SQLite segment store.

use std::collections::BTreeMap;

use leaf_core::{Error, Result};
use serde::{Deserialize, Serialize};

/// The `local` workerId mode (`[snowflake.local]`): the worker id comes from configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct LocalRegistryConfig {
    /// The worker id of this node when `work_id_map` is empty. Default `0`.
    pub worker_id: u64,
    /// `"ip:port" -> worker id`, the fork's `workIdMap`: one configuration file for a whole
    /// fleet, each node picking its id by its identity. When non-empty it replaces `worker_id`,
    /// and a node missing from it refuses to start. Default empty.
    pub work_id_map: BTreeMap<String, u64>,
    /// Where the worker id comes from: `"config"` (`worker_id` or `work_id_map`), or
    /// `"hostname_ordinal"`: the number after the last `-` of the host name (a Kubernetes
    /// StatefulSet's pods are `leaf-0`, `leaf-1`, ...: `leaf-2` gives 2) plus
    /// `worker_id_offset`. Default `"config"`.
    pub worker_id_from: WorkerIdFrom,
    /// Added to the host name's ordinal with `worker_id_from = "hostname_ordinal"`, so that
    /// several StatefulSets can share one id space (`leaf-a` from 0, `leaf-b` from 512).
    /// Default `0`.
    pub worker_id_offset: u64,
    /// The host name the ordinal is read from; empty: this machine's (the kernel's host name,
    /// which Kubernetes sets to the pod's name). Default `""`.
    pub hostname: String,
}

/// Where the `local` mode's worker id comes from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerIdFrom {
    /// `worker_id`, or the node's entry of `work_id_map`.
    #[default]
    Config,
    /// The ordinal at the end of the host name, plus `worker_id_offset`.
    HostnameOrdinal,
}

impl LocalRegistryConfig {
    /// `Config`, naming the field, if a value cannot work: a `work_id_map` key that is not
    /// `ip:port`.
    pub fn validate(&self) -> Result<()> {
        if self.worker_id_from == WorkerIdFrom::HostnameOrdinal && !self.work_id_map.is_empty() {
            return Err(Error::Config(
                "worker_id_from: \"hostname_ordinal\" and a work_id_map exclude each other".into(),
            ));
        }
        for key in self.work_id_map.keys() {
            if key.parse::<std::net::SocketAddr>().is_err() {
                return Err(Error::Config(format!(
                    "work_id_map: {key:?} is not an \"ip:port\" key"
                )));
            }
        }
        Ok(())
    }
}

/// The ordinal of `hostname`: the number after its last `-`, in its first label
/// (`leaf-2.leaf.default.svc` gives 2). `Config` naming `worker_id_from` when there is none.
pub fn hostname_ordinal(hostname: &str) -> Result<u64> {
    let label = hostname.split('.').next().unwrap_or_default();
    label
        .rsplit_once('-')
        .and_then(|(_, n)| (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())).then_some(n))
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| {
            Error::Config(format!(
                "worker_id_from: the host name {hostname:?} has no ordinal (a number after its \
                 last '-', as a StatefulSet's pods have: leaf-2)"
            ))
        })
}

/// The SQLite segment store (`[segment.sqlite]`, with `segment.store = "sqlite"`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SqliteStoreConfig {
    /// The database, as an sqlx SQLite URL. The file and its parent directory are created when
    /// missing. Default `"sqlite://leaf-data/leaf.db"`.
    pub url: String,
    /// The most connections the pool opens. Default `4`.
    pub max_connections: u32,
    /// How long a statement waits for another connection's (or process's) write lock before it
    /// fails with a retryable error, in milliseconds. Default `5000`.
    pub busy_timeout_ms: u64,
}

impl SqliteStoreConfig {
    /// `Config`, naming the field, if a value cannot work.
    pub fn validate(&self) -> Result<()> {
        if !self.url.to_ascii_lowercase().starts_with("sqlite:") {
            return Err(Error::Config(format!(
                "url {:?} is not a sqlite: url (sqlite://leaf-data/leaf.db)",
                self.url
            )));
        }
        leaf_core::check_bounds(&[
            ("max_connections", u64::from(self.max_connections), 1, 1_000),
            ("busy_timeout_ms", self.busy_timeout_ms, 0, 3_600_000),
        ])
    }
}

impl Default for SqliteStoreConfig {
    fn default() -> Self {
        SqliteStoreConfig {
            url: "sqlite://leaf-data/leaf.db".into(),
            max_connections: 4,
            busy_timeout_ms: 5000,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_number_is_bounded_and_named() {
        leaf_testkit::config::assert_bounds::<SqliteStoreConfig>(
            SqliteStoreConfig::validate,
            &[
                ("max_connections", 1, 1_000),
                ("busy_timeout_ms", 0, 3_600_000),
            ],
            &[],
        );
        // The worker id and its offset are held to the layout when the id is taken.
        leaf_testkit::config::assert_bounds::<LocalRegistryConfig>(
            LocalRegistryConfig::validate,
            &[],
            &["worker_id", "worker_id_offset"],
        );
    }

    #[test]
    fn defaults_match_the_documented_ones() {
        let c = SqliteStoreConfig::default();
        assert_eq!(c.url, "sqlite://leaf-data/leaf.db");
        assert_eq!(c.max_connections, 4);
        assert_eq!(c.busy_timeout_ms, 5000);
        let l = LocalRegistryConfig::default();
        assert_eq!(l.worker_id, 0);
        assert!(l.work_id_map.is_empty());
        assert_eq!(l.worker_id_from, WorkerIdFrom::Config);
        assert_eq!(l.worker_id_offset, 0);
        assert_eq!(l.hostname, "");
    }

    #[test]
    fn deserialises_partial_and_refuses_unknown_keys() {
        let c: SqliteStoreConfig = serde_json::from_str(r#"{"max_connections": 2}"#).unwrap();
        assert_eq!(c.max_connections, 2);
        assert_eq!(c.busy_timeout_ms, 5000);
        assert!(serde_json::from_str::<SqliteStoreConfig>(r#"{"urll": "x"}"#).is_err());

        let l: LocalRegistryConfig =
            serde_json::from_str(r#"{"work_id_map": {"10.0.0.1:8080": 3}}"#).unwrap();
        assert_eq!(l.work_id_map.get("10.0.0.1:8080"), Some(&3));
        assert_eq!(l.worker_id, 0);
        assert!(serde_json::from_str::<LocalRegistryConfig>(r#"{"workerId": 1}"#).is_err());
        let k: LocalRegistryConfig = serde_json::from_str(
            r#"{"worker_id_from": "hostname_ordinal", "worker_id_offset": 4}"#,
        )
        .unwrap();
        assert_eq!(k.worker_id_from, WorkerIdFrom::HostnameOrdinal);
        assert_eq!(k.worker_id_offset, 4);
        assert!(
            serde_json::from_str::<LocalRegistryConfig>(r#"{"worker_id_from": "ordinal"}"#)
                .is_err()
        );
    }

    #[test]
    fn hostname_ordinal_table() {
        let check = |host: &str, expect: Option<u64>| {
            let got = hostname_ordinal(host);
            match expect {
                Some(n) => assert_eq!(got.unwrap(), n, "{host}"),
                None => assert!(
                    matches!(&got, Err(Error::Config(m)) if m.starts_with("worker_id_from")
                        && m.contains(host)),
                    "{host}: {got:?}"
                ),
            }
        };
        check("leaf-0", Some(0));
        check("leaf-2", Some(2));
        check("my-leaf-server-17", Some(17));
        check("leaf-2.leaf.default.svc.cluster.local", Some(2));
        check("leaf", None);
        check("leaf-", None);
        check("leaf-x", None);
        check("leaf-+2", None);
        check("leaf-2a", None);
        check("", None);
        check("leaf-99999999999999999999999", None);
    }

    #[test]
    fn validation_names_the_field() {
        let check = |e: Error, field: &str| {
            assert!(
                matches!(&e, Error::Config(m) if m.starts_with(field)),
                "{field}: {e}"
            );
        };
        SqliteStoreConfig::default().validate().unwrap();
        check(
            SqliteStoreConfig {
                url: "mysql://h/db".into(),
                ..SqliteStoreConfig::default()
            }
            .validate()
            .unwrap_err(),
            "url",
        );
        check(
            SqliteStoreConfig {
                max_connections: 0,
                ..SqliteStoreConfig::default()
            }
            .validate()
            .unwrap_err(),
            "max_connections",
        );
        let mut l = LocalRegistryConfig::default();
        l.work_id_map.insert("10.0.0.1:8080".into(), 1);
        l.validate().unwrap();
        l.work_id_map.insert("node-a".into(), 2);
        check(l.validate().unwrap_err(), "work_id_map");
        let both = LocalRegistryConfig {
            worker_id_from: WorkerIdFrom::HostnameOrdinal,
            work_id_map: [("10.0.0.1:8080".to_owned(), 1)].into(),
            ..LocalRegistryConfig::default()
        };
        check(both.validate().unwrap_err(), "worker_id_from");
    }
}
