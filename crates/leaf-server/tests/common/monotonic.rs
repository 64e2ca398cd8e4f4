//! The monotonic mode on a cluster of three processes sharing one backend: clients on every
//! node record each request in a `leaf_testkit::history`, while the leader is killed (-9),
//! the next one frozen (SIGSTOP) past its lease and thawed, and the third stopped (SIGTERM,
//! a release). The history must hold: no ID twice, and a request invoked after another
//! completed got larger IDs, whichever nodes answered.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use leaf_testkit::history::{Recorder, check, describe};

use super::nodes::signal;
use super::{Server, http};

/// A window longer than the lease: a frozen leader's window outlives its lease when it thaws,
/// so that only its fence keeps it from answering.
pub(crate) const LONG_WINDOW: (&str, &str) = ("LEAF_MONOTONIC__WINDOW_MS", "10000");

/// What a run measured, for the closing note and BENCHMARKS.md.
#[derive(Debug)]
pub(crate) struct Figures {
    /// IDs checked.
    pub(crate) ids: usize,
    /// Requests answered with IDs, and refused (or cut off).
    pub(crate) requests: usize,
    pub(crate) failed: usize,
    /// From the leader's kill -9 to the first answer with IDs from the others.
    pub(crate) after_kill: Duration,
    /// From the leader's freeze to the first answer with IDs from the others.
    pub(crate) after_freeze: Duration,
    /// From the leader's SIGTERM to the first answer with IDs from the others.
    pub(crate) after_release: Duration,
    /// Requests a follower forwarded per call to the leader, over the run (coalescing).
    pub(crate) requests_per_call: f64,
}

fn ids_of(port: u16) -> Option<Vec<i64>> {
    let r = http(port, "GET", "/v1/monotonic?count=5").ok()?;
    (r.status == 200).then(|| r.ids())
}

/// The node that issues ranges itself (the range route is never forwarded).
fn leader(nodes: &[Server], up: &[bool]) -> usize {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        for (i, s) in nodes.iter().enumerate().filter(|(i, _)| up[*i]) {
            if http(s.port, "GET", "/v1/monotonic/range?count=1").is_ok_and(|r| r.status == 200) {
                return i;
            }
        }
        assert!(Instant::now() < deadline, "no node leads");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// How long until a node other than `gone` answers with IDs (recorded in `history`).
fn until_served(history: &Recorder, nodes: &[Server], up: &[bool], since: Instant) -> Duration {
    loop {
        for (i, s) in nodes.iter().enumerate().filter(|(i, _)| up[*i]) {
            let invoked = Instant::now();
            let got = ids_of(s.port);
            history.record(
                "probe",
                &format!("node {i}"),
                invoked,
                Instant::now(),
                got.clone().unwrap_or_default(),
            );
            if got.is_some() {
                return since.elapsed();
            }
        }
        assert!(
            since.elapsed() < Duration::from_secs(60),
            "no node served again"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs the scenario on three nodes made by `spawn(dir, n)`: a recycling workerId mode with
/// a short lease, each node's identity `127.0.0.1:{its port}` (where it serves, so that its
/// followers can forward to it). `lease` is that lease.
pub(crate) fn a_monotonic_cluster_keeps_order_through_a_kill_a_freeze_and_a_release(
    spawn: impl Fn(&Path, u32) -> Server,
    lease: Duration,
) -> Figures {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut nodes: Vec<Server> = Vec::new();
    for (n, dir) in dirs.iter().enumerate() {
        let mut s = spawn(dir.path(), n as u32 + 1);
        s.wait_for("/v1/monotonic", Duration::from_secs(60));
        nodes.push(s);
    }
    let mut up = vec![true; 3];
    let history = Arc::new(Recorder::new());
    let stop = Arc::new(AtomicBool::new(false));
    let ports: Vec<u16> = nodes.iter().map(|s| s.port).collect();
    let clients: Vec<_> = (0..4)
        .map(|c| {
            let (history, stop, ports) = (Arc::clone(&history), Arc::clone(&stop), ports.clone());
            std::thread::spawn(move || {
                let mut k = c;
                while !stop.load(Ordering::Relaxed) {
                    let i = k % ports.len();
                    k += 1;
                    let invoked = Instant::now();
                    let got = ids_of(ports[i]);
                    let failed = got.is_none();
                    history.record(
                        &format!("client {c}"),
                        &format!("node {i}"),
                        invoked,
                        Instant::now(),
                        got.unwrap_or_default(),
                    );
                    if failed {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));

    // The leader killed: another is elected once its lease ends.
    let first = leader(&nodes, &up);
    signal(&nodes[first], "-KILL");
    let killed = Instant::now();
    up[first] = false;
    let after_kill = until_served(&history, &nodes, &up, killed);
    std::thread::sleep(Duration::from_secs(2));

    // The next one frozen past its lease, a third elected, then the frozen one thawed: it must
    // not answer with IDs below the new leader's.
    let second = leader(&nodes, &up);
    signal(&nodes[second], "-STOP");
    let frozen = Instant::now();
    up[second] = false;
    let after_freeze = until_served(&history, &nodes, &up, frozen);
    let still = lease.saturating_sub(frozen.elapsed()) + Duration::from_secs(1);
    std::thread::sleep(still);
    signal(&nodes[second], "-CONT");
    up[second] = true;
    std::thread::sleep(Duration::from_secs(3));

    // The leader stopped: it releases the claim, and the next is elected within a renewal.
    let third = leader(&nodes, &up);
    let released = Instant::now();
    let stopping = nodes.remove(third);
    up.remove(third);
    let (status, log) = stopping.sigterm();
    assert!(status.success(), "{log}");
    let after_release = until_served(&history, &nodes, &up, released);
    std::thread::sleep(Duration::from_secs(2));

    // What the metrics say while the clients still run: one leader among the nodes left, and
    // the follower's requests went to it in calls, several requests to a call at times.
    let scrapes: Vec<String> = nodes
        .iter()
        .zip(&up)
        .filter(|(_, up)| **up)
        .map(|(s, _)| s.get("/metrics").body)
        .collect();
    let leaders: f64 = scrapes
        .iter()
        .map(|m| super::gauge(m, "leaf_monotonic_leader"))
        .sum();
    assert_eq!(leaders, 1.0, "{scrapes:?}");
    let calls: f64 = scrapes
        .iter()
        .map(|m| super::gauge(m, "leaf_monotonic_forwarded_calls_total"))
        .sum();
    let requests: f64 = scrapes
        .iter()
        .map(|m| super::gauge(m, "leaf_monotonic_forwarded_requests_total"))
        .sum();
    assert!(
        calls > 0.0 && requests >= calls,
        "{calls} calls, {requests} requests"
    );

    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    let ops = history.ops();
    let checked = check(&ops).unwrap_or_else(|v| {
        let logs: Vec<String> = nodes.iter().map(Server::log_text).collect();
        panic!("{}\n{}", describe(&ops, &v), logs.join("\n----\n"))
    });
    assert!(checked.requests > 100, "{checked:?}");
    Figures {
        ids: checked.ids,
        requests: checked.requests,
        failed: checked.failed,
        after_kill,
        after_freeze,
        after_release,
        requests_per_call: requests / calls,
    }
}

/// [`a_monotonic_cluster_keeps_order_through_a_kill_a_freeze_and_a_release`] off the async
/// runtime, its figures printed under `backend`'s name.
pub(crate) async fn run(
    backend: &str,
    spawn: impl Fn(&Path, u32) -> Server + Send + 'static,
    lease: Duration,
) {
    let figures = tokio::task::spawn_blocking(move || {
        a_monotonic_cluster_keeps_order_through_a_kill_a_freeze_and_a_release(spawn, lease)
    })
    .await
    .unwrap();
    eprintln!("{backend} monotonic cluster: {figures:?}");
}
