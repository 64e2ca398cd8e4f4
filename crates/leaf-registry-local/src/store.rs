//! `SqliteStore`: Leaf's `leaf_alloc` table in an embedded SQLite file, the default segment store.

use std::path::Path;
use std::str::FromStr;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use leaf_core::{
    Allocation, Error, NewTag, Result, SegmentStore, StoreCapabilities, Tag, TagRecord, TagUpdate,
};
use leaf_core::{clamp_step, validate_step};
use leaf_sql::not_found;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteRow, SqliteSynchronous,
};
use sqlx::{Connection, Row};

use crate::config::SqliteStoreConfig;
use crate::error::{is_busy, map_open, map_sqlx};

/// Leaf's `leaf_alloc` table in SQLite's dialect: the same columns, types and defaults as the
/// MySQL DDL Leaf ships, so rows copy across unchanged.
pub const LEAF_ALLOC_DDL: &str = "CREATE TABLE IF NOT EXISTS leaf_alloc (
    biz_tag varchar(128) NOT NULL PRIMARY KEY,
    max_id bigint NOT NULL DEFAULT 1,
    step int NOT NULL,
    description varchar(256) NULL,
    update_time timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP
)";

// `update_time` holds SQLite's `CURRENT_TIMESTAMP` text (UTC, whole seconds); read it as Unix ms.
macro_rules! columns {
    () => {
        "biz_tag, max_id, step, description, \
         CAST(strftime('%s', update_time) AS INTEGER) * 1000 AS updated_at_ms"
    };
}
const SELECT_ONE: &str = concat!("SELECT ", columns!(), " FROM leaf_alloc WHERE biz_tag = ?");
const SELECT_ALL: &str = concat!("SELECT ", columns!(), " FROM leaf_alloc ORDER BY biz_tag");

/// A segment store on one SQLite database file, safe for any number of processes at once.
///
/// Every allocation is one `BEGIN IMMEDIATE` transaction: it takes the database's write lock
/// before reading `max_id`, so two connections (or processes) never read the same value.
/// Commits are fully synchronous: a range handed out is never handed out again after a crash
/// or a power loss.
#[derive(Debug)]
pub struct SqliteStore {
    pool: SqlitePool,
    durable: bool,
}

impl SqliteStore {
    /// Opens (and creates when missing) the database of `config`, switches it to WAL journal
    /// mode and creates the `leaf_alloc` table if it is not there.
    pub async fn connect(config: &SqliteStoreConfig) -> Result<Self> {
        let busy = Duration::from_millis(config.busy_timeout_ms);
        let opts = SqliteConnectOptions::from_str(&config.url)
            .map_err(|e| {
                Error::Config(format!(
                    "url {:?} is not a valid sqlite url: {e}",
                    config.url
                ))
            })?
            .create_if_missing(true)
            .busy_timeout(busy)
            // NORMAL, the usual companion of WAL, may lose the last commits on power loss, and
            // a lost `max_id` update would hand the same IDs out twice.
            .synchronous(SqliteSynchronous::Full);
        let in_memory = is_in_memory(&config.url);
        let mut pool = SqlitePoolOptions::new().max_connections(config.max_connections.max(1));
        if in_memory {
            // An in-memory database lives as long as one of its connections: keep one open.
            pool = pool
                .min_connections(1)
                .idle_timeout(None)
                .max_lifetime(None);
        } else {
            create_parent(opts.get_filename())?;
            enable_wal(&opts, busy).await?;
        }
        let file = opts.get_filename().to_path_buf();
        let pool = pool
            .connect_with(opts)
            .await
            .map_err(|e| map_open(e, &file))?;
        sqlx::query(LEAF_ALLOC_DDL)
            .execute(&pool)
            .await
            .map_err(|e| map_open(e, &file))?;
        tracing::debug!(url = %config.url, "sqlite segment store ready");
        Ok(SqliteStore {
            pool,
            durable: !in_memory,
        })
    }

    /// The capabilities of a store opened with `config`, known before the file can be opened:
    /// a file is durable and shared by processes, an in-memory database neither.
    pub fn capabilities_of(config: &SqliteStoreConfig) -> StoreCapabilities {
        let durable = !is_in_memory(&config.url);
        StoreCapabilities::new(durable, durable)
    }

    /// [`connect`](Self::connect) with the default pool settings.
    pub async fn connect_url(url: &str) -> Result<Self> {
        Self::connect(&SqliteStoreConfig {
            url: url.to_string(),
            ..SqliteStoreConfig::default()
        })
        .await
    }

    async fn fetch(&self, tag: &Tag) -> Result<Option<TagRecord>> {
        let row = sqlx::query(SELECT_ONE)
            .bind(tag.as_str())
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| map_sqlx(e, tag.as_str()))?;
        row.map(|r| record(&r)).transpose()
    }
}

fn is_in_memory(url: &str) -> bool {
    url.contains(":memory:") || url.contains("mode=memory")
}

fn create_parent(file: &Path) -> Result<()> {
    match file.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => std::fs::create_dir_all(dir).map_err(|e| {
            Error::Config(format!(
                "url: cannot create the directory {}: {e}",
                dir.display()
            ))
        }),
        _ => Ok(()),
    }
}

/// Switches the file to WAL once, on a connection of its own. The switch needs an exclusive
/// lock that SQLite's busy timeout does not wait for, so two processes starting on a new file
/// at once would fail it; it is retried here instead, within the busy timeout.
async fn enable_wal(opts: &SqliteConnectOptions, busy: Duration) -> Result<()> {
    let wal = opts.clone().journal_mode(SqliteJournalMode::Wal);
    let start = Instant::now();
    let mut attempt = 0u64;
    loop {
        attempt += 1;
        match SqliteConnection::connect_with(&wal).await {
            Ok(conn) => {
                // The mode is stored in the file; closing cannot lose it.
                let _ = conn.close().await;
                return Ok(());
            }
            Err(e) if is_busy(&e) && start.elapsed() < busy => {
                tokio::time::sleep(Duration::from_millis(5 * attempt.min(10))).await;
            }
            Err(e) => return Err(map_open(e, opts.get_filename())),
        }
    }
}

/// A row as Leaf's record, read as every SQL store reads it (`leaf_sql::record`).
fn record(row: &SqliteRow) -> Result<TagRecord> {
    leaf_sql::record(row, |e| map_sqlx(e, "leaf_alloc row"))
}

#[async_trait]
impl SegmentStore for SqliteStore {
    fn kind(&self) -> &'static str {
        "sqlite"
    }

    fn capabilities(&self) -> StoreCapabilities {
        StoreCapabilities::new(self.durable, self.durable)
    }

    async fn allocate(&self, tag: &Tag, step: Option<i64>) -> Result<Allocation> {
        if let Some(s) = step {
            validate_step(s)?;
        }
        let err = |e| map_sqlx(e, tag.as_str());
        // IMMEDIATE takes the write lock before the first read: a plain (deferred) transaction
        // would let two connections read the same `max_id` and then one fail to upgrade.
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await.map_err(err)?;
        let row = sqlx::query("SELECT max_id, step FROM leaf_alloc WHERE biz_tag = ?")
            .bind(tag.as_str())
            .fetch_optional(&mut *tx)
            .await
            .map_err(err)?
            .ok_or_else(|| not_found(tag))?;
        let max_id: i64 = row.try_get("max_id").map_err(err)?;
        let stored: i64 = row.try_get("step").map_err(err)?;
        // Also keeps the sum below i64::MAX: SQLite turns an overflowing integer into a float
        // instead of failing.
        let used_step = clamp_step(tag, max_id, step.unwrap_or(stored))?;
        sqlx::query(
            "UPDATE leaf_alloc SET max_id = max_id + ?, update_time = CURRENT_TIMESTAMP \
             WHERE biz_tag = ?",
        )
        .bind(used_step)
        .bind(tag.as_str())
        .execute(&mut *tx)
        .await
        .map_err(err)?;
        let row = sqlx::query("SELECT biz_tag, max_id, step FROM leaf_alloc WHERE biz_tag = ?")
            .bind(tag.as_str())
            .fetch_one(&mut *tx)
            .await
            .map_err(err)?;
        let max_id: i64 = row.try_get("max_id").map_err(err)?;
        let step: i64 = row.try_get("step").map_err(err)?;
        tx.commit().await.map_err(err)?;
        Ok(Allocation {
            tag: tag.clone(),
            max_id,
            step,
            used_step,
        })
    }

    async fn get(&self, tag: &Tag) -> Result<Option<TagRecord>> {
        self.fetch(tag).await
    }

    async fn list(&self) -> Result<Vec<TagRecord>> {
        let rows = sqlx::query(SELECT_ALL)
            .fetch_all(&self.pool)
            .await
            .map_err(|e| map_sqlx(e, "leaf_alloc"))?;
        // A row whose biz_tag is not a valid tag is skipped; any other row that cannot be read
        // fails the listing (the table is this store's own, with Leaf's types).
        leaf_sql::records(&rows, record, |e| matches!(e, Error::InvalidInput(_)))
    }

    async fn create(&self, new: &NewTag) -> Result<TagRecord> {
        new.validate()?;
        let what = format!("tag {}", new.tag);
        sqlx::query(
            "INSERT INTO leaf_alloc (biz_tag, max_id, step, description, update_time) \
             VALUES (?, ?, ?, ?, CURRENT_TIMESTAMP)",
        )
        .bind(new.tag.as_str())
        .bind(new.max_id)
        .bind(new.step)
        .bind(new.description.as_deref())
        .execute(&self.pool)
        .await
        .map_err(|e| map_sqlx(e, &what))?;
        self.fetch(&new.tag)
            .await?
            .ok_or_else(|| not_found(&new.tag))
    }

    async fn update(&self, tag: &Tag, update: &TagUpdate) -> Result<TagRecord> {
        update.validate()?;
        let done = sqlx::query(
            "UPDATE leaf_alloc SET step = COALESCE(?, step), \
             description = COALESCE(?, description), update_time = CURRENT_TIMESTAMP \
             WHERE biz_tag = ?",
        )
        .bind(update.step)
        .bind(update.description.as_deref())
        .bind(tag.as_str())
        .execute(&self.pool)
        .await
        .map_err(|e| map_sqlx(e, tag.as_str()))?;
        if done.rows_affected() == 0 {
            return Err(not_found(tag));
        }
        self.fetch(tag).await?.ok_or_else(|| not_found(tag))
    }
}
