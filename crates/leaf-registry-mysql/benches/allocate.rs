//! Allocation latency against a real MySQL-compatible server: one `allocate` transaction
//! (`UPDATE ... SET max_id = max_id + step`, `SELECT`, `COMMIT`) per iteration, with the stored
//! step and with a dynamic one. Besides criterion's estimates it prints the p50/p99/p99.9 of
//! every timed call. The server comes from `leaf-testkit`'s provisioning (`LEAFTEST_MYSQL_URL`,
//! or a container of `LEAFTEST_MYSQL_IMAGE`).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use leaf_core::{NewTag, SegmentStore, Tag};
use leaf_registry_mysql::{MysqlConfig, MysqlStore};
use leaf_testkit::provision;

fn percentiles(name: &str, samples: &mut [Duration]) {
    if samples.is_empty() {
        return;
    }
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    eprintln!(
        "{name}: {} calls, p50 {:.3} ms, p99 {:.3} ms, p99.9 {:.3} ms, max {:.3} ms",
        samples.len(),
        at(0.50).as_secs_f64() * 1e3,
        at(0.99).as_secs_f64() * 1e3,
        at(0.999).as_secs_f64() * 1e3,
        samples[samples.len() - 1].as_secs_f64() * 1e3,
    );
}

fn allocate(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (db, store, tag) = rt.block_on(async {
        let db = provision::mysql_database()
            .await
            .unwrap_or_else(|e| panic!("no MySQL server for the benchmark: {e}"));
        let store = MysqlStore::connect(&MysqlConfig::with_url(&db.url))
            .await
            .expect("connect");
        let tag = Tag::new("bench").expect("tag");
        store
            .create(&NewTag::new(tag.clone()))
            .await
            .expect("create");
        (db, store, tag)
    });

    let mut group = c.benchmark_group("mysql");
    for (name, step) in [("allocate", None), ("allocate_dynamic_step", Some(4000))] {
        let samples = Mutex::new(Vec::new());
        group.bench_function(name, |b| {
            b.to_async(&rt).iter_custom(|iters| {
                let (store, tag, samples) = (&store, &tag, &samples);
                async move {
                    let mut total = Duration::ZERO;
                    let mut mine = Vec::with_capacity(iters as usize);
                    for _ in 0..iters {
                        let t = Instant::now();
                        store.allocate(tag, step).await.expect("allocate");
                        let d = t.elapsed();
                        total += d;
                        mine.push(d);
                    }
                    samples.lock().expect("samples").extend(mine);
                    total
                }
            })
        });
        percentiles(
            &format!("mysql/{name}"),
            &mut samples.into_inner().expect("samples"),
        );
    }
    group.finish();
    drop(store);
    drop(db);
}

criterion_group!(benches, allocate);
criterion_main!(benches);
