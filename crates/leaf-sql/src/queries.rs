//! [`Queries`]: Leaf's statements run on a dialect's database, written once. The bounds that
//! sqlx asks of a database (its executors, and the types Leaf binds and reads) are stated here
//! only, on the blanket implementation.

use async_trait::async_trait;
use leaf_core::{Allocation, Error, NewTag, Result, Tag, TagRecord, TagUpdate, clamp_step};
use sqlx::AssertSqlSafe;
use sqlx::database::HasStatementCache;
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Pool, Row, Type};

use crate::ServerError;
use crate::error::{map_sqlx, map_sqlx_at_start, retry_conflicts, worker_id_of};
use crate::inline::{Arg, inline};
use crate::leases::LeaseRow;
use crate::rows::{not_found, positive_step, record, records};
use crate::{Conn, Dialect, KEY, MarkRow, MarkWrite, Proof, RegistryDialect, StoreDialect};

/// A dialect ([`StoreDialect`] and [`RegistryDialect`]) whose database runs Leaf's statements: every dialect whose database has sqlx's
/// executors and Leaf's types (`i64`, text). The shared store and registry run their
/// statements through it.
#[async_trait]
pub trait Queries: StoreDialect + RegistryDialect {
    /// Runs `sql`, which takes no argument, as at start-up.
    async fn run_at_start(pool: &Pool<Self::Db>, sql: &'static str, what: &str) -> Result<()>;
    /// The record of `tag`.
    async fn select_tag(pool: &Pool<Self::Db>, tag: &Tag) -> Result<Option<TagRecord>>;
    /// Every record whose tag is valid, in the tags' order.
    async fn select_tags(pool: &Pool<Self::Db>) -> Result<Vec<TagRecord>>;
    /// Inserts `new`: the record, if the statement returns it.
    async fn insert_tag(pool: &Pool<Self::Db>, new: &NewTag) -> Result<Option<TagRecord>>;
    /// Applies `update` to `tag`: the record, if the statement returns it.
    async fn update_tag(
        pool: &Pool<Self::Db>,
        tag: &Tag,
        update: &TagUpdate,
    ) -> Result<Option<TagRecord>>;
    /// An allocation in a transaction that reads the row under its lock first, the step cut to
    /// what is left before `i64::MAX` ([`clamp_step`]): the path of a row that
    /// [`StoreDialect::allocate`] skipped.
    async fn allocate_locked(
        pool: &Pool<Self::Db>,
        tag: &Tag,
        step: Option<i64>,
    ) -> Result<Allocation>;
    /// The worker id and mark of the row of `ip_port`, as at start-up.
    async fn select_worker(
        pool: &Pool<Self::Db>,
        ip_port: &str,
    ) -> Result<Option<(u64, Option<i64>)>>;
    /// The stored mark of `row`, read on `conn` if its session holds the row's lock and the
    /// row is the identity's.
    async fn read_mark(conn: &mut Conn<Self>, row: MarkRow<'_>) -> Result<Proof<Option<u64>>>;
    /// Writes the mark of `row` on `conn` if its session holds the row's lock and the row is
    /// the identity's.
    async fn write_mark(
        conn: &mut Conn<Self>,
        row: MarkRow<'_>,
        mark_ms: u64,
        how: MarkWrite,
    ) -> Result<Proof<()>>;
    /// Runs `sql`, a changing statement with its values inlined, as a simple query on a pooled
    /// session: the rows it matched, `None` if it broke a unique key.
    async fn run_inlined(pool: &Pool<Self::Db>, sql: String) -> Result<Option<u64>>;
    /// Runs `sql`, a query of `leaf_workerid_lease` with its values inlined, as a simple query
    /// on a pooled session: its rows.
    async fn lease_rows(pool: &Pool<Self::Db>, sql: String) -> Result<Vec<LeaseRow>>;
}

/// `n` as a bigint, `i64::MAX` past it.
pub(crate) fn signed(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[async_trait]
impl<D: StoreDialect + RegistryDialect> Queries for D
where
    for<'c> &'c mut Conn<D>: Executor<'c, Database = D::Db>,
    <D::Db as Database>::Arguments: IntoArguments<D::Db>,
    for<'a> &'a str: ColumnIndex<<D::Db as Database>::Row> + Encode<'a, D::Db> + Type<D::Db>,
    for<'a> Option<&'a str>: Encode<'a, D::Db>,
    for<'r> String: Decode<'r, D::Db> + Type<D::Db>,
    for<'r> i64: Decode<'r, D::Db> + Encode<'r, D::Db> + Type<D::Db>,
    for<'r> Option<i64>: Encode<'r, D::Db>,
    D::Db: HasStatementCache,
{
    async fn run_at_start(pool: &Pool<D::Db>, sql: &'static str, what: &str) -> Result<()> {
        sqlx::query::<D::Db>(sql)
            .execute(pool)
            .await
            .map_err(|e| map_sqlx_at_start::<D>(e, what, KEY))?;
        Ok(())
    }

    async fn select_tag(pool: &Pool<D::Db>, tag: &Tag) -> Result<Option<TagRecord>> {
        let row = sqlx::query::<D::Db>(D::SELECT_TAG)
            .bind(tag.as_str())
            .fetch_optional(pool)
            .await
            .map_err(|e| map_sqlx::<D>(e, tag.as_str(), KEY))?;
        row.map(|r| record(&r, column::<D>)).transpose()
    }

    async fn select_tags(pool: &Pool<D::Db>) -> Result<Vec<TagRecord>> {
        let rows = sqlx::query::<D::Db>(D::SELECT_TAGS)
            .fetch_all(pool)
            .await
            .map_err(|e| map_sqlx::<D>(e, "leaf_alloc", KEY))?;
        records(&rows, |r| record(r, column::<D>), |_| true)
    }

    async fn insert_tag(pool: &Pool<D::Db>, new: &NewTag) -> Result<Option<TagRecord>> {
        let row = sqlx::query::<D::Db>(D::INSERT_TAG)
            .bind(new.tag.as_str())
            .bind(new.max_id)
            .bind(new.step)
            .bind(new.description.as_deref())
            .fetch_optional(pool)
            .await
            .map_err(|e| map_sqlx::<D>(e, &format!("tag {}", new.tag), KEY))?;
        row.map(|r| record(&r, column::<D>)).transpose()
    }

    async fn update_tag(
        pool: &Pool<D::Db>,
        tag: &Tag,
        update: &TagUpdate,
    ) -> Result<Option<TagRecord>> {
        let row = retry_conflicts::<D, _, _, _>(|| {
            sqlx::query::<D::Db>(D::UPDATE_TAG)
                .bind(update.step)
                .bind(update.description.as_deref())
                .bind(tag.as_str())
                .fetch_optional(pool)
        })
        .await
        .map_err(|e| map_sqlx::<D>(e, tag.as_str(), KEY))?;
        row.map(|r| record(&r, column::<D>)).transpose()
    }

    async fn allocate_locked(
        pool: &Pool<D::Db>,
        tag: &Tag,
        step: Option<i64>,
    ) -> Result<Allocation> {
        let attempt = || async {
            let mut tx = pool.begin().await?;
            let row = sqlx::query::<D::Db>(D::LOCK_TAG)
                .bind(tag.as_str())
                .fetch_optional(&mut *tx)
                .await?;
            // Dropping the transaction without a commit rolls it back.
            let Some(row) = row else {
                return Ok(Err(not_found(tag)));
            };
            let max_id: i64 = row.try_get("max_id")?;
            let stored: i64 = row.try_get("step")?;
            let used_step =
                match positive_step(tag, step, stored).and_then(|s| clamp_step(tag, max_id, s)) {
                    Ok(s) => s,
                    Err(e) => return Ok(Err(e)),
                };
            sqlx::query::<D::Db>(D::ADD_TO_TAG)
                .bind(used_step)
                .bind(tag.as_str())
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok::<_, sqlx::Error>(Ok(Allocation {
                tag: tag.clone(),
                max_id: max_id + used_step,
                step: stored,
                used_step,
            }))
        };
        retry_conflicts::<D, _, _, _>(attempt)
            .await
            .map_err(|e| map_sqlx::<D>(e, &format!("tag {tag}"), KEY))?
    }

    async fn select_worker(
        pool: &Pool<D::Db>,
        ip_port: &str,
    ) -> Result<Option<(u64, Option<i64>)>> {
        let err = |e| map_sqlx_at_start::<D>(e, ip_port, KEY);
        // Not kept prepared: a start-up statement, run once.
        let row = sqlx::query::<D::Db>(D::SELECT_WORKER)
            .bind(ip_port)
            .persistent(false)
            .fetch_optional(pool)
            .await
            .map_err(err)?;
        row.map(|r| {
            let id: i64 = r.try_get("id").map_err(err)?;
            let mark: Option<i64> = r.try_get("max_timestamp").map_err(err)?;
            Ok((worker_id_of::<D>(id, ip_port)?, mark))
        })
        .transpose()
    }

    // Simple queries with their values inlined (`crate::inline`): see there why.
    async fn read_mark(conn: &mut Conn<D>, row: MarkRow<'_>) -> Result<Proof<Option<u64>>> {
        let err = |e| map_sqlx::<D>(e, "leaf_workerid_alloc", KEY);
        let sql = inline::<D>(
            D::READ_MARK,
            &[
                Arg::Int(signed(row.worker_id)),
                Arg::Text(row.identity),
                Arg::Text(row.lock),
                Arg::Int(row.server_session),
            ],
        );
        let found = sqlx::raw_sql(AssertSqlSafe(sql))
            .fetch_optional(&mut *conn)
            .await
            .map_err(err)?;
        let Some(found) = found else {
            return Ok(Proof::NotHeld);
        };
        let mark: Option<i64> = found.try_get("max_timestamp").map_err(err)?;
        Ok(Proof::Held(mark.and_then(|m| u64::try_from(m).ok())))
    }

    async fn write_mark(
        conn: &mut Conn<D>,
        row: MarkRow<'_>,
        mark_ms: u64,
        how: MarkWrite,
    ) -> Result<Proof<()>> {
        let sql = match how {
            MarkWrite::Raise => D::RAISE_MARK,
            MarkWrite::Final => D::FINAL_MARK,
        };
        let sql = inline::<D>(
            sql,
            &[
                Arg::Int(signed(mark_ms)),
                Arg::Int(signed(row.worker_id)),
                Arg::Text(row.identity),
                Arg::Text(row.lock),
                Arg::Int(row.server_session),
            ],
        );
        let done = sqlx::raw_sql(AssertSqlSafe(sql))
            .execute(&mut *conn)
            .await
            .map_err(|e| map_sqlx::<D>(e, "leaf_workerid_alloc", KEY))?;
        // A mark left as it was still counts (MySQL is asked for found rows): 0 means the lock
        // is not this session's, or the row is gone or another identity's.
        Ok(match D::rows_affected(&done) {
            0 => Proof::NotHeld,
            _ => Proof::Held(()),
        })
    }

    async fn run_inlined(pool: &Pool<D::Db>, sql: String) -> Result<Option<u64>> {
        match sqlx::raw_sql(AssertSqlSafe(sql)).execute(pool).await {
            Ok(done) => Ok(Some(D::rows_affected(&done))),
            Err(e) if D::classify(&e) == Some(ServerError::Duplicate) => Ok(None),
            Err(e) => Err(lease_column::<D>(e)),
        }
    }

    async fn lease_rows(pool: &Pool<D::Db>, sql: String) -> Result<Vec<LeaseRow>> {
        let rows = sqlx::raw_sql(AssertSqlSafe(sql))
            .fetch_all(pool)
            .await
            .map_err(lease_column::<D>)?;
        rows.iter()
            .map(|r| {
                Ok(LeaseRow {
                    id: r.try_get("id").map_err(lease_column::<D>)?,
                    token: r.try_get("token").map_err(lease_column::<D>)?,
                    owner: r.try_get("owner").map_err(lease_column::<D>)?,
                    lease_until: r.try_get("lease_until").map_err(lease_column::<D>)?,
                    max_timestamp: r.try_get("max_timestamp").map_err(lease_column::<D>)?,
                    now_ms: r.try_get("now_ms").map_err(lease_column::<D>)?,
                })
            })
            .collect()
    }
}

/// A column of a `leaf_workerid_lease` row that does not decode.
fn lease_column<D: Dialect>(e: sqlx::Error) -> Error {
    map_sqlx::<D>(e, "leaf_workerid_lease", KEY)
}

/// A column of a `leaf_alloc` row that does not decode.
fn column<D: Dialect>(e: sqlx::Error) -> Error {
    map_sqlx::<D>(e, "leaf_alloc row", KEY)
}
