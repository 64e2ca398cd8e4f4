//! `leaf-testkit`'s conformance suite against a real MySQL-compatible server.

mod common;

use common::Fix;

leaf_testkit::store_conformance!(
    mysql_store,
    async { Fix::new().await },
    durable = true,
    multi_process = true,
);

leaf_testkit::period_conformance!(mysql_periods, async { Fix::new().await });

leaf_testkit::registry_conformance!(
    mysql_registry,
    async { Fix::new().await },
    recycles = false,
    assigns_distinct_ids = true,
    exclusive_identity = true,
    confirms_marks = false,
);

leaf_testkit::registry_conformance!(
    mysql_registry_fenced,
    async { Fix::fenced().await },
    recycles = false,
    assigns_distinct_ids = true,
    exclusive_identity = true,
    confirms_marks = true,
);

// The monotonic leader's leased pool (`leaf_workerid_lease`), as `fence_on_disconnect` opens
// it: every recycling case, the monotonic cases among them, on the real server.
leaf_testkit::registry_conformance!(
    mysql_leases,
    async { Fix::leased().await },
    recycles = true,
    assigns_distinct_ids = true,
    exclusive_identity = false,
    confirms_marks = true,
);
