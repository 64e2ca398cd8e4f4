//! Configuration: built-in defaults, then `leaf.toml` (or `--config PATH`), then `LEAF_...`
//! environment variables with `__` between sections, merged with `figment`.
//!
//! Unknown keys in a file are errors; unknown `LEAF_` variables are returned as warnings (the
//! caller logs them), because a shell environment often carries variables meant for another
//! version or tool. Every error names the key it is about.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use figment::providers::{Format, Serialized, Toml};
use figment::value::{Dict, Map, Value};
use figment::{Figment, Metadata, Profile, Provider};
use leaf_core::{Error, Result, SnowflakeLayout, TWITTER_EPOCH_MS, Tag};
use serde::{Deserialize, Serialize};

/// The prefix of configuration variables.
pub const ENV_PREFIX: &str = "LEAF_";

/// The file read from the working directory when no `--config` is given.
pub const DEFAULT_FILE: &str = "leaf.toml";

/// The whole configuration.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Leaf's `leaf.name`: namespaces ZooKeeper/etcd paths and names the worker-id cache file.
    /// Default `"leaf"`.
    pub name: String,
    /// The HTTP server.
    pub server: ServerConfig,
    /// Logging.
    pub log: LogConfig,
    /// Segment mode.
    pub segment: SegmentSection,
    /// Snowflake mode.
    pub snowflake: SnowflakeSection,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            name: "leaf".into(),
            server: ServerConfig::default(),
            log: LogConfig::default(),
            segment: SegmentSection::default(),
            snowflake: SnowflakeSection::default(),
        }
    }
}

/// `[server]`.
#[derive(Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// The address to listen on. Default `0.0.0.0:8080`.
    pub listen: SocketAddr,
    /// The bearer token of the admin routes (`/v1/tags*`, `/cache`, `/db`). Default empty: the
    /// admin routes serve loopback peers only. Behind a reverse proxy on the same host every
    /// client looks local, so such deployments must set a token.
    pub admin_token: String,
    /// The largest `count` of one batch request. Default 10000.
    pub max_batch: usize,
    /// The largest request body, in bytes. Default 65536.
    pub max_body_bytes: usize,
    /// The largest request head (request line and headers), in bytes; at least 8192.
    /// Default 16384.
    pub max_header_bytes: usize,
    /// A connection that has not sent a complete request head within this many seconds is closed;
    /// this bounds idle keep-alive connections and slow clients alike. A request body gets as
    /// long (then 408). Default 30.
    pub idle_timeout_s: u64,
    /// At shutdown, requests in flight get this many seconds to finish. Default 10.
    pub shutdown_timeout_s: u64,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: SocketAddr::from(([0, 0, 0, 0], 8080)),
            admin_token: String::new(),
            max_batch: 10_000,
            max_body_bytes: 64 * 1024,
            max_header_bytes: 16 * 1024,
            idle_timeout_s: 30,
            shutdown_timeout_s: 10,
        }
    }
}

impl fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerConfig")
            .field("listen", &self.listen)
            .field("admin_token", &redacted(&self.admin_token))
            .field("max_batch", &self.max_batch)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("max_header_bytes", &self.max_header_bytes)
            .field("idle_timeout_s", &self.idle_timeout_s)
            .field("shutdown_timeout_s", &self.shutdown_timeout_s)
            .finish()
    }
}

/// `[log]`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// `text` (human-readable lines) or `json` (one object per line). Default `text`.
    pub format: LogFormat,
    /// A `tracing` filter: a level (`info`) or directives (`info,leaf_segment=debug`).
    /// Default `info`.
    pub level: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            format: LogFormat::Text,
            level: "info".into(),
        }
    }
}

/// How log lines look.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

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
}

impl StoreKind {
    /// The configured name.
    pub fn name(self) -> &'static str {
        match self {
            StoreKind::Sqlite => "sqlite",
            StoreKind::Mysql => "mysql",
            StoreKind::Etcd => "etcd",
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
    /// `sqlite`, `mysql` or `etcd`, each behind its cargo feature. Default `sqlite`.
    pub store: StoreKind,
    /// The store's address. Default `sqlite://leaf-data/leaf.db`.
    pub url: String,
    /// Connections of the store's pool. Default 4.
    pub max_connections: u32,
    /// SQLite's busy timeout, in milliseconds. Default 5000.
    pub busy_timeout_ms: u64,
    /// MySQL: how long to wait for a connection (opening one, or a free one of the pool), in
    /// milliseconds, before a load fails and is retried. Default 3000.
    pub connect_timeout_ms: u64,
    /// MySQL: the longest one call (an allocation transaction, the tag list) may take, in
    /// milliseconds; a stalled server fails the call instead of hanging it. Default 5000.
    pub timeout_ms: u64,
    /// MySQL: InnoDB's `innodb_lock_wait_timeout` of the store's sessions, in seconds: how long
    /// an allocation waits for a row another server's transaction holds. At least 1. Default 3.
    pub lock_wait_timeout_s: u64,
    /// Tags created at start-up when missing (an existing row is never touched).
    /// Default `["leaf-segment-test"]`, Leaf's quick-start tag.
    pub seed_tags: Vec<String>,
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
}

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
        }
    }
}

/// `[snowflake]`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SnowflakeSection {
    /// Serve snowflake mode. Default `true`.
    pub enabled: bool,
    /// The workerId mode: `local`, `zk_normal`, `zk_recycle`, `mysql` or `etcd`. Default `local`.
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
    /// `[snowflake.local]`.
    pub local: LocalSection,
    /// `[snowflake.zk]`.
    pub zk: ZkSection,
    /// `[snowflake.mysql]`.
    pub mysql: MysqlSection,
    /// `[snowflake.etcd]`.
    pub etcd: EtcdSection,
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
            local: LocalSection::default(),
            zk: ZkSection::default(),
            mysql: MysqlSection::default(),
            etcd: EtcdSection::default(),
        }
    }
}

impl SnowflakeSection {
    /// The bit layout and epoch; `Config` naming the key when invalid.
    pub fn layout(&self) -> Result<SnowflakeLayout> {
        SnowflakeLayout::new(
            self.timestamp_bits,
            self.worker_bits,
            self.sequence_bits,
            self.epoch_ms,
        )
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

/// `[snowflake.zk]`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct ZkSection {
    /// ZooKeeper's address (Leaf's `leaf.snowflake.zk.address`). Default `127.0.0.1:2181`.
    pub address: String,
}

impl Default for ZkSection {
    fn default() -> Self {
        ZkSection {
            address: "127.0.0.1:2181".into(),
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

/// `[snowflake.etcd]`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct EtcdSection {
    /// etcd's endpoints. Default `["http://127.0.0.1:2379"]`.
    pub endpoints: Vec<String>,
}

impl Default for EtcdSection {
    fn default() -> Self {
        EtcdSection {
            endpoints: vec!["http://127.0.0.1:2379".into()],
        }
    }
}

fn redacted(secret: &str) -> &'static str {
    if secret.is_empty() { "" } else { "<redacted>" }
}

/// `scheme://user:secret@host/..` with the secret replaced, for logs and `Debug`; a
/// `password=` query parameter is hidden too. The user part ends at the authority's last `@`,
/// so a password holding `@` is hidden whole.
pub fn redact_url(url: &str) -> String {
    const HIDDEN: &str = "<redacted>";
    let mut out = url.to_string();
    if let Some(scheme_end) = out.find("://") {
        let start = scheme_end + 3;
        let authority_end = out[start..]
            .find(['/', '?', '#'])
            .map_or(out.len(), |i| start + i);
        if let Some(at) = out[start..authority_end].rfind('@')
            && let Some(colon) = out[start..start + at].find(':')
        {
            out.replace_range(start + colon + 1..start + at, HIDDEN);
        }
    }
    if let Some(q) = out.find('?') {
        let query: Vec<String> = out[q + 1..]
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}={HIDDEN}"),
                _ => kv.to_string(),
            })
            .collect();
        out = format!("{}?{}", &out[..q], query.join("&"));
    }
    out
}

/// Whether `url` names a MySQL-compatible server.
fn is_mysql_url(url: &str) -> bool {
    url.split_once("://").is_some_and(|(scheme, _)| {
        scheme.eq_ignore_ascii_case("mysql") || scheme.eq_ignore_ascii_case("mariadb")
    })
}

/// A loaded configuration and the warnings its loading produced.
#[derive(Debug)]
pub struct Loaded {
    /// The configuration, validated.
    pub config: Config,
    /// Things to log once logging is up (unknown `LEAF_` variables).
    pub warnings: Vec<String>,
    /// The file that was read, if any.
    pub file: Option<PathBuf>,
}

/// Loads the configuration: defaults, then `file` (or `leaf.toml` in the working directory if it
/// exists), then the `LEAF_` variables among `env`.
pub fn load(
    file: Option<&Path>,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<Loaded> {
    let file = match file {
        Some(path) => {
            if !path.is_file() {
                return Err(Error::Config(format!(
                    "--config {}: no such file",
                    path.display()
                )));
            }
            Some(path.to_path_buf())
        }
        None => Some(PathBuf::from(DEFAULT_FILE)).filter(|p| p.is_file()),
    };
    let known = known_keys();
    let (env, warnings) = EnvVars::collect(env, &known);
    let mut figment = Figment::from(Serialized::defaults(Config::default()));
    if let Some(path) = &file {
        figment = figment.merge(Toml::file_exact(path));
    }
    let config: Config = figment.merge(env).extract().map_err(describe)?;
    config.validate()?;
    Ok(Loaded {
        config,
        warnings,
        file,
    })
}

impl Config {
    /// Checks what types alone cannot; errors name the key.
    pub fn validate(&self) -> Result<()> {
        let bad = |key: &str, why: String| Err(Error::Config(format!("{key}: {why}")));
        if self.name.is_empty() || self.name.contains(['/', '\\']) || self.name.contains("..") {
            return bad(
                "name",
                format!(
                    "{:?} must be non-empty and hold no path separator",
                    self.name
                ),
            );
        }
        let s = &self.server;
        if s.max_batch == 0 {
            return bad("server.max_batch", "must be at least 1".into());
        }
        if s.max_body_bytes == 0 {
            return bad("server.max_body_bytes", "must be at least 1".into());
        }
        if s.max_header_bytes < 8192 {
            return bad(
                "server.max_header_bytes",
                format!("must be at least 8192, got {}", s.max_header_bytes),
            );
        }
        if s.idle_timeout_s == 0 {
            return bad("server.idle_timeout_s", "must be at least 1".into());
        }
        if let Err(e) = tracing_subscriber::EnvFilter::try_new(&self.log.level) {
            return bad("log.level", format!("{:?}: {e}", self.log.level));
        }
        let g = &self.segment;
        if !(0.0..=1.0).contains(&g.preload_threshold) {
            return bad(
                "segment.preload_threshold",
                format!("must be between 0 and 1, got {}", g.preload_threshold),
            );
        }
        if g.max_step < 1 {
            return bad("segment.max_step", "must be at least 1".into());
        }
        if g.step_double_below_s > g.step_halve_above_s {
            return bad(
                "segment.step_double_below_s",
                "must not exceed segment.step_halve_above_s".into(),
            );
        }
        if g.refresh_s == 0 {
            return bad("segment.refresh_s", "must be at least 1".into());
        }
        if g.max_connections == 0 {
            return bad("segment.max_connections", "must be at least 1".into());
        }
        g.seed_tags()?;
        if g.enabled && g.store == StoreKind::Mysql {
            if !is_mysql_url(&g.url) {
                return bad(
                    "segment.url",
                    format!(
                        "{:?} is not a mysql:// url, which segment.store = \"mysql\" needs",
                        redact_url(&g.url)
                    ),
                );
            }
            if g.lock_wait_timeout_s == 0 {
                return bad(
                    "segment.lock_wait_timeout_s",
                    "must be at least 1 (InnoDB counts whole seconds)".into(),
                );
            }
        }
        let f = &self.snowflake;
        f.layout()?;
        if f.mark_renew_ms == 0 {
            return bad("snowflake.mark_renew_ms", "must be at least 1".into());
        }
        if f.mark_window_ms <= f.mark_renew_ms {
            return bad(
                "snowflake.mark_window_ms",
                format!(
                    "must exceed snowflake.mark_renew_ms ({}), or every renewal would make \
                     requests wait",
                    f.mark_renew_ms
                ),
            );
        }
        if !f.ip.is_empty() && f.ip.parse::<IpAddr>().is_err() {
            return bad("snowflake.ip", format!("{:?} is not an ip address", f.ip));
        }
        if f.enabled && f.mode == SnowflakeMode::Mysql && !is_mysql_url(&f.mysql.url) {
            return bad(
                "snowflake.mysql.url",
                format!(
                    "{:?} is not a mysql:// url, which snowflake.mode = \"mysql\" needs",
                    redact_url(&f.mysql.url)
                ),
            );
        }
        if f.cache_dir.as_os_str().is_empty() {
            return bad("snowflake.cache_dir", "must not be empty".into());
        }
        for key in f.local.work_id_map.keys() {
            if key.parse::<SocketAddr>().is_err() {
                return bad(
                    "snowflake.local.work_id_map",
                    format!("{key:?} is not an \"ip:port\" key"),
                );
            }
        }
        Ok(())
    }
}

/// Every key of the configuration, dotted (`server.listen`), and the keys of maps whose own keys
/// are free (`snowflake.local.work_id_map`).
#[derive(Debug)]
struct KnownKeys {
    leaves: BTreeSet<String>,
    maps: BTreeSet<String>,
    /// The leaves that hold text: an environment value for them is taken as written, so that a
    /// token such as `12345` or a name such as `007` stays text.
    strings: BTreeSet<String>,
}

impl KnownKeys {
    fn contains(&self, key: &str) -> bool {
        self.leaves.contains(key)
            || self.maps.iter().any(|m| {
                key == m
                    || key
                        .strip_prefix(m.as_str())
                        .is_some_and(|r| r.starts_with('.'))
            })
    }
}

fn known_keys() -> KnownKeys {
    fn walk(prefix: &str, dict: &Dict, out: &mut KnownKeys) {
        for (k, v) in dict {
            let key = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            match v {
                Value::Dict(_, d) if d.is_empty() => {
                    out.maps.insert(key);
                }
                Value::Dict(_, d) => walk(&key, d, out),
                Value::String(..) => {
                    out.strings.insert(key.clone());
                    out.leaves.insert(key);
                }
                _ => {
                    out.leaves.insert(key);
                }
            }
        }
    }
    let mut out = KnownKeys {
        leaves: BTreeSet::new(),
        maps: BTreeSet::new(),
        strings: BTreeSet::new(),
    };
    // Serialising the defaults cannot fail: every field is a plain value.
    if let Ok(Value::Dict(_, d)) = Value::serialize(Config::default()) {
        walk("", &d, &mut out);
    }
    out
}

/// The `LEAF_` variables that name known keys, as a figment provider whose errors name the
/// variable.
struct EnvVars {
    dict: Dict,
}

impl EnvVars {
    fn collect(
        vars: impl IntoIterator<Item = (String, String)>,
        known: &KnownKeys,
    ) -> (EnvVars, Vec<String>) {
        let mut dict = Dict::new();
        let mut warnings = Vec::new();
        for (name, value) in vars {
            let Some(rest) = name
                .get(..ENV_PREFIX.len())
                .filter(|p| p.eq_ignore_ascii_case(ENV_PREFIX))
                .map(|_| &name[ENV_PREFIX.len()..])
            else {
                continue;
            };
            let key = rest.to_ascii_lowercase().replace("__", ".");
            if key.is_empty() || key.split('.').any(str::is_empty) || !known.contains(&key) {
                warnings.push(format!(
                    "ignoring environment variable {name}: it names no configuration key"
                ));
                continue;
            }
            let value: Value = if known.strings.contains(&key) {
                Value::from(value)
            } else {
                value.parse().unwrap_or_else(|_| Value::from(value))
            };
            if let Some(nested) = figment::util::nest(&key, value).into_dict() {
                dict = merge_dicts(dict, nested);
            }
        }
        (EnvVars { dict }, warnings)
    }
}

fn merge_dicts(mut a: Dict, b: Dict) -> Dict {
    for (k, v) in b {
        let merged = match (a.remove(&k), v) {
            (Some(Value::Dict(_, x)), Value::Dict(tag, y)) => Value::Dict(tag, merge_dicts(x, y)),
            (_, v) => v,
        };
        a.insert(k, merged);
    }
    a
}

impl Provider for EnvVars {
    fn metadata(&self) -> Metadata {
        Metadata::named("environment")
            .interpolater(|_, keys| format!("{ENV_PREFIX}{}", keys.join("__").to_ascii_uppercase()))
    }

    fn data(&self) -> std::result::Result<Map<Profile, Dict>, figment::Error> {
        Ok(Profile::Default.collect(self.dict.clone()))
    }
}

/// Turns figment's errors into one message that names each key and where it came from.
fn describe(err: figment::Error) -> Error {
    let lines: Vec<String> = err
        .into_iter()
        .map(|e| {
            let mut path = e.path.clone();
            // figment puts an unknown field at the end of the path; serde alone would not.
            if let figment::error::Kind::UnknownField(field, _) = &e.kind
                && path.last() != Some(field)
            {
                path.push(field.clone());
            }
            let key = path.join(".");
            let source = match &e.metadata {
                Some(md) if md.name == "environment" => {
                    format!(" (from {})", md.interpolate(&Profile::Default, &path))
                }
                Some(md) => match &md.source {
                    Some(src) => format!(" (in {src})"),
                    None => String::new(),
                },
                None => String::new(),
            };
            if key.is_empty() {
                format!("{}{source}", e.kind)
            } else {
                format!("key {key}: {}{source}", e.kind)
            }
        })
        .collect();
    Error::Config(lines.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> Vec<(String, String)> {
        vars.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn load_toml(text: &str, vars: &[(&str, &str)]) -> Result<Loaded> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("leaf.toml");
        std::fs::write(&path, text).unwrap();
        load(Some(&path), env(vars))
    }

    #[test]
    fn defaults_are_the_designs() {
        let c = load(None, Vec::new()).unwrap().config;
        assert_eq!(c.server.listen.to_string(), "0.0.0.0:8080");
        assert_eq!(c.server.max_batch, 10_000);
        assert_eq!(c.segment.url, "sqlite://leaf-data/leaf.db");
        assert_eq!(c.segment.store, StoreKind::Sqlite);
        assert_eq!(c.snowflake.mode, SnowflakeMode::Local);
        assert_eq!(c.snowflake.local.worker_id, 0);
        assert_eq!(c.snowflake.cache_dir, PathBuf::from("leaf-data"));
        assert_eq!(c.segment.seed_tags, vec!["leaf-segment-test".to_string()]);
        assert_eq!(c.snowflake.layout().unwrap(), SnowflakeLayout::default());
    }

    #[test]
    fn the_readme_lists_every_key_with_its_default() {
        let readme = include_str!("../README.md");
        let start = readme.find("```toml\n").expect("a toml block") + "```toml\n".len();
        let len = readme[start..].find("```").expect("its end");
        let l = load_toml(&readme[start..start + len], &[]).unwrap();
        assert_eq!(l.config, Config::default());
        let listed: BTreeSet<String> = {
            let mut k = known_keys();
            k.leaves.append(&mut k.maps);
            k.leaves
        };
        for key in listed {
            let leaf = key.rsplit('.').next().unwrap();
            assert!(
                readme.contains(&format!("{leaf} = ")),
                "{key} is documented"
            );
        }
    }

    #[test]
    fn every_key_of_the_design_is_known() {
        let known = known_keys();
        for key in [
            "name",
            "server.listen",
            "server.admin_token",
            "server.max_batch",
            "segment.enabled",
            "segment.preload_threshold",
            "segment.switch_wait_ms",
            "segment.step_double_below_s",
            "segment.step_halve_above_s",
            "segment.max_step",
            "segment.refresh_s",
            "segment.miss_ttl_ms",
            "segment.store",
            "segment.url",
            "snowflake.enabled",
            "snowflake.mode",
            "snowflake.epoch_ms",
            "snowflake.ip",
            "snowflake.port",
            "snowflake.cache_dir",
            "snowflake.interface",
            "snowflake.timestamp_bits",
            "snowflake.worker_bits",
            "snowflake.sequence_bits",
            "snowflake.random_start",
            "snowflake.max_backwards_ms",
            "snowflake.mark_window_ms",
            "snowflake.mark_renew_ms",
            "snowflake.max_startup_wait_ms",
            "snowflake.local.worker_id",
            "snowflake.local.work_id_map",
            "snowflake.local.work_id_map.10.0.0.1:8080",
            "snowflake.zk.address",
            "snowflake.mysql.url",
            "snowflake.etcd.endpoints",
            "log.format",
            "log.level",
        ] {
            assert!(known.contains(key), "{key}");
        }
        assert!(!known.contains("server.lisen"));
        assert!(!known.contains("server"));
        assert!(!known.contains("snowflake.local.work_id_mapx"));
    }

    #[test]
    fn file_then_environment() {
        let l = load_toml(
            "name = \"svc\"\n[server]\nlisten = \"127.0.0.1:9000\"\nmax_batch = 5\n\
             [snowflake.local]\nwork_id_map = { \"10.0.0.1:8080\" = 3 }\n",
            &[
                ("LEAF_SERVER__LISTEN", "127.0.0.1:9090"),
                ("LEAF_SEGMENT__ENABLED", "false"),
                ("LEAF_SNOWFLAKE__MODE", "zk_recycle"),
                ("LEAFTEST_MYSQL_URL", "mysql://x"),
                ("PATH", "/bin"),
            ],
        )
        .unwrap();
        let c = l.config;
        assert_eq!(c.name, "svc");
        assert_eq!(c.server.listen.to_string(), "127.0.0.1:9090", "env wins");
        assert_eq!(c.server.max_batch, 5, "file wins over defaults");
        assert!(!c.segment.enabled);
        assert_eq!(c.snowflake.mode, SnowflakeMode::ZkRecycle);
        assert_eq!(c.snowflake.local.work_id_map.get("10.0.0.1:8080"), Some(&3));
        assert!(l.warnings.is_empty(), "{:?}", l.warnings);
    }

    #[test]
    fn unknown_key_in_a_file_is_an_error_naming_it() {
        let e = load_toml("[server]\nlisen = \"127.0.0.1:1\"\n", &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("key server.lisen: unknown field"), "{e}");
        assert!(e.contains("leaf.toml"), "{e}");
        let e = load_toml("[segmnt]\nenabled = true\n", &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("key segmnt: unknown field"), "{e}");
    }

    #[test]
    fn bad_values_name_the_key() {
        let check = |text: &str, key: &str| {
            let e = load_toml(text, &[]).unwrap_err().to_string();
            assert!(e.contains(key), "{text:?}: {e}");
        };
        check("[server]\nmax_batch = \"x\"\n", "server.max_batch");
        check("[server]\nmax_batch = 0\n", "server.max_batch");
        check("[server]\nlisten = \"nowhere\"\n", "server.listen");
        check("[segment]\nstore = \"redis\"\n", "segment.store");
        check(
            "[segment]\npreload_threshold = 1.5\n",
            "segment.preload_threshold",
        );
        check("[snowflake]\nmode = \"zk\"\n", "snowflake.mode");
        check(
            "[snowflake]\nworker_bits = 20\n",
            "snowflake.timestamp_bits",
        );
        check("[snowflake]\nip = \"ten\"\n", "snowflake.ip");
        check(
            "[snowflake]\nmark_window_ms = 500\n",
            "snowflake.mark_window_ms",
        );
        check("[log]\nformat = \"xml\"\n", "log.format");
        check(
            "[server]\nmax_header_bytes = 100\n",
            "server.max_header_bytes",
        );
        check("[segment]\nseed_tags = [\"a/b\"]\n", "segment.seed_tags");
    }

    #[test]
    fn bad_environment_value_names_the_variable() {
        let e = load(None, env(&[("LEAF_SERVER__MAX_BATCH", "lots")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("server.max_batch"), "{e}");
        assert!(e.contains("LEAF_SERVER__MAX_BATCH"), "{e}");
    }

    #[test]
    fn unknown_environment_variables_are_warnings() {
        let l = load(
            None,
            env(&[
                ("LEAF_SERVER__LISEN", "x"),
                ("LEAF_", "x"),
                ("LEAF_SERVER____LISTEN", "x"),
                ("LEAF_SERVER__MAX_BATCH", "7"),
            ]),
        )
        .unwrap();
        assert_eq!(l.config.server.max_batch, 7);
        assert_eq!(l.warnings.len(), 3, "{:?}", l.warnings);
        assert!(l.warnings[0].contains("LEAF_SERVER__LISEN"));
    }

    #[test]
    fn text_keys_take_environment_values_as_written() {
        let c = load(
            None,
            env(&[
                ("LEAF_SERVER__ADMIN_TOKEN", "12345"),
                ("LEAF_NAME", "007"),
                ("LEAF_SNOWFLAKE__IP", "10.0.0.1"),
                (
                    "LEAF_SNOWFLAKE__LOCAL__WORK_ID_MAP",
                    "{\"10.0.0.1:8080\" = 3}",
                ),
                ("LEAF_SEGMENT__SEED_TAGS", "[a, b]"),
                ("LEAF_SNOWFLAKE__ENABLED", "false"),
            ]),
        )
        .unwrap()
        .config;
        assert_eq!(c.server.admin_token, "12345");
        assert_eq!(c.name, "007");
        assert_eq!(c.snowflake.ip, "10.0.0.1");
        assert_eq!(c.snowflake.local.work_id_map.get("10.0.0.1:8080"), Some(&3));
        assert_eq!(c.segment.seed_tags, ["a", "b"]);
        assert!(!c.snowflake.enabled);
    }

    #[test]
    fn missing_config_file_is_an_error() {
        let e = load(Some(Path::new("/nonexistent/leaf.toml")), Vec::new()).unwrap_err();
        assert!(e.to_string().contains("--config"), "{e}");
    }

    #[test]
    fn debug_hides_secrets() {
        let mut c = Config::default();
        c.server.admin_token = "s3cret".into();
        c.segment.url = "mysql://leaf:hunter2@db:3306/leaf".into();
        c.snowflake.mysql.url = "mysql://leaf:hunter2@db:3306/leaf".into();
        let d = format!("{c:?}");
        assert!(!d.contains("s3cret") && !d.contains("hunter2"), "{d}");
        assert!(d.contains("mysql://leaf:<redacted>@db:3306/leaf"), "{d}");
    }

    #[test]
    fn redaction_table() {
        let check = |url: &str, expect: &str| assert_eq!(redact_url(url), expect, "{url}");
        check("mysql://u:p@h:3306/db", "mysql://u:<redacted>@h:3306/db");
        check("mysql://u:p@ss@h/db", "mysql://u:<redacted>@h/db");
        check("mysql://u@h/db", "mysql://u@h/db");
        check("mysql://h/db?a=b@c:d", "mysql://h/db?a=b@c:d");
        check(
            "mysql://u:p@h/db?ssl-mode=required&password=x",
            "mysql://u:<redacted>@h/db?ssl-mode=required&password=<redacted>",
        );
        check("sqlite://leaf-data/leaf.db", "sqlite://leaf-data/leaf.db");
        check("not a url", "not a url");
    }

    #[test]
    fn mysql_backends_need_mysql_urls_and_the_message_hides_the_password() {
        let e = load(
            None,
            env(&[
                ("LEAF_SEGMENT__STORE", "mysql"),
                ("LEAF_SEGMENT__URL", "postgres://u:hunter2@h/db"),
            ]),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("segment.url"), "{e}");
        assert!(!e.contains("hunter2"), "{e}");
        let e = load(
            None,
            env(&[
                ("LEAF_SEGMENT__STORE", "mysql"),
                ("LEAF_SEGMENT__URL", "mysql://u:p@h/leaf"),
                ("LEAF_SEGMENT__LOCK_WAIT_TIMEOUT_S", "0"),
            ]),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("segment.lock_wait_timeout_s"), "{e}");
        let e = load(None, env(&[("LEAF_SNOWFLAKE__MODE", "mysql")]))
            .map(|_| ())
            .err();
        assert!(
            e.is_none(),
            "the default snowflake.mysql.url is a mysql url: {e:?}"
        );
        let e = load(
            None,
            env(&[
                ("LEAF_SNOWFLAKE__MODE", "mysql"),
                ("LEAF_SNOWFLAKE__MYSQL__URL", "http://h"),
            ]),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("snowflake.mysql.url"), "{e}");
        // A disabled mode's backend settings are not checked.
        let c = load(
            None,
            env(&[
                ("LEAF_SEGMENT__ENABLED", "false"),
                ("LEAF_SEGMENT__STORE", "mysql"),
                ("LEAF_SEGMENT__TIMEOUT_MS", "250"),
            ]),
        )
        .unwrap()
        .config;
        assert_eq!(c.segment.timeout_ms, 250);
    }
}
