//! The conformance suite against the in-memory reference backends.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use leaf_core::{NodeIdentity, WorkerIdRegistry};
use leaf_testkit::{MemoryFixture, MemoryRegistryPool, RegistryFixture};

leaf_testkit::store_conformance!(
    memory_store,
    async { MemoryFixture::default() },
    durable = false,
    multi_process = false,
);

struct MemoryRegistryFixture(Arc<MemoryRegistryPool>);

#[async_trait]
impl RegistryFixture for MemoryRegistryFixture {
    async fn node(&self) -> Arc<dyn WorkerIdRegistry> {
        Arc::new(self.0.node())
    }
    // A memory registry has no cache directory: a restarted node is a new client.
    async fn restarted(&self, previous: Arc<dyn WorkerIdRegistry>) -> Arc<dyn WorkerIdRegistry> {
        drop(previous);
        self.node().await
    }
    async fn let_expire(&self, ttl: Duration) {
        self.0.clock().advance(ttl);
    }
    fn clock(&self) -> Arc<dyn leaf_core::Clock> {
        Arc::new(self.0.clock().clone())
    }
    fn identity(&self, i: u16) -> NodeIdentity {
        NodeIdentity::new(format!("10.1.{}.{}", i / 256, i % 256), 8080)
    }
}

leaf_testkit::registry_conformance!(
    memory_registry,
    async { MemoryRegistryFixture(MemoryRegistryPool::new(false)) },
    recycles = false,
    assigns_distinct_ids = true,
    exclusive_identity = true,
    confirms_marks = true,
);

leaf_testkit::registry_conformance!(
    memory_recycling_registry,
    async { MemoryRegistryFixture(MemoryRegistryPool::new(true)) },
    recycles = true,
    assigns_distinct_ids = true,
    exclusive_identity = false,
    confirms_marks = true,
);
