//! Printing IDs in-process: a formatted order number against the plain decimal of the same
//! value, in one run.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use leaf_format::{Period, Reset, Template};

fn render(c: &mut Criterion) {
    let template = Template::parse("ORD{date:%Y%m%d}{seq:06}", Some(Reset::Day)).unwrap();
    let period = Period::from_key(Reset::Day, "20261126").ok();
    let renderer = template.renderer(period);
    let base62 = Template::parse("{seq:base62}", None)
        .unwrap()
        .renderer(None);
    let mut group = c.benchmark_group("render");
    let mut n = 0i64;
    group.bench_function("plain_decimal", |b| {
        b.iter(|| {
            n = (n + 1) % 999_999;
            black_box(black_box(n).to_string())
        })
    });
    group.bench_function("order_number", |b| {
        b.iter(|| {
            n = (n + 1) % 999_999;
            black_box(renderer.render(black_box(n)).unwrap())
        })
    });
    group.bench_function("base62", |b| {
        b.iter(|| {
            n = (n + 1) % 999_999;
            black_box(base62.render(black_box(n)).unwrap())
        })
    });
    group.finish();
}

criterion_group!(benches, render);
criterion_main!(benches);
