//! `[segment]`: segment mode and its store.

use std::fmt;
use std::time::Duration;

use leaf_core::{Error, Result, Tag};
use leaf_segment::SegmentConfig;
use serde::{Deserialize, Serialize};

use super::redact::redact_url;
use super::{bad, check_bounds, is_etcd_url, is_mysql_url, is_redis_url, name_keys};

/// The segment stores the configuration can name.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum StoreKind {
    /// The embedded SQLite file (feature `sqlite`).
    Sqlite,
    /// MySQL's `leaf_alloc` table (feature `mysql`).
    Mysql,
    /// etcd (feature `etcd`).
    Etcd,
    /// Redis, one hash per tag (feature `redis`).
    Redis,
}

impl StoreKind {
    /// The configured name.
    pub fn name(self) -> &'static str {
        match self {
            StoreKind::Sqlite => "sqlite",
            StoreKind::Mysql => "mysql",
            StoreKind::Etcd => "etcd",
            StoreKind::Redis => "redis",
        }
    }
}

/// `[segment]`.
#[derive(Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SegmentSection {
    /// Serve segment mode. Default `true`.
    pub enabled: bool,
    /// Load the next segment once this share of the current one is used. Default 0.1.
    pub preload_threshold: f64,
    /// How long a request waits for the next segment when both are spent. Default 10.
    pub switch_wait_ms: u64,
    /// The step doubles when a segment lasted less than this. Default 900.
    pub step_double_below_s: u64,
    /// The step halves when a segment lasted more than this. Default 1800.
    pub step_halve_above_s: u64,
    /// The dynamic step never doubles past this. Default 1000000.
    pub max_step: i64,
    /// How often the tag list is re-read from the store. Default 60.
    pub refresh_s: u64,
    /// How long "unknown tag" is remembered before the store is asked again. Default 1000.
    pub miss_ttl_ms: u64,
    /// Failed loads are retried with a backoff growing up to this. Default 5000.
    pub retry_backoff_max_ms: u64,
    /// `sqlite`, `mysql`, `etcd` or `redis`, each behind its cargo feature. Default `sqlite`.
    pub store: StoreKind,
    /// The store's address. Default `sqlite://leaf-data/leaf.db`.
    pub url: String,
    /// Connections of the store's pool. Default 4.
    pub max_connections: u32,
    /// SQLite's busy timeout, in milliseconds. Default 5000.
    pub busy_timeout_ms: u64,
    /// MySQL and Redis: how long to wait for a connection (opening one, or a free one of the
    /// pool), in milliseconds, before a load fails and is retried. Default 3000.
    pub connect_timeout_ms: u64,
    /// MySQL, Redis and etcd: the longest one call (an allocation, the tag list) may take, in
    /// milliseconds; a stalled server fails the call instead of hanging it. Default 5000.
    pub timeout_ms: u64,
    /// MySQL: InnoDB's `innodb_lock_wait_timeout` of the store's sessions, in seconds: how long
    /// an allocation waits for a row another server's transaction holds. At least 1. Default 3.
    pub lock_wait_timeout_s: u64,
    /// Tags created at start-up when missing (an existing row is never touched).
    /// Default `["leaf-segment-test"]`, Leaf's quick-start tag.
    pub seed_tags: Vec<String>,
    /// `[segment.redis]`: the Redis store's settings beyond `url` and the timeouts.
    pub redis: SegmentRedisSection,
}

/// `[segment.redis]` (`leaf-registry-redis`'s `RedisConfig`; the address is `segment.url`).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct SegmentRedisSection {
    /// The first part of every key the store writes. Default `leaf`.
    pub key_prefix: String,
    /// Start even when Redis is not set to `appendonly yes` + `appendfsync always` (a crash may
    /// then lose acknowledged allocations, and IDs repeat); a warning is logged at every start.
    /// Default `false`.
    pub accept_weak_durability: bool,
    /// Take the server's durability as sufficient without asking (for servers where `CONFIG`
    /// is disabled); the operator vouches for it. Default `false`.
    pub assume_durable: bool,
    /// After each write, `WAIT` for this many replicas to acknowledge it; 0: no `WAIT`.
    /// Default 0.
    pub wait_replicas: u32,
    /// How long `WAIT` waits for the replicas, in milliseconds. Default 1000.
    pub wait_timeout_ms: u64,
}

impl Default for SegmentRedisSection {
    fn default() -> Self {
        SegmentRedisSection {
            key_prefix: "leaf".into(),
            accept_weak_durability: false,
            assume_durable: false,
            wait_replicas: 0,
            wait_timeout_ms: 1000,
        }
    }
}

impl Default for SegmentSection {
    fn default() -> Self {
        SegmentSection {
            enabled: true,
            preload_threshold: 0.1,
            switch_wait_ms: 10,
            step_double_below_s: 900,
            step_halve_above_s: 1800,
            max_step: 1_000_000,
            refresh_s: 60,
            miss_ttl_ms: 1000,
            retry_backoff_max_ms: 5000,
            store: StoreKind::Sqlite,
            url: "sqlite://leaf-data/leaf.db".into(),
            max_connections: 4,
            busy_timeout_ms: 5000,
            connect_timeout_ms: 3000,
            timeout_ms: 5000,
            lock_wait_timeout_s: 3,
            seed_tags: vec!["leaf-segment-test".into()],
            redis: SegmentRedisSection::default(),
        }
    }
}

impl fmt::Debug for SegmentSection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SegmentSection")
            .field("enabled", &self.enabled)
            .field("preload_threshold", &self.preload_threshold)
            .field("switch_wait_ms", &self.switch_wait_ms)
            .field("step_double_below_s", &self.step_double_below_s)
            .field("step_halve_above_s", &self.step_halve_above_s)
            .field("max_step", &self.max_step)
            .field("refresh_s", &self.refresh_s)
            .field("miss_ttl_ms", &self.miss_ttl_ms)
            .field("retry_backoff_max_ms", &self.retry_backoff_max_ms)
            .field("store", &self.store)
            .field("url", &redact_url(&self.url))
            .field("max_connections", &self.max_connections)
            .field("busy_timeout_ms", &self.busy_timeout_ms)
            .field("connect_timeout_ms", &self.connect_timeout_ms)
            .field("timeout_ms", &self.timeout_ms)
            .field("lock_wait_timeout_s", &self.lock_wait_timeout_s)
            .field("seed_tags", &self.seed_tags)
            .field("redis", &self.redis)
            .finish()
    }
}

impl SegmentSection {
    /// The seed tags, validated.
    pub fn seed_tags(&self) -> Result<Vec<Tag>> {
        self.seed_tags
            .iter()
            .map(|t| {
                Tag::new(t).map_err(|e| Error::Config(format!("segment.seed_tags: {t:?}: {e}")))
            })
            .collect()
    }

    /// The allocator's configuration.
    pub fn allocator_config(&self) -> SegmentConfig {
        SegmentConfig {
            preload_threshold: self.preload_threshold,
            switch_wait: Duration::from_millis(self.switch_wait_ms),
            step_double_below: Duration::from_secs(self.step_double_below_s),
            step_halve_above: Duration::from_secs(self.step_halve_above_s),
            max_step: self.max_step,
            refresh_interval: Duration::from_secs(self.refresh_s),
            miss_ttl: Duration::from_millis(self.miss_ttl_ms),
            retry_backoff_max: Duration::from_millis(self.retry_backoff_max_ms),
        }
    }

    /// Bounds the numbers, then applies the allocator's own rules (named by these keys), then
    /// the store's.
    pub(super) fn validate(&self) -> Result<()> {
        const HOUR_MS: u64 = 3_600_000;
        const MONTH_S: u64 = 30 * 86_400;
        check_bounds(&[
            ("segment.switch_wait_ms", self.switch_wait_ms, 0, 60_000),
            (
                "segment.step_double_below_s",
                self.step_double_below_s,
                0,
                MONTH_S,
            ),
            (
                "segment.step_halve_above_s",
                self.step_halve_above_s,
                0,
                MONTH_S,
            ),
            // Above zero: leaf-segment's rule.
            ("segment.refresh_s", self.refresh_s, 0, 86_400),
            ("segment.miss_ttl_ms", self.miss_ttl_ms, 0, HOUR_MS),
            (
                "segment.retry_backoff_max_ms",
                self.retry_backoff_max_ms,
                0,
                HOUR_MS,
            ),
            (
                "segment.max_connections",
                u64::from(self.max_connections),
                1,
                1_000,
            ),
            ("segment.busy_timeout_ms", self.busy_timeout_ms, 0, HOUR_MS),
            (
                "segment.connect_timeout_ms",
                self.connect_timeout_ms,
                0,
                HOUR_MS,
            ),
            ("segment.timeout_ms", self.timeout_ms, 0, HOUR_MS),
            (
                "segment.lock_wait_timeout_s",
                self.lock_wait_timeout_s,
                0,
                3_600,
            ),
            (
                "segment.redis.wait_replicas",
                u64::from(self.redis.wait_replicas),
                0,
                1_000,
            ),
            (
                "segment.redis.wait_timeout_ms",
                self.redis.wait_timeout_ms,
                0,
                HOUR_MS,
            ),
        ])?;
        self.allocator_config()
            .validate()
            .map_err(|e| name_keys(e, FIELD_KEYS))?;
        self.seed_tags()?;
        if self.enabled && self.store == StoreKind::Mysql {
            if !is_mysql_url(&self.url) {
                return bad(
                    "segment.url",
                    format!(
                        "{:?} is not a mysql:// url, which segment.store = \"mysql\" needs",
                        redact_url(&self.url)
                    ),
                );
            }
            if self.lock_wait_timeout_s == 0 {
                return bad(
                    "segment.lock_wait_timeout_s",
                    "must be at least 1 (InnoDB counts whole seconds)".into(),
                );
            }
        }
        if self.enabled && self.store == StoreKind::Etcd && !is_etcd_url(&self.url) {
            return bad(
                "segment.url",
                format!(
                    "{:?} is not a list of http:// urls (http://host:2379[,http://host:2379...]), \
                     which segment.store = \"etcd\" needs",
                    redact_url(&self.url)
                ),
            );
        }
        if self.enabled && self.store == StoreKind::Redis && !is_redis_url(&self.url) {
            return bad(
                "segment.url",
                format!(
                    "{:?} is not a redis:// (or rediss://) url, which segment.store = \"redis\" needs",
                    redact_url(&self.url)
                ),
            );
        }
        Ok(())
    }
}

/// leaf-segment's field names and the keys they are read from.
const FIELD_KEYS: &[(&str, &str)] = &[
    ("preload_threshold", "segment.preload_threshold"),
    ("switch_wait", "segment.switch_wait_ms"),
    ("step_double_below", "segment.step_double_below_s"),
    ("step_halve_above", "segment.step_halve_above_s"),
    ("max_step", "segment.max_step"),
    ("refresh_interval", "segment.refresh_s"),
    ("miss_ttl", "segment.miss_ttl_ms"),
    ("retry_backoff_max", "segment.retry_backoff_max_ms"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocator_field_names_become_keys() {
        let check = |message: &str, expect: &str| {
            let e = name_keys(Error::Config(message.into()), FIELD_KEYS);
            assert_eq!(e.to_string(), Error::Config(expect.into()).to_string());
        };
        check(
            "step_double_below (3600s) must not exceed step_halve_above (1800s)",
            "segment.step_double_below_s (3600s) must not exceed segment.step_halve_above_s (1800s)",
        );
        check(
            "max_step must be from 1 to 2147483647, got 0",
            "segment.max_step must be from 1 to 2147483647, got 0",
        );
        check(
            "refresh_interval must be above zero",
            "segment.refresh_s must be above zero",
        );
        // Only whole words: a longer identifier that starts with a field name stays.
        check("max_steps x", "max_steps x");
    }

    #[test]
    fn every_allocator_field_has_a_key() {
        // A new SegmentConfig field must be added to FIELD_KEYS (and read in allocator_config).
        let c = format!("{:?}", SegmentSection::default().allocator_config());
        let fields: Vec<&str> = c
            .trim_start_matches("SegmentConfig { ")
            .split(", ")
            .filter_map(|kv| kv.split_once(": ").map(|(k, _)| k))
            .collect();
        let keys: Vec<&str> = FIELD_KEYS.iter().map(|(f, _)| *f).collect();
        assert_eq!(fields, keys);
    }
}
