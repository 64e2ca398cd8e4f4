//! [`SqlLeases`]: worker ids leased from a pool in `leaf_workerid_lease`, in any dialect, each
//! lease counted by the database server's clock; what the monotonic mode's leader holds on the
//! `mysql` and `postgres` modes (with `fence_on_disconnect`), whose own worker ids are held by
//! an identity lock that has no lease to fence on.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use leaf_core::{
    AcquireRequest, CachedRegistry, ClaimError, Error, HeldClaim, Lease, LeaseToken,
    RegistryCapabilities, Renewal, Result, WorkerIdClaims, bounded,
};
use sqlx::Pool;
use tokio::sync::Mutex;

use crate::config::{Rotation, pool};
use crate::error::map_sqlx;
use crate::inline::{Arg, inline};
use crate::queries::signed;
use crate::store::{ensure_table, type_name};
use crate::{KEY, Queries, SqlConfig};

/// The table.
const TABLE: &str = "leaf_workerid_lease";

/// The most ids a claim looks at: a layout with more worker ids uses the first ones.
const MAX_POOL_ID: u64 = (1 << 14) - 1;

/// One row of `leaf_workerid_lease`, with the server's clock read by the same statement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseRow {
    /// The worker id.
    pub id: i64,
    /// The claim's token; 0 when free.
    pub token: i64,
    /// The holder's `ip:port`.
    pub owner: String,
    /// When the lease ends, by the server's clock (Unix ms).
    pub lease_until: i64,
    /// The id's highest time mark.
    pub max_timestamp: Option<i64>,
    /// The server's clock when the statement ran (Unix ms).
    pub now_ms: i64,
}

impl LeaseRow {
    /// Whether a live claim holds it.
    fn held(&self) -> bool {
        self.token != 0 && self.lease_until > self.now_ms
    }
}

/// The statements, each written once with `?` placeholders and the dialect's clock
/// ([`RegistryDialect::NOW_MS`](crate::RegistryDialect::NOW_MS)) spliced in; run as simple
/// queries with their values inlined ([`inline`]), so that a pooler cannot split one.
struct Statements {
    /// The rows of name `?1` with an id up to `?2`, by id.
    list: String,
    /// The row of name `?1` and id `?2`.
    one: String,
    /// A new row: name, id, token, owner, ttl, ttl.
    insert: String,
    /// Takes a free or expired row: token, owner, ttl, ttl, name, id, the token seen.
    take: String,
    /// Extends the claim of a token and raises its mark: mark, name, id, token.
    renew: String,
    /// Frees the claim of a token with its final mark: mark, name, id, token.
    release: String,
    /// Frees a claim without touching its mark: name, id, token.
    give_back: String,
}

impl Statements {
    fn new(now: &str) -> Self {
        let columns = format!(
            "SELECT id, token, owner, lease_until, max_timestamp, {now} AS now_ms FROM {TABLE}"
        );
        Statements {
            list: format!("{columns} WHERE name = ? AND id <= ? ORDER BY id"),
            one: format!("{columns} WHERE name = ? AND id = ?"),
            insert: format!(
                "INSERT INTO {TABLE} (name, id, token, owner, ttl_ms, lease_until) \
                 VALUES (?, ?, ?, ?, ?, {now} + ?)"
            ),
            take: format!(
                "UPDATE {TABLE} SET token = ?, owner = ?, ttl_ms = ?, lease_until = {now} + ? \
                 WHERE name = ? AND id = ? AND token = ? AND (token = 0 OR lease_until <= {now})"
            ),
            renew: format!(
                "UPDATE {TABLE} SET lease_until = {now} + ttl_ms, \
                 max_timestamp = GREATEST(COALESCE(max_timestamp, 0), ?) \
                 WHERE name = ? AND id = ? AND token = ?"
            ),
            release: format!(
                "UPDATE {TABLE} SET max_timestamp = ?, token = 0, lease_until = 0 \
                 WHERE name = ? AND id = ? AND token = ?"
            ),
            give_back: format!(
                "UPDATE {TABLE} SET token = 0, lease_until = 0 WHERE name = ? AND id = ? AND token = ?"
            ),
        }
    }
}

/// Worker ids leased from a pool of rows of `leaf_workerid_lease` (`name`, `id`): a claim takes
/// the lowest id whose row is missing, free, or whose lease ended by the server's clock, with a
/// new random token, in one statement that compares the token it saw and the lease's end;
/// renewals and the release compare that token in the statement itself, so a holder whose id
/// was claimed again never writes it again, and the next holder reads the mark after its
/// claim, when no one else can write it. (A holder whose lease ended and that nobody claimed
/// since renews it: its own fence stopped it in between, and no one else issued under it.)
/// The lease is `lease_ttl_ms`, stored with the claim so that renewals extend it by the
/// owner's TTL. The database server's clock counts it, as Redis's counts a `PEXPIRE`: a holder
/// counts its own validity from before each renewal by its monotonic clock, which ends before
/// the server's end of the lease as long as the server's clock does not jump ahead by more
/// than the fencing margin (a stepped clock, or a failover to a server whose clock is ahead,
/// ends leases early). At the first claim the table is created when missing and the
/// deployment checked as the identity lock's is (a Galera node refused, lax commits warned of).
///
/// `SqlLeases` is the registry of the monotonic mode's claim on the SQL modes; the `mysql` and
/// `postgres` workerId modes themselves hold ids by identity ([`SqlClaims`](crate::SqlClaims)).
pub struct SqlLeases<D: Queries> {
    pool: Pool<D::Db>,
    config: D::Config,
    rotation: Rotation,
    /// The leaf name, a key column.
    name: String,
    file_name: String,
    statements: Statements,
    held: Mutex<Option<HeldClaim>>,
    /// Whether the table was made (or found) and the deployment checked: once, at the first
    /// claim that reached the server, not at every campaign.
    prepared: AtomicBool,
}

/// The leased registry of dialect `D` with its cache file.
pub type SqlLeaseRegistry<D> = CachedRegistry<SqlLeases<D>>;

impl<D: Queries> fmt::Debug for SqlLeases<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(&type_name(D::NAME, "Leases"))
            .field("url", &self.config.settings().redacted_url())
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// A random token that fits the bigint column, never 0 (`LeaseToken::NONE`, a free row).
fn new_token() -> LeaseToken {
    LeaseToken::new(fastrand::u64(1..=i64::MAX as u64))
}

impl<D: Queries> SqlLeases<D> {
    /// The pool of the leaf name `name` on the server of `config`; its cache file is
    /// `lease-{NAME}-{name}`. Nothing is contacted before the first claim.
    pub fn connect(config: &D::Config, name: &str) -> Result<Self> {
        config.validate()?;
        if name.is_empty() || name.len() > 128 {
            return Err(Error::Config(format!(
                "the leaf name {name:?} must have 1 to 128 bytes"
            )));
        }
        Ok(SqlLeases {
            pool: pool::<D>(config, KEY)?,
            config: config.clone(),
            rotation: Rotation::new(&config.settings()),
            name: name.to_owned(),
            file_name: format!("lease-{}-{name}", D::NAME),
            statements: Statements::new(D::NOW_MS),
            held: Mutex::new(None),
            prepared: AtomicBool::new(false),
        })
    }

    /// This pool with its cache file in `cache_dir`.
    pub fn registry(self, cache_dir: impl Into<PathBuf>) -> SqlLeaseRegistry<D> {
        CachedRegistry::new(self, cache_dir)
    }

    /// Creates the table when missing and checks the deployment as the identity lock does
    /// ([`RegistryDialect::check_deployment`](crate::RegistryDialect::check_deployment)):
    /// refused where a committed lease or mark may be lost or granted twice, warned of where a
    /// crash may lose the last ones. Once.
    async fn prepare(&self) -> Result<()> {
        if self.prepared.load(Ordering::Acquire) {
            return Ok(());
        }
        ensure_table::<D>(&self.pool, TABLE, D::LEAF_WORKERID_LEASE_DDL).await?;
        let mut conn = self
            .pool
            .acquire()
            .await
            .map_err(|e| map_sqlx::<D>(e, TABLE, KEY))?;
        for warning in D::check_deployment(&mut conn).await? {
            tracing::warn!(backend = D::NAME, "{warning}");
        }
        self.prepared.store(true, Ordering::Release);
        Ok(())
    }

    fn ttl(&self) -> Duration {
        Duration::from_millis(self.config.settings().lease_ttl_ms)
    }

    fn limit(&self) -> Duration {
        let s = self.config.settings();
        s.timeout() + s.connect_timeout()
    }

    /// Runs a changing statement: the rows it matched, `None` on a duplicate key.
    async fn write(&self, what: &str, sql: &str, args: &[Arg<'_>]) -> Result<Option<u64>> {
        self.rotation.refresh::<D>(&self.config, &self.pool);
        let sql = inline::<D>(sql, args);
        bounded(D::NAME, self.limit(), what, D::run_inlined(&self.pool, sql)).await
    }

    async fn rows(&self, what: &str, sql: &str, args: &[Arg<'_>]) -> Result<Vec<LeaseRow>> {
        self.rotation.refresh::<D>(&self.config, &self.pool);
        let sql = inline::<D>(sql, args);
        bounded(D::NAME, self.limit(), what, D::lease_rows(&self.pool, sql)).await
    }

    async fn one(&self, id: u64) -> Result<Option<LeaseRow>> {
        let args = [Arg::Text(&self.name), Arg::Int(signed(id))];
        let rows = self
            .rows("reading a leased worker id", &self.statements.one, &args)
            .await?;
        Ok(rows.into_iter().next())
    }

    /// Tries to claim `id`, whose row is `row` (`None`: no row yet), with `token`.
    async fn try_claim(
        &self,
        id: u64,
        row: Option<&LeaseRow>,
        token: LeaseToken,
        owner: &str,
        ttl: Duration,
    ) -> Result<bool> {
        let ttl_ms = signed(ttl.as_millis() as u64);
        let (name, id) = (Arg::Text(&self.name), Arg::Int(signed(id)));
        let mine = Arg::Int(token.get() as i64);
        let (sql, args) = match row {
            None => (
                &self.statements.insert,
                vec![
                    name,
                    id,
                    mine,
                    Arg::Text(owner),
                    Arg::Int(ttl_ms),
                    Arg::Int(ttl_ms),
                ],
            ),
            Some(seen) => (
                &self.statements.take,
                vec![
                    mine,
                    Arg::Text(owner),
                    Arg::Int(ttl_ms),
                    Arg::Int(ttl_ms),
                    name,
                    id,
                    Arg::Int(seen.token),
                ],
            ),
        };
        // A duplicate key: another node inserted the row first, and holds it.
        Ok(self.write("claiming a worker id", sql, &args).await? == Some(1))
    }

    async fn give_back(&self, id: u64, token: LeaseToken) {
        let args = [
            Arg::Text(&self.name),
            Arg::Int(signed(id)),
            Arg::Int(token.get() as i64),
        ];
        let r = self
            .write("returning the worker id", &self.statements.give_back, &args)
            .await;
        if let Err(e) = r {
            tracing::warn!(worker_id = id, error = %e, "claimed id not returned; it expires after its ttl");
        }
    }
}

#[async_trait]
impl<D: Queries> WorkerIdClaims for SqlLeases<D> {
    fn mode(&self) -> &'static str {
        D::NAME
    }

    fn capabilities(&self) -> RegistryCapabilities {
        RegistryCapabilities::new(true, true)
    }

    fn cache_file_name(&self) -> &str {
        &self.file_name
    }

    fn lease_ttl(&self) -> Option<(Duration, &'static str)> {
        Some((self.ttl(), "lease_ttl_ms"))
    }

    async fn holder(&self, worker_id: u64) -> Result<Option<String>> {
        Ok(self
            .one(worker_id)
            .await?
            .filter(LeaseRow::held)
            .map(|r| r.owner))
    }

    async fn claim(&self, req: &AcquireRequest) -> Result<Lease, ClaimError> {
        let ttl = self.ttl();
        let mut state = self.held.lock().await;
        self.rotation.refresh::<D>(&self.config, &self.pool);
        bounded(
            D::NAME,
            self.limit(),
            "preparing leaf_workerid_lease",
            self.prepare(),
        )
        .await?;
        let max = req.max_worker_id.min(MAX_POOL_ID);
        let limit = req.now_ms.saturating_add(req.max_ahead_ms);
        let args = [Arg::Text(&self.name), Arg::Int(signed(max))];
        let rows: BTreeMap<u64, LeaseRow> = self
            .rows(
                "listing the leased worker ids",
                &self.statements.list,
                &args,
            )
            .await?
            .into_iter()
            .filter_map(|r| Some((u64::try_from(r.id).ok()?, r)))
            .collect();
        let owner = req.identity.to_string();
        let token = new_token();
        let mut skipped: Option<(u64, u64)> = None;
        let mut claimed = None;
        for id in 0..=max {
            let row = rows.get(&id);
            if let Some(r) = row {
                let mark = r.max_timestamp.and_then(|m| u64::try_from(m).ok());
                if r.held() {
                    continue;
                }
                if let Some(m) = mark.filter(|m| *m > limit) {
                    skipped.get_or_insert((id, m));
                    continue;
                }
            }
            if self.try_claim(id, row, token, &owner, ttl).await? {
                claimed = Some(id);
                break;
            }
        }
        let Some(worker_id) = claimed else {
            return Err(leaf_core::no_free_worker_id(max, skipped, req.now_ms).into());
        };
        // Read after the claim: only this token writes the row from here on, so this is the
        // mark the claim took over.
        let mark = match self.one(worker_id).await {
            Ok(Some(r)) if r.token == token.get() as i64 => r.max_timestamp,
            Ok(_) => {
                return Err(Error::Unavailable(format!(
                    "the lease of worker id {worker_id} ended before its mark was read"
                ))
                .into());
            }
            Err(e) => {
                self.give_back(worker_id, token).await;
                return Err(e.into());
            }
        };
        let carried = mark.and_then(|m| u64::try_from(m).ok()).filter(|m| *m > 0);
        tracing::info!(worker_id, carried_mark_ms = ?carried, identity = %req.identity, ttl_ms = ttl.as_millis() as u64, "{} worker id leased", D::NAME);
        *state = Some(HeldClaim {
            worker_id,
            token,
            ttl,
        });
        Ok(Lease::new(worker_id, carried)
            .with_ttl(ttl)
            .with_token(token))
    }

    async fn renew(&self, lease: &Lease, mark_ms: u64) -> Result<Renewal> {
        let mut state = self.held.lock().await;
        let Some(h) = state.as_ref().filter(|h| h.is(lease)) else {
            return Ok(Renewal::LeaseLost);
        };
        let (id, token, ttl) = (h.worker_id, h.token, h.ttl);
        let args = [
            Arg::Int(signed(mark_ms)),
            Arg::Text(&self.name),
            Arg::Int(signed(id)),
            Arg::Int(token.get() as i64),
        ];
        let n = self
            .write("the lease renewal", &self.statements.renew, &args)
            .await?;
        if n != Some(1) {
            tracing::warn!(
                worker_id = id,
                "the worker id's lease is gone (expired, or claimed by another node)"
            );
            *state = None;
            return Ok(Renewal::LeaseLost);
        }
        Ok(Renewal::Ok { ttl: Some(ttl) })
    }

    async fn release(&self, lease: &Lease, final_mark_ms: u64) -> Result<()> {
        let mut state = self.held.lock().await;
        let Some(h) = state.as_ref().filter(|h| h.is(lease)) else {
            tracing::debug!(worker_id = lease.worker_id, "release of a lease not held");
            return Ok(());
        };
        let (id, token) = (h.worker_id, h.token);
        let args = [
            Arg::Int(signed(final_mark_ms)),
            Arg::Text(&self.name),
            Arg::Int(signed(id)),
            Arg::Int(token.get() as i64),
        ];
        let n = self
            .write("returning the worker id", &self.statements.release, &args)
            .await?;
        if n != Some(1) {
            tracing::debug!(worker_id = id, "the lease was gone at release");
        }
        *state = None;
        tracing::info!(
            worker_id = id,
            final_mark_ms,
            "{} leased worker id returned to the pool",
            D::NAME
        );
        Ok(())
    }

    async fn abandon(&self, lease: &Lease) {
        HeldClaim::forget(&mut *self.held.lock().await, lease);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_fit_the_column_and_are_never_none() {
        for _ in 0..1000 {
            let t = new_token();
            assert_ne!(t, LeaseToken::NONE);
            assert!(i64::try_from(t.get()).is_ok());
        }
    }

    #[test]
    fn every_statement_compares_what_it_must() {
        let s = Statements::new("NOW_MS");
        // Renewals and releases only while the claim is this token's.
        for sql in [&s.renew, &s.release, &s.give_back] {
            assert!(sql.ends_with("AND token = ?"), "{sql}");
        }
        // A take only of a free or ended lease, and only of the claim that was seen.
        assert!(
            s.take
                .contains("AND token = ? AND (token = 0 OR lease_until <= NOW_MS)")
        );
        // Marks only rise, but for the release's final one.
        assert!(s.renew.contains("GREATEST(COALESCE(max_timestamp, 0), ?)"));
        let count = |sql: &str| sql.matches('?').count();
        assert_eq!(
            [
                count(&s.list),
                count(&s.one),
                count(&s.insert),
                count(&s.take),
                count(&s.renew),
                count(&s.release),
                count(&s.give_back),
            ],
            [2, 2, 6, 7, 4, 4, 3]
        );
    }
}
