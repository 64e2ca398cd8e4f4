//! `HttpStore`: a `leaf_core::SegmentStore` whose rows live behind the servers. `allocate` is
//! `POST /v1/segment/{tag}/allocate` (a range reserved straight from the servers' store),
//! `get` is `GET /v1/tags/{tag}`; `create`, `update` and `list` go through the admin routes and
//! need the admin token.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use hyper::Method;
use hyper::body::Bytes;
use leaf_core::{
    Allocation, Error, NewTag, Result, SegmentStore, StoreCapabilities, Tag, TagRecord, TagUpdate,
};
use serde::Deserialize;
use serde_json::json;

use crate::error::{TokenKind, malformed, parse};
use crate::transport::{Call, Transport};

/// A segment store reached through the servers' HTTP API, with failover across them.
///
/// Its ranges come from the servers' own store (`SegmentStore::allocate` there, never a
/// server's buffers), so they never overlap what any server or other client hands out, as long
/// as every endpoint uses one store. It is as durable as that store, and any number of clients
/// share it. Each tag's ranges must rise: a range that starts below the end of one this store
/// already had (an endpoint on another store, a store restored from an older copy) is refused,
/// never handed out, and its endpoint skipped as failed.
#[derive(Clone)]
pub struct HttpStore {
    transport: Arc<Transport>,
    /// Per tag, the end of the highest range had so far; its lock is held across an
    /// allocation, so that answers of one tag are judged in the order they were asked.
    high_water: Arc<Mutex<HashMap<Tag, Arc<tokio::sync::Mutex<i64>>>>>,
}

impl fmt::Debug for HttpStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let urls: Vec<String> = self.transport.status().into_iter().map(|s| s.url).collect();
        f.debug_struct("HttpStore")
            .field("endpoints", &urls)
            .field("admin_token", &self.transport.has_admin_token())
            .finish()
    }
}

/// The answer of the allocate route.
#[derive(Deserialize)]
struct AllocationJson {
    tag: String,
    max_id: i64,
    step: i64,
    used_step: i64,
}

/// A row as the servers show it (`GET /v1/tags/{tag}`, each of `GET /v1/tags`).
#[derive(Deserialize)]
struct RowJson {
    tag: String,
    max_id: i64,
    step: i64,
    description: Option<String>,
    updated_at_ms: Option<i64>,
}

#[derive(Deserialize)]
struct ListJson {
    tags: Vec<RowJson>,
}

impl RowJson {
    fn record(self) -> Result<TagRecord> {
        Ok(TagRecord {
            tag: Tag::new(&self.tag).map_err(|e| malformed(format!("tag {:?}: {e}", self.tag)))?,
            max_id: self.max_id,
            step: self.step,
            description: self.description,
            updated_at_ms: self.updated_at_ms,
        })
    }
}

/// `tag` as one path segment: every byte but the unreserved ones (RFC 3986) percent-encoded,
/// so that `?`, `#`, `%`, spaces and non-ASCII tags reach the server as they are. The tags `.`
/// and `..` are encoded whole: a normalising proxy would take them for path steps.
pub(crate) fn path_segment(tag: &str) -> String {
    let dots = matches!(tag, "." | "..");
    let mut out = String::with_capacity(tag.len());
    for b in tag.bytes() {
        if (b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')) && !dots {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl HttpStore {
    pub(crate) fn new(transport: Arc<Transport>) -> Self {
        HttpStore {
            transport,
            high_water: Arc::default(),
        }
    }

    /// The high-water mark of `tag`'s ranges.
    fn high_water(&self, tag: &Tag) -> Arc<tokio::sync::Mutex<i64>> {
        let mut map = self
            .high_water
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        map.entry(tag.clone()).or_default().clone()
    }

    /// The admin routes need the admin token: without one, say so before any request.
    fn admin(&self, method: &str) -> Result<()> {
        if self.transport.has_admin_token() {
            Ok(())
        } else {
            Err(Error::Config(format!(
                "HttpStore::{method} goes through the servers' admin routes and needs their \
                 admin token (LeafClientBuilder::admin_token, or admin_token in ClientConfig); \
                 without it only allocate and get are available, so the allocator's init() and \
                 spawn_refresher(), which list the tags, are not: tags are looked up at first use"
            )))
        }
    }

    /// `method path` with `body`, failing over; `accept` judges each 2xx answer.
    async fn call<T>(
        &self,
        method: Method,
        path: String,
        body: Option<serde_json::Value>,
        token: TokenKind,
        accept: impl Fn(&Bytes) -> std::result::Result<T, String>,
    ) -> Result<T> {
        let call = Call {
            method,
            path,
            body,
            token,
        };
        self.transport.call(&call, accept).await
    }
}

/// The JSON of a 2xx answer as `T`, or why it is not one.
pub(crate) fn json<T: serde::de::DeserializeOwned>(body: &Bytes) -> std::result::Result<T, String> {
    parse(body).map_err(|e| e.to_string())
}

/// A row answer, for `tag` when one was asked for.
fn row(body: &Bytes, tag: Option<&Tag>) -> std::result::Result<TagRecord, String> {
    let record = json::<RowJson>(body)?.record().map_err(|e| e.to_string())?;
    match tag {
        Some(t) if record.tag != *t => Err(format!("the row of tag {:?}, not of {t}", record.tag)),
        _ => Ok(record),
    }
}

/// Checks an allocation answer for `tag`: the tag asked for, a range of 1 to `asked` IDs (the
/// step asked for, else the row's step), starting at or above `high_water` (the end of the
/// highest range had before).
fn allocation(
    body: &Bytes,
    tag: &Tag,
    asked: Option<i64>,
    high_water: i64,
) -> std::result::Result<Allocation, String> {
    let a: AllocationJson = json(body)?;
    if a.tag != tag.as_str() {
        return Err(format!("an allocation for tag {:?}, not {tag}", a.tag));
    }
    let most = asked.unwrap_or(a.step);
    if a.used_step < 1 || a.used_step > most {
        return Err(format!(
            "a range of {} ids of tag {tag}, asked for 1 to {most}",
            a.used_step
        ));
    }
    let start = a.max_id.checked_sub(a.used_step).filter(|s| *s >= 0);
    let Some(start) = start else {
        return Err(format!(
            "max_id {} of tag {tag} is below its step {}",
            a.max_id, a.used_step
        ));
    };
    if start < high_water {
        return Err(format!(
            "the range {start}..{} of tag {tag} starts below {high_water}, the end of a range \
             this client already had: this endpoint's store is not the others' (every endpoint \
             must use one store; a separate or restored store hands the same IDs out again)",
            a.max_id
        ));
    }
    Ok(Allocation {
        tag: tag.clone(),
        max_id: a.max_id,
        step: a.step,
        used_step: a.used_step,
    })
}

#[async_trait]
impl SegmentStore for HttpStore {
    fn kind(&self) -> &'static str {
        "http"
    }

    fn capabilities(&self) -> StoreCapabilities {
        // The servers' store is shared by every server and client, and keeps what it reserved.
        StoreCapabilities::new(true, true)
    }

    async fn allocate(&self, tag: &Tag, step: Option<i64>) -> Result<Allocation> {
        let path = format!("/v1/segment/{}/allocate", path_segment(tag.as_str()));
        let body = step.map(|s| json!({ "step": s }));
        let high_water = self.high_water(tag);
        let mut high_water = high_water.lock().await;
        let hwm = *high_water;
        let accept = |answer: &Bytes| allocation(answer, tag, step, hwm);
        let a = self
            .call(Method::POST, path, body, TokenKind::Client, accept)
            .await?;
        *high_water = a.max_id;
        Ok(a)
    }

    async fn get(&self, tag: &Tag) -> Result<Option<TagRecord>> {
        let path = format!("/v1/tags/{}", path_segment(tag.as_str()));
        let accept = |answer: &Bytes| row(answer, Some(tag));
        match self
            .call(Method::GET, path, None, TokenKind::Client, accept)
            .await
        {
            Ok(record) => Ok(Some(record)),
            Err(Error::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn list(&self) -> Result<Vec<TagRecord>> {
        self.admin("list")?;
        let accept = |answer: &Bytes| {
            json::<ListJson>(answer)?
                .tags
                .into_iter()
                .map(|r| r.record().map_err(|e| e.to_string()))
                .collect::<std::result::Result<Vec<_>, _>>()
        };
        self.call(
            Method::GET,
            "/v1/tags".into(),
            None,
            TokenKind::Admin,
            accept,
        )
        .await
    }

    async fn create(&self, new: &NewTag) -> Result<TagRecord> {
        self.admin("create")?;
        new.validate()?;
        let body = json!({
            "tag": new.tag.as_str(),
            "max_id": new.max_id,
            "step": new.step,
            "description": new.description,
        });
        let accept = |answer: &Bytes| row(answer, Some(&new.tag));
        self.call(
            Method::POST,
            "/v1/tags".into(),
            Some(body),
            TokenKind::Admin,
            accept,
        )
        .await
    }

    async fn update(&self, tag: &Tag, update: &TagUpdate) -> Result<TagRecord> {
        self.admin("update")?;
        update.validate()?;
        let path = format!("/v1/tags/{}", path_segment(tag.as_str()));
        let mut body = serde_json::Map::new();
        if let Some(step) = update.step {
            body.insert("step".into(), step.into());
        }
        if let Some(d) = &update.description {
            body.insert("description".into(), d.clone().into());
        }
        let accept = |answer: &Bytes| row(answer, Some(tag));
        self.call(
            Method::PATCH,
            path,
            Some(body.into()),
            TokenKind::Admin,
            accept,
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_segment_table() {
        let check = |tag: &str, expect: &str| assert_eq!(path_segment(tag), expect, "{tag}");
        check("leaf-segment-test", "leaf-segment-test");
        check("a.b_c~d", "a.b_c~d");
        check("a b", "a%20b");
        check("a?b#c%d", "a%3Fb%23c%25d");
        check("allocate/x", "allocate%2Fx");
        check("\u{e9}t\u{e9}", "%C3%A9t%C3%A9");
        check(".", "%2E");
        check("..", "%2E%2E");
        check("...", "...");
    }
}
