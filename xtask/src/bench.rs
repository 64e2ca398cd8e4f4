//! `cargo xtask bench`: runs the criterion benchmarks and prints one summary table from
//! criterion's `estimates.json` files, with each figure beside its baseline of the same run.
//! `cargo xtask bench --stores sqlite,mysql,postgres`: the segment stores' allocation
//! benchmark, one store after the other in one run, on provisioned servers.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde_json::Value;

/// One measured benchmark.
struct Figure {
    ns_per_iter: f64,
    elements: f64,
}

impl Figure {
    fn ids_per_sec(&self) -> f64 {
        self.elements * 1e9 / self.ns_per_iter
    }
    fn ns_per_id(&self) -> f64 {
        self.ns_per_iter / self.elements
    }
}

/// `cargo xtask bench [--quick] [--stores NAME,NAME...]`.
pub(crate) fn run(root: &Path, args: &[String]) -> Result<()> {
    let quick = args.iter().any(|a| a == "--quick");
    let timing: &[&str] = if quick {
        &["--warm-up-time", "1", "--measurement-time", "2"]
    } else {
        &["--warm-up-time", "2", "--measurement-time", "5"]
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let list = match a.as_str() {
            "--stores" => it
                .next()
                .context("--stores needs a list: sqlite,mysql,postgres")?,
            "--quick" => continue,
            other => match other.strip_prefix("--stores=") {
                Some(list) => list,
                None => {
                    bail!("unknown argument {other:?} (usage: bench [--quick] [--stores LIST])")
                }
            },
        };
        let names: Vec<&str> = list.split(',').map(str::trim).collect();
        return allocation(root, &names, timing);
    }
    for (package, bench) in [
        ("leaf-segment", "segment"),
        ("leaf-snowflake", "snowflake"),
        ("leaf-client", "client"),
    ] {
        let mut args = vec!["bench", "-p", package, "--bench", bench, "--"];
        args.extend_from_slice(timing);
        crate::cargo(root, &format!("bench {bench}"), &args)?;
    }
    let criterion = target_dir(root).join("criterion");
    let get = |group: &str, id: &str| read_figure(&criterion, group, id);

    println!();
    println!("| benchmark | ns/ID | IDs/s | against | target |");
    println!("|---|---:|---:|---|---|");
    let baseline = get("segment", "atomic_fetch_add_baseline")?;
    row(
        "segment/atomic_fetch_add_baseline",
        &baseline,
        "baseline".into(),
        "",
    );
    // A single-thread figure beside the baseline, with its design target as a ratio.
    let against_baseline = |id: &str, max_ratio: f64| -> Result<Figure> {
        let f = get("segment", id)?;
        let ratio = f.ns_per_iter / baseline.ns_per_iter;
        row(
            &format!("segment/{id}"),
            &f,
            format!("{ratio:.2}x the baseline"),
            &verdict(ratio <= max_ratio, &format!("at most {max_ratio}x")),
        );
        Ok(f)
    };
    let next = against_baseline("next_id_by_name", 3.0)?;
    against_baseline("handle_next_id", 1.5)?;
    against_baseline("local_handle_next_id", 1.1)?;
    let two = get("segment", "two_threads_shared_tag")?;
    row(
        "segment/two_threads_shared_tag",
        &two,
        format!(
            "{:.2}x one thread's IDs/s",
            two.ids_per_sec() / next.ids_per_sec()
        ),
        "",
    );
    let two_atomic = get("segment", "two_threads_one_atomic_baseline")?;
    row(
        "segment/two_threads_one_atomic_baseline",
        &two_atomic,
        "baseline (two threads)".into(),
        "",
    );
    let two_handle = get("segment", "two_threads_one_handle")?;
    row(
        "segment/two_threads_one_handle",
        &two_handle,
        format!(
            "{:.2}x the two-thread baseline",
            two_handle.ns_per_iter / two_atomic.ns_per_iter
        ),
        "",
    );
    let two_local = get("segment", "two_threads_local_handles")?;
    let ratio = two_local.ns_per_iter / two_atomic.ns_per_iter;
    row(
        "segment/two_threads_local_handles",
        &two_local,
        format!("{ratio:.2}x the two-thread baseline"),
        &verdict(ratio <= 1.2, "at most 1.2x"),
    );
    let four_atomic = get("segment", "four_threads_one_atomic_baseline")?;
    row(
        "segment/four_threads_one_atomic_baseline",
        &four_atomic,
        "baseline (four threads)".into(),
        "",
    );
    for id in ["four_threads_one_handle", "four_threads_local_handles"] {
        let f = get("segment", id)?;
        row(
            &format!("segment/{id}"),
            &f,
            format!(
                "{:.2}x the four-thread baseline",
                f.ns_per_iter / four_atomic.ns_per_iter
            ),
            "",
        );
    }

    let rs = get("snowflake", "rs_snowflake_real_time_generate")?;
    let ferroid = get("snowflake", "ferroid")?;
    for (id, random_start) in [
        ("leaf_random_start_100", 100.0),
        ("leaf_random_start_0", 0.0),
    ] {
        let f = get("snowflake", id)?;
        // A new millisecond starts at a random value in 0..R, on average (R - 1) / 2.
        let per_ms = 4096.0 - f64::max(random_start - 1.0, 0.0) / 2.0;
        let share = f.ids_per_sec() / (per_ms * 1000.0);
        row(
            &format!("snowflake/{id}"),
            &f,
            format!(
                "{:.1}% of the {:.0} IDs/s ceiling",
                share * 100.0,
                per_ms * 1000.0
            ),
            &verdict(share >= 0.98, "at least 98%"),
        );
    }
    row(
        "snowflake/rs_snowflake_real_time_generate",
        &rs,
        "reference".into(),
        "",
    );
    row("snowflake/ferroid", &ferroid, "reference".into(), "");
    let two = get("snowflake", "two_threads_shared")?;
    row(
        "snowflake/two_threads_shared",
        &two,
        "one generator, two threads".into(),
        "",
    );
    let waiting = get("snowflake_burst", "next_ids_1m_max_borrow_0")?;
    row(
        "snowflake_burst/next_ids_1m_max_borrow_0",
        &waiting,
        format!(
            "baseline, {:.2}x the 4,096,000 IDs/s ceiling",
            waiting.ids_per_sec() / 4_096_000.0
        ),
        "",
    );
    let borrowing = get("snowflake_burst", "next_ids_1m_max_borrow_300")?;
    let times = borrowing.ids_per_sec() / 4_096_000.0;
    row(
        "snowflake_burst/next_ids_1m_max_borrow_300",
        &borrowing,
        format!("{times:.1}x the ceiling"),
        &verdict(times >= 2.0, "at least 2x"),
    );
    client_rows(&get)
}

/// `leaf-client`'s figures, each beside its in-process counterpart of the same run.
fn client_rows(get: &dyn Fn(&str, &str) -> Result<Figure>) -> Result<()> {
    let baseline = get("client", "atomic_fetch_add_baseline")?;
    row(
        "client/atomic_fetch_add_baseline",
        &baseline,
        "baseline (this run)".into(),
        "",
    );
    let mut in_process = Vec::new();
    for id in ["in_process_handle_next_id", "in_process_next_id_by_name"] {
        let f = get("client", id)?;
        let ratio = f.ns_per_iter / baseline.ns_per_iter;
        row(
            &format!("client/{id}"),
            &f,
            format!("{ratio:.2}x the baseline"),
            "",
        );
        in_process.push(f);
    }
    let handle = get("client", "client_handle_next_id")?;
    let ratio = handle.ns_per_iter / in_process[0].ns_per_iter;
    row(
        "client/client_handle_next_id",
        &handle,
        format!("{ratio:.2}x the in-process handle"),
        &verdict(ratio <= 1.5, "at most 1.5x"),
    );
    let by_name = get("client", "client_next_id_by_name")?;
    row(
        "client/client_next_id_by_name",
        &by_name,
        format!(
            "{:.2}x the in-process allocator by name",
            by_name.ns_per_iter / in_process[1].ns_per_iter
        ),
        "",
    );
    let http = get("client", "http_single_id")?;
    row(
        "client/http_single_id",
        &http,
        format!(
            "{:.0}x the client handle's time per ID",
            http.ns_per_id() / handle.ns_per_id()
        ),
        "",
    );
    Ok(())
}

/// The allocation benchmark of each store in `names`, one after the other in one run, on the
/// servers `cargo xtask conformance` would give them (the local testbed images unless a
/// `LEAFTEST_*` variable says otherwise), then one table of criterion's means. Each bench
/// prints its own percentiles as it ends.
fn allocation(root: &Path, names: &[&str], timing: &[&str]) -> Result<()> {
    let mut crates = Vec::new();
    for name in names {
        // The segment stores whose crate has the allocation benchmark (`benches/allocate.rs`,
        // on `leaf_testkit::bench::allocation`).
        let Some(package) = crate::backends::find(name).and_then(|b| b.alloc_bench) else {
            let known = crate::backends::names(|b| b.alloc_bench.is_some(), ", ");
            bail!("--stores: no store {name:?}; one of {known}");
        };
        crates.push((*name, package));
    }
    let env = crate::conformance::server_env_for(root, names)?;
    for (name, package) in &crates {
        let mut args = vec!["bench", "-p", package, "--bench", "allocate", "--"];
        args.extend_from_slice(timing);
        crate::cargo_with_env(root, &format!("bench allocate on {name}"), &args, &env)?;
    }
    let criterion = target_dir(root).join("criterion");
    println!();
    println!("| store | allocate, stored step | allocate, dynamic step |");
    println!("|---|---:|---:|");
    for (name, _) in &crates {
        let ms = |id: &str| -> Result<String> {
            let f = read_figure(&criterion, name, id)?;
            Ok(format!("{:.3} ms", f.ns_per_iter / 1e6))
        };
        println!(
            "| {name} | {} | {} |",
            ms("allocate")?,
            ms("allocate_dynamic_step")?
        );
    }
    println!();
    println!("- criterion's mean per allocation; the percentiles are in each bench's output");
    Ok(())
}

fn verdict(ok: bool, target: &str) -> String {
    format!("{target}: {}", if ok { "met" } else { "MISSED" })
}

fn row(name: &str, f: &Figure, against: String, target: &str) {
    println!(
        "| {name} | {:.2} | {} | {against} | {target} |",
        f.ns_per_id(),
        thousands(f.ids_per_sec())
    );
}

fn thousands(v: f64) -> String {
    let digits = format!("{:.0}", v);
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

pub(crate) fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
}

fn read_figure(criterion: &Path, group: &str, id: &str) -> Result<Figure> {
    let dir = criterion.join(group).join(id).join("new");
    let json = |name: &str| -> Result<Value> {
        let path = dir.join(name);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {} (did the benchmark run?)", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("cannot parse {}", path.display()))
    };
    let ns_per_iter = json("estimates.json")?["mean"]["point_estimate"]
        .as_f64()
        .context("estimates.json has no mean")?;
    let elements = json("benchmark.json")?["throughput"]["Elements"]
        .as_f64()
        .unwrap_or(1.0);
    Ok(Figure {
        ns_per_iter,
        elements,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_name_their_target() {
        assert_eq!(verdict(true, "at most 1.5x"), "at most 1.5x: met");
        assert_eq!(verdict(false, "at most 3x"), "at most 3x: MISSED");
    }

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(4_096_000.0), "4,096,000");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(1000.4), "1,000");
    }

    #[test]
    fn reads_criterion_files() {
        let dir = std::env::temp_dir().join(format!("xtask-bench-{}", std::process::id()));
        let new = dir.join("g").join("f").join("new");
        std::fs::create_dir_all(&new).unwrap();
        std::fs::write(
            new.join("estimates.json"),
            r#"{"mean":{"point_estimate":250.0}}"#,
        )
        .unwrap();
        std::fs::write(
            new.join("benchmark.json"),
            r#"{"throughput":{"Elements":2}}"#,
        )
        .unwrap();
        let f = read_figure(&dir, "g", "f").unwrap();
        assert_eq!(f.ids_per_sec(), 8_000_000.0);
        assert_eq!(f.ns_per_id(), 125.0);
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(read_figure(&dir, "g", "f").is_err());
    }
}
