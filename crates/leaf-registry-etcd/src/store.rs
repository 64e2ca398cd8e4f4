//! `EtcdStore`: the segment store on etcd, one key per tag holding Leaf's `leaf_alloc` row as
//! JSON, every change a compare-and-swap on the key's revision.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use etcd_client::{
    Compare, CompareOp, GetOptions, KeyValue, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse,
};
use leaf_core::{
    Allocation, Error, NewTag, Result, SegmentStore, StoreCapabilities, Tag, TagRecord, TagUpdate,
};
use leaf_core::{clamp_step, validate_step};
use serde::{Deserialize, Serialize};

use crate::client::Conn;
use crate::config::EtcdConfig;
use crate::error::BACKEND;

/// One tag's row: the value of `{prefix}/{name}/segments/{tag}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Row {
    max_id: i64,
    step: i64,
    #[serde(default)]
    description: Option<String>,
    /// Unix milliseconds of the last write.
    #[serde(default)]
    update_time: Option<i64>,
}

/// A row and the revision it was read at: what a compare-and-swap checks.
struct Versioned {
    row: Row,
    mod_revision: i64,
}

/// A segment store on etcd, safe for any number of servers at once.
///
/// An allocation reads the tag's key, then writes `max_id + step` in a transaction that
/// succeeds only if the key's `mod_revision` is still the one read; on a conflict it retries
/// with the value the transaction returned. A commit whose answer is lost (a timeout) may have
/// taken a segment that nobody uses: IDs may be skipped, never repeated. Every call is bounded
/// by `timeout_ms` and fails with `Unavailable`, never hangs.
pub struct EtcdStore {
    conn: Conn,
    /// `{prefix}/{name}/segments/`.
    dir: String,
    endpoints: Vec<String>,
}

impl fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdStore")
            .field("endpoints", &self.endpoints)
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn not_found(tag: &Tag) -> Error {
    Error::NotFound(format!("tag {tag}"))
}

/// The step an allocation uses: the caller's, or the row's when that is a usable one.
fn positive_step(tag: &Tag, step: Option<i64>, stored: i64) -> Result<i64> {
    match step {
        Some(s) => Ok(s),
        None if stored >= 1 => Ok(stored),
        None => Err(Error::InvalidInput(format!(
            "tag {tag} has step {stored} in etcd; a step must be at least 1"
        ))),
    }
}

fn parse(kv: &KeyValue) -> Result<Versioned> {
    let row: Row = serde_json::from_slice(kv.value()).map_err(|e| {
        Error::backend(
            BACKEND,
            format!(
                "{} does not hold a segment row: {e}",
                String::from_utf8_lossy(kv.key())
            ),
        )
    })?;
    Ok(Versioned {
        row,
        mod_revision: kv.mod_revision(),
    })
}

fn record(tag: &Tag, row: &Row) -> TagRecord {
    TagRecord {
        tag: tag.clone(),
        max_id: row.max_id,
        step: row.step,
        description: row.description.clone(),
        updated_at_ms: row.update_time,
    }
}

fn encode(row: &Row) -> String {
    serde_json::to_string(row).expect("a row always serialises")
}

impl EtcdStore {
    /// A store on the cluster of `config` for the leaf name `name` (keys under
    /// `{prefix}/{name}/segments/`). Reads the key range once, so a cluster that cannot be
    /// reached fails start-up with `Unavailable`; `Config` for a bad configuration.
    pub async fn connect(config: &EtcdConfig, name: &str) -> Result<Self> {
        config.validate()?;
        let store = EtcdStore {
            conn: Conn::new(config),
            dir: format!("{}/segments/", config.base(name)?),
            endpoints: config.endpoints.clone(),
        };
        let mut c = store.conn.client().await?;
        store
            .conn
            .call(
                "start-up",
                c.get(
                    store.dir.clone(),
                    Some(GetOptions::new().with_prefix().with_count_only()),
                ),
            )
            .await?;
        tracing::debug!(endpoints = ?config.endpoints, dir = %store.dir, "etcd segment store ready");
        Ok(store)
    }

    fn key(&self, tag: &Tag) -> String {
        format!("{}{}", self.dir, tag.as_str())
    }

    async fn fetch(&self, tag: &Tag) -> Result<Option<Versioned>> {
        let mut c = self.conn.client().await?;
        let resp = self
            .conn
            .call("the lookup", c.get(self.key(tag), None))
            .await?;
        resp.kvs().first().map(parse).transpose()
    }

    /// Writes `next` if the key is still at `seen`'s revision: `Ok(None)` on success, else the
    /// key as it is now (`None` inside if it was deleted).
    async fn swap(
        &self,
        tag: &Tag,
        seen: &Versioned,
        next: &Row,
        what: &str,
    ) -> Result<Option<Option<Versioned>>> {
        let key = self.key(tag);
        let txn = Txn::new()
            .when([Compare::mod_revision(
                key.clone(),
                CompareOp::Equal,
                seen.mod_revision,
            )])
            .and_then([TxnOp::put(key.clone(), encode(next), None)])
            .or_else([TxnOp::get(key, None)]);
        let mut c = self.conn.client().await?;
        let resp = self.conn.call(what, c.txn(txn)).await?;
        if resp.succeeded() {
            return Ok(None);
        }
        let now = resp.op_responses().into_iter().find_map(|r| match r {
            TxnOpResponse::Get(g) => Some(g.kvs().first().map(parse)),
            _ => None,
        });
        Ok(Some(now.flatten().transpose()?))
    }

    /// Applies `change` to the tag's row by compare-and-swap until one lands; `change` returns
    /// the new row and a result to hand back.
    async fn cas<T>(
        &self,
        tag: &Tag,
        what: &str,
        mut change: impl FnMut(&Row) -> Result<(Row, T)>,
    ) -> Result<T> {
        let mut seen = self.fetch(tag).await?.ok_or_else(|| not_found(tag))?;
        for attempt in 0u32.. {
            let (next, out) = change(&seen.row)?;
            match self.swap(tag, &seen, &next, what).await? {
                None => return Ok(out),
                Some(now) => seen = now.ok_or_else(|| not_found(tag))?,
            }
            if attempt >= 2 {
                // Many writers on one tag: spread the retries out a little.
                let ms = fastrand::u64(0..=u64::from(attempt.min(10)) * 2);
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
        }
        unreachable!("the retry loop ends by returning")
    }
}

#[async_trait]
impl SegmentStore for EtcdStore {
    fn kind(&self) -> &'static str {
        "etcd"
    }

    fn capabilities(&self) -> StoreCapabilities {
        StoreCapabilities::new(true, true)
    }

    async fn allocate(&self, tag: &Tag, step: Option<i64>) -> Result<Allocation> {
        if let Some(s) = step {
            validate_step(s)?;
        }
        leaf_core::bounded(BACKEND, self.conn.timeout(), "the allocation", async {
            self.cas(tag, "the allocation", |row| {
                let used_step = clamp_step(tag, row.max_id, positive_step(tag, step, row.step)?)?;
                let next = Row {
                    max_id: row.max_id + used_step,
                    update_time: Some(now_ms()),
                    ..row.clone()
                };
                let allocation = Allocation {
                    tag: tag.clone(),
                    max_id: next.max_id,
                    step: row.step,
                    used_step,
                };
                Ok((next, allocation))
            })
            .await
        })
        .await
    }

    async fn get(&self, tag: &Tag) -> Result<Option<TagRecord>> {
        Ok(self.fetch(tag).await?.map(|v| record(tag, &v.row)))
    }

    async fn list(&self) -> Result<Vec<TagRecord>> {
        let mut c = self.conn.client().await?;
        let resp = self
            .conn
            .call(
                "the listing",
                c.get(
                    self.dir.clone(),
                    Some(
                        GetOptions::new()
                            .with_prefix()
                            .with_sort(SortTarget::Key, SortOrder::Ascend),
                    ),
                ),
            )
            .await?;
        // A key that is not a valid tag or a row (written by another tool) is skipped rather
        // than hiding every other tag.
        let mut records: Vec<TagRecord> = resp
            .kvs()
            .iter()
            .filter_map(|kv| {
                let name = kv.key_str().ok()?.strip_prefix(&self.dir)?;
                let parsed = Tag::new(name).and_then(|tag| Ok((parse(kv)?, tag)));
                match parsed {
                    Ok((v, tag)) => Some(record(&tag, &v.row)),
                    Err(e) => {
                        tracing::warn!(key = name, error = %e, "skipping an etcd segment key");
                        None
                    }
                }
            })
            .collect();
        records.sort_by(|a, b| a.tag.cmp(&b.tag));
        Ok(records)
    }

    async fn create(&self, new: &NewTag) -> Result<TagRecord> {
        new.validate()?;
        let key = self.key(&new.tag);
        let row = Row {
            max_id: new.max_id,
            step: new.step,
            description: new.description.clone(),
            update_time: Some(now_ms()),
        };
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key, encode(&row), None)]);
        let mut c = self.conn.client().await?;
        let resp = self.conn.call("the insert", c.txn(txn)).await?;
        if !resp.succeeded() {
            return Err(Error::AlreadyExists(format!("tag {}", new.tag)));
        }
        Ok(record(&new.tag, &row))
    }

    async fn update(&self, tag: &Tag, update: &TagUpdate) -> Result<TagRecord> {
        update.validate()?;
        leaf_core::bounded(BACKEND, self.conn.timeout(), "the update", async {
            self.cas(tag, "the update", |row| {
                let next = Row {
                    max_id: row.max_id,
                    step: update.step.unwrap_or(row.step),
                    description: update
                        .description
                        .clone()
                        .or_else(|| row.description.clone()),
                    update_time: Some(now_ms()),
                };
                let out = record(tag, &next);
                Ok((next, out))
            })
            .await
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_round_trip_and_tolerate_missing_optional_fields() {
        let row = Row {
            max_id: 2001,
            step: 2000,
            description: Some("orders".into()),
            update_time: Some(1_700_000_000_000),
        };
        let back: Row = serde_json::from_str(&encode(&row)).unwrap();
        assert_eq!(back, row);
        let bare: Row = serde_json::from_str(r#"{"max_id": 1, "step": 10}"#).unwrap();
        assert_eq!(bare.description, None);
        assert_eq!(bare.update_time, None);
    }

    #[test]
    fn the_stored_step_must_be_positive() {
        let t = Tag::new("t").unwrap();
        assert_eq!(positive_step(&t, None, 5).unwrap(), 5);
        assert_eq!(positive_step(&t, Some(7), 0).unwrap(), 7);
        assert!(matches!(
            positive_step(&t, None, 0),
            Err(Error::InvalidInput(_))
        ));
    }
}
