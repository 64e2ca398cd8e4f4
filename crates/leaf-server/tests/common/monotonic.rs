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
    let Cluster {
        _dirs,
        mut nodes,
        history,
        stop,
        clients,
    } = Cluster::start(|dir, n| spawn(dir, n));
    let mut up = vec![true; 3];

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
    assert!(
        after_release < lease,
        "{after_release:?}: a released claim is taken up without waiting for its lease"
    );
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
        calls > 0.0 && requests > calls,
        "{calls} calls, {requests} requests: nothing was coalesced"
    );

    let (_, checked) = stop_and_check(&stop, clients, &history, &nodes);
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

/// The network faults, on three nodes each reaching the backend through a proxy of its own
/// (`proxies[i]` for node `i`, made by `spawn(dir, n, proxy_address)`): the leader's link
/// stalled (its renewals held, then delivered late when the link comes back), the next
/// leader's link cut (connections reset) and restored, then every node's link cut at once (the
/// backend unreachable) and restored. Clients on every node record a history that must hold,
/// and while every link is cut no node answers with IDs.
pub(crate) fn a_monotonic_cluster_keeps_order_through_partitions(
    spawn: impl Fn(&Path, u32, &str) -> Server,
    proxies: &[leaf_testkit::proxy::Proxy],
    lease: Duration,
) -> Figures {
    use leaf_testkit::proxy::Link;

    let Cluster {
        _dirs,
        nodes,
        history,
        stop,
        clients,
    } = Cluster::start(|dir, n| spawn(dir, n, &proxies[n as usize - 1].address));
    let all = vec![true; 3];

    // The leader's link stalls: its renewals hang, it fences, another is elected; the link
    // comes back and the held renewal arrives late, after the claim changed hands.
    let first = leader(&nodes, &all);
    proxies[first].set_link(Link::Stalled);
    let stalled = Instant::now();
    let others: Vec<bool> = (0..3).map(|i| i != first).collect();
    // Served all along by the others, through the leader until its fence: the gaps are read
    // from the history below.
    until_served(&history, &nodes, &others, stalled);
    // Past the lease: another node is elected while the old leader's renewal is held.
    std::thread::sleep(lease + Duration::from_secs(1));
    proxies[first].set_link(Link::Up);
    std::thread::sleep(lease);

    // The next leader's connections are reset and refused, then allowed again.
    let second = leader(&nodes, &all);
    assert_ne!(second, first, "the stalled leader stepped down");
    proxies[second].set_link(Link::Cut);
    let cut = Instant::now();
    let others: Vec<bool> = (0..3).map(|i| i != second).collect();
    until_served(&history, &nodes, &others, cut);
    std::thread::sleep(lease + Duration::from_secs(1));
    proxies[second].set_link(Link::Up);
    std::thread::sleep(Duration::from_secs(2));
    assert_ne!(
        leader(&nodes, &all),
        second,
        "the cut-off leader stepped down"
    );

    // The backend unreachable from every node: within a lease nobody answers with IDs; once
    // it is back, a leader serves again.
    for p in proxies {
        p.set_link(Link::Cut);
    }
    let unreachable = Instant::now();
    std::thread::sleep(lease + Duration::from_secs(1));
    let quiet_from = Instant::now();
    std::thread::sleep(Duration::from_secs(1));
    let quiet_to = Instant::now();
    for p in proxies {
        p.set_link(Link::Up);
    }
    let back = Instant::now();
    let after_outage = until_served(&history, &nodes, &all, back);
    std::thread::sleep(Duration::from_secs(2));
    eprintln!(
        "backend unreachable for {:?}; served again {after_outage:?} after it came back",
        back - unreachable
    );

    let (ops, checked) = stop_and_check(&stop, clients, &history, &nodes);
    // While no node could reach the backend (past a lease), no request got IDs.
    let start = history.start();
    let served_while_cut = ops.iter().filter(|op| {
        !op.ids.is_empty() && start + op.invoked >= quiet_from && start + op.completed <= quiet_to
    });
    assert_eq!(
        served_while_cut.count(),
        0,
        "IDs were issued with the backend unreachable"
    );
    // How long the clients went without IDs after each fault: the failovers.
    let gap = |from: Instant| longest_gap(&ops, start, from, from + lease + Duration::from_secs(3));
    Figures {
        ids: checked.ids,
        requests: checked.requests,
        failed: checked.failed,
        after_kill: gap(cut),
        after_freeze: gap(stalled),
        after_release: after_outage,
        requests_per_call: 0.0,
    }
}

/// Four client threads asking the nodes of `ports` in turn until `stop`, recording each
/// request in `history`.
fn spawn_clients(
    history: &Arc<Recorder>,
    stop: &Arc<AtomicBool>,
    ports: &[u16],
) -> Vec<std::thread::JoinHandle<()>> {
    (0..4)
        .map(|c| {
            let (history, stop, ports) = (Arc::clone(history), Arc::clone(stop), ports.to_vec());
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
        .collect()
}

/// [`a_monotonic_cluster_keeps_order_through_partitions`] with three proxies to the backend at
/// `target` (`host:port`), off the async runtime (which runs the proxies).
pub(crate) async fn run_partitions(
    backend: &str,
    target: &str,
    spawn: impl Fn(&Path, u32, &str) -> Server + Send + 'static,
    lease: Duration,
) {
    let mut proxies = Vec::new();
    for _ in 0..3 {
        proxies.push(leaf_testkit::proxy::Proxy::start(target).await);
    }
    let (figures, proxies) = tokio::task::spawn_blocking(move || {
        let f = a_monotonic_cluster_keeps_order_through_partitions(spawn, &proxies, lease);
        (f, proxies)
    })
    .await
    .unwrap();
    drop(proxies);
    eprintln!(
        "{backend} monotonic partitions: {} IDs in {} requests ({} refused); longest time \
         without IDs {:?} after the leader's link stalled, {:?} after the next one's was cut; \
         served again {:?} after the backend came back",
        figures.ids,
        figures.requests,
        figures.failed,
        figures.after_freeze,
        figures.after_kill,
        figures.after_release
    );
}

/// The longest time between `from` and `to` in which no request of `ops` (times counted from
/// `start`) completed with IDs.
fn longest_gap(
    ops: &[leaf_testkit::history::Op],
    start: Instant,
    from: Instant,
    to: Instant,
) -> Duration {
    let mut done: Vec<Instant> = ops
        .iter()
        .filter(|op| !op.ids.is_empty())
        .map(|op| start + op.completed)
        .filter(|t| *t >= from && *t <= to)
        .collect();
    done.sort();
    let mut last = from;
    let mut longest = Duration::ZERO;
    for t in done.into_iter().chain([to]) {
        longest = longest.max(t - last);
        last = t;
    }
    longest
}

/// Three nodes serving, clients asking them in turn: what both scenarios start from.
struct Cluster {
    _dirs: Vec<tempfile::TempDir>,
    nodes: Vec<Server>,
    history: Arc<Recorder>,
    stop: Arc<AtomicBool>,
    clients: Vec<std::thread::JoinHandle<()>>,
}

impl Cluster {
    /// Starts nodes 1 to 3 with `spawn(dir, n)`, waits until each answers `/v1/monotonic`,
    /// starts the clients and lets them run for two seconds.
    fn start(spawn: impl Fn(&Path, u32) -> Server) -> Cluster {
        let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
        let mut nodes: Vec<Server> = Vec::new();
        for (n, dir) in dirs.iter().enumerate() {
            let mut s = spawn(dir.path(), n as u32 + 1);
            s.wait_for("/v1/monotonic", Duration::from_secs(60));
            nodes.push(s);
        }
        let history = Arc::new(Recorder::new());
        let stop = Arc::new(AtomicBool::new(false));
        let ports: Vec<u16> = nodes.iter().map(|s| s.port).collect();
        let clients = spawn_clients(&history, &stop, &ports);
        std::thread::sleep(Duration::from_secs(2));
        Cluster {
            _dirs: dirs,
            nodes,
            history,
            stop,
            clients,
        }
    }
}

/// Stops the clients and checks their history: the requests and what the check counted,
/// failing with the violations and the nodes' logs.
fn stop_and_check(
    stop: &AtomicBool,
    clients: Vec<std::thread::JoinHandle<()>>,
    history: &Recorder,
    nodes: &[Server],
) -> (
    Vec<leaf_testkit::history::Op>,
    leaf_testkit::history::Checked,
) {
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    let ops = history.ops();
    let checked = check(&ops).unwrap_or_else(|v| {
        let logs: Vec<String> = nodes.iter().map(Server::log_text).collect();
        panic!("{}\n{}", describe(&ops, &v), logs.join("\n----\n"))
    });
    (ops, checked)
}

/// How far behind the others the clock of [`a_new_leader_whose_clock_is_behind_starts_above_the_old_one`]'s
/// second node is: more than the lease plus the window, so that its clock at the takeover is
/// still below the old leader's last IDs and only the confirmed window keeps the order.
pub(crate) const BEHIND: Duration = Duration::from_secs(8);

/// The environment that sets a process's clock `BEHIND` the machine's.
pub(crate) fn clock_behind() -> Vec<(&'static str, String)> {
    super::clock_set_back(BEHIND)
}

/// A new leader whose wall clock is [`BEHIND`] the old one's, across processes: node 0 leads
/// and issues; node 1, its clock set back by libfaketime (checked from its snowflake IDs),
/// follows; node 0 is killed -9; node 1 takes over after the lease. Every request's IDs, on
/// both nodes, must be in real-time order: node 1's clock alone would issue below node 0's
/// last IDs, so only the window read with the claim keeps them above. `spawn(dir, n, env)`
/// starts node `n` with `env` added (a lease of `lease` and
/// `snowflake.max_startup_wait_ms` above the clocks' distance plus the window, so that the
/// claim is taken up, not given back as too far ahead).
pub(crate) fn a_new_leader_whose_clock_is_behind_starts_above_the_old_one(
    spawn: impl Fn(&Path, u32, &[(&str, String)]) -> Server,
    lease: Duration,
) -> usize {
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut a = spawn(da.path(), 0, &[]);
    a.wait_for("/v1/monotonic/range", Duration::from_secs(60));
    let mut b = spawn(db.path(), 1, &clock_behind());
    b.wait_for("/readyz", Duration::from_secs(60));
    // The preload took: node 1's snowflake IDs carry a time BEHIND the machine's.
    let sf = b.get("/v1/snowflake").ids()[0];
    let decoded = b.get(&format!("/v1/snowflake/{sf}/decode")).json();
    let at = decoded["timestamp_ms"].as_u64().unwrap();
    let lag = super::now_ms().saturating_sub(at);
    assert!(
        lag + 1000 >= BEHIND.as_millis() as u64,
        "node 1's clock is only {lag} ms behind: libfaketime did not take"
    );
    let history = Recorder::new();
    let ask = |node: usize, port: u16, client: &str| {
        let invoked = Instant::now();
        let got = ids_of(port);
        history.record(
            client,
            &format!("node {node}"),
            invoked,
            Instant::now(),
            got.clone().unwrap_or_default(),
        );
        got.is_some()
    };
    // Both nodes serve from node 0 for a second.
    let until = Instant::now() + Duration::from_secs(1);
    while Instant::now() < until {
        assert!(ask(0, a.port, "client"), "node 0 did not serve");
        assert!(ask(1, b.port, "client"), "node 1 did not forward");
    }
    signal(&a, "-KILL");
    let _ = a.child.wait();
    let killed = Instant::now();
    while !ask(1, b.port, "client") {
        assert!(
            killed.elapsed() < lease + Duration::from_secs(10),
            "node 1 never led:\n{}",
            b.log_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    for _ in 0..200 {
        assert!(ask(1, b.port, "client"), "node 1 stopped serving");
    }
    let ops = history.ops();
    match check(&ops) {
        Ok(checked) => checked.ids,
        Err(v) => panic!("{}\nnode 1:\n{}", describe(&ops, &v), b.log_text()),
    }
}
