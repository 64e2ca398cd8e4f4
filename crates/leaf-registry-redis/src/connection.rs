//! The connection to Redis shared by every call of a store or registry: opened on demand,
//! checked by the durability guard every time it is opened (at start and after every
//! reconnect) and again every [`RECHECK`] while open (a replica that connects later, or a
//! setting changed at run time, is found within that), dropped on an I/O error or a timeout
//! so that the next call opens a new one, and `WAIT` for replicas after writes.
//!
//! The redis crate's `ConnectionManager` reconnects by itself, but offers no hook to run the
//! guard on the new connection (only a RESP3 push channel); this small manager does.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex as StdMutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use leaf_core::{Error, Result};
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{AsyncConnectionConfig, Client, RedisError};

use crate::config::RedisConfig;
use crate::error::{bounded, breaks_connection, map_redis, map_redis_at_start};

/// One lazily opened, guarded, multiplexed connection.
pub(crate) struct Connection {
    client: Client,
    config: RedisConfig,
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
        let client = Client::open(config.url.as_str()).map_err(|e| {
            Error::Config(format!(
                "url {:?} is not a valid redis url: {}",
                config.redacted_url(),
                e.detail().unwrap_or("unparseable")
            ))
        })?;
        Ok(Connection {
            client,
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
        let map = |e: RedisError| {
            if at_start {
                map_redis_at_start(e)
            } else {
                map_redis(e)
            }
        };
        let cfg = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.config.connect_timeout()))
            .set_response_timeout(Some(self.config.timeout()));
        let mut conn = self
            .client
            .get_multiplexed_async_connection_with_config(&cfg)
            .await
            .map_err(map)?;
        self.guard(&mut conn, at_start).await?;
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
        let server = info(conn, "server").await?;
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
                    "redis at {url} refuses CONFIG GET, so its durability and eviction settings \
                     cannot be checked; leaf needs appendonly yes, appendfsync always and \
                     maxmemory-policy noeviction (set assume_durable = true if the server runs \
                     with them)"
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
    let text: String = redis::cmd("INFO")
        .arg(section)
        .query_async(conn)
        .await
        .map_err(map_redis)?;
    Ok(parse_info(&text))
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
