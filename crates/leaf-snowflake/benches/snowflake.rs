//! Saturated snowflake generation: ours against `rs-snowflake` and `ferroid`, one thread each,
//! and ours shared by two threads.
//!
//! The ceiling with 12 sequence bits is 4,096,000 IDs/s with the random start off; with a random
//! start in `0..R` a millisecond holds `4096 - (R - 1) / 2` IDs on average.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ferroid::generator::BasicSnowflakeGenerator;
use ferroid::id::SnowflakeTwitterId;
use ferroid::time::{MonotonicClock, TWITTER_EPOCH};
use leaf_core::{
    AcquireRequest, Lease, NodeIdentity, RegistryCapabilities, Renewal, Result, SystemClock,
    WorkerIdRegistry,
};
use leaf_snowflake::{Snowflake, SnowflakeConfig};
use tokio::runtime::Runtime;

/// A local registry that keeps nothing: every renewal is durable at once.
#[derive(Debug)]
struct InMemory;

#[async_trait::async_trait]
impl WorkerIdRegistry for InMemory {
    fn mode(&self) -> &'static str {
        "memory"
    }
    fn capabilities(&self) -> RegistryCapabilities {
        RegistryCapabilities::new(false, false)
    }
    async fn acquire(&self, _: &AcquireRequest) -> Result<Lease> {
        Ok(Lease::new(1, None))
    }
    async fn renew(&self, _: &Lease, _: u64) -> Result<Renewal> {
        Ok(Renewal::OK)
    }
    async fn release(&self, _: &Lease, _: u64) -> Result<()> {
        Ok(())
    }
    async fn abandon(&self, _: &Lease) {}
}

/// Starts a generator whose renewer runs on `background` (every 1 s, keeping the mark 2-3 s
/// ahead), so the measured thread never waits for a mark; borrowing up to `max_borrow_ms`
/// ahead of the clock (0: waiting for it, as Leaf).
fn leaf(background: &Runtime, random_start: u64, max_borrow_ms: u64) -> Snowflake {
    background.block_on(async {
        let sf = Snowflake::start(
            Arc::new(InMemory),
            NodeIdentity::new("10.0.0.1", 8080),
            Arc::new(SystemClock::new()),
            SnowflakeConfig {
                random_start,
                max_borrow: Duration::from_millis(max_borrow_ms),
                ..SnowflakeConfig::default()
            },
        )
        .await
        .expect("snowflake starts");
        // Detached: it ends with the runtime.
        drop(sf.spawn_renewer());
        sf
    })
}

fn bench(c: &mut Criterion) {
    let background = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    // The measured loop: a current-thread runtime, as `next_id` completes on its first poll.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();

    let mut group = c.benchmark_group("snowflake");
    group.throughput(Throughput::Elements(1));

    // The layout's ceiling: a sustained single-ID loop, waiting for the clock at each spent
    // millisecond (with borrowing it runs at the same ceiling once its lead is at the bound).
    for random_start in [100, 0] {
        let sf = leaf(&background, random_start, 0);
        group.bench_function(format!("leaf_random_start_{random_start}"), |b| {
            b.to_async(&rt)
                .iter(|| async { black_box(sf.next_id().await.unwrap()) })
        });
    }

    let mut rs = snowflake::SnowflakeIdGenerator::new(1, 1);
    group.bench_function("rs_snowflake_real_time_generate", |b| {
        b.iter(|| black_box(rs.real_time_generate()))
    });

    let ferroid = BasicSnowflakeGenerator::new(1, MonotonicClock::<1>::with_epoch(TWITTER_EPOCH));
    group.bench_function("ferroid", |b| {
        b.iter(|| {
            let id: SnowflakeTwitterId = ferroid.next_id(|_| std::hint::spin_loop());
            black_box(id)
        })
    });

    let sf = leaf(&background, 100, 0);
    group.throughput(Throughput::Elements(2));
    group.bench_function("two_threads_shared", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            std::thread::scope(|s| {
                for _ in 0..2 {
                    s.spawn(|| {
                        let rt = tokio::runtime::Builder::new_current_thread()
                            .build()
                            .unwrap();
                        rt.block_on(async {
                            for _ in 0..iters {
                                black_box(sf.next_id().await.unwrap());
                            }
                        })
                    });
                }
            });
            start.elapsed()
        })
    });
    group.finish();

    // A burst: one batch of a million IDs (244 ms of the layout's sequence), after a pause that
    // lets any lead of borrowed milliseconds drain (not timed), with and without borrowing.
    let mut group = c.benchmark_group("snowflake_burst");
    group.throughput(Throughput::Elements(BURST));
    group.sample_size(10);
    group.sampling_mode(criterion::SamplingMode::Flat);
    for max_borrow_ms in [0, 300] {
        let sf = leaf(&background, 0, max_borrow_ms);
        group.bench_function(format!("next_ids_1m_max_borrow_{max_borrow_ms}"), |b| {
            b.iter_custom(|iters| {
                let mut timed = Duration::ZERO;
                for _ in 0..iters {
                    std::thread::sleep(Duration::from_millis(400));
                    let start = Instant::now();
                    let ids = rt.block_on(sf.next_ids(BURST as usize)).unwrap();
                    timed += start.elapsed();
                    black_box(ids);
                }
                timed
            })
        });
    }
    group.finish();
}

/// The IDs of one burst.
const BURST: u64 = 1_000_000;

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1));
    targets = bench
}
criterion_main!(benches);
