//! `--formatted`: a business tag's IDs beside a plain tag's on one server, driven by
//! `leaf-loadgen` with the same connections, single IDs and `count=1000` batches, each pair
//! measured twice in turn (plain, formatted, plain, formatted) so that a drift of the machine
//! shows. The business tag restarts each day in Asia/Shanghai and prints
//! `ORD{date:%Y%m%d}{seq:09}`, whose width lets its rows take the step the plain tag grows to
//! (1,000,000), so that what differs is the business path and the rendering, not the number of
//! loads. (A `{seq:06}` day holds 999,999 IDs: this load spends it in a second, and the rest is
//! the width's error, as it must be.)

use std::path::Path;

use anyhow::{Result, bail};

use super::CONNECTIONS;
use super::grpc::{Run, Session, loadgen, print_runs, segment_session};
use super::server::request;

const PLAIN: &str = "leaf-segment-test";
const WIDE: &str = r#"{"tag":"order","step":1000000,"reset":"day","time_zone":"Asia/Shanghai","format":"ORD{date:%Y%m%d}{seq:09}"}"#;

pub(super) fn compare_formatted(root: &Path, seconds: u64) -> Result<()> {
    let Session {
        mut server,
        dir,
        addr,
        loadgen: loadgen_bin,
    } = segment_session(root, "formatted")?;
    let (status, answer) = request(addr, "POST", "/v1/tags", Some(WIDE))?;
    if status != 201 {
        bail!("creating the business tag: {status} {answer}");
    }
    let a = addr.to_string();
    // Warm-ups: the plain tag's dynamic step grows to its maximum, the business rows load.
    for tag in [PLAIN, "order"] {
        loadgen(
            &loadgen_bin,
            &a,
            &["http", "--tag", tag, "--count", "1000"],
            3,
        )?;
    }
    let single = |tag: &'static str| vec!["http", "--tag", tag];
    let batch = |tag: &'static str| vec!["http", "--tag", tag, "--count", "1000"];
    let runs = [
        ("plain tag, single IDs", single(PLAIN)),
        ("business tag, single IDs", single("order")),
        ("plain tag, single IDs (again)", single(PLAIN)),
        ("business tag, single IDs (again)", single("order")),
        ("plain tag, count=1000", batch(PLAIN)),
        ("business tag, count=1000", batch("order")),
        ("plain tag, count=1000 (again)", batch(PLAIN)),
        ("business tag, count=1000 (again)", batch("order")),
    ];
    let mut results: Vec<(&str, Run)> = Vec::new();
    for (name, args) in &runs {
        results.push((*name, loadgen(&loadgen_bin, &a, args, seconds)?));
    }
    server.stop();
    std::fs::remove_dir_all(&dir).ok();

    print_runs(&results);
    let ids = |i: usize| results[i].1.ids_per_s;
    println!();
    println!(
        "- business / plain, single IDs: {:.2}x and {:.2}x (target at least 0.9x)",
        ids(1) / ids(0),
        ids(3) / ids(2)
    );
    println!(
        "- business / plain, count=1000: {:.2}x and {:.2}x (target at least 0.9x)",
        ids(5) / ids(4),
        ids(7) / ids(6)
    );
    println!(
        "- {CONNECTIONS} connections, one request in flight on each, {seconds} s per run, \
         segment mode on SQLite, snowflake mode off"
    );
    Ok(())
}
