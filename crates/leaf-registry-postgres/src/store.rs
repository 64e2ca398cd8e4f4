//! `PostgresStore`: Leaf's `leaf_alloc` table on PostgreSQL, used as it is.

use std::fmt;

use async_trait::async_trait;
use leaf_core::{
    Allocation, Error, NewTag, Result, SegmentStore, StoreCapabilities, Tag, TagRecord, TagUpdate,
};
use leaf_core::{clamp_step, validate_step};
use sqlx::Row;
use sqlx::postgres::{PgPool, PgPoolOptions, PgRow};

use crate::config::{PostgresConfig, PostgresStoreConfig};
use crate::error::{
    bounded, is_duplicate_object, map_sqlx, map_sqlx_at_start, retry_serialization,
};

/// Leaf's `leaf_alloc` in PostgreSQL's types: the same columns, `update_time` a `timestamptz`.
/// It runs only when the table is missing; an existing table is never altered.
pub const LEAF_ALLOC_DDL: &str = "CREATE TABLE leaf_alloc (biz_tag varchar(128) NOT NULL DEFAULT '', max_id bigint NOT NULL DEFAULT 1, step integer NOT NULL, description varchar(256) DEFAULT NULL, update_time timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP, PRIMARY KEY (biz_tag))";

/// The configuration key of the store's URL, named in messages.
const KEY: &str = "url";

// Read as Leaf's types whatever an existing table declares (`step` may be an `integer` or a
// `bigint`, `update_time` a `timestamp` or a `timestamptz`, or null).
macro_rules! columns {
    () => {
        "biz_tag::text AS biz_tag, max_id::bigint AS max_id, step::bigint AS step, \
         description::text AS description, \
         (EXTRACT(EPOCH FROM update_time) * 1000)::bigint AS updated_at_ms"
    };
}
const SELECT_ONE: &str = concat!("SELECT ", columns!(), " FROM leaf_alloc WHERE biz_tag = $1");
const SELECT_ALL: &str = concat!("SELECT ", columns!(), " FROM leaf_alloc ORDER BY biz_tag");

/// Leaf's update as one statement: the step added (`$2`, or the row's when null) only when the
/// sum stays within the bigint column, the row returned. A row it skips (an unknown tag, a bad
/// stored step, the end of the column near) takes [`PostgresStore::allocate_rest`].
const ALLOCATE: &str = "UPDATE leaf_alloc \
     SET max_id = max_id + COALESCE($2::bigint, step), update_time = CURRENT_TIMESTAMP \
     WHERE biz_tag = $1 AND COALESCE($2::bigint, step) >= 1 \
     AND max_id <= 9223372036854775807 - GREATEST(COALESCE($2::bigint, step), 1) \
     RETURNING max_id::bigint AS max_id, step::bigint AS step";

/// A segment store on Leaf's `leaf_alloc` table, safe for any number of servers at once.
///
/// An allocation is one statement, `UPDATE leaf_alloc SET max_id = max_id + step ... RETURNING
/// max_id, step`: the update holds the row's lock until it commits, so two servers never get
/// the same range, and no transaction costs extra round trips. The statement checks in SQL that
/// the sum stays within the bigint column; near `i64::MAX` the row is read under its lock
/// instead and the step cut to what is left. Every call is bounded by `timeout_ms` (also the
/// sessions' `statement_timeout`), a row lock wait by `lock_timeout_ms` (`lock_timeout`); both
/// fail with `Unavailable`, never hang. A database whose default isolation is `repeatable read`
/// or `serializable` rolls concurrent allocations back with serialization failures; those are
/// run again.
pub struct PostgresStore {
    pool: PgPool,
    config: PostgresConfig,
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("url", &self.config.redacted_url())
            .field("max_connections", &self.config.max_connections)
            .finish_non_exhaustive()
    }
}

/// A pool whose connections open on first use: a store or registry can be made while the
/// server is down.
pub(crate) fn pool(config: &PostgresConfig, key: &str) -> Result<PgPool> {
    let opts = config.connect_options(key)?;
    Ok(PgPoolOptions::new()
        .max_connections(config.max_connections)
        .min_connections(0)
        .acquire_timeout(config.connect_timeout())
        .connect_lazy_with(opts))
}

/// Creates `table` with `ddl` when the search path has none; an existing table is left exactly
/// as it is. Concurrent `CREATE TABLE`s of one name fail in more ways than one (the relation,
/// its row type or a catalog index already taken), so the servers' creators take turns under a
/// transaction-scoped advisory lock and look again once they hold it; a table someone else
/// creates at that moment is taken as it is.
pub(crate) async fn ensure_table(
    pool: &PgPool,
    table: &str,
    ddl: &'static str,
    key: &str,
) -> Result<()> {
    let err = |e| map_sqlx_at_start(e, table, key);
    if table_exists(pool, table).await.map_err(err)? {
        return Ok(());
    }
    let created = async {
        let mut tx = pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
            .bind(format!("leaf_create_table:{table}"))
            .execute(&mut *tx)
            .await?;
        let found = table_exists(&mut *tx, table).await?;
        if !found {
            sqlx::query(ddl).execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok::<_, sqlx::Error>(!found)
    };
    match created.await {
        Ok(true) => tracing::info!(table, "created the missing table"),
        Ok(false) => {}
        Err(e) if is_duplicate_object(&e) && table_exists(pool, table).await.map_err(err)? => {}
        Err(e) => return Err(err(e)),
    }
    Ok(())
}

async fn table_exists<'c>(
    conn: impl sqlx::PgExecutor<'c>,
    table: &str,
) -> std::result::Result<bool, sqlx::Error> {
    sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL")
        .bind(table)
        .fetch_one(conn)
        .await
}

impl PostgresStore {
    /// Connects to the server of `config`, creates `leaf_alloc` if the database has none, and
    /// checks that the table has Leaf's columns. Fails with `Unavailable` if the server cannot
    /// be reached within the timeouts, `Config` if it refuses the credentials or the database.
    pub async fn connect(config: &PostgresStoreConfig) -> Result<Self> {
        config.validate_store()?;
        let store = PostgresStore {
            pool: pool(config, KEY)?,
            config: config.clone(),
        };
        bounded(
            config.timeout() + config.connect_timeout(),
            "start-up",
            async {
                ensure_table(&store.pool, "leaf_alloc", LEAF_ALLOC_DDL, KEY).await?;
                // Fails with `Config` naming the column if an existing table lacks one of Leaf's.
                sqlx::query(concat!("SELECT ", columns!(), " FROM leaf_alloc LIMIT 0"))
                    .execute(&store.pool)
                    .await
                    .map_err(|e| map_sqlx_at_start(e, "leaf_alloc", KEY))?;
                Ok(())
            },
        )
        .await?;
        tracing::debug!(url = %config.redacted_url(), "postgres segment store ready");
        Ok(store)
    }

    /// [`connect`](Self::connect) with the default settings.
    pub async fn connect_url(url: &str) -> Result<Self> {
        Self::connect(&PostgresConfig::with_url(url)).await
    }

    /// The connection pool, for tools and tests that need the raw database.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    async fn fetch(&self, tag: &Tag) -> Result<Option<TagRecord>> {
        let row = sqlx::query(SELECT_ONE)
            .bind(tag.as_str())
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| map_sqlx(e, tag.as_str(), KEY))?;
        row.map(|r| record(&r)).transpose()
    }

    async fn allocate_once(&self, tag: &Tag, step: Option<i64>) -> Result<Allocation> {
        let err = |e| map_sqlx(e, &format!("tag {tag}"), KEY);
        let row = retry_serialization(|| {
            sqlx::query(ALLOCATE)
                .bind(tag.as_str())
                .bind(step)
                .fetch_optional(&self.pool)
        })
        .await
        .map_err(err)?;
        let Some(row) = row else {
            return self.allocate_rest(tag, step).await;
        };
        let max_id: i64 = row.try_get("max_id").map_err(err)?;
        let stored: i64 = row.try_get("step").map_err(err)?;
        Ok(Allocation {
            tag: tag.clone(),
            max_id,
            step: stored,
            used_step: positive_step(tag, step, stored)?,
        })
    }

    /// An allocation the guarded update skipped: the row is read under its lock in a
    /// transaction, and the step cut to what is left before `i64::MAX` ([`clamp_step`]).
    async fn allocate_rest(&self, tag: &Tag, step: Option<i64>) -> Result<Allocation> {
        let err = |e| map_sqlx(e, &format!("tag {tag}"), KEY);
        let attempt = || async {
            let mut tx = self.pool.begin().await?;
            let row = sqlx::query(
                "SELECT max_id::bigint AS max_id, step::bigint AS step FROM leaf_alloc \
                 WHERE biz_tag = $1 FOR UPDATE",
            )
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
            sqlx::query(
                "UPDATE leaf_alloc SET max_id = max_id + $1, update_time = CURRENT_TIMESTAMP \
                 WHERE biz_tag = $2",
            )
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
        retry_serialization(attempt).await.map_err(err)?
    }
}

/// The step an allocation uses: the caller's, or the row's when that is a usable one.
fn positive_step(tag: &Tag, step: Option<i64>, stored: i64) -> Result<i64> {
    match step {
        Some(s) => Ok(s),
        None if stored >= 1 => Ok(stored),
        None => Err(Error::InvalidInput(format!(
            "tag {tag} has step {stored} in leaf_alloc; a step must be at least 1"
        ))),
    }
}

fn record(row: &PgRow) -> Result<TagRecord> {
    let col = |e: sqlx::Error| map_sqlx(e, "leaf_alloc row", KEY);
    let tag: String = row.try_get("biz_tag").map_err(col)?;
    Ok(TagRecord {
        tag: Tag::try_from(tag)?,
        max_id: row.try_get("max_id").map_err(col)?,
        step: row.try_get("step").map_err(col)?,
        description: row.try_get("description").map_err(col)?,
        updated_at_ms: row.try_get("updated_at_ms").map_err(col)?,
    })
}

fn not_found(tag: &Tag) -> Error {
    Error::NotFound(format!("tag {tag}"))
}

#[async_trait]
impl SegmentStore for PostgresStore {
    fn kind(&self) -> &'static str {
        "postgres"
    }

    fn capabilities(&self) -> StoreCapabilities {
        StoreCapabilities::new(true, true)
    }

    async fn allocate(&self, tag: &Tag, step: Option<i64>) -> Result<Allocation> {
        if let Some(s) = step {
            validate_step(s)?;
        }
        bounded(
            self.config.timeout(),
            "the allocation",
            self.allocate_once(tag, step),
        )
        .await
    }

    async fn get(&self, tag: &Tag) -> Result<Option<TagRecord>> {
        bounded(self.config.timeout(), "the lookup", self.fetch(tag)).await
    }

    async fn list(&self) -> Result<Vec<TagRecord>> {
        let rows = bounded(self.config.timeout(), "the listing", async {
            sqlx::query(SELECT_ALL)
                .fetch_all(&self.pool)
                .await
                .map_err(|e| map_sqlx(e, "leaf_alloc", KEY))
        })
        .await?;
        // A row whose biz_tag is not a valid tag (an existing database may hold anything) is
        // skipped rather than hiding every other tag.
        let mut records: Vec<TagRecord> = rows
            .iter()
            .filter_map(|r| match record(r) {
                Ok(rec) => Some(rec),
                Err(e) => {
                    tracing::warn!(error = %e, "skipping a leaf_alloc row");
                    None
                }
            })
            .collect();
        // The server sorts by its collation; callers expect the tags' own order.
        records.sort_by(|a, b| a.tag.cmp(&b.tag));
        Ok(records)
    }

    async fn create(&self, new: &NewTag) -> Result<TagRecord> {
        new.validate()?;
        let what = format!("tag {}", new.tag);
        let row = bounded(self.config.timeout(), "the insert", async {
            sqlx::query(concat!(
                "INSERT INTO leaf_alloc (biz_tag, max_id, step, description) \
                 VALUES ($1, $2, $3, $4) RETURNING ",
                columns!()
            ))
            .bind(new.tag.as_str())
            .bind(new.max_id)
            .bind(new.step)
            .bind(new.description.as_deref())
            .fetch_one(&self.pool)
            .await
            .map_err(|e| map_sqlx(e, &what, KEY))
        })
        .await?;
        record(&row)
    }

    async fn update(&self, tag: &Tag, update: &TagUpdate) -> Result<TagRecord> {
        update.validate()?;
        let row = bounded(self.config.timeout(), "the update", async {
            retry_serialization(|| {
                sqlx::query(concat!(
                    "UPDATE leaf_alloc SET step = COALESCE($1, step), \
                     description = COALESCE($2, description), update_time = CURRENT_TIMESTAMP \
                     WHERE biz_tag = $3 RETURNING ",
                    columns!()
                ))
                .bind(update.step)
                .bind(update.description.as_deref())
                .bind(tag.as_str())
                .fetch_optional(&self.pool)
            })
            .await
            .map_err(|e| map_sqlx(e, tag.as_str(), KEY))
        })
        .await?;
        record(&row.ok_or_else(|| not_found(tag))?)
    }
}
