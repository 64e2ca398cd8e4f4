//! Scenarios and checks shared by the tests of the binary on shared backends (ZooKeeper, etcd,
//! Redis, PostgreSQL): IDs collected and checked for repeats, signals, two servers sharing one
//! store, the backend stopped while a node serves, and a node frozen past its lease while
//! another takes its worker id.

#![allow(
    dead_code,
    reason = "each backend's test binary uses the part that fits its backend"
)]

use std::collections::HashSet;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use leaf_testkit::provision::Dedicated;

use super::{Server, http};

/// Snowflake IDs from one `count` request, or `None` for any non-200 answer or a refused
/// connection.
pub(crate) fn take(s: &Server, count: u32) -> Option<Vec<i64>> {
    let r = http(s.port, "GET", &format!("/v1/snowflake?count={count}")).ok()?;
    (r.status == 200).then(|| r.ids())
}

/// Adds `ids` to `seen`, failing on the first repeat.
pub(crate) fn record(seen: &mut HashSet<i64>, ids: &[i64], who: &str) {
    for id in ids {
        assert!(
            seen.insert(*id),
            "{who} issued {id}, which was issued before"
        );
    }
}

/// The worker id of the next snowflake ID `s` issues.
pub(crate) fn worker_id(s: &Server) -> u64 {
    let id = s.get("/v1/snowflake").ids()[0];
    let decoded = s.get(&format!("/v1/snowflake/{id}/decode")).json();
    decoded["worker_id"].as_u64().unwrap()
}

/// Sends `sig` (`-STOP`, `-CONT`) to the server's process.
pub(crate) fn signal(s: &Server, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &s.child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig}");
}

/// Two running servers on one store: batches of `tag` taken in turns never repeat (a 503 of a
/// batch that reached past a segment still loading is retried, as a Leaf client does), their
/// worker ids differ, and both stop cleanly on SIGTERM, giving their worker ids up.
pub(crate) fn two_servers_share_segments_with_distinct_worker_ids(a: Server, b: Server, tag: &str) {
    let mut seen = HashSet::new();
    for round in 0..10 {
        for (who, s) in [("a", &a), ("b", &b)] {
            let r = s.get(&format!("/v1/segment/{tag}?count=1500"));
            if r.status == 503 {
                continue;
            }
            for id in r.ids() {
                assert!(seen.insert(id), "round {round}: {who} repeated {id}");
            }
        }
    }
    assert!(seen.len() >= 15_000, "only {} ids were served", seen.len());
    assert_ne!(worker_id(&a), worker_id(&b));
    for s in [a, b] {
        let (status, log) = s.sigterm();
        assert!(status.success(), "{log}");
        assert!(log.contains("worker id released"), "{log}");
    }
}

/// A node frozen (SIGSTOP) past its lease while a second node takes its worker id, then resumed
/// (SIGCONT): the resumed node issues not one ID while the other holds the id, and no ID repeats
/// across both. `spawn(dir, n)` starts node `n` in a recycling mode with a pool of one worker id
/// (`worker_bits = 0`) and a lease of a few seconds.
pub(crate) fn a_frozen_node_whose_id_was_taken_issues_nothing_after_it_resumes(
    spawn: impl Fn(&Path, u32) -> Server,
) {
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut a = spawn(da.path(), 1);
    a.wait_for("/api/snowflake/get/x", Duration::from_secs(60));
    let mut seen = HashSet::new();
    for _ in 0..20 {
        record(&mut seen, &take(&a, 100).expect("a serves"), "a");
    }
    let before_freeze = seen.len();

    signal(&a, "-STOP");
    // b cannot claim the only id until a's lease has run out.
    let mut b = spawn(db.path(), 2);
    b.wait_for("/api/snowflake/get/x", Duration::from_secs(60));
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        record(&mut seen, &take(&b, 100).expect("b serves"), "b");
    }

    signal(&a, "-CONT");
    let (mut a_ids, mut a_refused) = (0, 0);
    let deadline = Instant::now() + Duration::from_secs(6);
    while Instant::now() < deadline {
        match take(&a, 10) {
            Some(ids) => {
                a_ids += ids.len();
                record(&mut seen, &ids, "a after it resumed");
            }
            None => a_refused += 1,
        }
        if let Some(ids) = take(&b, 10) {
            record(&mut seen, &ids, "b");
        }
    }
    assert_eq!(
        a_ids, 0,
        "the resumed node issued IDs with worker id 0 while the other node held it"
    );
    assert!(a_refused > 0, "the resumed node was asked");
    assert!(seen.len() > before_freeze, "b issued IDs");
    let ready = a.get("/readyz");
    assert_eq!(
        ready.status, 503,
        "the resumed node is not ready: {}",
        ready.body
    );
    let (status, log) = b.sigterm();
    assert!(status.success(), "{log}");
}

/// What snowflake mode does while its workerId mode's server is down.
#[derive(Clone, Copy, Debug)]
pub(crate) enum WhileDown {
    /// A recycling mode: it stops issuing (503, code -4) within the lease's TTL.
    FencesWithin(Duration),
    /// A mode that never recycles ids (`mysql`, `postgres`): it goes on issuing, its marks in
    /// the cache file, for as long as the check runs.
    KeepsServingFor(Duration),
}

/// The backend of a running node `s` (store and workerId mode on one server) stopped while it
/// serves: segment IDs of `tag` keep coming from the buffers, snowflake does as `snowflake`
/// says, and both serve again once the backend is back. Nothing repeats.
pub(crate) async fn backend_stopped_while_serving(
    s: &Server,
    backend: &Dedicated,
    tag: &str,
    snowflake: WhileDown,
) {
    let mut snowflakes = HashSet::new();
    let mut segments = HashSet::new();
    record(&mut snowflakes, &take(s, 100).expect("serves"), "before");
    // The seed tag's step of 2000: a handful of IDs leaves the rest of two buffers.
    record(
        &mut segments,
        &s.get(&format!("/v1/segment/{tag}?count=10")).ids(),
        "segment before",
    );

    backend.stop(Duration::from_secs(5)).await.unwrap();
    let stopped = Instant::now();
    let watch = match snowflake {
        WhileDown::FencesWithin(ttl) => ttl * 2,
        WhileDown::KeepsServingFor(d) => d,
    };
    let mut fenced_after = None;
    while stopped.elapsed() < watch {
        let r = s.get(&format!("/api/segment/get/{tag}"));
        assert_eq!(r.status, 200, "segment serves from its buffers: {}", r.body);
        record(
            &mut segments,
            &[r.body.trim().parse().unwrap()],
            "segment while the backend was down",
        );
        match take(s, 10) {
            Some(ids) => record(&mut snowflakes, &ids, "while the backend was down"),
            None => {
                let r = s.get("/v1/snowflake");
                assert!(
                    matches!(snowflake, WhileDown::FencesWithin(_)),
                    "snowflake stopped while the backend was down, after {:?}: {} {}",
                    stopped.elapsed(),
                    r.status,
                    r.body
                );
                assert_eq!(r.status, 503, "{}", r.body);
                assert_eq!(r.json()["code"], -4, "{}", r.body);
                if fenced_after.is_none() {
                    // What LeafWorkerLeaseInvalid and LeafNotReady read, while segment mode
                    // stays ready on its buffers.
                    let scrape = s.get("/metrics").body;
                    assert_eq!(super::gauge(&scrape, "leaf_worker_lease_valid"), 0.0);
                    assert_eq!(super::gauge(&scrape, "leaf_snowflake_ready"), 0.0);
                    assert_eq!(super::gauge(&scrape, "leaf_segment_ready"), 1.0);
                }
                fenced_after.get_or_insert(stopped.elapsed());
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    if let WhileDown::FencesWithin(ttl) = snowflake {
        let fenced_after = fenced_after.expect("snowflake stopped while the backend was down");
        assert!(
            fenced_after <= ttl,
            "fenced within the lease's TTL, after {fenced_after:?}"
        );
    }

    backend.start().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(ids) = take(s, 100) {
            record(&mut snowflakes, &ids, "after the backend came back");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "snowflake did not resume:\n{}",
            s.log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
