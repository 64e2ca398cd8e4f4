//! Allocation latency against a real etcd server: one `allocate` (a read of the tag's key, then
//! a compare-and-swap on its revision) per iteration, with the stored step and with a dynamic one
//! (`leaf_testkit::bench::allocation`). The server comes from `leaf-testkit`'s provisioning
//! (`LEAFTEST_ETCD_URL`, or a container of `LEAFTEST_ETCD_IMAGE`); the keys live under a leaf
//! name of their own.

use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use leaf_core::SegmentStore;
use leaf_registry_etcd::{EtcdConfig, EtcdStore};
use leaf_testkit::provision;

fn allocate(c: &mut Criterion) {
    leaf_testkit::bench::allocation(c, "etcd", || async {
        let ns = provision::etcd_namespace()
            .await
            .unwrap_or_else(|e| panic!("no etcd server for the benchmark: {e}"));
        let config = EtcdConfig {
            prefix: ns.prefix.clone(),
            ..EtcdConfig::with_endpoints(ns.endpoints.clone())
        };
        let store = EtcdStore::connect(&config, "bench").await.expect("connect");
        (ns, Arc::new(store) as Arc<dyn SegmentStore>)
    });
}

criterion_group!(benches, allocate);
criterion_main!(benches);
