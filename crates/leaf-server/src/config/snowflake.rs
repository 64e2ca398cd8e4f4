//! `[snowflake]`: snowflake mode, its bit layout and its workerId mode's sections.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use leaf_core::{Result, SnowflakeLayout, TWITTER_EPOCH_MS};
use serde::{Deserialize, Serialize};

use super::redact::redact_url;
use super::{bad, check_bounds, is_mysql_url, is_redis_url, keyed, name_keys};

/// The workerId modes the configuration can name.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum SnowflakeMode {
    /// Worker ids from configuration (feature `local`).
    Local,
    /// Leaf's ZooKeeper sequential nodes (feature `zk-normal`).
    ZkNormal,
    /// A recycled ZooKeeper pool (feature `zk-recycle`).
    ZkRecycle,
    /// The fork's `leaf_workerid_alloc` table (feature `mysql`).
    Mysql,
    /// etcd leases (feature `etcd`).
    Etcd,
    /// Leased ids on Redis (feature `redis`).
    Redis,
}

impl SnowflakeMode {
    /// The configured name.
    pub fn name(self) -> &'static str {
        match self {
            SnowflakeMode::Local => "local",
            SnowflakeMode::ZkNormal => "zk_normal",
            SnowflakeMode::ZkRecycle => "zk_recycle",
            SnowflakeMode::Mysql => "mysql",
            SnowflakeMode::Etcd => "etcd",
            SnowflakeMode::Redis => "redis",
        }
    }
}

/// `[snowflake]`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SnowflakeSection {
    /// Serve snowflake mode. Default `true`.
    pub enabled: bool,
    /// The workerId mode: `local`, `zk_normal`, `zk_recycle`, `mysql`, `etcd` or `redis`.
    /// Default `local`.
    pub mode: SnowflakeMode,
    /// The epoch, Unix milliseconds. Default 1288834974657 (Twitter's, Leaf's).
    pub epoch_ms: u64,
    /// The node's ip (its identity `ip:port`). Default empty: the first non-loopback address
    /// of `interface`, or of the machine.
    pub ip: String,
    /// The node's port. Default 0: the listen port.
    pub port: u16,
    /// Where the worker-id cache file and the warm-restart tag list live; must persist.
    /// Default `leaf-data`.
    pub cache_dir: PathBuf,
    /// Take the node's ip from this network interface when `ip` is empty. Default empty: any.
    pub interface: String,
    /// Bits of the timestamp. Default 41.
    pub timestamp_bits: u32,
    /// Bits of the worker id. Default 10.
    pub worker_bits: u32,
    /// Bits of the sequence. Default 12.
    pub sequence_bits: u32,
    /// A new millisecond starts the sequence at a random value in `0..random_start`; 0: off.
    /// Default 100.
    pub random_start: u64,
    /// A clock that went back by at most this is waited out; by more, requests fail. Default 5.
    pub max_backwards_ms: u64,
    /// The persisted time mark runs this far ahead of the issued timestamps. Default 3000.
    pub mark_window_ms: u64,
    /// How often the mark is written. Default 1000.
    pub mark_renew_ms: u64,
    /// At start-up, a clock behind the previous mark by at most this is waited out; by more,
    /// snowflake mode stays unavailable (segment mode serves). Never below `mark_window_ms`.
    /// Default 10000.
    pub max_startup_wait_ms: u64,
    /// Recycling modes stop issuing this long before their lease could expire. Default 1000.
    pub fencing_margin_ms: u64,
    /// A wall clock step forward larger than this (against the monotonic clock) is not trusted:
    /// snowflake mode stops until the clock comes back; a restart trusts it. Default 60000.
    pub max_forward_step_ms: u64,
    /// `[snowflake.local]`.
    pub local: LocalSection,
    /// `[snowflake.zk]`.
    pub zk: ZkSection,
    /// `[snowflake.mysql]`.
    pub mysql: MysqlSection,
    /// `[snowflake.etcd]`.
    pub etcd: EtcdSection,
    /// `[snowflake.redis]`.
    pub redis: RedisSection,
}

impl Default for SnowflakeSection {
    fn default() -> Self {
        SnowflakeSection {
            enabled: true,
            mode: SnowflakeMode::Local,
            epoch_ms: TWITTER_EPOCH_MS,
            ip: String::new(),
            port: 0,
            cache_dir: PathBuf::from("leaf-data"),
            interface: String::new(),
            timestamp_bits: 41,
            worker_bits: 10,
            sequence_bits: 12,
            random_start: 100,
            max_backwards_ms: 5,
            mark_window_ms: 3000,
            mark_renew_ms: 1000,
            max_startup_wait_ms: 10_000,
            fencing_margin_ms: 1000,
            max_forward_step_ms: 60_000,
            local: LocalSection::default(),
            zk: ZkSection::default(),
            mysql: MysqlSection::default(),
            etcd: EtcdSection::default(),
            redis: RedisSection::default(),
        }
    }
}

/// leaf-snowflake's `SnowflakeConfig` field names and the keys they are read from.
const GENERATOR_FIELD_KEYS: &[(&str, &str)] = &[
    ("layout", "snowflake.timestamp_bits"),
    ("random_start", "snowflake.random_start"),
    ("max_backwards", "snowflake.max_backwards_ms"),
    ("mark_window", "snowflake.mark_window_ms"),
    ("mark_renew", "snowflake.mark_renew_ms"),
    ("max_startup_wait", "snowflake.max_startup_wait_ms"),
    ("fencing_margin", "snowflake.fencing_margin_ms"),
    ("max_forward_step", "snowflake.max_forward_step_ms"),
];

impl SnowflakeSection {
    /// The generator's configuration, with `layout` (see [`layout`](Self::layout)).
    pub fn generator_config(&self, layout: SnowflakeLayout) -> leaf_snowflake::SnowflakeConfig {
        leaf_snowflake::SnowflakeConfig {
            layout,
            random_start: self.random_start,
            max_backwards: Duration::from_millis(self.max_backwards_ms),
            mark_window: Duration::from_millis(self.mark_window_ms),
            mark_renew: Duration::from_millis(self.mark_renew_ms),
            max_startup_wait: Duration::from_millis(self.max_startup_wait_ms),
            fencing_margin: Duration::from_millis(self.fencing_margin_ms),
            max_forward_step: Duration::from_millis(self.max_forward_step_ms),
        }
    }

    /// The bit layout and epoch; `Config` naming the key when invalid.
    pub fn layout(&self) -> Result<SnowflakeLayout> {
        SnowflakeLayout::new(
            self.timestamp_bits,
            self.worker_bits,
            self.sequence_bits,
            self.epoch_ms,
        )
        .map_err(|e| keyed("snowflake", e))
    }

    /// Bounds the numbers, then the layout, the mark and the identity.
    pub(super) fn validate(&self) -> Result<()> {
        const HOUR_MS: u64 = 3_600_000;
        check_bounds(&[
            // The largest sequence space (62 bits); the generator clamps to the layout's.
            ("snowflake.random_start", self.random_start, 0, 1 << 62),
            (
                "snowflake.max_backwards_ms",
                self.max_backwards_ms,
                0,
                60_000,
            ),
            ("snowflake.mark_window_ms", self.mark_window_ms, 0, HOUR_MS),
            ("snowflake.mark_renew_ms", self.mark_renew_ms, 1, HOUR_MS),
            (
                "snowflake.max_startup_wait_ms",
                self.max_startup_wait_ms,
                0,
                24 * HOUR_MS,
            ),
            (
                "snowflake.fencing_margin_ms",
                self.fencing_margin_ms,
                0,
                HOUR_MS,
            ),
            (
                "snowflake.max_forward_step_ms",
                self.max_forward_step_ms,
                1,
                24 * HOUR_MS,
            ),
            (
                "snowflake.zk.session_timeout_ms",
                self.zk.session_timeout_ms,
                1_000,
                HOUR_MS,
            ),
            (
                "snowflake.zk.recycle_idle_timeout_ms",
                self.zk.recycle_idle_timeout_ms,
                1,
                24 * HOUR_MS,
            ),
            (
                "snowflake.zk.max_peer_skew_ms",
                self.zk.max_peer_skew_ms,
                0,
                24 * HOUR_MS,
            ),
            (
                "snowflake.etcd.timeout_ms",
                self.etcd.timeout_ms,
                1,
                HOUR_MS,
            ),
            (
                "snowflake.etcd.lease_ttl_ms",
                self.etcd.lease_ttl_ms,
                1_000,
                24 * HOUR_MS,
            ),
            (
                "snowflake.redis.lease_ttl_ms",
                self.redis.lease_ttl_ms,
                1,
                24 * HOUR_MS,
            ),
            (
                "snowflake.redis.connect_timeout_ms",
                self.redis.connect_timeout_ms,
                0,
                HOUR_MS,
            ),
            (
                "snowflake.redis.timeout_ms",
                self.redis.timeout_ms,
                0,
                HOUR_MS,
            ),
            (
                "snowflake.redis.wait_replicas",
                u64::from(self.redis.wait_replicas),
                0,
                1_000,
            ),
            (
                "snowflake.redis.wait_timeout_ms",
                self.redis.wait_timeout_ms,
                0,
                HOUR_MS,
            ),
        ])?;
        // leaf-registry-etcd's rule (etcd leases count seconds), here so that a bad value is
        // refused with the configuration, not when the registry starts.
        if !self.etcd.lease_ttl_ms.is_multiple_of(1000) {
            return bad(
                "snowflake.etcd.lease_ttl_ms",
                format!(
                    "must be a whole number of seconds (etcd leases count seconds), got {}",
                    self.etcd.lease_ttl_ms
                ),
            );
        }
        // The generator's own timing rules, once, named by these keys.
        self.generator_config(self.layout()?)
            .validate()
            .map_err(|e| name_keys(e, GENERATOR_FIELD_KEYS))?;
        if !self.ip.is_empty() && self.ip.parse::<IpAddr>().is_err() {
            return bad(
                "snowflake.ip",
                format!("{:?} is not an ip address", self.ip),
            );
        }
        if self.enabled && self.mode == SnowflakeMode::Mysql && !is_mysql_url(&self.mysql.url) {
            return bad(
                "snowflake.mysql.url",
                format!(
                    "{:?} is not a mysql:// url, which snowflake.mode = \"mysql\" needs",
                    redact_url(&self.mysql.url)
                ),
            );
        }
        if self.enabled && self.mode == SnowflakeMode::Redis && !is_redis_url(&self.redis.url) {
            return bad(
                "snowflake.redis.url",
                format!(
                    "{:?} is not a redis:// (or rediss://) url, which snowflake.mode = \"redis\" needs",
                    redact_url(&self.redis.url)
                ),
            );
        }
        if self.cache_dir.as_os_str().is_empty() {
            return bad("snowflake.cache_dir", "must not be empty".into());
        }
        for key in self.local.work_id_map.keys() {
            if key.parse::<SocketAddr>().is_err() {
                return bad(
                    "snowflake.local.work_id_map",
                    format!("{key:?} is not an \"ip:port\" key"),
                );
            }
        }
        Ok(())
    }

    /// Checks `layout` against the wall clock `now_ms`; `Config` naming the key.
    pub fn check_layout_now(layout: &SnowflakeLayout, now_ms: u64) -> Result<()> {
        layout.check_now(now_ms).map_err(|e| keyed("snowflake", e))
    }
}

/// `[snowflake.local]`: worker ids from configuration.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(default, deny_unknown_fields)]
pub struct LocalSection {
    /// This node's worker id when `work_id_map` is empty. Default 0.
    pub worker_id: u64,
    /// `"ip:port" = id` for every node (the fork's `workIdMap`); when set, this node's entry is
    /// found by its identity. Default empty.
    pub work_id_map: BTreeMap<String, u64>,
}

/// `[snowflake.zk]`: the `zk_normal` and `zk_recycle` modes (`leaf-registry-zk`'s `ZkConfig`).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct ZkSection {
    /// ZooKeeper's connect string, `host:port[,host:port...]` (Leaf's
    /// `leaf.snowflake.zk.address`). Default `127.0.0.1:2181`.
    pub address: String,
    /// The ZooKeeper session timeout to negotiate. Default 10000.
    pub session_timeout_ms: u64,
    /// `zk_recycle`: the TTL of a worker id's lease; an id unrenewed this long is recycled.
    /// Default 10000.
    pub recycle_idle_timeout_ms: u64,
    /// The root of Leaf's nodes; a leaf name's live under `{root}/{name}`. Default `/snowflake`.
    pub root: String,
    /// Snowflake mode stays off when this node's clock is further than this from the average
    /// of its running peers' at start-up. Default 5000.
    pub max_peer_skew_ms: u64,
    /// `zk_normal`: stop issuing (503, code -4) when ZooKeeper has not confirmed this node's
    /// lock for the session timeout minus `snowflake.fencing_margin_ms`; resume once it has.
    /// Default false (Leaf's behaviour: keep serving through a ZooKeeper outage).
    pub fence_on_disconnect: bool,
}

impl Default for ZkSection {
    fn default() -> Self {
        ZkSection {
            address: "127.0.0.1:2181".into(),
            session_timeout_ms: 10_000,
            recycle_idle_timeout_ms: 10_000,
            root: "/snowflake".into(),
            max_peer_skew_ms: 5000,
            fence_on_disconnect: false,
        }
    }
}

/// `[snowflake.mysql]`.
#[derive(Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct MysqlSection {
    /// The database holding `leaf_workerid_alloc`. Default `mysql://user:pass@host:3306/leaf`.
    pub url: String,
}

impl Default for MysqlSection {
    fn default() -> Self {
        MysqlSection {
            url: "mysql://user:pass@host:3306/leaf".into(),
        }
    }
}

impl fmt::Debug for MysqlSection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MysqlSection")
            .field("url", &redact_url(&self.url))
            .finish()
    }
}

/// `[snowflake.etcd]`: the `etcd` mode (`leaf-registry-etcd`'s `EtcdConfig`).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct EtcdSection {
    /// etcd's client URLs (`http://host:2379`). Default `["http://127.0.0.1:2379"]`.
    pub endpoints: Vec<String>,
    /// The longest one etcd call may take, in milliseconds. Default 3000.
    pub timeout_ms: u64,
    /// The TTL of a worker id's lease, a whole number of seconds in milliseconds; an id whose
    /// owner stopped renewing is free for another node after it. Must exceed
    /// `snowflake.mark_renew_ms` + `snowflake.fencing_margin_ms` + 1 s. Default 10000.
    pub lease_ttl_ms: u64,
    /// A prefix for every key: a leaf name's keys live under `{prefix}/{name}/`. Empty or an
    /// absolute path (`/leaf-prod`). Default empty.
    pub prefix: String,
}

impl Default for EtcdSection {
    fn default() -> Self {
        EtcdSection {
            endpoints: vec!["http://127.0.0.1:2379".into()],
            timeout_ms: 3000,
            lease_ttl_ms: 10_000,
            prefix: String::new(),
        }
    }
}

/// `[snowflake.redis]`: the `redis` mode (`leaf-registry-redis`'s `RedisConfig`).
#[derive(Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct RedisSection {
    /// The Redis server. Default `redis://127.0.0.1:6379`.
    pub url: String,
    /// The first part of every key the registry writes (`{key_prefix}:{name}:workers:{id}`).
    /// Default `leaf`.
    pub key_prefix: String,
    /// The TTL of a worker id's lease; an id unrenewed this long is free for another node.
    /// Must exceed `snowflake.mark_renew_ms` + `snowflake.fencing_margin_ms` + 1 s.
    /// Default 10000.
    pub lease_ttl_ms: u64,
    /// How long to wait for a connection, in milliseconds. Default 3000.
    pub connect_timeout_ms: u64,
    /// The longest one call may take, in milliseconds. Default 5000.
    pub timeout_ms: u64,
    /// Start even when Redis is not set to `appendonly yes` + `appendfsync always` (a crash
    /// may then lose the marks); a warning is logged at every start. Default `false`.
    pub accept_weak_durability: bool,
    /// Take the server's durability as sufficient without asking (for servers where `CONFIG`
    /// is disabled). Default `false`.
    pub assume_durable: bool,
    /// After each write, `WAIT` for this many replicas; 0: no `WAIT`. Default 0.
    pub wait_replicas: u32,
    /// How long `WAIT` waits for the replicas, in milliseconds. Default 1000.
    pub wait_timeout_ms: u64,
}

impl Default for RedisSection {
    fn default() -> Self {
        RedisSection {
            url: "redis://127.0.0.1:6379".into(),
            key_prefix: "leaf".into(),
            lease_ttl_ms: 10_000,
            connect_timeout_ms: 3000,
            timeout_ms: 5000,
            accept_weak_durability: false,
            assume_durable: false,
            wait_replicas: 0,
            wait_timeout_ms: 1000,
        }
    }
}

impl fmt::Debug for RedisSection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisSection")
            .field("url", &redact_url(&self.url))
            .field("key_prefix", &self.key_prefix)
            .field("lease_ttl_ms", &self.lease_ttl_ms)
            .field("connect_timeout_ms", &self.connect_timeout_ms)
            .field("timeout_ms", &self.timeout_ms)
            .field("accept_weak_durability", &self.accept_weak_durability)
            .field("assume_durable", &self.assume_durable)
            .field("wait_replicas", &self.wait_replicas)
            .field("wait_timeout_ms", &self.wait_timeout_ms)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_generator_field_has_a_key() {
        // A new SnowflakeConfig field must be added to GENERATOR_FIELD_KEYS.
        let c = leaf_snowflake::SnowflakeConfig::default();
        let leaf_snowflake::SnowflakeConfig {
            layout: _,
            random_start: _,
            max_backwards: _,
            mark_window: _,
            mark_renew: _,
            max_startup_wait: _,
            fencing_margin: _,
            max_forward_step: _,
        } = c;
        let keys: Vec<&str> = GENERATOR_FIELD_KEYS.iter().map(|(f, _)| *f).collect();
        assert_eq!(
            keys,
            [
                "layout",
                "random_start",
                "max_backwards",
                "mark_window",
                "mark_renew",
                "max_startup_wait",
                "fencing_margin",
                "max_forward_step"
            ]
        );
    }

    #[test]
    fn the_generators_timing_rule_names_the_keys() {
        let s = SnowflakeSection {
            mark_renew_ms: 2000,
            mark_window_ms: 1500,
            ..SnowflakeSection::default()
        };
        let e = s.validate().unwrap_err().to_string();
        assert!(
            e.contains("snowflake.mark_renew_ms") && e.contains("snowflake.mark_window_ms"),
            "{e}"
        );
    }
}
