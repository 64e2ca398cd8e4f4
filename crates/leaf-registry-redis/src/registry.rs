//! `RedisRegistry`: the `redis` workerId mode, a recycling pool of leased worker ids, and the
//! worker-id cache file as every registry keeps it.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use async_trait::async_trait;
use leaf_core::cache_file::merge_marks;
use leaf_core::{
    AcquireRequest, CacheRecord, Error, HeldCache, Lease, LeaseToken, RegistryCapabilities,
    Renewal, Result, WorkerIdRegistry,
};
use redis::Script;
use tokio::sync::Mutex;

use crate::config::RedisRegistryConfig;
use crate::connection::{Connection, not_replicated};

/// Claims the lowest free id: for `id` in `0..=ARGV[2]`, skips a claimed one
/// (`{prefix}:workers:{id}` exists) and one whose mark (`{prefix}:marks:{id}`) is above
/// ARGV[5] (the claimer's clock plus `max_ahead_ms`), and sets the first other one to the
/// token with `NX PX ttl`. ARGV: prefix, max id, token, ttl ms, limit.
/// Answers `{1, id, mark}`, or `{0, skipped id or -1, its mark}` when none is free.
///
/// The keys are made inside the script, so this needs a single Redis (not Redis Cluster).
const CLAIM: &str = r#"
local prefix, max, token, ttl, limit = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4], tonumber(ARGV[5])
local skipped, skipped_mark = -1, 0
for id = 0, max do
  local wk = prefix .. ':workers:' .. id
  if redis.call('EXISTS', wk) == 0 then
    local mark = tonumber(redis.call('GET', prefix .. ':marks:' .. id) or '0') or 0
    if mark > limit then
      if skipped < 0 then skipped, skipped_mark = id, mark end
    elseif redis.call('SET', wk, token, 'NX', 'PX', ttl) then
      return {1, id, mark}
    end
  end
end
return {0, skipped, skipped_mark}
"#;

/// Renews a claim: only while KEYS[1] (the worker key) holds ARGV[1] (the token), extends it
/// by ARGV[2] ms and raises KEYS[2] (the mark) to ARGV[3], never lowering it. Answers 1, or 0
/// when the claim is gone.
const RENEW: &str = r#"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
local cur = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
if tonumber(ARGV[3]) > cur then redis.call('SET', KEYS[2], ARGV[3]) end
return 1
"#;

/// Releases a claim: only while KEYS[1] holds ARGV[1], writes the final mark ARGV[2] to KEYS[2]
/// (the last timestamp issued: the one write that may lower the mark) and deletes the claim.
/// Answers 1, or 0 when the claim is gone.
const RELEASE: &str = r#"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[2], ARGV[2])
redis.call('DEL', KEYS[1])
return 1
"#;

/// Gives a claim back without touching its mark (a start that failed after the claim).
const GIVE_BACK: &str = r#"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
return 1
"#;

/// The most ids the claim script looks at: a layout with more worker ids uses the first ones.
pub(crate) const MAX_POOL_ID: u64 = (1 << 14) - 1;

/// The `redis` workerId mode: worker ids leased from a pool on Redis, recycled when their
/// owner stops renewing (the lease key expires). See the crate docs for the keys and scripts.
pub struct RedisRegistry {
    conn: Connection,
    /// `{key_prefix}:{name}`.
    prefix: String,
    cache_dir: PathBuf,
    file_name: String,
    held: HeldCache,
    /// The lease held, if any. Locked before `held` by every call.
    lease: Mutex<Option<Held>>,
    claim: Script,
    renew: Script,
    release: Script,
    give_back: Script,
}

#[derive(Debug)]
struct Held {
    worker_id: u64,
    token: LeaseToken,
    ttl: Duration,
}

impl Held {
    fn is(&self, lease: &Lease) -> bool {
        self.worker_id == lease.worker_id && self.token == lease.token
    }
}

impl fmt::Debug for RedisRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisRegistry")
            .field("url", &self.conn.config().redacted_url())
            .field("prefix", &self.prefix)
            .field("cache_dir", &self.cache_dir)
            .finish_non_exhaustive()
    }
}

impl RedisRegistry {
    /// A registry on the server of `config`, for the leaf name `name` (keys under
    /// `{key_prefix}:{name}`), keeping its cache file in `cache_dir`. Nothing is contacted
    /// before [`acquire`](WorkerIdRegistry::acquire), so this succeeds while Redis is down; the
    /// durability guard runs at the first connection (`Config` from that acquire if the server
    /// is too weak) and after every reconnect.
    pub fn new(config: &RedisRegistryConfig, cache_dir: PathBuf, name: &str) -> Result<Self> {
        let conn = Connection::new(config)?;
        if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c == ':') {
            return Err(Error::Config(format!(
                "the leaf name {name:?} must be non-empty, without whitespace or ':'"
            )));
        }
        Ok(RedisRegistry {
            conn,
            prefix: format!("{}:{name}", config.key_prefix),
            cache_dir,
            file_name: format!("worker-redis-{name}"),
            held: HeldCache::new(),
            lease: Mutex::new(None),
            claim: Script::new(CLAIM),
            renew: Script::new(RENEW),
            release: Script::new(RELEASE),
            give_back: Script::new(GIVE_BACK),
        })
    }

    /// `{key_prefix}:{name}:workers:{id}`: the claim, holding the token, expiring after the TTL.
    pub fn worker_key(&self, id: u64) -> String {
        format!("{}:workers:{id}", self.prefix)
    }

    /// `{key_prefix}:{name}:marks:{id}`: the id's highest mark, persistent.
    pub fn mark_key(&self, id: u64) -> String {
        format!("{}:marks:{id}", self.prefix)
    }

    /// The TTL, or `Config` naming the field if the caller could not renew in time.
    fn check_ttl(&self, req: &AcquireRequest) -> Result<Duration> {
        let ttl = self.conn.config().lease_ttl();
        if ttl <= req.min_ttl() {
            return Err(Error::Config(format!(
                "lease_ttl_ms {} must be above {} ms, the generator's renew period plus fencing \
                 margin plus latency allowance",
                ttl.as_millis(),
                req.min_ttl().as_millis()
            )));
        }
        Ok(ttl)
    }

    /// Runs a compare-token script on the claim of `id` as a write. `Ok(None)` when the write
    /// landed but too few replicas acknowledged it.
    async fn token_script(
        &self,
        what: &str,
        script: &Script,
        id: u64,
        args: Vec<String>,
    ) -> Result<(i64, bool)> {
        let (wk, mk) = (self.worker_key(id), self.mark_key(id));
        self.conn
            .write(what, |mut c| async move {
                let mut inv = script.key(wk);
                inv.key(mk);
                for a in &args {
                    inv.arg(a);
                }
                let n: i64 = inv.invoke_async(&mut c).await?;
                Ok(n)
            })
            .await
    }

    async fn give_back(&self, id: u64, token: LeaseToken) {
        let r = self
            .token_script(
                "returning the worker id",
                &self.give_back,
                id,
                vec![token.get().to_string()],
            )
            .await;
        if let Err(e) = r {
            tracing::warn!(worker_id = id, error = %e, "claimed id not returned; it expires after its ttl");
        }
    }
}

/// A random token, never 0 (`LeaseToken::NONE`).
fn new_token() -> LeaseToken {
    LeaseToken::new(fastrand::u64(1..))
}

#[async_trait]
impl WorkerIdRegistry for RedisRegistry {
    fn mode(&self) -> &'static str {
        "redis"
    }

    fn capabilities(&self) -> RegistryCapabilities {
        RegistryCapabilities::new(true, true)
    }

    async fn acquire(&self, req: &AcquireRequest) -> Result<Lease> {
        let ttl = self.check_ttl(req)?;
        let mut state = self.lease.lock().await;
        let mut held = self.held.lock().await;
        // The cache directory's lock first: a second process on it must not start at all.
        // No start from the cache file: the cached id may have been recycled meanwhile.
        let (cache, cached) = held.open_unheld(&self.cache_dir, &self.file_name).await?;
        let token = new_token();
        let max = req.max_worker_id.min(MAX_POOL_ID);
        let limit = req.now_ms.saturating_add(req.max_ahead_ms);
        let script = &self.claim;
        let args = [
            self.prefix.clone(),
            max.to_string(),
            token.get().to_string(),
            ttl.as_millis().to_string(),
            limit.to_string(),
        ];
        let (answer, replicated) = self
            .conn
            .write("claiming a worker id", |mut c| async move {
                let mut inv = script.prepare_invoke();
                for a in &args {
                    inv.arg(a);
                }
                let answer: (i64, i64, u64) = inv.invoke_async(&mut c).await?;
                Ok(answer)
            })
            .await?;
        let (claimed, id, mark) = answer;
        if claimed != 1 {
            return Err(if id >= 0 {
                Error::Unavailable(format!(
                    "no free worker id in 0..={max} is usable now: worker id {id} carries mark \
                     {mark}, more than max_ahead_ms ahead of this clock ({}); another machine's \
                     clock ran fast",
                    req.now_ms
                ))
            } else {
                Error::Unavailable(format!(
                    "every worker id in 0..={max} is in use; one comes back when its owner stops \
                     or after its lease ttl"
                ))
            });
        }
        let worker_id = id as u64;
        if !replicated {
            self.give_back(worker_id, token).await;
            return Err(not_replicated());
        }
        let prev_mark_ms = merge_marks(worker_id, (mark > 0).then_some(mark), cached);
        let lease = Lease::new(worker_id, prev_mark_ms)
            .with_ttl(ttl)
            .with_token(token);
        let written = cache
            .write(CacheRecord {
                worker_id,
                mark_ms: prev_mark_ms.unwrap_or(0),
            })
            .await;
        if let Err(e) = written {
            // Not started: the id goes back now rather than after its TTL.
            self.give_back(worker_id, token).await;
            return Err(e);
        }
        tracing::info!(worker_id, ?prev_mark_ms, identity = %req.identity, ttl_ms = ttl.as_millis() as u64, "redis worker id claimed");
        held.hold(&lease, cache);
        *state = Some(Held {
            worker_id,
            token,
            ttl,
        });
        Ok(lease)
    }

    async fn renew(&self, lease: &Lease, mark_ms: u64) -> Result<Renewal> {
        let mut state = self.lease.lock().await;
        let Some(h) = state.as_ref().filter(|h| h.is(lease)) else {
            return Ok(Renewal::LeaseLost);
        };
        let (id, token, ttl) = (h.worker_id, h.token, h.ttl);
        let (n, replicated) = self
            .token_script(
                "the lease renewal",
                &self.renew,
                id,
                vec![
                    token.get().to_string(),
                    ttl.as_millis().to_string(),
                    mark_ms.to_string(),
                ],
            )
            .await?;
        if n != 1 {
            tracing::warn!(
                worker_id = id,
                "the worker id's lease is gone (expired, or claimed by another node)"
            );
            *state = None;
            self.held.forget(lease).await;
            return Ok(Renewal::LeaseLost);
        }
        if !replicated {
            return Err(not_replicated());
        }
        if !self.held.lock().await.write_mark(lease, mark_ms).await? {
            return Ok(Renewal::LeaseLost);
        }
        Ok(Renewal::Ok { ttl: Some(ttl) })
    }

    async fn release(&self, lease: &Lease, final_mark_ms: u64) -> Result<()> {
        let mut state = self.lease.lock().await;
        let Some(h) = state.as_ref().filter(|h| h.is(lease)) else {
            tracing::debug!(worker_id = lease.worker_id, "release of a lease not held");
            return Ok(());
        };
        let (id, token) = (h.worker_id, h.token);
        let (n, replicated) = self
            .token_script(
                "returning the worker id",
                &self.release,
                id,
                vec![token.get().to_string(), final_mark_ms.to_string()],
            )
            .await?;
        if n == 1 && !replicated {
            // Deleted here, perhaps not on the replicas: the final mark may be lost with a
            // failover, and the last renewed mark (higher) stays there. Nothing to retry.
            tracing::warn!(worker_id = id, "release not acknowledged by the replicas");
        }
        if n != 1 {
            tracing::debug!(worker_id = id, "the claim was gone at release");
        }
        if !self.held.release(lease, final_mark_ms).await? {
            tracing::debug!(worker_id = id, "cache file not held at release");
        }
        *state = None;
        tracing::info!(
            worker_id = id,
            final_mark_ms,
            "redis worker id returned to the pool"
        );
        Ok(())
    }

    async fn abandon(&self, lease: &Lease) {
        let mut state = self.lease.lock().await;
        if state.as_ref().is_some_and(|h| h.is(lease)) {
            *state = None;
            self.held.forget(lease).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leaf_core::NodeIdentity;

    fn registry() -> RedisRegistry {
        let dir = std::env::temp_dir();
        RedisRegistry::new(&RedisRegistryConfig::default(), dir, "leaf").unwrap()
    }

    #[test]
    fn keys() {
        let r = registry();
        assert_eq!(r.worker_key(3), "leaf:leaf:workers:3");
        assert_eq!(r.mark_key(3), "leaf:leaf:marks:3");
    }

    #[test]
    fn names_are_one_key_segment() {
        let c = RedisRegistryConfig::default();
        for bad in ["", "a:b", "a b"] {
            let e = RedisRegistry::new(&c, std::env::temp_dir(), bad).unwrap_err();
            assert!(matches!(e, Error::Config(_)), "{bad:?}: {e}");
        }
    }

    #[test]
    fn a_ttl_the_caller_cannot_renew_in_time_is_config() {
        let r = registry();
        let req = AcquireRequest::new(NodeIdentity::new("10.0.0.1", 1), 1023, 0);
        // Default timing: min ttl 3 s; the default 10 s passes.
        assert_eq!(r.check_ttl(&req).unwrap(), Duration::from_secs(10));
        let slow = req.with_timing(Duration::from_secs(8), Duration::from_secs(1));
        let e = r.check_ttl(&slow).unwrap_err();
        assert!(
            matches!(&e, Error::Config(m) if m.starts_with("lease_ttl_ms")),
            "{e}"
        );
    }

    #[test]
    fn tokens_are_never_none() {
        for _ in 0..1000 {
            assert_ne!(new_token(), LeaseToken::NONE);
        }
    }
}
