//! A segment store whose connection is retried on use: when a store cannot be opened at start-up
//! for a reason that may pass (a MySQL server down, a SQLite file locked by another program),
//! segment mode starts "not ready" and the allocator's start-up retries reach the store through
//! this wrapper, instead of the process exiting.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;
use leaf_core::{
    Allocation, NewTag, Result, SegmentStore, StoreCapabilities, Tag, TagRecord, TagUpdate,
};
use tokio::sync::OnceCell;

/// Makes the real store; called again on every use until it succeeds once.
pub type Connect = Box<
    dyn Fn() -> Pin<Box<dyn Future<Output = Result<Arc<dyn SegmentStore>>> + Send>> + Send + Sync,
>;

/// A store connected on first successful use. Until then every call fails with the error of its
/// own connection attempt (retryable when the server is merely down).
pub struct DeferredStore {
    kind: &'static str,
    capabilities: StoreCapabilities,
    connect: Connect,
    inner: OnceCell<Arc<dyn SegmentStore>>,
}

impl fmt::Debug for DeferredStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeferredStore")
            .field("kind", &self.kind)
            .field("connected", &self.inner.get())
            .finish_non_exhaustive()
    }
}

impl DeferredStore {
    /// A store of `kind` with `capabilities` (those of the store `connect` makes).
    pub fn new(kind: &'static str, capabilities: StoreCapabilities, connect: Connect) -> Self {
        DeferredStore {
            kind,
            capabilities,
            connect,
            inner: OnceCell::new(),
        }
    }

    /// Whether the real store has been made.
    #[cfg(test)]
    fn is_connected(&self) -> bool {
        self.inner.initialized()
    }

    async fn store(&self) -> Result<&Arc<dyn SegmentStore>> {
        // Concurrent callers wait for one attempt; a failed one leaves the cell empty.
        self.inner
            .get_or_try_init(|| async {
                let store = (self.connect)().await?;
                tracing::info!(store = self.kind, "segment store connected");
                Ok(store)
            })
            .await
    }
}

#[async_trait]
impl SegmentStore for DeferredStore {
    fn kind(&self) -> &'static str {
        self.kind
    }

    fn capabilities(&self) -> StoreCapabilities {
        self.capabilities
    }

    async fn allocate(&self, tag: &Tag, step: Option<i64>) -> Result<Allocation> {
        self.store().await?.allocate(tag, step).await
    }

    async fn get(&self, tag: &Tag) -> Result<Option<TagRecord>> {
        self.store().await?.get(tag).await
    }

    async fn list(&self) -> Result<Vec<TagRecord>> {
        self.store().await?.list().await
    }

    async fn tags(&self) -> Result<Vec<Tag>> {
        self.store().await?.tags().await
    }

    async fn create(&self, new: &NewTag) -> Result<TagRecord> {
        self.store().await?.create(new).await
    }

    async fn update(&self, tag: &Tag, update: &TagUpdate) -> Result<TagRecord> {
        self.store().await?.update(tag, update).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use leaf_core::Error;
    use leaf_testkit::MemoryStore;

    use super::*;

    #[tokio::test]
    async fn calls_fail_until_a_connection_succeeds_then_use_it() {
        let attempts = Arc::new(AtomicU32::new(0));
        let memory = Arc::new(MemoryStore::with_tags([("t", 10)]));
        let connect: Connect = {
            let (attempts, memory) = (attempts.clone(), memory.clone());
            Box::new(move || {
                let n = attempts.fetch_add(1, Ordering::SeqCst);
                let memory: Arc<dyn SegmentStore> = memory.clone();
                Box::pin(async move {
                    if n < 2 {
                        Err(Error::Unavailable(format!("down (attempt {n})")))
                    } else {
                        Ok(memory)
                    }
                })
            })
        };
        let store = DeferredStore::new("mysql", StoreCapabilities::new(true, true), connect);
        assert_eq!(store.kind(), "mysql");
        let tag = Tag::new("t").unwrap();
        for n in 0..2 {
            let e = store.allocate(&tag, None).await.unwrap_err();
            assert!(e.is_retryable(), "{e}");
            assert!(e.to_string().contains(&format!("attempt {n}")), "{e}");
            assert!(!store.is_connected());
        }
        assert_eq!(store.allocate(&tag, None).await.unwrap().range(), 1..11);
        assert!(store.is_connected());
        assert_eq!(store.list().await.unwrap().len(), 1);
        assert_eq!(store.get(&tag).await.unwrap().unwrap().max_id, 11);
        assert_eq!(attempts.load(Ordering::SeqCst), 3, "connected once, kept");
    }
}
