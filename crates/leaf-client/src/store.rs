//! `HttpStore`: a `leaf_core::SegmentStore` whose rows live behind the servers. `allocate` is
//! `POST /v1/segment/{tag}/allocate` (a range reserved straight from the servers' store),
//! `get` is `GET /v1/tags/{tag}`; `create`, `update` and `list` go through the admin routes and
//! need the admin token.

use std::fmt;
use std::sync::Arc;

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
/// server's buffers), so they never overlap what any server or other client hands out. It is
/// as durable as that store, and any number of clients share it.
#[derive(Clone)]
pub struct HttpStore {
    transport: Arc<Transport>,
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
/// so that `?`, `#`, `%`, spaces and non-ASCII tags reach the server as they are.
pub(crate) fn path_segment(tag: &str) -> String {
    let mut out = String::with_capacity(tag.len());
    for b in tag.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl HttpStore {
    pub(crate) fn new(transport: Arc<Transport>) -> Self {
        HttpStore { transport }
    }

    /// The admin routes need the admin token: without one, say so before any request.
    fn admin(&self, method: &str) -> Result<()> {
        if self.transport.has_admin_token() {
            Ok(())
        } else {
            Err(Error::Config(format!(
                "HttpStore::{method} goes through the servers' admin routes and needs their \
                 admin token (LeafClientBuilder::admin_token, or admin_token in ClientConfig); \
                 without it only allocate and get are available"
            )))
        }
    }

    async fn call(
        &self,
        method: Method,
        path: String,
        body: Option<serde_json::Value>,
        token: TokenKind,
    ) -> Result<Bytes> {
        self.transport
            .call(&Call {
                method,
                path,
                body,
                token,
            })
            .await
    }
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
        let answer = self
            .call(Method::POST, path, body, TokenKind::Client)
            .await?;
        let a: AllocationJson = parse(&answer)?;
        if a.tag != tag.as_str() {
            return Err(malformed(format!(
                "asked to allocate for tag {tag}, got an allocation for {:?}",
                a.tag
            )));
        }
        Ok(Allocation {
            tag: tag.clone(),
            max_id: a.max_id,
            step: a.step,
            used_step: a.used_step,
        })
    }

    async fn get(&self, tag: &Tag) -> Result<Option<TagRecord>> {
        let path = format!("/v1/tags/{}", path_segment(tag.as_str()));
        match self.call(Method::GET, path, None, TokenKind::Client).await {
            Ok(answer) => parse::<RowJson>(&answer)?.record().map(Some),
            Err(Error::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn list(&self) -> Result<Vec<TagRecord>> {
        self.admin("list")?;
        let answer = self
            .call(Method::GET, "/v1/tags".into(), None, TokenKind::Admin)
            .await?;
        parse::<ListJson>(&answer)?
            .tags
            .into_iter()
            .map(RowJson::record)
            .collect()
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
        let answer = self
            .call(
                Method::POST,
                "/v1/tags".into(),
                Some(body),
                TokenKind::Admin,
            )
            .await?;
        parse::<RowJson>(&answer)?.record()
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
        let answer = self
            .call(Method::PATCH, path, Some(body.into()), TokenKind::Admin)
            .await?;
        parse::<RowJson>(&answer)?.record()
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
    }
}
