//! A blocking client for callers outside Tokio (a thread-per-request service, a batch job, a
//! CLI), as `reqwest::blocking` is for reqwest: [`LeafClient`] owns a small runtime of its own
//! (one worker thread, which runs the background preloads), and each call blocks the calling
//! thread until the async client's answer. The same guarantees, settings and failover as
//! [`crate::LeafClient`]; build it with [`LeafClientBuilder::build_blocking`].
//!
//! Do not call it from inside a Tokio runtime: blocking there would stall the runtime's thread.
//! Such a call fails with `Config` saying so (use [`crate::LeafClient`] there), never panics.

use std::sync::Arc;

use leaf_core::{DecodedId, Error, NewTag, Result, SegmentStore, Tag, TagRecord};
use tokio::runtime::{Builder, Runtime};

use crate::{EndpointStatus, LeafClientBuilder};

/// A blocking client of one set of servers; see the module docs. Cheap to clone: clones share
/// the runtime, the connections and the allocator's buffers.
#[derive(Clone, Debug)]
pub struct LeafClient {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    client: crate::LeafClient,
    /// `None` only while dropping.
    runtime: Option<Runtime>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Never blocks (dropping a runtime inside another one would panic): the background
        // loads in flight are abandoned, which loses no ID (a range not handed out is skipped).
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl LeafClientBuilder {
    /// The blocking client, with its own runtime; `Config` naming the field if a setting is
    /// invalid, `Unavailable` if the runtime's thread cannot be started. No server is
    /// contacted until the first call.
    pub fn build_blocking(self) -> Result<LeafClient> {
        let client = self.build()?;
        let runtime = Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("leaf-client")
            .enable_all()
            .build()
            .map_err(|e| Error::Unavailable(format!("cannot start leaf-client's runtime: {e}")))?;
        Ok(LeafClient {
            inner: Arc::new(Inner {
                client,
                runtime: Some(runtime),
            }),
        })
    }
}

impl LeafClient {
    /// A builder; finish it with [`LeafClientBuilder::build_blocking`].
    pub fn builder() -> LeafClientBuilder {
        LeafClientBuilder::default()
    }

    /// Runs `f` on the client's runtime, blocking this thread until it ends.
    fn block_on<T>(&self, f: impl AsyncFnOnce(&crate::LeafClient) -> Result<T>) -> Result<T> {
        if tokio::runtime::Handle::try_current().is_ok() {
            return Err(Error::Config(
                "leaf_client::blocking::LeafClient was called inside a Tokio runtime, whose \
                 thread it would block; use leaf_client::LeafClient there"
                    .into(),
            ));
        }
        let rt = self
            .inner
            .runtime
            .as_ref()
            .expect("the runtime lives as long as the client");
        rt.block_on(f(&self.inner.client))
    }

    /// One segment ID of `tag`, from memory (see [`crate::LeafClient::segment`]).
    pub fn next_id(&self, tag: &str) -> Result<i64> {
        self.block_on(async |c| c.segment().next_id(tag).await)
    }

    /// `n` segment IDs of `tag`, ascending.
    pub fn next_ids(&self, tag: &str, n: usize) -> Result<Vec<i64>> {
        self.block_on(async |c| c.segment().next_ids(tag, n).await)
    }

    /// `n` snowflake IDs from one server.
    pub fn snowflake_ids(&self, n: usize) -> Result<Vec<i64>> {
        self.block_on(async |c| c.snowflake_ids(n).await)
    }

    /// `n` monotonic IDs, each above every ID of a call that completed before this one.
    pub fn monotonic_ids(&self, n: usize) -> Result<Vec<i64>> {
        self.block_on(async |c| c.monotonic_ids(n).await)
    }

    /// A snowflake ID taken apart by a server.
    pub fn decode(&self, id: i64) -> Result<DecodedId> {
        self.block_on(async |c| c.decode(id).await)
    }

    /// The row of `tag` as the servers' store has it (`None`: no such tag).
    pub fn get(&self, tag: &Tag) -> Result<Option<TagRecord>> {
        self.block_on(async |c| c.store().get(tag).await)
    }

    /// Creates a tag (the servers' admin route: needs the admin token).
    pub fn create(&self, new: &NewTag) -> Result<TagRecord> {
        self.block_on(async |c| c.store().create(new).await)
    }

    /// What the client knows of each endpoint.
    pub fn endpoints(&self) -> Vec<EndpointStatus> {
        self.inner.client.endpoints()
    }

    /// The async client underneath, for a caller that has a runtime after all.
    pub fn as_async(&self) -> &crate::LeafClient {
        &self.inner.client
    }
}
