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
}

impl LocalRegistryConfig {
    /// `Config`, naming the field, if a value cannot work: a `work_id_map` key that is not
    /// `ip:port`.
    pub fn validate(&self) -> Result<()> {
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
    fn defaults_match_the_documented_ones() {
        let c = SqliteStoreConfig::default();
        assert_eq!(c.url, "sqlite://leaf-data/leaf.db");
        assert_eq!(c.max_connections, 4);
        assert_eq!(c.busy_timeout_ms, 5000);
        let l = LocalRegistryConfig::default();
        assert_eq!(l.worker_id, 0);
        assert!(l.work_id_map.is_empty());
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
    }
}
