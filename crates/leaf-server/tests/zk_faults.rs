//! The server binary in the ZooKeeper modes under faults, on real ZooKeeper containers
//! (`leaf_testkit::provision`): a node frozen past its lease while another takes its worker id,
//! a three-member ensemble losing a member mid-run, ZooKeeper stopped while serving, and
//! ZooKeeper down at start-up. Every ID collected is checked for repeats.

#![cfg(all(feature = "zk-normal", feature = "zk-recycle"))]

mod common;

use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, Instant};

use common::nodes::{self, record, take};
use common::{Server, free_port, http, now_ms};
use leaf_testkit::provision::{self, Dedicated, ZOOKEEPER, ZkNamespace};

/// A short lease (above the generator's minimum of renew 1 s + margin 1 s + 1 s) and session,
/// so that expiry and recycling take seconds.
const TTL_MS: &str = "4000";

fn spawn(dir: &Path, n: u32, mode: &str, ns: &ZkNamespace, extra: &[(&str, &str)]) -> Server {
    let mut env = vec![
        ("LEAF_SNOWFLAKE__MODE", mode),
        ("LEAF_SNOWFLAKE__IP", "127.0.0.1"),
        ("LEAF_SNOWFLAKE__ZK__ADDRESS", ns.connect.as_str()),
        ("LEAF_SNOWFLAKE__ZK__ROOT", ns.root.as_str()),
        ("LEAF_SNOWFLAKE__ZK__SESSION_TIMEOUT_MS", TTL_MS),
        ("LEAF_SNOWFLAKE__ZK__RECYCLE_IDLE_TIMEOUT_MS", TTL_MS),
    ];
    env.extend_from_slice(extra);
    Server::spawn(dir, free_port(), n, &env)
}

/// The worker id of `id` in a layout with `sequence_bits` 12 and `worker_bits` bits.
fn worker_of(id: i64, worker_bits: u32) -> u64 {
    ((id as u64) >> 12) & ((1 << worker_bits) - 1)
}

async fn dedicated() -> Dedicated {
    provision::dedicated(&ZOOKEEPER)
        .await
        .unwrap_or_else(|e| panic!("no ZooKeeper container for the fault tests: {e}"))
}

/// A `zk_recycle` node frozen (SIGSTOP) past its lease while a second node takes its worker id
/// (a pool of one id: `worker_bits = 0`), then resumed (SIGCONT): the resumed node issues not
/// one ID while the other holds the id, and no ID repeats across both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_node_whose_id_was_recycled_issues_nothing_after_it_resumes() {
    let ns = provision::zk_namespace()
        .await
        .unwrap_or_else(|e| panic!("no ZooKeeper for the leaf-server tests: {e}"));
    let one_id = [("LEAF_SNOWFLAKE__WORKER_BITS", "0")];
    nodes::a_frozen_node_whose_id_was_taken_issues_nothing_after_it_resumes(|dir, n| {
        spawn(dir, n, "zk_recycle", &ns, &one_id)
    });
}

/// Two nodes per mode on a three-member ensemble; one member stops mid-run and starts again.
/// Both nodes keep (or resume) serving, and nothing repeats.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ensemble_losing_a_member_keeps_both_modes_serving_without_repeats() {
    let ensemble = provision::zk_ensemble()
        .await
        .unwrap_or_else(|e| panic!("no ZooKeeper ensemble for the fault tests: {e}"));
    for mode in ["zk_normal", "zk_recycle"] {
        let ns = provision::zk_namespace_on(ensemble.connect());
        let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let mut nodes = [
            spawn(da.path(), 1, mode, &ns, &[]),
            spawn(db.path(), 2, mode, &ns, &[]),
        ];
        for n in &mut nodes {
            n.wait_for("/api/snowflake/get/x", Duration::from_secs(60));
        }
        let mut seen = HashSet::new();
        let run = |secs: u64, seen: &mut HashSet<i64>| {
            let (mut ok, mut failed) = (0, 0);
            let deadline = Instant::now() + Duration::from_secs(secs);
            while Instant::now() < deadline {
                for (i, n) in nodes.iter().enumerate() {
                    match take(n, 20) {
                        Some(ids) => {
                            ok += 1;
                            record(seen, &ids, &format!("{mode} node {i}"));
                        }
                        None => failed += 1,
                    }
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            (ok, failed)
        };
        let (ok, failed) = run(2, &mut seen);
        assert_eq!(failed, 0, "{mode}: before the stop");
        assert!(ok > 0);
        ensemble.members()[0]
            .stop(Duration::from_secs(5))
            .await
            .unwrap();
        let (ok_down, _) = run(12, &mut seen);
        ensemble.members()[0].start().await.unwrap();
        let (_, _) = run(3, &mut seen);
        // Whatever the election cost, both nodes serve at the end.
        let deadline = Instant::now() + Duration::from_secs(30);
        for (i, n) in nodes.iter().enumerate() {
            loop {
                if let Some(ids) = take(n, 20) {
                    record(&mut seen, &ids, &format!("{mode} node {i}"));
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "{mode}: node {i} did not serve again"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        assert!(
            ok_down > 0,
            "{mode}: nothing served while a member was down"
        );
        for n in nodes {
            let (status, log) = n.sigterm();
            assert!(status.success(), "{mode}:\n{log}");
        }
    }
    ensemble.remove().await.unwrap();
}

/// ZooKeeper stopped while serving: `zk_normal` keeps serving (its cache file makes the mark
/// durable); `zk_recycle` stops issuing once it could not renew for its ttl (fencing) and
/// serves again after ZooKeeper is back. Nothing repeats.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_stopped_while_serving_normal_serves_recycle_fences_and_recovers() {
    let zk = dedicated().await;
    let connect = zk.endpoint().url.clone();
    let (nn, nr) = (
        provision::zk_namespace_on(&connect),
        provision::zk_namespace_on(&connect),
    );
    let (dn, dr) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut normal = spawn(dn.path(), 1, "zk_normal", &nn, &[]);
    let mut recycle = spawn(dr.path(), 2, "zk_recycle", &nr, &[]);
    normal.wait_for("/api/snowflake/get/x", Duration::from_secs(60));
    recycle.wait_for("/api/snowflake/get/x", Duration::from_secs(60));
    let mut seen = HashSet::new();
    record(&mut seen, &take(&normal, 100).unwrap(), "zk_normal");
    record(&mut seen, &take(&recycle, 100).unwrap(), "zk_recycle");

    zk.stop(Duration::from_secs(5)).await.unwrap();
    let (mut normal_failed, mut recycle_fenced_at) = (0, None);
    let stopped = Instant::now();
    while stopped.elapsed() < Duration::from_secs(8) {
        match take(&normal, 10) {
            Some(ids) => record(&mut seen, &ids, "zk_normal"),
            None => normal_failed += 1,
        }
        match take(&recycle, 10) {
            Some(ids) => record(&mut seen, &ids, "zk_recycle"),
            None => {
                recycle_fenced_at.get_or_insert(stopped.elapsed());
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        normal_failed, 0,
        "zk_normal stopped serving without ZooKeeper"
    );
    let fenced_at = recycle_fenced_at.expect("zk_recycle kept issuing past its ttl");
    assert!(
        fenced_at <= Duration::from_millis(4000),
        "zk_recycle fenced only after {fenced_at:?}, past its 4 s ttl"
    );
    assert!(
        take(&recycle, 1).is_none(),
        "zk_recycle issues while fenced"
    );
    assert_eq!(recycle.get("/readyz").status, 503);

    zk.start().await.unwrap();
    recycle.wait_for("/api/snowflake/get/x", Duration::from_secs(60));
    record(&mut seen, &take(&recycle, 100).unwrap(), "zk_recycle after");
    let Some(ids) = take(&normal, 100) else {
        let answer = http(normal.port, "GET", "/v1/snowflake?count=1")
            .map(|r| format!("{} {}", r.status, r.body));
        let (_, log) = normal.sigterm();
        panic!("zk_normal serves nothing once ZooKeeper is back: {answer:?}\n{log}");
    };
    record(&mut seen, &ids, "zk_normal after");
    for n in [normal, recycle] {
        let (status, log) = n.sigterm();
        assert!(status.success(), "{log}");
    }
    zk.remove().await.unwrap();
}

/// ZooKeeper down at start-up (`zk_normal`): a node that ran before starts from its cache file
/// with the same worker id when its clock is past the cached mark, and keeps snowflake mode off
/// (segment serving) when the cached mark is an hour ahead of its clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_down_at_start_up_starts_from_the_cache_file_after_the_time_check() {
    let zk = dedicated().await;
    let ns = provision::zk_namespace_on(&zk.endpoint().url);
    let dir = tempfile::tempdir().unwrap();
    let mut first = spawn(dir.path(), 1, "zk_normal", &ns, &[]);
    first.wait_for("/api/snowflake/get/x", Duration::from_secs(60));
    let id = take(&first, 1).unwrap()[0];
    let worker = worker_of(id, 10);
    let (status, log) = first.sigterm();
    assert!(status.success(), "{log}");
    zk.stop(Duration::from_secs(5)).await.unwrap();

    // The clock is past the cached mark: the same worker id, at once.
    let mut again = spawn(dir.path(), 2, "zk_normal", &ns, &[]);
    again.wait_for("/api/snowflake/get/x", Duration::from_secs(60));
    let later = take(&again, 1).unwrap()[0];
    assert_eq!(worker_of(later, 10), worker, "the cached worker id");
    assert!(later > id);
    let (status, log) = again.sigterm();
    assert!(status.success(), "{log}");

    // The cached mark an hour ahead: snowflake stays off, segment serves.
    let cache = dir
        .path()
        .join("leaf-data")
        .join("worker-zk_normal-leaf.properties");
    let text = std::fs::read_to_string(&cache).unwrap();
    let ahead = now_ms() + 3_600_000;
    let edited: String = text
        .lines()
        .map(|l| {
            if l.starts_with("markMs=") {
                format!("markMs={ahead}\n")
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    assert_ne!(edited, text, "the cache file has a markMs line:\n{text}");
    std::fs::write(&cache, edited).unwrap();
    let mut behind = spawn(dir.path(), 3, "zk_normal", &ns, &[]);
    behind.wait_for(
        "/api/segment/get/leaf-segment-test",
        Duration::from_secs(60),
    );
    let r = behind.get("/api/snowflake/get/x");
    assert_eq!(r.status, 503, "{}", r.body);
    let ready = behind.get("/readyz");
    assert_eq!(ready.status, 503, "{}", ready.body);
    assert_eq!(ready.json()["snowflake"]["ready"], false, "{}", ready.body);
    let (status, log) = behind.sigterm();
    assert!(status.success(), "{log}");
    zk.remove().await.unwrap();
}
