//! `LeafClient`: segment IDs from memory over leased ranges (`segment()`), and the snowflake
//! calls passed through to the servers (`snowflake_ids`, `monotonic_ids`, `decode`).

use std::sync::Arc;

use hyper::Method;
use hyper::body::Bytes;
use leaf_business::BusinessTags;
use leaf_core::{Clock, DecodedId, Error, Result};
use leaf_segment::{SegmentAllocator, SegmentConfig};
use serde::Deserialize;

use crate::config::{ClientConfig, LeafClientBuilder};
use crate::endpoints::EndpointStatus;
use crate::error::TokenKind;
use crate::store::{HttpStore, json};
use crate::transport::{Call, Transport};

/// A client of one set of servers. Cheap to clone; clones share the connections, the endpoints'
/// state and the allocator's buffers. Must be used inside a Tokio runtime with the timer
/// enabled (build it anywhere).
#[derive(Clone, Debug)]
pub struct LeafClient {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    transport: Arc<Transport>,
    store: HttpStore,
    segment: SegmentAllocator,
    business: BusinessTags,
}

#[derive(Deserialize)]
struct IdsJson {
    ids: Vec<i64>,
}

#[derive(Deserialize)]
struct DecodeJson {
    timestamp_ms: u64,
    worker_id: u64,
    sequence: u64,
}

impl LeafClient {
    /// A builder: `LeafClient::builder().endpoints(["http://leaf1:8080"]).build()?`.
    pub fn builder() -> LeafClientBuilder {
        LeafClientBuilder::default()
    }

    pub(crate) fn new(
        config: ClientConfig,
        tls: rustls::ClientConfig,
        segment: SegmentConfig,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let transport = Arc::new(Transport::new(&config, tls, clock.clone()));
        let store = HttpStore::new(transport.clone());
        let business = BusinessTags::new(Arc::new(store.clone()), clock.clone(), segment.clone());
        let segment = SegmentAllocator::new(Arc::new(store.clone()), clock, segment);
        LeafClient {
            inner: Arc::new(Inner {
                transport,
                store,
                segment,
                business,
            }),
        }
    }

    /// Segment mode in this process: Leaf's allocator over [`HttpStore`], so `next_id(tag)`,
    /// `next_ids(tag, n)` and `handle(tag)` hand IDs out from memory, the next range is
    /// reserved in the background once 10% of the current one is used, and the step adapts to
    /// the rate as on a server. A tag is looked up on the servers at its first use.
    pub fn segment(&self) -> &SegmentAllocator {
        &self.inner.segment
    }

    /// `n` (at least 1) IDs of the business tag `tag` (one created with a `format`), as its
    /// format prints them (`ORD20261127000001`), from leased ranges of its period rows, in the
    /// period this client's clock is in (in the tag's zone). The tag's definition is read from
    /// the servers once; a period's row is created by the server the client reads it from,
    /// which accepts periods within one of its own clock's. A value past a fixed width is
    /// `Exhausted`, never a wider ID.
    pub async fn business_ids(&self, tag: &str, n: usize) -> Result<Vec<String>> {
        let business = &self.inner.business;
        let def = business
            .definition(tag)
            .await?
            .ok_or_else(|| Error::NotFound(format!("business tag {tag}")))?;
        Ok(business.next(&def, n).await?.ids)
    }

    /// The business tags in this process ([`business_ids`](Self::business_ids) uses them):
    /// definitions, and the allocator of the period rows' leases.
    pub fn business(&self) -> &BusinessTags {
        &self.inner.business
    }

    /// The store behind [`segment`](Self::segment); with the admin token it also creates,
    /// changes and lists tags.
    pub fn store(&self) -> &HttpStore {
        &self.inner.store
    }

    /// `n` snowflake IDs from one server (`GET /v1/snowflake?count=n`; `n` from 1 to the
    /// servers' `server.max_batch`), failing over like every call. Snowflake IDs carry the
    /// time they were made, so they cannot be fetched ahead.
    pub async fn snowflake_ids(&self, n: usize) -> Result<Vec<i64>> {
        if n == 0 {
            return Err(Error::InvalidInput("count must be at least 1".into()));
        }
        let accept = |body: &Bytes| {
            let ids = json::<IdsJson>(body)?.ids;
            if ids.len() != n {
                return Err(format!("{} snowflake ids, asked for {n}", ids.len()));
            }
            Ok(ids)
        };
        self.get(format!("/v1/snowflake?count={n}"), accept).await
    }

    /// `n` monotonic IDs (`GET /v1/monotonic?count=n`; `n` from 1 to the servers'
    /// `server.max_batch`), failing over like every call: ascending, and each above every ID of
    /// a call that completed before this one began, whichever server answered it (the servers
    /// forward to their elected leader). A call failed over to another server is a new request;
    /// what the first may have issued is never handed out.
    pub async fn monotonic_ids(&self, n: usize) -> Result<Vec<i64>> {
        if n == 0 {
            return Err(Error::InvalidInput("count must be at least 1".into()));
        }
        let accept = |body: &Bytes| {
            let ids = json::<IdsJson>(body)?.ids;
            if ids.len() != n || ids.windows(2).any(|w| w[1] <= w[0]) {
                return Err(format!("{} monotonic ids, not {n} ascending", ids.len()));
            }
            Ok(ids)
        };
        self.get(format!("/v1/monotonic?count={n}"), accept).await
    }

    /// A snowflake ID taken apart by a server, with its configured layout and epoch
    /// (`GET /v1/snowflake/{id}/decode`).
    pub async fn decode(&self, id: i64) -> Result<DecodedId> {
        let accept = |body: &Bytes| {
            let d = json::<DecodeJson>(body)?;
            Ok(DecodedId {
                timestamp_ms: d.timestamp_ms,
                worker_id: d.worker_id,
                sequence: d.sequence,
            })
        };
        self.get(format!("/v1/snowflake/{id}/decode"), accept).await
    }

    /// What the client knows of each endpoint: which is asked first, answers and failures,
    /// how long a failed one is still skipped and why it failed.
    pub fn endpoints(&self) -> Vec<EndpointStatus> {
        self.inner.transport.status()
    }

    async fn get<T>(
        &self,
        path: String,
        accept: impl Fn(&Bytes) -> std::result::Result<T, String>,
    ) -> Result<T> {
        let call = Call {
            method: Method::GET,
            path,
            body: None,
            token: TokenKind::Client,
        };
        self.inner.transport.call(&call, accept).await
    }
}
