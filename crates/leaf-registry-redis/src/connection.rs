//! The connection to Redis shared by every call of a store or registry: opened on demand,
//! checked by the durability guard every time it is opened (at start and after every
//! reconnect) and again every [`RECHECK`] while open (a replica that connects later, or a
//! setting changed at run time, is found within that), dropped on an I/O error or a timeout
//! so that the next call opens a new one, and `WAIT` for replicas after writes.
//!
//! The redis crate's `ConnectionManager` reconnects by itself, but offers no hook to run the
//! guard on the new connection (only a RESP3 push channel); this small manager does. It also
//! builds the client anew for every connection it opens, reading `password_file` and the TLS
//! files then, so that a rotated secret or certificate takes effect at the next reconnection.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex as StdMutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use std::path::Path;

use leaf_core::{Error, Result};
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{
    AsyncConnectionConfig, Client, ClientTlsConfig, ErrorKind, IntoConnectionInfo, RedisError,
    Script, ServerErrorKind, TlsCertificates,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::config::RedisConfig;
use crate::error::{bounded, breaks_connection, map_redis, map_redis_at_start};

/// One lazily opened, guarded, multiplexed connection.
pub(crate) struct Connection {
    config: RedisConfig,
    /// The start-up check of the ACL user's grants ([`ACL_PROBE`]).
    probe: Script,
    /// The connection in use, if one is open.
    current: StdMutex<Option<MultiplexedConnection>>,
    /// Serialises opening, so that concurrent calls open one connection, not many.
    opening: tokio::sync::Mutex<()>,
    /// Whether a connection passed the guard once: failures before that are start-up failures
    /// (`Config`), after it outages (`Unavailable`).
    started: AtomicBool,
    /// When the open connection last passed the guard.
    checked: StdMutex<Instant>,
}

/// How often the guard checks the server of an open connection again.
pub(crate) const RECHECK: Duration = Duration::from_secs(5);

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("url", &self.config.redacted_url())
            .finish_non_exhaustive()
    }
}

/// What the durability guard found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Durability {
    /// `appendonly yes` and `appendfsync always`.
    Durable,
    /// The two settings as the server reported them, at least one weaker.
    Weak {
        appendonly: String,
        appendfsync: String,
    },
    /// The server refused `CONFIG GET` and `assume_durable` is not set.
    Unknown,
}

/// What the guard found of the server's eviction: whether Redis may drop Leaf's keys to stay
/// under its `maxmemory`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Eviction {
    /// `maxmemory-policy noeviction`, or no `maxmemory` (0): Redis evicts nothing.
    None,
    /// A `maxmemory` limit and a policy that evicts keys under it, as the server reported them.
    Evicting { maxmemory: String, policy: String },
    /// The server refused `CONFIG GET` and `assume_durable` is not set.
    Unknown,
}

/// Judges the server's answers to `CONFIG GET maxmemory` / `maxmemory-policy` (`None`:
/// refused). Any policy but `noeviction` is refused, a future one too: `allkeys-*` evicts any
/// key (an id's mark, a tag's row), `volatile-*` the keys with a TTL (the live leases). Redis
/// evicts only once `maxmemory` is set and reached, so with `maxmemory` 0 the policy is
/// harmless; an operator who sets `maxmemory` at run time is found by the re-check.
pub(crate) fn judge_eviction(
    maxmemory: Option<&str>,
    policy: Option<&str>,
    assume_durable: bool,
) -> Eviction {
    match (maxmemory, policy) {
        (Some(m), Some(p)) => {
            let unlimited = m.trim().parse::<u64>() == Ok(0);
            if unlimited || p.trim().eq_ignore_ascii_case("noeviction") {
                Eviction::None
            } else {
                Eviction::Evicting {
                    maxmemory: m.to_owned(),
                    policy: p.to_owned(),
                }
            }
        }
        _ if assume_durable => Eviction::None,
        _ => Eviction::Unknown,
    }
}

/// What a policy other than `noeviction` can take from Leaf, for the guard's message.
fn what_it_evicts(policy: &str) -> &'static str {
    let p = policy.to_ascii_lowercase();
    if p.starts_with("volatile-") {
        "the keys with a ttl, which are the live worker id leases (a holder loses its id before \
         its lease_ttl_ms, and another node can claim it meanwhile)"
    } else {
        "any key, such as a worker id's mark (its next holder starts from mark 0, below the \
         timestamps already issued with it) or a tag's row"
    }
}

/// Judges the server's answers to `CONFIG GET appendonly` / `appendfsync` (`None`: refused).
pub(crate) fn judge(
    appendonly: Option<&str>,
    appendfsync: Option<&str>,
    assume_durable: bool,
) -> Durability {
    match (appendonly, appendfsync) {
        (Some(a), Some(f)) => {
            if a.eq_ignore_ascii_case("yes") && f.eq_ignore_ascii_case("always") {
                Durability::Durable
            } else {
                Durability::Weak {
                    appendonly: a.to_owned(),
                    appendfsync: f.to_owned(),
                }
            }
        }
        _ if assume_durable => Durability::Durable,
        _ => Durability::Unknown,
    }
}

impl Connection {
    /// A connection to the server of `config`; nothing is contacted yet.
    pub(crate) fn new(config: &RedisConfig) -> Result<Self> {
        config.validate()?;
        if config.tls() {
            // The redis crate's rustls takes the process's provider: ring, as everywhere in
            // this workspace (none is installed yet in a process that made no TLS config).
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        // Everything is read and parsed once now, so that a bad file fails at construction.
        client_of(config)?;
        Ok(Connection {
            probe: Script::new(ACL_PROBE),
            config: config.clone(),
            current: StdMutex::default(),
            opening: tokio::sync::Mutex::new(()),
            started: AtomicBool::new(false),
            checked: StdMutex::new(Instant::now()),
        })
    }

    pub(crate) fn config(&self) -> &RedisConfig {
        &self.config
    }

    /// Opens the connection now (if none is open) and runs the guard: a store's start-up.
    pub(crate) async fn open(&self) -> Result<()> {
        bounded(
            self.config.connect_timeout() + self.config.timeout(),
            "the connection",
            self.get(),
        )
        .await
        .map(drop)
    }

    /// The open connection (checked again by the guard once [`RECHECK`] has passed), or a new
    /// one that passed the guard.
    async fn get(&self) -> Result<MultiplexedConnection> {
        if let Some(c) = self.current.lock().expect("connection lock").clone()
            && !self.recheck_due()
        {
            return Ok(c);
        }
        let _opening = self.opening.lock().await;
        let open = self.current.lock().expect("connection lock").clone();
        if let Some(mut c) = open {
            if !self.recheck_due() {
                return Ok(c);
            }
            if let Err(e) = self.guard(&mut c, false).await {
                self.reset();
                return Err(e);
            }
            *self.checked.lock().expect("check lock") = Instant::now();
            return Ok(c);
        }
        let at_start = !self.started.load(Ordering::Acquire);
        let client = match client_of(&self.config) {
            Ok(c) => c,
            Err(e) if at_start => return Err(e),
            Err(e) => {
                tracing::error!(error = %e, "cannot open a new redis connection");
                return Err(Error::Unavailable(
                    "redis: the configured password or certificate files cannot be read".into(),
                ));
            }
        };
        let cfg = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.config.connect_timeout()))
            .set_response_timeout(Some(self.config.timeout()));
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&cfg)
            .await
            .map_err(|e| self.map_open(e, at_start))?;
        self.guard(&mut conn, at_start).await?;
        self.check_grants(&mut conn, at_start).await?;
        *self.checked.lock().expect("check lock") = Instant::now();
        self.started.store(true, Ordering::Release);
        *self.current.lock().expect("connection lock") = Some(conn.clone());
        tracing::debug!(url = %self.config.redacted_url(), "redis connection opened");
        Ok(conn)
    }

    /// The durability guard on a new connection: the server's version, its AOF settings, its
    /// eviction policy, and its replicas against `wait_replicas`.
    async fn guard(&self, conn: &mut MultiplexedConnection, at_start: bool) -> Result<()> {
        let url = self.config.redacted_url();
        // The first command on a new connection: how it fails tells a wrong url or user.
        let server = info_raw(conn, "server")
            .await
            .map_err(|e| self.map_open(e, at_start))?;
        if let Some(problem) = judge_version(server.get("redis_version").map(String::as_str)) {
            let problem = format!("redis at {url} {problem}");
            return Err(if at_start {
                Error::Config(problem)
            } else {
                tracing::error!(url = %url, "{problem}; refusing the reconnected server");
                Error::Unavailable("the redis server is older than 5.0".into())
            });
        }
        let appendonly = config_get(conn, "appendonly").await?;
        let appendfsync = config_get(conn, "appendfsync").await?;
        let maxmemory = config_get(conn, "maxmemory").await?;
        let policy = config_get(conn, "maxmemory-policy").await?;
        let assume = self.config.assume_durable;
        let verdict = judge(appendonly.as_deref(), appendfsync.as_deref(), assume);
        let eviction = judge_eviction(maxmemory.as_deref(), policy.as_deref(), assume);
        // Each problem: what the log says (with the server's address), and what a client may
        // learn at a reconnect.
        let mut problems: Vec<(String, &str)> = Vec::new();
        let weak_aof = "redis durability is weaker than appendonly yes and appendfsync always";
        if let Durability::Weak {
            appendonly,
            appendfsync,
        } = &verdict
        {
            problems.push((
                format!(
                    "redis at {url} runs with appendonly {appendonly} and appendfsync \
                     {appendfsync}; leaf needs appendonly yes and appendfsync always, or an \
                     acknowledged allocation can be lost in a crash and its ids handed out twice"
                ),
                weak_aof,
            ));
        }
        if let Eviction::Evicting { maxmemory, policy } = &eviction {
            problems.push((
                format!(
                    "redis at {url} runs with maxmemory {maxmemory} and maxmemory-policy \
                     {policy}: once the limit is reached it evicts {}; set maxmemory-policy \
                     noeviction",
                    what_it_evicts(policy)
                ),
                "redis may evict leaf's keys: its maxmemory-policy is not noeviction",
            ));
        }
        // One message for both: CONFIG GET is refused as a whole (renamed, or denied by an ACL).
        if verdict == Durability::Unknown || eviction == Eviction::Unknown {
            problems.push((
                format!(
                    "redis at {url} refuses CONFIG GET (renamed, or not granted to the ACL \
                     user), so its durability and eviction settings cannot be checked; leaf \
                     needs appendonly yes, appendfsync always and maxmemory-policy noeviction: \
                     set assume_durable = true to vouch that the server runs with them"
                ),
                weak_aof,
            ));
        }
        let replication = info(conn, "replication").await?;
        if let Some(problem) = judge_replicas(&replication, self.config.wait_replicas) {
            problems.push((
                format!("redis at {url} {problem}"),
                "redis has more connected replicas than wait_replicas acknowledges",
            ));
        }
        if problems.is_empty() {
            return Ok(());
        }
        let problem = problems
            .iter()
            .map(|(p, _)| p.as_str())
            .collect::<Vec<_>>()
            .join("; and ");
        if self.config.accept_weak_durability {
            tracing::warn!(
                url = %url,
                "{problem}; running anyway because accept_weak_durability is set"
            );
            return Ok(());
        }
        if at_start {
            Err(Error::Config(format!(
                "{problem}; set accept_weak_durability = true to run anyway"
            )))
        } else {
            tracing::error!(url = %url, "{problem}; refusing the reconnected server");
            let public: Vec<&str> = problems.iter().map(|(_, p)| *p).collect();
            Err(Error::Unavailable(public.join("; ")))
        }
    }

    /// What a failure to open (or to use, at its first command) a new connection means: at
    /// start, a misconfiguration is `Config` naming the key to fix (`ca_file`, `cert_file`,
    /// the password's key, `username`, `url`); after start, as any call's failure.
    fn map_open(&self, e: RedisError, at_start: bool) -> Error {
        if !at_start {
            return map_redis(e);
        }
        let c = &self.config;
        let url = c.redacted_url();
        if let Some(problem) = tls_problem(c, &e.to_string()) {
            return Error::Config(format!("{problem} (redis at {url}: {e})"));
        }
        match e.kind() {
            ErrorKind::AuthenticationFailed => {
                return Error::Config(format!(
                    "{}: the redis server at {url} refused the credentials of {}: {e}",
                    c.password_key(),
                    user_of(c)
                ));
            }
            ErrorKind::Server(ServerErrorKind::NoPerm) => {
                return Error::Config(format!(
                    "username: the redis server at {url} denies {} a command leaf needs: {e}; \
                     grant it the commands and keys of leaf's ACL line",
                    user_of(c)
                ));
            }
            _ => {}
        }
        // Connected, then dropped before any answer (not refused, not slow): what a TLS-only
        // port does to a client speaking RESP in the clear.
        if !c.tls() && e.is_connection_dropped() && !e.is_connection_refusal() && !e.is_timeout() {
            return Error::Config(format!(
                "url {url:?}: the server closed the connection without answering; if it serves \
                 TLS only (tls-port), use rediss:// ({e})"
            ));
        }
        map_redis_at_start(e)
    }

    /// On a new connection: whether the server's ACL grants the user every command leaf's
    /// calls and scripts run, on the keys under `key_prefix` ([`ACL_PROBE`]; Redis 7 and later,
    /// nothing is written). At start, `Config` naming `username` and what is denied.
    async fn check_grants(&self, conn: &mut MultiplexedConnection, at_start: bool) -> Result<()> {
        let probe_key = format!("{}:acl-probe", self.config.key_prefix);
        let wait = if self.config.wait_replicas > 0 {
            "1"
        } else {
            "0"
        };
        let denied: Vec<String> = self
            .probe
            .arg(probe_key)
            .arg(wait)
            .invoke_async(conn)
            .await
            .map_err(|e| self.map_open(e, at_start))?;
        if denied.is_empty() {
            return Ok(());
        }
        let problem = format!(
            "username: the redis server at {} denies {} commands leaf runs on its keys \
             ({}:*): {}; grant it the keys ~{}:* and the commands of leaf's ACL line",
            self.config.redacted_url(),
            user_of(&self.config),
            self.config.key_prefix,
            denied.join(", "),
            self.config.key_prefix
        );
        if at_start {
            Err(Error::Config(problem))
        } else {
            tracing::error!("{problem}; refusing the reconnected server");
            Err(Error::Unavailable(
                "redis refused the configured credentials".into(),
            ))
        }
    }

    /// Whether the open connection's server is due for the guard again; never with
    /// `accept_weak_durability`, whose guard only warns (once per connection is enough).
    fn recheck_due(&self) -> bool {
        !self.config.accept_weak_durability
            && self.checked.lock().expect("check lock").elapsed() >= RECHECK
    }

    /// Forgets the open connection (the next call opens a new one).
    fn reset(&self) {
        self.current.lock().expect("connection lock").take();
    }

    /// Runs `f` on the connection within `timeout_ms`; `what` names it in a timeout's message.
    pub(crate) async fn call<T, F, Fut>(&self, what: &str, f: F) -> Result<T>
    where
        F: FnOnce(MultiplexedConnection) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        self.call_within(self.config.timeout(), what, f).await
    }

    /// As [`call`](Self::call), for a write: `f`'s answer, and whether `wait_replicas` replicas
    /// acknowledged the write (`WAIT` on the same connection right after it; always `true` with
    /// no replicas configured). Bounded by `timeout_ms` plus `wait_timeout_ms`.
    pub(crate) async fn write<T, F, Fut>(&self, what: &str, f: F) -> Result<(T, bool)>
    where
        F: FnOnce(MultiplexedConnection) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        let config = &self.config;
        self.call_within(config.write_timeout(), what, |conn| async move {
            // A clone shares the connection, so `WAIT` counts the replicas of `f`'s write.
            let mut same = conn.clone();
            let answer = f(conn).await?;
            let replicated = Self::wait_replicas(config, &mut same).await?;
            Ok((answer, replicated))
        })
        .await
    }

    async fn call_within<T, F, Fut>(
        &self,
        limit: std::time::Duration,
        what: &str,
        f: F,
    ) -> Result<T>
    where
        F: FnOnce(MultiplexedConnection) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        let r = bounded(limit, what, async {
            let conn = self.get().await?;
            f(conn).await.map_err(|e| {
                if breaks_connection(&e) {
                    self.reset();
                }
                map_redis(e)
            })
        })
        .await;
        if let Err(Error::Unavailable(_)) = &r {
            // A timeout may leave the connection stuck behind a stalled server.
            self.reset();
        }
        r
    }

    /// After a write on `conn`: `WAIT` for `wait_replicas` replicas (nothing when 0).
    /// `Ok(false)` if fewer acknowledged it within `wait_timeout_ms`.
    async fn wait_replicas(
        config: &RedisConfig,
        conn: &mut MultiplexedConnection,
    ) -> redis::RedisResult<bool> {
        if config.wait_replicas == 0 {
            return Ok(true);
        }
        let acked: u64 = redis::cmd("WAIT")
            .arg(config.wait_replicas)
            .arg(config.wait_timeout_ms)
            .query_async(conn)
            .await?;
        if acked < u64::from(config.wait_replicas) {
            tracing::warn!(
                acked,
                wanted = config.wait_replicas,
                wait_timeout_ms = config.wait_timeout_ms,
                "a write was not acknowledged by enough replicas"
            );
            return Ok(false);
        }
        Ok(true)
    }
}

/// The failure of a write that fewer replicas than `wait_replicas` acknowledged.
pub(crate) fn not_replicated() -> Error {
    Error::Unavailable(
        "redis: the write was not acknowledged by wait_replicas replicas within wait_timeout_ms"
            .into(),
    )
}

/// `CONFIG GET name`: its value, `None` if the server refuses the command (renamed, ACL).
async fn config_get(conn: &mut impl ConnectionLike, name: &str) -> Result<Option<String>> {
    let r: redis::RedisResult<HashMap<String, String>> = redis::cmd("CONFIG")
        .arg("GET")
        .arg(name)
        .query_async(conn)
        .await;
    match r {
        Ok(map) => Ok(map.get(name).cloned()),
        Err(e) if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() => {
            Err(map_redis(e))
        }
        Err(e) => {
            tracing::info!(error = %e, "redis refuses CONFIG GET {name}");
            Ok(None)
        }
    }
}

/// `INFO section` as its `key:value` lines.
async fn info(conn: &mut impl ConnectionLike, section: &str) -> Result<HashMap<String, String>> {
    info_raw(conn, section).await.map_err(map_redis)
}

async fn info_raw(
    conn: &mut impl ConnectionLike,
    section: &str,
) -> redis::RedisResult<HashMap<String, String>> {
    let text: String = redis::cmd("INFO").arg(section).query_async(conn).await?;
    Ok(parse_info(&text))
}

/// Checks, without running them, every command leaf runs (directly and in its scripts) on a
/// key under the prefix (ARGV[1]), and `WAIT` when ARGV[2] is "1": the names of the ones the
/// user may not run there. `redis.acl_check_cmd` came with Redis 7.0; before it, nothing is checked.
const ACL_PROBE: &str = r#"
if not redis.acl_check_cmd then return {} end
local k, denied = ARGV[1], {}
local function check(...)
  local ok, allowed = pcall(redis.acl_check_cmd, ...)
  if not ok or not allowed then denied[#denied + 1] = (...) end
end
check('HGET', k, 'f') check('HINCRBY', k, 'f', '1') check('HSET', k, 'f', '1')
check('HGETALL', k) check('EXISTS', k) check('SADD', k, 'm') check('SMEMBERS', k)
check('GET', k) check('SET', k, '1', 'NX', 'PX', '1') check('PEXPIRE', k, '1') check('DEL', k)
check('TIME') check('INFO', 'server') check('SCRIPT', 'LOAD', 'return 0')
if ARGV[2] == '1' then check('WAIT', '0', '0') end
return denied
"#;

/// `user "name"` (the configured or the URL's user), or `the default user`, for messages.
fn user_of(config: &RedisConfig) -> String {
    let from_url = config
        .url
        .as_str()
        .into_connection_info()
        .ok()
        .and_then(|i| i.redis_settings().username().map(str::to_owned));
    match config.username.clone().or(from_url) {
        Some(u) => format!("user {u:?}"),
        None => "the default user".into(),
    }
}

/// Which key to fix when the TLS handshake failed with `text` (the client's error): the
/// server's certificate not trusted (`ca_file`), not naming the host (`url`), or the server
/// refusing the client's certificate or its absence (`cert_file`).
pub(crate) fn tls_problem(config: &RedisConfig, text: &str) -> Option<String> {
    if !config.tls() {
        return None;
    }
    let t = text.to_ascii_lowercase();
    if t.contains("invalid peer certificate") {
        if t.contains("notvalidforname") || t.contains("not valid for name") {
            return Some(format!(
                "url {:?}: the server's certificate does not name its host",
                config.redacted_url()
            ));
        }
        let trusted = match &config.ca_file {
            Some(p) => format!("the CA of ca_file ({})", p.display()),
            None => "the system's roots (set ca_file to the server's CA)".into(),
        };
        return Some(format!(
            "ca_file: the server's certificate is not trusted by {trusted}"
        ));
    }
    if t.contains("received fatal alert") || t.contains("peer sent no certificates") {
        let given = if config.cert_file.is_some() {
            "refused the client certificate of cert_file"
        } else {
            "requires a client certificate: set cert_file and key_file"
        };
        return Some(format!("cert_file: the server {given}"));
    }
    None
}

/// The redis client for one connection: the url, with `username` and `password` (or
/// `password_file`, read now) replacing its own, and with `rediss://` the `ca_file` and the
/// `cert_file` / `key_file` read now. `Config` naming the key of what cannot be read.
pub(crate) fn client_of(config: &RedisConfig) -> Result<Client> {
    let bad_url = |e: RedisError| {
        Error::Config(format!(
            "url {:?} is not a valid redis url: {}",
            config.redacted_url(),
            e.detail().unwrap_or("unparseable")
        ))
    };
    let info = config
        .url
        .as_str()
        .into_connection_info()
        .map_err(bad_url)?;
    // No `CLIENT SETINFO` at connect: one command fewer for the ACL line to grant.
    let mut settings = info.redis_settings().clone().set_skip_set_lib_name();
    if let Some(user) = &config.username {
        settings = settings.set_username(user);
    }
    let password = match &config.password_file {
        Some(path) => Some(leaf_core::read_secret_file("password_file", path)?),
        None => config.password.clone(),
    };
    if let Some(password) = password {
        settings = settings.set_password(password);
    }
    let info = info.set_redis_settings(settings);
    if !config.tls() {
        return Client::open(info).map_err(bad_url);
    }
    let root_cert = match &config.ca_file {
        Some(path) => Some(read_pem("ca_file", path, Pem::Certificates)?),
        None => None,
    };
    let client_tls = match (&config.cert_file, &config.key_file) {
        (Some(cert), Some(key)) => Some(ClientTlsConfig {
            client_cert: read_pem("cert_file", cert, Pem::Certificates)?,
            client_key: read_pem("key_file", key, Pem::PrivateKey)?,
        }),
        _ => None,
    };
    Client::build_with_tls(
        info,
        TlsCertificates {
            client_tls,
            root_cert,
        },
    )
    .map_err(|e| Error::Config(format!("ca_file, cert_file or key_file: {e}")))
}

enum Pem {
    Certificates,
    PrivateKey,
}

/// The bytes of the PEM file `path` (the key `key`), checked to hold what it should; errors
/// name the key and the path, never the content.
fn read_pem(key: &str, path: &Path, what: Pem) -> Result<Vec<u8>> {
    let bytes = std::fs::read(path)
        .map_err(|e| Error::Config(format!("{key}: cannot read {}: {e}", path.display())))?;
    let ok = match what {
        Pem::Certificates => {
            let certs: std::result::Result<Vec<_>, _> =
                CertificateDer::pem_slice_iter(&bytes).collect();
            certs.is_ok_and(|c| !c.is_empty())
        }
        Pem::PrivateKey => PrivateKeyDer::from_pem_slice(&bytes).is_ok(),
    };
    if !ok {
        let wanted = match what {
            Pem::Certificates => "a PEM certificate",
            Pem::PrivateKey => "a PEM private key",
        };
        return Err(Error::Config(format!(
            "{key}: {} holds no {wanted}",
            path.display()
        )));
    }
    Ok(bytes)
}

fn parse_info(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

/// Why a server of `version` (`INFO server`'s `redis_version`) cannot be used, if it cannot:
/// the scripts read `TIME` before they write, which needs effects replication, the default
/// from Redis 5.0 on.
pub(crate) fn judge_version(version: Option<&str>) -> Option<String> {
    let v = version?;
    let mut parts = v.split('.').map(|p| p.parse::<u32>());
    match (parts.next(), parts.next()) {
        (Some(Ok(major)), Some(Ok(_))) if major >= 5 => None,
        (Some(Ok(_)), Some(Ok(_))) => Some(format!(
            "runs redis {v}; leaf needs redis 5.0 or later (its scripts rely on effects \
             replication)"
        )),
        _ => Some(format!("reports an unreadable redis_version {v:?}")),
    }
}

/// Why a primary's replicas (`INFO replication`) make `wait_replicas` unsafe, if they do: a
/// failover may promote a replica that never saw an acknowledged write unless every connected
/// replica acknowledges each write.
pub(crate) fn judge_replicas(replication: &HashMap<String, String>, wait: u32) -> Option<String> {
    if replication.get("role").map(String::as_str) != Some("master") {
        return None;
    }
    let replicas: u32 = replication
        .get("connected_slaves")
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    (replicas > wait).then(|| {
        format!(
            "has {replicas} connected replica(s) but wait_replicas is {wait}: a failover to a \
             replica that missed an acknowledged write hands its ids out twice; set \
             wait_replicas = {replicas}"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durability_table() {
        let check = |a: Option<&str>, f: Option<&str>, assume: bool, durable: bool| {
            let v = judge(a, f, assume);
            assert_eq!(
                v == Durability::Durable,
                durable,
                "{a:?} {f:?} {assume}: {v:?}"
            );
        };
        check(Some("yes"), Some("always"), false, true);
        check(Some("YES"), Some("Always"), false, true);
        check(Some("yes"), Some("everysec"), false, false);
        check(Some("no"), Some("always"), false, false);
        check(Some("no"), Some("no"), true, false);
        check(None, None, false, false);
        check(None, None, true, true);
        assert_eq!(
            judge(Some("yes"), Some("everysec"), false),
            Durability::Weak {
                appendonly: "yes".into(),
                appendfsync: "everysec".into()
            }
        );
        assert_eq!(judge(None, Some("always"), false), Durability::Unknown);
    }

    #[test]
    fn eviction_table() {
        let check = |m: Option<&str>, p: Option<&str>, assume: bool, safe: bool| {
            let v = judge_eviction(m, p, assume);
            assert_eq!(v == Eviction::None, safe, "{m:?} {p:?} {assume}: {v:?}");
        };
        let limit = Some("4194304");
        check(limit, Some("noeviction"), false, true);
        check(limit, Some("NoEviction"), false, true);
        for evicting in [
            "allkeys-lru",
            "allkeys-lfu",
            "allkeys-random",
            "volatile-lru",
            "volatile-lfu",
            "volatile-random",
            "volatile-ttl",
            "a-policy-of-a-later-redis",
        ] {
            check(limit, Some(evicting), false, false);
            // assume_durable is about a refused CONFIG GET only.
            check(limit, Some(evicting), true, false);
            // Redis evicts only under a maxmemory limit.
            check(Some("0"), Some(evicting), false, true);
        }
        check(Some("x"), Some("allkeys-lru"), false, false);
        check(None, None, false, false);
        check(None, None, true, true);
        assert_eq!(
            judge_eviction(None, Some("noeviction"), false),
            Eviction::Unknown
        );
        assert_eq!(
            judge_eviction(limit, Some("volatile-ttl"), false),
            Eviction::Evicting {
                maxmemory: "4194304".into(),
                policy: "volatile-ttl".into()
            }
        );
        assert!(what_it_evicts("volatile-lru").contains("lease"));
        assert!(what_it_evicts("allkeys-lfu").contains("mark"));
    }

    #[test]
    fn tls_failures_name_the_key_to_fix() {
        let tls = RedisConfig::with_url("rediss://h:6379");
        let check = |c: &RedisConfig, text: &str, key: Option<&str>| {
            let got = tls_problem(c, text);
            assert_eq!(
                got.as_deref().map(|p| p.split(':').next().unwrap_or("")),
                key,
                "{text}: {got:?}"
            );
        };
        check(
            &tls,
            "invalid peer certificate: UnknownIssuer",
            Some("ca_file"),
        );
        check(
            &tls,
            "invalid peer certificate: NotValidForNameContext { .. }",
            Some("url \"rediss"),
        );
        check(
            &tls,
            "received fatal alert: CertificateRequired",
            Some("cert_file"),
        );
        check(&tls, "Connection refused (os error 111)", None);
        // A plain url never has a TLS problem.
        let plain = RedisConfig::default();
        check(&plain, "invalid peer certificate: UnknownIssuer", None);
    }

    #[test]
    fn version_table() {
        assert_eq!(judge_version(Some("7.0.15")), None);
        assert_eq!(judge_version(Some("5.0.0")), None);
        assert_eq!(judge_version(None), None);
        let old = judge_version(Some("4.0.14")).unwrap();
        assert!(old.contains("4.0.14") && old.contains("5.0"), "{old}");
        assert!(judge_version(Some("x")).unwrap().contains("unreadable"));
    }

    #[test]
    fn replicas_table() {
        let info = |text: &str| parse_info(text);
        let primary = info("# Replication\r\nrole:master\r\nconnected_slaves:2\r\n");
        assert_eq!(judge_replicas(&primary, 2), None);
        assert_eq!(judge_replicas(&primary, 3), None);
        let p = judge_replicas(&primary, 1).unwrap();
        assert!(
            p.contains("2 connected replica") && p.contains("wait_replicas is 1"),
            "{p}"
        );
        let alone = info("role:master\nconnected_slaves:0\n");
        assert_eq!(judge_replicas(&alone, 0), None);
        let replica = info("role:slave\nconnected_slaves:0\n");
        assert_eq!(judge_replicas(&replica, 0), None);
    }
}
