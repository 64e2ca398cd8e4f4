//! [`SqlStore`]: Leaf's `leaf_alloc` table on a SQL server, used as it is, in any dialect.

use std::fmt;

use async_trait::async_trait;
use leaf_core::{
    Allocation, NewTag, Result, SegmentStore, StoreCapabilities, Tag, TagRecord, TagUpdate,
    bounded, validate_step,
};
use sqlx::Pool;
use std::future::Future;

use crate::config::{Rotation, pool, validate_store};
use crate::error::map_sqlx;
use crate::rows::{not_found, positive_step};
use crate::{Dialect, KEY, Queries, SqlConfig};

/// A dialect's part of the segment store: `leaf_alloc`'s DDL, Leaf's statements on it, and the
/// allocation's first statement. `?n` below is the dialect's n-th placeholder.
#[async_trait]
pub trait StoreDialect: Dialect {
    /// `leaf_alloc`'s DDL, run only when the table is missing.
    const LEAF_ALLOC_DDL: &'static str;
    /// Leaf's columns of the row of tag `?1` (`biz_tag`, `max_id`, `step`, `description`, and
    /// `update_time` as Unix milliseconds, `updated_at_ms`), each as Leaf's type.
    const SELECT_TAG: &'static str;
    /// Leaf's columns of every row, by `biz_tag`.
    const SELECT_TAGS: &'static str;
    /// Leaf's columns and no row: fails naming a column the table lacks.
    const CHECK_COLUMNS: &'static str;
    /// Inserts tag `?1` with `max_id` `?2`, `step` `?3` and `description` `?4`; it may return
    /// Leaf's columns of the row.
    const INSERT_TAG: &'static str;
    /// Sets `step` `?1` and `description` `?2` of tag `?3` where given; it may return Leaf's
    /// columns of the row.
    const UPDATE_TAG: &'static str;
    /// `max_id` and `step` of tag `?1`, the row locked until the transaction ends.
    const LOCK_TAG: &'static str;
    /// Adds `?1` to `max_id` of tag `?2`.
    const ADD_TO_TAG: &'static str;

    /// Leaf's allocation where the row and the step allow it (the sum within the bigint
    /// column, a positive step): `tag`'s `max_id` raised by `step` (the row's when `None`),
    /// and the row's new `max_id` and `step`. `None` if no row was changed.
    async fn allocate(
        pool: &Pool<Self::Db>,
        tag: &Tag,
        step: Option<i64>,
    ) -> Result<Option<(i64, i64)>, sqlx::Error>;
}

/// A segment store on Leaf's `leaf_alloc` table, safe for any number of servers at once. The
/// table is created with the dialect's DDL only when missing, and an existing one is never
/// altered. An allocation is [`StoreDialect::allocate`]; a row it skips (an unknown tag, a step
/// that is not positive, the end of the bigint column near) is read under its lock in a
/// transaction and the step cut to what is left before `i64::MAX`. Every call is bounded by
/// `timeout_ms`, and fails with `Unavailable`, never hangs.
pub struct SqlStore<D: Dialect> {
    pool: Pool<D::Db>,
    config: D::Config,
    rotation: Rotation,
}

impl<D: Dialect> fmt::Debug for SqlStore<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let settings = self.config.settings();
        f.debug_struct(&type_name(D::NAME, "Store"))
            .field("url", &settings.redacted_url())
            .field("max_connections", &settings.max_connections)
            .finish_non_exhaustive()
    }
}

/// A type's name as a backend's crate calls it: `MysqlStore` for `mysql`.
pub(crate) fn type_name(backend: &str, kind: &str) -> String {
    let mut name = backend[..1].to_ascii_uppercase();
    name.push_str(&backend[1..]);
    name + kind
}

impl<D: Queries> SqlStore<D> {
    /// Connects to the server of `config`, creates `leaf_alloc` if the database has none, and
    /// checks that the table has Leaf's columns. Fails with `Unavailable` if the server cannot
    /// be reached within the timeouts, `Config` if it refuses the credentials or the database.
    pub async fn connect(config: &D::Config) -> Result<Self> {
        validate_store::<D>(config)?;
        let store = SqlStore {
            pool: pool::<D>(config, KEY)?,
            config: config.clone(),
            rotation: Rotation::new(&config.settings()),
        };
        let settings = config.settings();
        let limit = settings.timeout() + settings.connect_timeout();
        bounded(D::NAME, limit, "start-up", async {
            ensure_table::<D>(&store.pool, "leaf_alloc", D::LEAF_ALLOC_DDL).await?;
            // Fails with `Config` naming the column if an existing table lacks one of Leaf's.
            D::run_at_start(&store.pool, D::CHECK_COLUMNS, "leaf_alloc").await
        })
        .await?;
        tracing::debug!(url = %settings.redacted_url(), "{} segment store ready", D::NAME);
        Ok(store)
    }

    /// [`connect`](Self::connect) with the default settings.
    pub async fn connect_url(url: &str) -> Result<Self> {
        Self::connect(&D::Config::with_url(url)).await
    }

    /// The connection pool, for tools and tests that need the raw database.
    pub fn pool(&self) -> &Pool<D::Db> {
        &self.pool
    }

    async fn bounded<T>(
        &self,
        what: &str,
        fut: impl Future<Output = Result<T>> + Send,
    ) -> Result<T> {
        self.rotation.refresh::<D>(&self.config, &self.pool);
        bounded(D::NAME, self.config.settings().timeout(), what, fut).await
    }

    async fn allocate_once(&self, tag: &Tag, step: Option<i64>) -> Result<Allocation> {
        let row = D::allocate(&self.pool, tag, step)
            .await
            .map_err(|e| map_sqlx::<D>(e, &format!("tag {tag}"), KEY))?;
        let Some((max_id, stored)) = row else {
            return D::allocate_locked(&self.pool, tag, step).await;
        };
        Ok(Allocation {
            tag: tag.clone(),
            max_id,
            step: stored,
            used_step: positive_step(tag, step, stored)?,
        })
    }

    /// The record a statement returned, else the row read again.
    async fn or_fetch(&self, tag: &Tag, returned: Option<TagRecord>) -> Result<TagRecord> {
        match returned {
            Some(record) => Ok(record),
            None => D::select_tag(&self.pool, tag)
                .await?
                .ok_or_else(|| not_found(tag)),
        }
    }
}

/// Creates `table` with `ddl` when it is missing ([`Dialect::create_table`]); an existing table
/// is left exactly as it is.
pub(crate) async fn ensure_table<D: Dialect>(
    pool: &Pool<D::Db>,
    table: &str,
    ddl: &'static str,
) -> Result<()> {
    match D::create_table(pool, table, ddl).await {
        Ok(true) => tracing::info!(table, "created the missing table"),
        Ok(false) => {}
        Err(e) => return Err(crate::error::map_sqlx_at_start::<D>(e, table, KEY)),
    }
    Ok(())
}

#[async_trait]
impl<D: Queries> SegmentStore for SqlStore<D> {
    fn kind(&self) -> &'static str {
        D::NAME
    }

    fn capabilities(&self) -> StoreCapabilities {
        StoreCapabilities::new(true, true)
    }

    async fn allocate(&self, tag: &Tag, step: Option<i64>) -> Result<Allocation> {
        if let Some(s) = step {
            validate_step(s)?;
        }
        self.bounded("the allocation", self.allocate_once(tag, step))
            .await
    }

    async fn get(&self, tag: &Tag) -> Result<Option<TagRecord>> {
        self.bounded("the lookup", D::select_tag(&self.pool, tag))
            .await
    }

    async fn list(&self) -> Result<Vec<TagRecord>> {
        self.bounded("the listing", D::select_tags(&self.pool))
            .await
    }

    async fn create(&self, new: &NewTag) -> Result<TagRecord> {
        new.validate()?;
        self.bounded("the insert", async {
            let returned = D::insert_tag(&self.pool, new).await?;
            self.or_fetch(&new.tag, returned).await
        })
        .await
    }

    async fn update(&self, tag: &Tag, update: &TagUpdate) -> Result<TagRecord> {
        update.validate()?;
        self.bounded("the update", async {
            // Not the rows affected: an update to the values already stored changes no row.
            let returned = D::update_tag(&self.pool, tag, update).await?;
            self.or_fetch(tag, returned).await
        })
        .await
    }
}
