//! Printing IDs in-process: a formatted order number against the plain decimal of the same
//! value, and a snowflake ID in each form against its plain decimal, in one run.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use leaf_core::SnowflakeLayout;
use leaf_format::{Period, Reset, SnowflakeForm, Template};

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
    // A batch's way: every ID into one reused buffer (`Taken::render_joined`).
    let mut joined = String::with_capacity(64);
    group.bench_function("order_number_into_a_buffer", |b| {
        b.iter(|| {
            n = (n + 1) % 999_999;
            joined.clear();
            renderer.render_into(black_box(n), &mut joined).unwrap();
            black_box(joined.len())
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

/// One snowflake ID per iteration, a new millisecond every 4096 IDs, as a busy node issues
/// them; the plain decimal of the same IDs is the baseline.
fn snowflake(c: &mut Criterion) {
    let layout = SnowflakeLayout::default();
    let t0 = 1_795_699_050_192;
    let mut k = 0u64;
    let mut next = move || {
        k += 1;
        layout.encode_unchecked(t0 + (k >> 12), 3, k & 4095)
    };
    let mut group = c.benchmark_group("snowflake");
    group.bench_function("plain_decimal", |b| {
        b.iter(|| black_box(black_box(next()).to_string()))
    });
    for (name, form) in [
        ("base36", SnowflakeForm::Base36),
        ("base62", SnowflakeForm::Base62),
        ("friendly", SnowflakeForm::Friendly),
    ] {
        group.bench_function(name, |b| {
            b.iter(|| black_box(form.render(black_box(next()), &layout).unwrap()))
        });
    }
    group.finish();
}

criterion_group!(benches, render, snowflake);
criterion_main!(benches);
