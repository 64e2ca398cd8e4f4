//! `leaf-client`'s `next_id` (through a handle, and by name) beside, in the same run, a bare
//! atomic increment and the in-process allocator over an in-memory store (design target: the
//! client's handle within 1.5x of the in-process handle); and, for scale, a server's own
//! single-ID HTTP route asked by one keep-alive connection. The client and the HTTP route use
//! a real leaf-server (the server's start-up and accept loop, on a loopback port, segments on a
//! temporary SQLite file).

#[path = "../tests/common/mod.rs"]
mod common;

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Waker};
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use leaf_core::SystemClock;
use leaf_segment::{SegmentAllocator, SegmentConfig};
use leaf_testkit::MemoryStore;
use leaf_testkit::bench::poll_once_then_block;

const TAG: &str = "bench-tag";
/// Leaf's largest step: leases are rare, as the in-process allocator's loads are.
const STEP: i64 = 1_000_000;

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let cluster = common::Cluster::start(1, &[]);
    let client = common::client(cluster.urls()).build().expect("client");
    rt.block_on(async {
        common::create_tag(&client, TAG, STEP).await;
        client.segment().next_id(TAG).await.expect("first lease");
    });
    let local = SegmentAllocator::new(
        Arc::new(MemoryStore::with_tags([(TAG, STEP)])),
        Arc::new(SystemClock::new()),
        SegmentConfig::default(),
    );
    rt.block_on(local.next_id(TAG)).expect("first load");
    // Preloads are spawned on this runtime; a switch that waits is finished by `block_on`.
    let _entered = rt.enter();
    let tag: &str = black_box(TAG);
    let mut cx = Context::from_waker(Waker::noop());

    let mut g = c.benchmark_group("client");
    g.throughput(Throughput::Elements(1));
    let counter = AtomicU64::new(0);
    g.bench_function("atomic_fetch_add_baseline", |b| {
        b.iter(|| black_box(&counter).fetch_add(1, Ordering::Relaxed))
    });
    let local_handle = rt.block_on(local.handle(tag)).expect("handle");
    g.bench_function("in_process_handle_next_id", |b| {
        b.iter(|| poll_once_then_block(&rt, &mut cx, local_handle.next_id()))
    });
    g.bench_function("in_process_next_id_by_name", |b| {
        b.iter(|| poll_once_then_block(&rt, &mut cx, local.next_id(tag)))
    });
    let handle = rt.block_on(client.segment().handle(tag)).expect("handle");
    g.bench_function("client_handle_next_id", |b| {
        b.iter(|| poll_once_then_block(&rt, &mut cx, handle.next_id()))
    });
    g.bench_function("client_next_id_by_name", |b| {
        b.iter(|| poll_once_then_block(&rt, &mut cx, client.segment().next_id(tag)))
    });

    // One keep-alive connection, one request at a time: a service asking per ID.
    let http: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let uri: hyper::Uri = format!("{}/api/segment/get/{TAG}", cluster.urls()[0])
        .parse()
        .expect("uri");
    g.sample_size(20)
        .measurement_time(Duration::from_secs(5))
        .bench_function("http_single_id", |b| {
            b.iter(|| {
                rt.block_on(async {
                    let resp = http.get(uri.clone()).await.expect("answer");
                    assert_eq!(resp.status(), 200);
                    let body = resp.into_body().collect().await.expect("body").to_bytes();
                    black_box(body)
                })
            })
        });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
