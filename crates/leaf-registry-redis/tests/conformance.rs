//! `leaf-testkit`'s conformance suites against a real Redis: the segment store and the
//! recycling workerId registry, each test in a key prefix of its own.

mod common;

use common::{RegFix, StoreFix};

leaf_testkit::store_conformance!(
    redis_store,
    async { StoreFix::new().await },
    durable = true,
    multi_process = true,
);

leaf_testkit::period_conformance!(redis_periods, async { StoreFix::new().await });

leaf_testkit::registry_conformance!(
    redis_registry,
    async { RegFix::new().await },
    recycles = true,
    assigns_distinct_ids = true,
    exclusive_identity = false,
    confirms_marks = true,
);
