//! The allocation benchmark every segment store runs against its real server (feature `bench`):
//! one `allocate` per iteration, with the stored step and with a dynamic one, criterion's
//! estimates and the p50/p99/p99.9/max of every timed call. A store's `benches/allocate.rs`
//! provisions its server and hands the store over. Also the way the allocator benchmarks
//! (`leaf-segment`'s, `leaf-client`'s) take one ID per iteration, [`poll_once_then_block`].

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use criterion::Criterion;
use leaf_core::{NewTag, SegmentStore, Tag};

/// Polls `fut` (a `next_id`) once, as a runtime would on its first poll; a request that has to
/// wait (a segment switch) is driven to the end on `rt`. The ID comes back as a plain `i64` (-1
/// for an error), as a caller would consume the result. A benchmark polls the future directly:
/// criterion's async runner alone costs several times a bare atomic increment.
#[inline(always)]
pub fn poll_once_then_block<F: Future<Output = leaf_core::Result<i64>> + Unpin>(
    rt: &tokio::runtime::Runtime,
    cx: &mut Context<'_>,
    mut fut: F,
) -> i64 {
    match Pin::new(&mut fut).poll(cx) {
        Poll::Ready(Ok(id)) => id,
        Poll::Ready(Err(e)) => failed(e),
        Poll::Pending => finish(rt, fut),
    }
}

#[cold]
#[inline(never)]
fn finish<F: Future<Output = leaf_core::Result<i64>>>(rt: &tokio::runtime::Runtime, fut: F) -> i64 {
    rt.block_on(fut).unwrap_or_else(failed)
}

#[cold]
#[inline(never)]
fn failed(_: leaf_core::Error) -> i64 {
    -1
}

/// Runs the `allocate` and `allocate_dynamic_step` benchmarks in the criterion group `group`
/// on the store that `open` makes (on a two-worker runtime), on a tag `bench` it creates. `open`
/// also returns a guard (the test database, the key prefix) that lives until the end.
pub fn allocation<G, F>(c: &mut Criterion, group: &str, open: impl FnOnce() -> F)
where
    F: Future<Output = (G, Arc<dyn SegmentStore>)>,
{
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (guard, store, tag) = rt.block_on(async {
        let (guard, store) = open().await;
        let tag = Tag::new("bench").expect("tag");
        store
            .create(&NewTag::new(tag.clone()))
            .await
            .expect("create");
        (guard, store, tag)
    });

    let mut bench = c.benchmark_group(group);
    for (name, step) in [("allocate", None), ("allocate_dynamic_step", Some(4000))] {
        let samples = Mutex::new(Vec::new());
        bench.bench_function(name, |b| {
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
            &format!("{group}/{name}"),
            &mut samples.into_inner().expect("samples"),
        );
    }
    bench.finish();
    drop(store);
    drop(guard);
}

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
