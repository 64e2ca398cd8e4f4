//! MySQL's part of the segment store (`leaf_sql::SqlStore`): Leaf's `leaf_alloc` table, used
//! as it is, and its statements.

use async_trait::async_trait;
use leaf_core::Tag;
use leaf_sql::StoreDialect;
use sqlx::Row;
use sqlx::mysql::MySqlPool;

use crate::MysqlDialect;

/// Leaf's DDL for `leaf_alloc`, exactly as Leaf ships it. It runs only when the table is
/// missing; an existing table is never altered.
pub const LEAF_ALLOC_DDL: &str = "CREATE TABLE leaf_alloc (biz_tag varchar(128) NOT NULL DEFAULT '', max_id bigint(20) NOT NULL DEFAULT '1', step int(11) NOT NULL, description varchar(256) DEFAULT NULL, update_time timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP, PRIMARY KEY (biz_tag)) ENGINE=InnoDB;";

// `update_time` is a whole-second `timestamp`; read it as Unix milliseconds.
macro_rules! columns {
    () => {
        "biz_tag, max_id, step, description, \
         CAST(UNIX_TIMESTAMP(update_time) AS SIGNED) * 1000 AS updated_at_ms"
    };
}

#[async_trait]
impl StoreDialect for MysqlDialect {
    const LEAF_ALLOC_DDL: &'static str = LEAF_ALLOC_DDL;
    const SELECT_TAG: &'static str =
        concat!("SELECT ", columns!(), " FROM leaf_alloc WHERE biz_tag = ?");
    const SELECT_TAGS: &'static str =
        concat!("SELECT ", columns!(), " FROM leaf_alloc ORDER BY biz_tag");
    const CHECK_COLUMNS: &'static str = concat!("SELECT ", columns!(), " FROM leaf_alloc LIMIT 0");
    const INSERT_TAG: &'static str =
        "INSERT INTO leaf_alloc (biz_tag, max_id, step, description) VALUES (?, ?, ?, ?)";
    // `update_time` follows by itself (`ON UPDATE CURRENT_TIMESTAMP`).
    const UPDATE_TAG: &'static str = "UPDATE leaf_alloc SET step = COALESCE(?, step), \
         description = COALESCE(?, description) WHERE biz_tag = ?";
    const LOCK_TAG: &'static str =
        "SELECT max_id, step FROM leaf_alloc WHERE biz_tag = ? FOR UPDATE";
    const ADD_TO_TAG: &'static str = "UPDATE leaf_alloc SET max_id = max_id + ? WHERE biz_tag = ?";

    /// One transaction, as in Leaf: `UPDATE leaf_alloc SET max_id = max_id + step` (or `+ ?`),
    /// then the `SELECT` of the row. The update holds the row's lock until the commit, so two
    /// servers never read the same `max_id`.
    async fn allocate(
        pool: &MySqlPool,
        tag: &Tag,
        step: Option<i64>,
    ) -> Result<Option<(i64, i64)>, sqlx::Error> {
        let mut tx = pool.begin().await?;
        // Leaf's update, guarded so that the sum stays within the bigint column: near the end
        // MySQL would refuse it, and the tag's last IDs would never be handed out.
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
        if update.execute(&mut *tx).await?.rows_affected() == 0 {
            return Ok(None);
        }
        let row = sqlx::query("SELECT max_id, step FROM leaf_alloc WHERE biz_tag = ?")
            .bind(tag.as_str())
            .fetch_optional(&mut *tx)
            .await?;
        // Dropping the transaction without a commit rolls it back.
        let Some(row) = row else {
            return Ok(None);
        };
        let allocated = (row.try_get("max_id")?, row.try_get("step")?);
        tx.commit().await?;
        Ok(Some(allocated))
    }
}
