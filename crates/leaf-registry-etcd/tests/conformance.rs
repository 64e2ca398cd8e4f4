//! `leaf-testkit`'s conformance suite against a real etcd, each test under a key prefix of its
//! own.

mod common;

use common::EtcdFix;

leaf_testkit::store_conformance!(
    etcd_store,
    async { EtcdFix::new().await },
    durable = true,
    multi_process = true,
);

leaf_testkit::period_conformance!(etcd_periods, async { EtcdFix::new().await });

leaf_testkit::registry_conformance!(
    etcd_registry,
    async { EtcdFix::new().await },
    recycles = true,
    assigns_distinct_ids = true,
    exclusive_identity = false,
    confirms_marks = true,
);
