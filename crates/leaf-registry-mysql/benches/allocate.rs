//! Allocation latency against a real MySQL-compatible server: one `allocate` transaction
//! (`UPDATE ... SET max_id = max_id + step`, `SELECT`, `COMMIT`) per iteration, with the stored
//! step and with a dynamic one (`leaf_testkit::bench::allocation`). The server comes from
//! `leaf-testkit`'s provisioning (`LEAFTEST_MYSQL_URL`, or a container of `LEAFTEST_MYSQL_IMAGE`).

use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use leaf_core::SegmentStore;
use leaf_registry_mysql::{MysqlConfig, MysqlStore};
use leaf_testkit::provision;

fn allocate(c: &mut Criterion) {
    leaf_testkit::bench::allocation(c, "mysql", || async {
        let db = provision::mysql_database()
            .await
            .unwrap_or_else(|e| panic!("no MySQL server for the benchmark: {e}"));
        let store = MysqlStore::connect(&MysqlConfig::with_url(&db.url))
            .await
            .expect("connect");
        (db, Arc::new(store) as Arc<dyn SegmentStore>)
    });
}

criterion_group!(benches, allocate);
criterion_main!(benches);
