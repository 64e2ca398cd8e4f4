//! `leaf-testkit`'s registry conformance suite against a real ZooKeeper, in both modes, each
//! test in a root of its own.

mod common;

use common::ZkFix;
use leaf_registry_zk::ZkMode;

leaf_testkit::registry_conformance!(
    zk_normal,
    async { ZkFix::new(ZkMode::Normal).await },
    recycles = false,
    assigns_distinct_ids = true,
    exclusive_identity = true,
    confirms_marks = false,
);

leaf_testkit::registry_conformance!(
    zk_normal_fenced,
    async { ZkFix::with_config(ZkMode::Normal, |c| c.fence_on_disconnect = true).await },
    recycles = false,
    assigns_distinct_ids = true,
    exclusive_identity = true,
    confirms_marks = true,
);

leaf_testkit::registry_conformance!(
    zk_recycle,
    async { ZkFix::new(ZkMode::Recycle).await },
    recycles = true,
    assigns_distinct_ids = true,
    exclusive_identity = false,
    confirms_marks = true,
);
