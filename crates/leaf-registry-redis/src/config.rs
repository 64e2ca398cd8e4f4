//! Configuration of the Redis segment store and of the `redis` workerId mode: where the server
//! is, the key prefix, how long to wait, the durability guard and replica acknowledgement, the
//! lease TTL. `Debug` never shows the password.

use std::fmt;
use std::time::Duration;

use leaf_core::{Error, Result};
use serde::{Deserialize, Serialize};

/// How to reach Redis and how the store and the registry use it. The segment store
/// (`[segment.redis]` with `store = "redis"`) and the `redis` workerId mode
/// (`[snowflake.redis]`) take the same settings; `lease_ttl_ms` concerns the registry only.
#[derive(Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedisConfig {
    /// The server, `redis://[user:password@]host:6379[/db]`. Only a single server (with
    /// replicas, optionally) is supported, not Redis Cluster. Default `"redis://127.0.0.1:6379"`.
    pub url: String,
    /// The prefix of every key written: the store's keys are `{key_prefix}:tags` and
    /// `{key_prefix}:tag:{tag}`, the registry's `{key_prefix}:{name}:workers:{id}` and
    /// `{key_prefix}:{name}:marks:{id}`. Default `"leaf"`.
    pub key_prefix: String,
    /// How long opening a connection may take, in milliseconds, before failing with
    /// `Unavailable`. Default `3000`.
    pub connect_timeout_ms: u64,
    /// The longest any one call (an allocation, a renewal, a lookup) may take, in milliseconds,
    /// before it fails with `Unavailable`: a stalled server never hangs a caller. Default `5000`.
    pub timeout_ms: u64,
    /// Run on a server whose `appendonly`/`appendfsync` are weaker than `yes`/`always`, whose
    /// connected replicas outnumber `wait_replicas` (an acknowledged allocation or mark may then
    /// be lost in a crash or a failover, and its IDs handed out twice), or whose `maxmemory`
    /// limit comes with a `maxmemory-policy` other than `noeviction` (Redis may then evict an
    /// id's mark, a tag's row or a live lease). A warning is logged at every connection.
    /// Default `false`: such a server is refused.
    pub accept_weak_durability: bool,
    /// Where the server refuses `CONFIG GET` (renamed, or denied by an ACL): `true` states that
    /// it runs with `appendonly yes`, `appendfsync always` and `maxmemory-policy noeviction` (or
    /// no `maxmemory`), which the guard then takes on trust. Ignored when `CONFIG GET` answers.
    /// Default `false`.
    pub assume_durable: bool,
    /// How many replicas must acknowledge every write (`WAIT`) before it counts; a write not
    /// acknowledged in time fails with `Unavailable`. A primary with more connected replicas
    /// than this is refused at connect (a failover could promote one that missed a write),
    /// unless `accept_weak_durability`. Default `0` (no `WAIT`; no replicas allowed).
    pub wait_replicas: u32,
    /// How long `WAIT` waits for the replicas, in milliseconds; at least 1 (Redis would wait
    /// for ever on 0). Default `1000`.
    pub wait_timeout_ms: u64,
    /// The `redis` workerId mode: the TTL of a worker id's lease, in milliseconds. It must be
    /// above the generator's minimum (renew period + fencing margin + latency allowance).
    /// Default `10000`.
    pub lease_ttl_ms: u64,
}

/// The segment store's settings (`[segment.redis]`).
pub type RedisStoreConfig = RedisConfig;

/// The `redis` workerId mode's settings (`[snowflake.redis]`).
pub type RedisRegistryConfig = RedisConfig;

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            url: "redis://127.0.0.1:6379".into(),
            key_prefix: "leaf".into(),
            connect_timeout_ms: 3000,
            timeout_ms: 5000,
            accept_weak_durability: false,
            assume_durable: false,
            wait_replicas: 0,
            wait_timeout_ms: 1000,
            lease_ttl_ms: 10_000,
        }
    }
}

impl RedisConfig {
    /// The defaults with `url`.
    pub fn with_url(url: impl Into<String>) -> Self {
        RedisConfig {
            url: url.into(),
            ..RedisConfig::default()
        }
    }

    /// The URL with its password replaced by `***`, for logs and messages.
    pub fn redacted_url(&self) -> String {
        redact_url(&self.url)
    }

    /// `Config`, naming the field, if a value cannot work.
    pub fn validate(&self) -> Result<()> {
        let scheme = self
            .url
            .split_once("://")
            .map(|(s, _)| s.to_ascii_lowercase());
        match scheme.as_deref() {
            Some("redis") => {}
            Some("rediss") => {
                return Err(Error::Config(format!(
                    "url {:?}: TLS (rediss://) is not built into this server",
                    self.redacted_url()
                )));
            }
            _ => {
                return Err(Error::Config(format!(
                    "url {:?} is not a redis:// url",
                    self.redacted_url()
                )));
            }
        }
        if self.key_prefix.is_empty() || self.key_prefix.chars().any(char::is_whitespace) {
            return Err(Error::Config(format!(
                "key_prefix {:?} must be non-empty, without whitespace",
                self.key_prefix
            )));
        }
        const HOUR_MS: u64 = 3_600_000;
        leaf_core::check_bounds(&[
            ("connect_timeout_ms", self.connect_timeout_ms, 1, HOUR_MS),
            ("timeout_ms", self.timeout_ms, 1, HOUR_MS),
            ("wait_replicas", u64::from(self.wait_replicas), 0, 1_000),
            // Redis waits for ever on 0.
            ("wait_timeout_ms", self.wait_timeout_ms, 1, HOUR_MS),
            ("lease_ttl_ms", self.lease_ttl_ms, 1, 24 * HOUR_MS),
        ])?;
        Ok(())
    }

    pub(crate) fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms.max(1))
    }

    pub(crate) fn connect_timeout(&self) -> Duration {
        Duration::from_millis(self.connect_timeout_ms.max(1))
    }

    /// The bound of a call that may end with a `WAIT`.
    pub(crate) fn write_timeout(&self) -> Duration {
        let wait = if self.wait_replicas > 0 {
            Duration::from_millis(self.wait_timeout_ms)
        } else {
            Duration::ZERO
        };
        self.timeout() + wait
    }

    pub(crate) fn lease_ttl(&self) -> Duration {
        Duration::from_millis(self.lease_ttl_ms)
    }
}

impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisConfig")
            .field("url", &self.redacted_url())
            .field("key_prefix", &self.key_prefix)
            .field("connect_timeout_ms", &self.connect_timeout_ms)
            .field("timeout_ms", &self.timeout_ms)
            .field("accept_weak_durability", &self.accept_weak_durability)
            .field("assume_durable", &self.assume_durable)
            .field("wait_replicas", &self.wait_replicas)
            .field("wait_timeout_ms", &self.wait_timeout_ms)
            .field("lease_ttl_ms", &self.lease_ttl_ms)
            .finish()
    }
}

/// The URL with its password shown as `***` (`leaf_core::redact_url`).
pub(crate) fn redact_url(url: &str) -> String {
    leaf_core::redact_url(url, "***")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_number_is_bounded_and_named() {
        leaf_testkit::config::assert_bounds::<RedisConfig>(
            RedisConfig::validate,
            &[
                ("connect_timeout_ms", 1, 3_600_000),
                ("timeout_ms", 1, 3_600_000),
                ("wait_replicas", 0, 1_000),
                ("wait_timeout_ms", 1, 3_600_000),
                ("lease_ttl_ms", 1, 86_400_000),
            ],
            &[],
        );
    }

    #[test]
    fn defaults_match_the_documented_ones() {
        let c = RedisConfig::default();
        assert_eq!(c.url, "redis://127.0.0.1:6379");
        assert_eq!(c.key_prefix, "leaf");
        assert_eq!(c.connect_timeout_ms, 3000);
        assert_eq!(c.timeout_ms, 5000);
        assert!(!c.accept_weak_durability);
        assert!(!c.assume_durable);
        assert_eq!(c.wait_replicas, 0);
        assert_eq!(c.wait_timeout_ms, 1000);
        assert_eq!(c.lease_ttl_ms, 10_000);
        c.validate().unwrap();
    }

    #[test]
    fn deserialises_partial_and_refuses_unknown_keys() {
        let c: RedisConfig = serde_json::from_str(
            r#"{"url": "redis://h:6380", "accept_weak_durability": true, "wait_replicas": 1}"#,
        )
        .unwrap();
        assert_eq!(c.url, "redis://h:6380");
        assert!(c.accept_weak_durability);
        assert_eq!(c.wait_replicas, 1);
        assert_eq!(c.timeout_ms, 5000);
        assert!(serde_json::from_str::<RedisConfig>(r#"{"acept_weak_durability": true}"#).is_err());
    }

    #[test]
    fn debug_never_shows_the_password() {
        let c = RedisConfig::with_url("redis://leaf:url-secret@db:6379/0?password=q-secret");
        let shown = format!("{c:?}");
        assert!(!shown.contains("secret"), "{shown}");
        assert!(
            shown.contains("redis://leaf:***@db:6379/0?password=***"),
            "{shown}"
        );
    }

    #[test]
    fn redaction_table() {
        let check = |url: &str, expect: &str| assert_eq!(redact_url(url), expect, "{url}");
        check("redis://u:p@h:6379/0", "redis://u:***@h:6379/0");
        check("redis://:p@h:6379", "redis://:***@h:6379");
        check("redis://h:6379", "redis://h:6379");
        check("not a url", "not a url");
    }

    #[test]
    fn validation_names_the_field() {
        let check = |c: RedisConfig, field: &str| {
            let e = c.validate().unwrap_err();
            assert!(
                matches!(&e, Error::Config(m) if m.starts_with(field)),
                "{field}: {e}"
            );
        };
        let d = RedisConfig::default;
        check(RedisConfig::with_url("mysql://h"), "url");
        check(RedisConfig::with_url("rediss://h"), "url");
        check(
            RedisConfig {
                key_prefix: String::new(),
                ..d()
            },
            "key_prefix",
        );
        check(
            RedisConfig {
                key_prefix: "a b".into(),
                ..d()
            },
            "key_prefix",
        );
        check(
            RedisConfig {
                connect_timeout_ms: 0,
                ..d()
            },
            "connect_timeout_ms",
        );
        check(
            RedisConfig {
                timeout_ms: 0,
                ..d()
            },
            "timeout_ms",
        );
        check(
            RedisConfig {
                wait_timeout_ms: 0,
                ..d()
            },
            "wait_timeout_ms",
        );
        check(
            RedisConfig {
                lease_ttl_ms: 0,
                ..d()
            },
            "lease_ttl_ms",
        );
    }
}
