//! Segment allocator hot path against a bare atomic increment, in the same run (design targets:
//! `next_id` by name within 3x, a tag handle within 1.5x), on one thread and on two.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::task::{Context, Waker};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use leaf_core::SystemClock;
use leaf_segment::{SegmentAllocator, SegmentConfig};
use leaf_testkit::MemoryStore;
use leaf_testkit::bench::poll_once_then_block;

/// Big enough that switches are rare, small enough that a run sees some.
const STEP: i64 = 1_000_000;

fn allocator(rt: &tokio::runtime::Runtime, tag: &str) -> SegmentAllocator {
    let store = Arc::new(MemoryStore::with_tags([(tag, STEP)]));
    let alloc = SegmentAllocator::new(
        store,
        Arc::new(SystemClock::new()),
        SegmentConfig::default(),
    );
    rt.block_on(async {
        alloc.init().await.expect("init");
        alloc.next_id(tag).await.expect("first load");
    });
    alloc
}

/// The chunk of the local handles measured.
const CHUNK: u64 = 256;

/// Runs `work(iters)` on two threads at once; the time from their common start to the end of
/// the slower one.
fn two_threads(iters: u64, work: impl Fn(u64) + Sync) -> Duration {
    threads(2, iters, work)
}

/// Runs `work(iters)` on `n` threads at once; the time from their common start to the end of
/// the slowest one.
fn threads(n: usize, iters: u64, work: impl Fn(u64) + Sync) -> Duration {
    let barrier = Barrier::new(n + 1);
    std::thread::scope(|scope| {
        for _ in 0..n {
            scope.spawn(|| {
                barrier.wait();
                work(iters);
            });
        }
        barrier.wait();
        // The scope joins both threads before it returns.
        Instant::now()
    })
    .elapsed()
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("segment");

    g.throughput(Throughput::Elements(1));
    let counter = AtomicU64::new(0);
    g.bench_function("atomic_fetch_add_baseline", |b| {
        b.iter(|| black_box(&counter).fetch_add(1, Ordering::Relaxed))
    });

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let alloc = allocator(&rt, "bench-tag");
    // The future is polled directly: criterion's `to_async` loop alone costs several times a bare
    // atomic increment. The runtime is entered so that a preload can be spawned; a request that
    // has to wait (a switch) is finished by `block_on`, which also runs the load.
    let _entered = rt.enter();
    // Opaque to the optimiser, as a tag parsed from a request is.
    let tag: &str = black_box("bench-tag");
    let mut cx = Context::from_waker(Waker::noop());
    g.bench_function("next_id_by_name", |b| {
        b.iter(|| poll_once_then_block(&rt, &mut cx, alloc.next_id(tag)))
    });
    let tag_handle = rt.block_on(alloc.handle(tag)).expect("handle");
    g.bench_function("handle_next_id", |b| {
        b.iter(|| poll_once_then_block(&rt, &mut cx, tag_handle.next_id()))
    });
    let mut local = tag_handle.local(CHUNK).expect("local handle");
    g.bench_function("local_handle_next_id", |b| {
        b.iter(|| poll_once_then_block(&rt, &mut cx, std::pin::pin!(local.next_id())))
    });

    // Background loads run on the runtime's worker; the two measuring threads drive their own
    // requests with `Handle::block_on`.
    let shared_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let shared = allocator(&shared_rt, "shared-tag");
    let handle = shared_rt.handle().clone();
    g.throughput(Throughput::Elements(2));
    g.bench_function("two_threads_shared_tag", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, |n| {
                let tag: &str = black_box("shared-tag");
                handle.block_on(async {
                    for _ in 0..n {
                        let _ = black_box(shared.next_id(tag).await);
                    }
                })
            })
        })
    });
    g.bench_function("two_threads_one_atomic_baseline", |b| {
        let counter = AtomicU64::new(0);
        b.iter_custom(|iters| {
            two_threads(iters, |n| {
                for _ in 0..n {
                    black_box(black_box(&counter).fetch_add(1, Ordering::Relaxed));
                }
            })
        })
    });
    let shared_handle = shared_rt
        .block_on(shared.handle("shared-tag"))
        .expect("handle");
    g.bench_function("two_threads_one_handle", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, |n| {
                handle.block_on(async {
                    for _ in 0..n {
                        let _ = black_box(shared_handle.next_id().await);
                    }
                })
            })
        })
    });
    g.bench_function("two_threads_local_handles", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, |n| {
                let mut local = shared_handle.local(CHUNK).expect("local handle");
                handle.block_on(async {
                    for _ in 0..n {
                        let _ = black_box(local.next_id().await);
                    }
                })
            })
        })
    });
    g.throughput(Throughput::Elements(4));
    g.bench_function("four_threads_one_atomic_baseline", |b| {
        let counter = AtomicU64::new(0);
        b.iter_custom(|iters| {
            threads(4, iters, |n| {
                for _ in 0..n {
                    black_box(black_box(&counter).fetch_add(1, Ordering::Relaxed));
                }
            })
        })
    });
    g.bench_function("four_threads_one_handle", |b| {
        b.iter_custom(|iters| {
            threads(4, iters, |n| {
                handle.block_on(async {
                    for _ in 0..n {
                        let _ = black_box(shared_handle.next_id().await);
                    }
                })
            })
        })
    });
    g.bench_function("four_threads_local_handles", |b| {
        b.iter_custom(|iters| {
            threads(4, iters, |n| {
                let mut local = shared_handle.local(CHUNK).expect("local handle");
                handle.block_on(async {
                    for _ in 0..n {
                        let _ = black_box(local.next_id().await);
                    }
                })
            })
        })
    });
    g.finish();

    // Not a design target: what a thread pays when consecutive requests name different tags (the
    // per-thread last-tag shortcut misses and the tag is hashed).
    let mut more = c.benchmark_group("segment_more");
    more.throughput(Throughput::Elements(2));
    let two = {
        let store = Arc::new(MemoryStore::with_tags([
            ("tag-one", STEP),
            ("tag-two", STEP),
        ]));
        let alloc = SegmentAllocator::new(
            store,
            Arc::new(SystemClock::new()),
            SegmentConfig::default(),
        );
        rt.block_on(async {
            alloc.init().await.expect("init");
            alloc.next_id("tag-one").await.expect("first load");
            alloc.next_id("tag-two").await.expect("first load");
        });
        alloc
    };
    let (tag_one, tag_two): (&str, &str) = black_box(("tag-one", "tag-two"));
    more.bench_function("next_id_alternating_tags", |b| {
        b.iter(|| {
            let one = poll_once_then_block(&rt, &mut cx, two.next_id(tag_one));
            let two = poll_once_then_block(&rt, &mut cx, two.next_id(tag_two));
            (one, two)
        })
    });
    more.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
