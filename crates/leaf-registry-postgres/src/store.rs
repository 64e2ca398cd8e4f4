//! PostgreSQL's part of the segment store (`leaf_sql::SqlStore`): Leaf's `leaf_alloc` table,
//! used as it is, and its statements; an allocation is one statement.

use async_trait::async_trait;
use leaf_core::Tag;
use leaf_sql::{StoreDialect, retry_conflicts};
use sqlx::Row;
use sqlx::postgres::PgPool;

use crate::PostgresDialect;

/// Leaf's `leaf_alloc` in PostgreSQL's types: the same columns, `update_time` a `timestamptz`.
/// It runs only when the table is missing; an existing table is never altered.
pub const LEAF_ALLOC_DDL: &str = "CREATE TABLE leaf_alloc (biz_tag varchar(128) NOT NULL DEFAULT '', max_id bigint NOT NULL DEFAULT 1, step integer NOT NULL, description varchar(256) DEFAULT NULL, update_time timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP, PRIMARY KEY (biz_tag))";

// Read as Leaf's types whatever an existing table declares (`step` may be an `integer` or a
// `bigint`, `update_time` a `timestamp` or a `timestamptz`, or null).
macro_rules! columns {
    () => {
        "biz_tag::text AS biz_tag, max_id::bigint AS max_id, step::bigint AS step, \
         description::text AS description, \
         (EXTRACT(EPOCH FROM update_time) * 1000)::bigint AS updated_at_ms"
    };
}

#[async_trait]
impl StoreDialect for PostgresDialect {
    const LEAF_ALLOC_DDL: &'static str = LEAF_ALLOC_DDL;
    const SELECT_TAG: &'static str =
        concat!("SELECT ", columns!(), " FROM leaf_alloc WHERE biz_tag = $1");
    const SELECT_TAGS: &'static str =
        concat!("SELECT ", columns!(), " FROM leaf_alloc ORDER BY biz_tag");
    const CHECK_COLUMNS: &'static str = concat!("SELECT ", columns!(), " FROM leaf_alloc LIMIT 0");
    const INSERT_TAG: &'static str = concat!(
        "INSERT INTO leaf_alloc (biz_tag, max_id, step, description) \
         VALUES ($1, $2, $3, $4) RETURNING ",
        columns!()
    );
    const UPDATE_TAG: &'static str = concat!(
        "UPDATE leaf_alloc SET step = COALESCE($1, step), \
         description = COALESCE($2, description), update_time = CURRENT_TIMESTAMP \
         WHERE biz_tag = $3 RETURNING ",
        columns!()
    );
    const LOCK_TAG: &'static str = "SELECT max_id::bigint AS max_id, step::bigint AS step \
         FROM leaf_alloc WHERE biz_tag = $1 FOR UPDATE";
    const ADD_TO_TAG: &'static str = "UPDATE leaf_alloc \
         SET max_id = max_id + $1, update_time = CURRENT_TIMESTAMP WHERE biz_tag = $2";

    /// Leaf's update as one statement: the step added (`$2`, or the row's when null) only when
    /// the sum stays within the bigint column, the row returned. The update holds the row's
    /// lock until it commits, so two servers never get the same range, and no transaction
    /// costs extra round trips. Serialization failures are run again.
    async fn allocate(
        pool: &PgPool,
        tag: &Tag,
        step: Option<i64>,
    ) -> Result<Option<(i64, i64)>, sqlx::Error> {
        let row = retry_conflicts::<Self, _, _, _>(|| {
            sqlx::query(
                "UPDATE leaf_alloc \
                 SET max_id = max_id + COALESCE($2::bigint, step), update_time = CURRENT_TIMESTAMP \
                 WHERE biz_tag = $1 AND COALESCE($2::bigint, step) >= 1 \
                 AND max_id <= 9223372036854775807 - GREATEST(COALESCE($2::bigint, step), 1) \
                 RETURNING max_id::bigint AS max_id, step::bigint AS step",
            )
            .bind(tag.as_str())
            .bind(step)
            .fetch_optional(pool)
        })
        .await?;
        row.map(|r| Ok((r.try_get("max_id")?, r.try_get("step")?)))
            .transpose()
    }
}
