//! `MysqlStore`: Leaf's `leaf_alloc` table on a MySQL-compatible server, used as it is.

use std::fmt;

use async_trait::async_trait;
use leaf_core::{
    Allocation, Error, NewTag, Result, SegmentStore, StoreCapabilities, Tag, TagRecord, TagUpdate,
};
use leaf_core::{clamp_step, validate_step};
use sqlx::mysql::{MySqlPool, MySqlPoolOptions, MySqlRow};
use sqlx::{AssertSqlSafe, Executor, Row};

use crate::config::{MysqlConfig, MysqlStoreConfig};
use crate::error::{bounded, is_table_exists, map_sqlx, map_sqlx_at_start};

/// Leaf's DDL for `leaf_alloc`, exactly as Leaf ships it. It runs only when the table is
/// missing; an existing table is never altered.
pub const LEAF_ALLOC_DDL: &str = "CREATE TABLE leaf_alloc (biz_tag varchar(128) NOT NULL DEFAULT '', max_id bigint(20) NOT NULL DEFAULT '1', step int(11) NOT NULL, description varchar(256) DEFAULT NULL, update_time timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP, PRIMARY KEY (biz_tag)) ENGINE=InnoDB;";

/// The configuration key of the store's URL, named in messages.
const KEY: &str = "url";

// `update_time` is a whole-second `timestamp`; read it as Unix milliseconds.
macro_rules! columns {
    () => {
        "biz_tag, max_id, step, description, \
         CAST(UNIX_TIMESTAMP(update_time) AS SIGNED) * 1000 AS updated_at_ms"
    };
}
const SELECT_ONE: &str = concat!("SELECT ", columns!(), " FROM leaf_alloc WHERE biz_tag = ?");
const SELECT_ALL: &str = concat!("SELECT ", columns!(), " FROM leaf_alloc ORDER BY biz_tag");

/// A segment store on Leaf's `leaf_alloc` table, safe for any number of servers at once.
///
/// An allocation is one transaction, as in Leaf: `UPDATE leaf_alloc SET max_id = max_id + step`
/// (or `+ ?`, the dynamic step) `WHERE biz_tag = ?`, then the `SELECT` of the row. The update
/// holds the row's lock until the commit, so two servers never read the same `max_id`. Near
/// `i64::MAX` the row is read under its lock first and the step cut to what is left. Every
/// call is bounded by `timeout_ms`, a row lock wait by `lock_wait_timeout_s`; both fail with
/// `Unavailable`, never hang.
pub struct MysqlStore {
    pool: MySqlPool,
    config: MysqlConfig,
}

impl fmt::Debug for MysqlStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MysqlStore")
            .field("url", &self.config.redacted_url())
            .field("max_connections", &self.config.max_connections)
            .finish_non_exhaustive()
    }
}

/// A pool with the session settings every connection needs.
pub(crate) fn pool(config: &MysqlConfig, key: &str) -> Result<(MySqlPool, MySqlPoolOptions)> {
    let opts = config.connect_options(key)?;
    let lock_wait = config.lock_wait_timeout_s;
    let pool_opts = MySqlPoolOptions::new()
        .max_connections(config.max_connections)
        .min_connections(0)
        .acquire_timeout(config.connect_timeout())
        .after_connect(move |conn, _meta| {
            Box::pin(async move {
                // A number formatted here, not input: safe to splice into the statement.
                let set = format!("SET SESSION innodb_lock_wait_timeout = {lock_wait}");
                conn.execute(AssertSqlSafe(set)).await?;
                Ok(())
            })
        });
    // Connections open on first use: a store or registry can be made while the server is down.
    let pool = pool_opts.clone().connect_lazy_with(opts);
    Ok((pool, pool_opts))
}

/// Creates `table` with `ddl` when it is missing; an existing table is left exactly as it is.
pub(crate) async fn ensure_table(
    pool: &MySqlPool,
    table: &str,
    ddl: &'static str,
    key: &str,
) -> Result<()> {
    let exists: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.tables \
         WHERE table_schema = DATABASE() AND table_name = ?",
    )
    .bind(table)
    .fetch_one(pool)
    .await
    .map_err(|e| map_sqlx_at_start(e, table, key))?;
    if exists == 0 {
        match sqlx::query(ddl).execute(pool).await {
            Ok(_) => tracing::info!(table, "created the missing table"),
            // Another process created it between the check and the DDL.
            Err(e) if is_table_exists(&e) => {}
            Err(e) => return Err(map_sqlx_at_start(e, table, key)),
        }
    }
    Ok(())
}

impl MysqlStore {
    /// Connects to the server of `config`, creates `leaf_alloc` with Leaf's DDL if the database
    /// has none, and checks that the table has Leaf's columns. Fails with `Unavailable` if the
    /// server cannot be reached within the timeouts, `Config` if it refuses the credentials or
    /// the database.
    pub async fn connect(config: &MysqlStoreConfig) -> Result<Self> {
        config.validate_store()?;
        let (pool, _) = pool(config, KEY)?;
        let store = MysqlStore {
            pool,
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
        tracing::debug!(url = %config.redacted_url(), "mysql segment store ready");
        Ok(store)
    }

    /// [`connect`](Self::connect) with the default settings.
    pub async fn connect_url(url: &str) -> Result<Self> {
        Self::connect(&MysqlConfig::with_url(url)).await
    }

    /// The connection pool, for tools and tests that need the raw database.
    pub fn pool(&self) -> &MySqlPool {
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

    async fn allocate_tx(&self, tag: &Tag, step: Option<i64>) -> Result<Allocation> {
        let err = |e| map_sqlx(e, &format!("tag {tag}"), KEY);
        let mut tx = self.pool.begin().await.map_err(err)?;
        // Leaf's update, guarded so that the sum stays within the bigint column: near the end
        // MySQL would refuse it, and the tag's last IDs would never be handed out. A row the
        // guard skips (unknown tag, the end near, a bad step) takes the locked path below.
        let update = match step {
            Some(s) => sqlx::query(
                "UPDATE leaf_alloc SET max_id = max_id + ? \
                 WHERE biz_tag = ? AND max_id <= 9223372036854775807 - ?",
            )
            .bind(s)
            .bind(tag.as_str())
            .bind(s),
            None => sqlx::query(
                "UPDATE leaf_alloc SET max_id = max_id + step \
                 WHERE biz_tag = ? AND step >= 1 AND max_id <= 9223372036854775807 - GREATEST(step, 1)",
            )
            .bind(tag.as_str()),
        };
        if update.execute(&mut *tx).await.map_err(err)?.rows_affected() == 0 {
            return self.allocate_rest(tx, tag, step).await;
        }
        let row = sqlx::query("SELECT max_id, step FROM leaf_alloc WHERE biz_tag = ?")
            .bind(tag.as_str())
            .fetch_optional(&mut *tx)
            .await
            .map_err(err)?;
        // Dropping the transaction without a commit rolls it back.
        let Some(row) = row else {
            return Err(not_found(tag));
        };
        let max_id: i64 = row.try_get("max_id").map_err(err)?;
        let stored: i64 = row.try_get("step").map_err(err)?;
        let used_step = positive_step(tag, step, stored)?;
        tx.commit().await.map_err(err)?;
        Ok(Allocation {
            tag: tag.clone(),
            max_id,
            step: stored,
            used_step,
        })
    }

    /// An allocation the guarded update skipped: the row is read under its lock, and the step
    /// cut to what is left before `i64::MAX` ([`clamp_step`]).
    async fn allocate_rest(
        &self,
        mut tx: sqlx::Transaction<'_, sqlx::MySql>,
        tag: &Tag,
        step: Option<i64>,
    ) -> Result<Allocation> {
        let err = |e| map_sqlx(e, &format!("tag {tag}"), KEY);
        let row = sqlx::query("SELECT max_id, step FROM leaf_alloc WHERE biz_tag = ? FOR UPDATE")
            .bind(tag.as_str())
            .fetch_optional(&mut *tx)
            .await
            .map_err(err)?
            .ok_or_else(|| not_found(tag))?;
        let max_id: i64 = row.try_get("max_id").map_err(err)?;
        let stored: i64 = row.try_get("step").map_err(err)?;
        let used_step = clamp_step(tag, max_id, positive_step(tag, step, stored)?)?;
        sqlx::query("UPDATE leaf_alloc SET max_id = max_id + ? WHERE biz_tag = ?")
            .bind(used_step)
            .bind(tag.as_str())
            .execute(&mut *tx)
            .await
            .map_err(err)?;
        tx.commit().await.map_err(err)?;
        Ok(Allocation {
            tag: tag.clone(),
            max_id: max_id + used_step,
            step: stored,
            used_step,
        })
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

fn record(row: &MySqlRow) -> Result<TagRecord> {
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
impl SegmentStore for MysqlStore {
    fn kind(&self) -> &'static str {
        "mysql"
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
            self.allocate_tx(tag, step),
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
        bounded(self.config.timeout(), "the insert", async {
            sqlx::query(
                "INSERT INTO leaf_alloc (biz_tag, max_id, step, description) VALUES (?, ?, ?, ?)",
            )
            .bind(new.tag.as_str())
            .bind(new.max_id)
            .bind(new.step)
            .bind(new.description.as_deref())
            .execute(&self.pool)
            .await
            .map_err(|e| map_sqlx(e, &what, KEY))?;
            self.fetch(&new.tag)
                .await?
                .ok_or_else(|| not_found(&new.tag))
        })
        .await
    }

    async fn update(&self, tag: &Tag, update: &TagUpdate) -> Result<TagRecord> {
        update.validate()?;
        bounded(self.config.timeout(), "the update", async {
            sqlx::query(
                "UPDATE leaf_alloc SET step = COALESCE(?, step), \
                 description = COALESCE(?, description) WHERE biz_tag = ?",
            )
            .bind(update.step)
            .bind(update.description.as_deref())
            .bind(tag.as_str())
            .execute(&self.pool)
            .await
            .map_err(|e| map_sqlx(e, tag.as_str(), KEY))?;
            // Not `rows_affected`: an update to the values already stored changes no row.
            self.fetch(tag).await?.ok_or_else(|| not_found(tag))
        })
        .await
    }
}
