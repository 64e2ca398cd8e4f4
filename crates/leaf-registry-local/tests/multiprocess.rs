//! Several OS processes: two allocators on one SQLite file, two registries on one cache
//! directory, and a renewing process killed with SIGKILL.
//!
//! Each test re-runs this test binary as its child (`--exact` on the test's own name), with a
//! `LEAFTEST_` variable telling the copy to play the child's part.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use leaf_core::{
    AcquireRequest, CacheFile, Error, NewTag, NodeIdentity, Renewal, SegmentStore, Tag,
    WorkerIdRegistry,
};
use leaf_registry_local::{LocalClaims, LocalRegistry, LocalRegistryConfig, SqliteStore};
use leaf_testkit::store_cases::assert_disjoint_and_contiguous;

const ALLOC_ENV: &str = "LEAFTEST_ALLOC_CHILD_DB";
const HOLD_ENV: &str = "LEAFTEST_HOLD_CHILD_DIR";
const RENEW_ENV: &str = "LEAFTEST_RENEW_CHILD_DIR";

/// This binary, running only `test` with `var` set to `value`.
fn spawn_child(test: &str, var: &str, value: &Path) -> Child {
    Command::new(std::env::current_exe().expect("test binary"))
        .args([
            test,
            "--exact",
            "--nocapture",
            "--test-threads=1",
            "--quiet",
        ])
        .env(var, value)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn child")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

fn request(worker_bits_max: u64) -> AcquireRequest {
    AcquireRequest::new(
        NodeIdentity::new("10.0.0.1", 8080),
        worker_bits_max,
        1_700_000_000_000,
    )
}

fn registry(dir: &Path) -> LocalRegistry {
    LocalClaims::new(
        LocalRegistryConfig {
            worker_id: 7,
            ..Default::default()
        },
        "leaf",
    )
    .registry(dir)
}

/// The values of the lines `KEY value...` a child printed (libtest's own lines are skipped).
fn values(output: &str, key: &str) -> Vec<Vec<i64>> {
    output
        .lines()
        .filter_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
        .map(|rest| {
            rest.split(' ')
                .map(|v| v.parse().expect("a number"))
                .collect()
        })
        .collect()
}

const ALLOC_TASKS: usize = 2;
const ALLOC_EACH: usize = 60;
const ALLOC_STEP: i64 = 7;

#[test]
fn two_processes_on_one_file_never_share_ids() {
    if let Some(db) = std::env::var_os(ALLOC_ENV) {
        return alloc_child(Path::new(&db));
    }
    let dir = tempfile::tempdir().unwrap();
    // Neither the file nor the table exists yet: the two children race to create both.
    let db = dir.path().join("data/leaf.db");
    let children: Vec<Child> = (0..2)
        .map(|_| spawn_child("two_processes_on_one_file_never_share_ids", ALLOC_ENV, &db))
        .collect();
    let mut ranges = Vec::new();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "a child failed: {:?}", out.status);
        let got = values(&String::from_utf8_lossy(&out.stdout), "RANGE");
        assert_eq!(got.len(), ALLOC_TASKS * ALLOC_EACH, "one child's ranges");
        ranges.extend(got.into_iter().map(|v| v[0]..v[1]));
    }
    let total = (2 * ALLOC_TASKS * ALLOC_EACH) as i64;
    assert_disjoint_and_contiguous(&ranges, 1, 1 + total * ALLOC_STEP);
    runtime().block_on(async {
        let store = SqliteStore::connect_url(&format!("sqlite://{}", db.display()))
            .await
            .unwrap();
        let row = store.get(&Tag::new("mp").unwrap()).await.unwrap().unwrap();
        assert_eq!(row.max_id, 1 + total * ALLOC_STEP);
    });
}

fn alloc_child(db: &Path) {
    runtime().block_on(async {
        let store = SqliteStore::connect_url(&format!("sqlite://{}", db.display()))
            .await
            .expect("child connects");
        let tag = Tag::new("mp").unwrap();
        let new = NewTag {
            step: ALLOC_STEP,
            ..NewTag::new(tag.clone())
        };
        match store.create(&new).await {
            Ok(_) | Err(Error::AlreadyExists(_)) => {}
            Err(e) => panic!("child creates the tag: {e}"),
        }
        let store = std::sync::Arc::new(store);
        let tasks: Vec<_> = (0..ALLOC_TASKS)
            .map(|_| {
                let (store, tag) = (store.clone(), tag.clone());
                tokio::spawn(async move {
                    for _ in 0..ALLOC_EACH {
                        let r = store.allocate(&tag, None).await.expect("allocate").range();
                        println!("RANGE {} {}", r.start, r.end);
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("allocating task");
        }
    });
}

#[test]
fn a_second_process_with_the_same_cache_dir_is_refused() {
    if let Some(dir) = std::env::var_os(HOLD_ENV) {
        return hold_child(Path::new(&dir));
    }
    let dir = tempfile::tempdir().unwrap();
    let (mut child, lines) = spawn_holder(dir.path());
    runtime().block_on(async {
        let e = registry(dir.path())
            .acquire(&request(1023))
            .await
            .unwrap_err();
        assert!(
            matches!(&e, Error::Config(m) if m.contains("in use by another process")),
            "{e}"
        );
    });
    // Closing its stdin tells the child to release and exit.
    drop(child.stdin.take());
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(child.wait().unwrap().success());
    assert!(rest.iter().any(|l| l == "RELEASED"), "{rest:?}");
    runtime().block_on(async {
        let r = registry(dir.path());
        let lease = r
            .acquire(&request(1023))
            .await
            .expect("free after the release");
        assert_eq!(lease.prev_mark_ms, Some(4242));
    });
}

fn hold_child(dir: &Path) {
    runtime().block_on(async {
        let r = registry(dir);
        let lease = r.acquire(&request(1023)).await.expect("child acquires");
        println!("HELD");
        let mut buf = String::new();
        // Blocks until the parent closes our stdin.
        while std::io::stdin()
            .read_line(&mut buf)
            .map(|n| n > 0)
            .unwrap_or(false)
        {}
        r.release(&lease, 4242).await.expect("child releases");
        println!("RELEASED");
        std::io::stdout().flush().unwrap();
    });
}

#[test]
fn a_killed_renewer_never_leaves_an_older_or_torn_cache_file() {
    if let Some(dir) = std::env::var_os(RENEW_ENV) {
        return renew_child(Path::new(&dir));
    }
    let dir = tempfile::tempdir().unwrap();
    let mut last_printed: Option<u64> = None;
    for round in 0..6 {
        let mut child = spawn_child(
            "a_killed_renewer_never_leaves_an_older_or_torn_cache_file",
            RENEW_ENV,
            dir.path(),
        );
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut seen = Vec::new();
        // Kill only once the child is renewing, then at a random moment of its loop.
        loop {
            let line = rx
                .recv_timeout(Duration::from_secs(20))
                .expect("child output");
            let first_mark = line.starts_with("MARK");
            seen.push(line);
            if first_mark {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(fastrand::u64(1..60)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        reader.join().unwrap();
        seen.extend(rx.try_iter());
        let text = seen.join("\n");

        let prev = values(&text, "PREV")[0][0];
        if let Some(last) = last_printed {
            assert!(
                prev >= last as i64,
                "round {round}: restarted below {last}: {prev}"
            );
        }
        let marks = values(&text, "MARK");
        let last = marks.last().expect("at least one mark")[0] as u64;

        let cache = CacheFile::open(dir.path(), "worker-leaf").expect("the lock died with it");
        let record = cache
            .read()
            .unwrap_or_else(|e| panic!("round {round}: unreadable cache file: {e}"))
            .expect("a cache file");
        assert_eq!(record.worker_id, 7);
        // The file holds the last printed mark, or the one renewed just before the kill.
        assert!(
            record.mark_ms == last || record.mark_ms == last + 1,
            "round {round}: file has {}, last printed {last}",
            record.mark_ms
        );
        last_printed = Some(last);
    }
}

fn renew_child(dir: &Path) {
    runtime().block_on(async {
        let r = registry(dir);
        let lease = r.acquire(&request(1023)).await.expect("child acquires");
        let prev = lease.prev_mark_ms.unwrap_or(0);
        println!("PREV {prev}");
        let mut mark = prev;
        loop {
            mark += 1;
            assert_eq!(r.renew(&lease, mark).await.expect("renew"), Renewal::OK);
            println!("MARK {mark}");
        }
    });
}

#[test]
fn a_killed_holder_leaves_no_stale_lock() {
    // The lock goes with its process, however it ends: a crash never needs a manual clean-up.
    let dir = tempfile::tempdir().unwrap();
    let (mut child, _lines) = spawn_holder(dir.path());
    child.kill().unwrap();
    child.wait().unwrap();
    runtime().block_on(async {
        let r = registry(dir.path());
        let lease = r
            .acquire(&request(1023))
            .await
            .expect("the dead holder's lock is gone");
        assert_eq!(lease.worker_id, 7);
    });
}

/// Starts a child process that holds the local registry on `dir`, and waits until it does.
/// Returns the child and the rest of its output.
fn spawn_holder(dir: &Path) -> (Child, std::io::Lines<BufReader<ChildStdout>>) {
    let mut child = spawn_child(
        "a_second_process_with_the_same_cache_dir_is_refused",
        HOLD_ENV,
        dir,
    );
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let held = lines.by_ref().map_while(Result::ok).any(|l| l == "HELD");
    assert!(held, "the child never held the registry");
    (child, lines)
}
