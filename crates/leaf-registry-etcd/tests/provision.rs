//! `leaf-testkit`'s etcd provisioning, checked with this crate's store: each test's prefix is
//! its own, and what a test wrote is deleted when its namespace goes.

mod common;

use std::time::{Duration, Instant};

use common::{EtcdFix, NAME};
use leaf_core::{NewTag, SegmentStore, Tag};
use leaf_registry_etcd::EtcdStore;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefixes_are_separate_and_cleaned_up_after_the_test() {
    let a = EtcdFix::new().await;
    let b = EtcdFix::new().await;
    assert_ne!(a.config.prefix, b.config.prefix);
    assert_eq!(
        a.config.endpoints, b.config.endpoints,
        "one server per test binary"
    );
    let t = Tag::new("provisioned").unwrap();
    a.new_store()
        .await
        .create(&NewTag::new(t.clone()))
        .await
        .expect("create");
    assert_eq!(a.new_store().await.list().await.expect("list").len(), 1);
    assert!(b.new_store().await.list().await.expect("list").is_empty());
    let config = a.config.clone();
    drop(a);
    let store = EtcdStore::connect(&config, NAME).await.expect("store");
    let start = Instant::now();
    while !store.list().await.expect("list").is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the namespace's keys outlived it"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
