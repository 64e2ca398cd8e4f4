//! Allocation latency against a real Redis server: one `allocate` script (`HINCRBY` of
//! `max_id` by the step, `update_time`, the row back) per iteration, with the stored step and
//! with a dynamic one (`leaf_testkit::bench::allocation`). The server comes from
//! `leaf-testkit`'s provisioning (`LEAFTEST_REDIS_URL`, or a container of `LEAFTEST_REDIS_IMAGE`
//! with `appendonly yes` and `appendfsync always`); the keys live under a prefix of their own.

use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use leaf_core::SegmentStore;
use leaf_registry_redis::{RedisStore, RedisStoreConfig};
use leaf_testkit::provision;

fn allocate(c: &mut Criterion) {
    leaf_testkit::bench::allocation(c, "redis", || async {
        let ns = provision::redis_namespace()
            .await
            .unwrap_or_else(|e| panic!("no Redis server for the benchmark: {e}"));
        let config = RedisStoreConfig {
            key_prefix: ns.prefix.clone(),
            ..RedisStoreConfig::with_url(&ns.url)
        };
        let store = RedisStore::connect(&config).await.expect("connect");
        (ns, Arc::new(store) as Arc<dyn SegmentStore>)
    });
}

criterion_group!(benches, allocate);
criterion_main!(benches);
