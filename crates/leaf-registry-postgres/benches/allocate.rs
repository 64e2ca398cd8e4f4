//! Allocation latency against a real PostgreSQL: one `allocate` statement (`UPDATE ... SET
//! max_id = max_id + step ... RETURNING`) per iteration, with the stored step and with a dynamic
//! one (`leaf_testkit::bench::allocation`). The server comes from `leaf-testkit`'s provisioning
//! (`LEAFTEST_POSTGRES_URL`, or a container of `LEAFTEST_POSTGRES_IMAGE`).

use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use leaf_core::SegmentStore;
use leaf_registry_postgres::{PostgresConfig, PostgresStore};
use leaf_testkit::provision;

fn allocate(c: &mut Criterion) {
    leaf_testkit::bench::allocation(c, "postgres", || async {
        let db = provision::postgres_database()
            .await
            .unwrap_or_else(|e| panic!("no PostgreSQL server for the benchmark: {e}"));
        let store = PostgresStore::connect(&PostgresConfig::with_url(&db.url))
            .await
            .expect("connect");
        (db, Arc::new(store) as Arc<dyn SegmentStore>)
    });
}

criterion_group!(benches, allocate);
criterion_main!(benches);
