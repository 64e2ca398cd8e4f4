//! `leaf_alloc` rows as Leaf's records, on any sqlx database (the SQLite store reads them so
//! too), and the two rules of an allocation every SQL store states the same way.

use leaf_core::{Error, Result, Tag, TagRecord};
use sqlx::{ColumnIndex, Decode, Row, Type};

/// The record of a row read with Leaf's column names (`biz_tag`, `max_id`, `step`,
/// `description`, `updated_at_ms`); `err` maps a column that does not decode.
pub fn record<R: Row>(row: &R, err: impl Fn(sqlx::Error) -> Error) -> Result<TagRecord>
where
    for<'a> &'a str: ColumnIndex<R>,
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> i64: Decode<'r, R::Database> + Type<R::Database>,
{
    let tag: String = row.try_get("biz_tag").map_err(&err)?;
    Ok(TagRecord {
        tag: Tag::try_from(tag)?,
        max_id: row.try_get("max_id").map_err(&err)?,
        step: row.try_get("step").map_err(&err)?,
        description: row.try_get("description").map_err(&err)?,
        updated_at_ms: row.try_get("updated_at_ms").map_err(&err)?,
    })
}

/// The records of `rows`, in the tags' order. A row `decode` refuses is skipped, with a
/// warning, when `skip` says so (a database another tool writes to may hold a `biz_tag` no
/// request can name, and it must not hide every other tag); otherwise it fails the listing.
pub fn records<R>(
    rows: &[R],
    decode: impl Fn(&R) -> Result<TagRecord>,
    skip: impl Fn(&Error) -> bool,
) -> Result<Vec<TagRecord>> {
    let mut records = Vec::with_capacity(rows.len());
    for row in rows {
        match decode(row) {
            Ok(r) => records.push(r),
            Err(e) if skip(&e) => tracing::warn!(error = %e, "skipping a leaf_alloc row"),
            Err(e) => return Err(e),
        }
    }
    // A server sorts by its collation; callers expect the tags' own order.
    records.sort_by(|a, b| a.tag.cmp(&b.tag));
    Ok(records)
}

/// The step an allocation uses: the caller's, or the row's when that is a usable one.
pub(crate) fn positive_step(tag: &Tag, step: Option<i64>, stored: i64) -> Result<i64> {
    match step {
        Some(s) => Ok(s),
        None if stored >= 1 => Ok(stored),
        None => Err(Error::InvalidInput(format!(
            "tag {tag} has step {stored} in leaf_alloc; a step must be at least 1"
        ))),
    }
}

/// `NotFound` for `tag`.
pub fn not_found(tag: &Tag) -> Error {
    Error::NotFound(format!("tag {tag}"))
}
