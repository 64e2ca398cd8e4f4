//! `RedisClaims`: the `redis` workerId mode, a recycling pool of leased worker ids;
//! [`RedisRegistry`] is it with the worker-id cache file.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use async_trait::async_trait;
use leaf_core::{
    AcquireRequest, CachedRegistry, ClaimError, Error, HeldClaim, Lease, LeaseToken,
    RegistryCapabilities, Renewal, Result, WorkerIdClaims,
};
use redis::Script;
use tokio::sync::Mutex;

use crate::config::RedisRegistryConfig;
use crate::connection::{Connection, not_replicated};

/// Claims the lowest free id: for `id` in `0..=ARGV[2]`, skips a claimed one
/// (`{prefix}:workers:{id}` exists) and one whose mark (`{prefix}:marks:{id}`) is above
/// ARGV[5] (the claimer's clock plus `max_ahead_ms`), and sets the first other one to the
/// token with `NX PX ttl`, and `{prefix}:owners:{id}` to the claimer's `ip:port` (read only
/// while the claim exists). ARGV: prefix, max id, token, ttl ms, limit, owner.
/// Answers `{1, id, mark}`, or `{0, skipped id or -1, its mark}` when none is free.
///
/// The keys are made inside the script, so this needs a single Redis (not Redis Cluster).
const CLAIM: &str = r#"
local prefix, max, token, ttl, limit, owner = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4], tonumber(ARGV[5]), ARGV[6]
local skipped, skipped_mark = -1, 0
for id = 0, max do
  local wk = prefix .. ':workers:' .. id
  if redis.call('EXISTS', wk) == 0 then
    local mark = tonumber(redis.call('GET', prefix .. ':marks:' .. id) or '0') or 0
    if mark > limit then
      if skipped < 0 then skipped, skipped_mark = id, mark end
    elseif redis.call('SET', wk, token, 'NX', 'PX', ttl) then
      redis.call('SET', prefix .. ':owners:' .. id, owner)
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

/// Who holds a claim: KEYS[2] (the owner) while KEYS[1] (the worker key) exists, else nil.
const HOLDER: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
return redis.call('GET', KEYS[2])
"#;

/// Gives a claim back without touching its mark (a start that failed after the claim).
const GIVE_BACK: &str = r#"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
return 1
"#;

/// The most ids the claim script looks at: a layout with more worker ids uses the first ones.
pub(crate) const MAX_POOL_ID: u64 = (1 << 14) - 1;

/// The `redis` workerId mode with the worker-id cache file: what the server runs.
pub type RedisRegistry = CachedRegistry<RedisClaims>;

/// The `redis` workerId mode: worker ids leased from a pool on Redis, recycled when their
/// owner stops renewing (the lease key expires). See the crate docs for the keys and scripts.
pub struct RedisClaims {
    conn: Connection,
    /// `{key_prefix}:{name}`.
    prefix: String,
    file_name: String,
    /// The lease held, if any.
    lease: Mutex<Option<HeldClaim>>,
    claim: Script,
    renew: Script,
    release: Script,
    give_back: Script,
    holder: Script,
}

impl fmt::Debug for RedisClaims {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisClaims")
            .field("url", &self.conn.config().redacted_url())
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl RedisClaims {
    /// The backend on the server of `config`, for the leaf name `name` (keys under
    /// `{key_prefix}:{name}`). Nothing is contacted before the first claim, so this succeeds
    /// while Redis is down; the durability guard runs at the first connection (`Config` from
    /// that claim if the server is too weak) and after every reconnect.
    pub fn new(config: &RedisRegistryConfig, name: &str) -> Result<Self> {
        let conn = Connection::new(config)?;
        if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c == ':') {
            return Err(Error::Config(format!(
                "the leaf name {name:?} must be non-empty, without whitespace or ':'"
            )));
        }
        Ok(RedisClaims {
            conn,
            prefix: format!("{}:{name}", config.key_prefix),
            file_name: format!("worker-redis-{name}"),
            lease: Mutex::new(None),
            claim: Script::new(CLAIM),
            renew: Script::new(RENEW),
            release: Script::new(RELEASE),
            give_back: Script::new(GIVE_BACK),
            holder: Script::new(HOLDER),
        })
    }

    /// This backend with its cache file in `cache_dir`: the registry the server runs.
    pub fn registry(self, cache_dir: impl Into<PathBuf>) -> RedisRegistry {
        CachedRegistry::new(self, cache_dir)
    }

    /// `{key_prefix}:{name}:workers:{id}`: the claim, holding the token, expiring after the TTL.
    pub fn worker_key(&self, id: u64) -> String {
        format!("{}:workers:{id}", self.prefix)
    }

    /// `{key_prefix}:{name}:marks:{id}`: the id's highest mark, persistent.
    pub fn mark_key(&self, id: u64) -> String {
        format!("{}:marks:{id}", self.prefix)
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
impl WorkerIdClaims for RedisClaims {
    fn mode(&self) -> &'static str {
        "redis"
    }

    fn capabilities(&self) -> RegistryCapabilities {
        RegistryCapabilities::new(true, true)
    }

    fn cache_file_name(&self) -> &str {
        &self.file_name
    }

    async fn holder(&self, worker_id: u64) -> Result<Option<String>> {
        let (wk, ok) = (
            self.worker_key(worker_id),
            format!("{}:owners:{worker_id}", self.prefix),
        );
        let script = &self.holder;
        self.conn
            .call("reading who holds a worker id", |mut c| async move {
                let owner: Option<String> = script.key(wk).key(ok).invoke_async(&mut c).await?;
                Ok(owner)
            })
            .await
    }

    fn lease_ttl(&self) -> Option<(Duration, &'static str)> {
        Some((self.conn.config().lease_ttl(), "lease_ttl_ms"))
    }

    async fn claim(&self, req: &AcquireRequest) -> Result<Lease, ClaimError> {
        let ttl = self.conn.config().lease_ttl();
        let mut state = self.lease.lock().await;
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
            req.identity.to_string(),
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
            let far_ahead = u64::try_from(id).ok().map(|id| (id, mark));
            return Err(leaf_core::no_free_worker_id(max, far_ahead, req.now_ms).into());
        }
        let worker_id = id as u64;
        if !replicated {
            self.give_back(worker_id, token).await;
            return Err(not_replicated().into());
        }
        let carried = (mark > 0).then_some(mark);
        let lease = Lease::new(worker_id, carried)
            .with_ttl(ttl)
            .with_token(token);
        tracing::info!(worker_id, carried_mark_ms = ?carried, identity = %req.identity, ttl_ms = ttl.as_millis() as u64, "redis worker id claimed");
        *state = Some(HeldClaim {
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
            return Ok(Renewal::LeaseLost);
        }
        if !replicated {
            return Err(not_replicated());
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
        *state = None;
        tracing::info!(
            worker_id = id,
            final_mark_ms,
            "redis worker id returned to the pool"
        );
        Ok(())
    }

    async fn abandon(&self, lease: &Lease) {
        HeldClaim::forget(&mut *self.lease.lock().await, lease);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leaf_core::{NodeIdentity, WorkerIdRegistry};

    fn backend() -> RedisClaims {
        RedisClaims::new(&RedisRegistryConfig::default(), "leaf").unwrap()
    }

    #[test]
    fn keys() {
        let r = backend();
        assert_eq!(r.worker_key(3), "leaf:leaf:workers:3");
        assert_eq!(r.mark_key(3), "leaf:leaf:marks:3");
    }

    #[test]
    fn names_are_one_key_segment() {
        let c = RedisRegistryConfig::default();
        for bad in ["", "a:b", "a b"] {
            let e = RedisClaims::new(&c, bad).unwrap_err();
            assert!(matches!(e, Error::Config(_)), "{bad:?}: {e}");
        }
    }

    #[tokio::test]
    async fn a_ttl_the_caller_cannot_renew_in_time_is_config() {
        let dir = tempfile::tempdir().unwrap();
        let r = backend().registry(dir.path());
        let req = AcquireRequest::new(NodeIdentity::new("10.0.0.1", 1), 1023, 0);
        // Default timing: min ttl 3 s; the default 10 s passes.
        assert_eq!(
            r.backend().lease_ttl(),
            Some((Duration::from_secs(10), "lease_ttl_ms"))
        );
        // Refused before Redis (here, none) is contacted.
        let slow = req.with_timing(Duration::from_secs(8), Duration::from_secs(1));
        let e = r.acquire(&slow).await.unwrap_err();
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
