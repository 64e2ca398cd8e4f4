//! Allocation latency of the embedded SQLite store: one `allocate` (`BEGIN IMMEDIATE`, the
//! update, the row, `COMMIT` with `synchronous = FULL`) per iteration, with the stored step and
//! with a dynamic one (`leaf_testkit::bench::allocation`): the baseline the server stores'
//! allocation benches are read beside. The file lives in a temporary directory.

use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use leaf_core::SegmentStore;
use leaf_registry_local::SqliteStore;

fn allocate(c: &mut Criterion) {
    leaf_testkit::bench::allocation(c, "sqlite", || async {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let url = format!("sqlite://{}/leaf.db", dir.path().display());
        let store = SqliteStore::connect_url(&url).await.expect("the store");
        (dir, Arc::new(store) as Arc<dyn SegmentStore>)
    });
}

criterion_group!(benches, allocate);
criterion_main!(benches);
