//! The server as an orchestrator runs it: `leaf-server` containers of the image
//! (`LEAFTEST_SERVER_IMAGE`, default `leaf-server:local` from `cargo xtask image`) over a
//! three-member ZooKeeper ensemble (`zk_recycle`), and over a three-member etcd cluster
//! (`etcd`), on one Docker network, each node finding its own container address. Clients on
//! the host take snowflake IDs from every node through its published port while the test
//! kills a node and starts it again on its volume, pauses one past its lease until another node
//! holds its worker id, and stops a coordination member mid-run. Zero duplicate IDs, zero IDs of
//! one worker id from two nodes over overlapping time, every node ready at the end. On etcd,
//! which is also a segment store, the clients take segment IDs of one tag from every node too,
//! through the same faults: zero duplicates among them.
//!
//! Run by `cargo xtask conformance --backend cluster` (part of `cargo xtask ci`), which builds
//! the images it needs.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leaf_testkit::provision::{Coordination, Dedicated, LeafCluster, leaf_cluster};

/// The worker bits of the layout: a pool of four ids, so that three nodes and a spare fill it
/// and a fifth node can only take the id of the one that froze.
const WORKER_BITS: u32 = 2;
const SEQUENCE_BITS: u32 = 12;
/// The lease TTL (ZooKeeper's recycle timeout and session timeout, etcd's lease).
const TTL_MS: u64 = 4000;
/// IDs per request.
const BATCH: usize = 20;
/// The segment tag of the etcd run (the server's seed tag, created at its start).
const TAG: &str = "leaf-segment-test";

/// One answer of one node.
struct Sample {
    node: usize,
    /// From the segment route (else the snowflake route).
    segment: bool,
    status: u16,
    ids: Vec<i64>,
    code: Option<i64>,
}

/// Requests IDs from every node added to it until stopped.
#[derive(Clone)]
struct Clients {
    samples: Arc<Mutex<Vec<Sample>>>,
    stop: Arc<AtomicBool>,
    /// Segment IDs too, every other request.
    segment: bool,
}

impl Clients {
    fn new(segment: bool) -> Self {
        Clients {
            samples: Arc::default(),
            stop: Arc::default(),
            segment,
        }
    }

    /// A client looping on node `node` at `addr` until [`stop`](Self::stop).
    fn watch(&self, node: usize, addr: String) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move {
            let mut segment = false;
            while !this.stop.load(Ordering::Relaxed) {
                segment = this.segment && !segment;
                let path = if segment {
                    format!("/v1/segment/{TAG}?count={BATCH}")
                } else {
                    format!("/v1/snowflake?count={BATCH}")
                };
                let sample = match leaf_testkit::provision::http_get(&addr, &path).await {
                    Ok((status, body)) => parse(node, segment, status, &body),
                    // A killed or paused node: no answer, nothing issued.
                    Err(_) => Sample {
                        node,
                        segment,
                        status: 0,
                        ids: Vec::new(),
                        code: None,
                    },
                };
                let pause = if sample.status == 200 { 5 } else { 50 };
                this.samples.lock().unwrap().push(sample);
                tokio::time::sleep(Duration::from_millis(pause)).await;
            }
        })
    }

    /// The nodes that issued IDs (segment IDs when `segment`) since sample `from`.
    fn serving(&self, from: usize, segment: bool) -> HashSet<usize> {
        let samples = self.samples.lock().unwrap();
        samples[from..]
            .iter()
            .filter(|s| s.segment == segment && !s.ids.is_empty())
            .map(|s| s.node)
            .collect()
    }

    /// Node `node`'s snowflake IDs so far.
    fn ids_of(&self, node: usize) -> Vec<i64> {
        let samples = self.samples.lock().unwrap();
        samples
            .iter()
            .filter(|s| s.node == node && !s.segment)
            .flat_map(|s| s.ids.iter().copied())
            .collect()
    }
}

fn parse(node: usize, segment: bool, status: u16, body: &str) -> Sample {
    let json: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
    let ids = json["ids"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_i64()).collect())
        .unwrap_or_default();
    if status == 200 {
        assert_eq!(
            json["ids"].as_array().map(Vec::len),
            Some(BATCH),
            "node {node}: {body}"
        );
    }
    Sample {
        node,
        segment,
        status,
        ids,
        code: json["code"].as_i64(),
    }
}

fn worker_of(id: i64) -> u64 {
    ((id as u64) >> SEQUENCE_BITS) & ((1 << WORKER_BITS) - 1)
}

fn timestamp_of(id: i64) -> u64 {
    (id as u64) >> (SEQUENCE_BITS + WORKER_BITS)
}

/// Waits until node `i` answers `/readyz` 200.
async fn wait_ready(cluster: &LeafCluster, i: usize, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        if let Ok((200, _)) = cluster.nodes()[i].endpoint().get("/readyz").await {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "node {i} was not ready within {} s",
            limit.as_secs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until `done()` holds, asking every 100 ms; fails naming `what` after `limit`. On a
/// busy machine (ten containers on two cores) a fixed sleep may end before the clients' next
/// answer has come.
async fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(
            Instant::now() < deadline,
            "still not, after {} s: {what}",
            limit.as_secs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Node `i`'s worker id, from one of its IDs (asked again for up to 30 s: one request may go
/// unanswered on a busy machine).
async fn worker_id(node: &Dedicated) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match node.endpoint().get("/v1/snowflake?count=1").await {
            Ok((200, body)) => {
                let json: serde_json::Value = serde_json::from_str(&body).unwrap();
                return worker_of(json["ids"][0].as_i64().unwrap());
            }
            other => assert!(Instant::now() < deadline, "no ID to read: {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Writes a line to the real stderr, past the test harness's capture: the counts are the
/// test's report, wanted in a passing run too.
fn report(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "cluster test: {line}");
}

/// One cluster at a time: two would share two cores with ten servers and six coordination
/// members.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn run(coordination: Coordination) {
    let _turn = ONE_AT_A_TIME.lock().await;
    let ttl = TTL_MS.to_string();
    let bits = WORKER_BITS.to_string();
    let mut env = vec![("LEAF_SNOWFLAKE__WORKER_BITS", bits.as_str())];
    // Segment IDs too where the coordination service is also a segment store (etcd): one
    // store shared by every node, through the same kills, pause and member stop.
    let segment = coordination == Coordination::Etcd;
    match coordination {
        Coordination::ZooKeeper => env.extend([
            ("LEAF_SEGMENT__ENABLED", "false"),
            ("LEAF_SNOWFLAKE__ZK__RECYCLE_IDLE_TIMEOUT_MS", ttl.as_str()),
            ("LEAF_SNOWFLAKE__ZK__SESSION_TIMEOUT_MS", ttl.as_str()),
        ]),
        Coordination::Etcd => env.extend([
            ("LEAF_SEGMENT__STORE", "etcd"),
            ("LEAF_SNOWFLAKE__ETCD__LEASE_TTL_MS", ttl.as_str()),
        ]),
    }
    let started = Instant::now();
    let mut cluster = leaf_cluster(coordination, 3, &env)
        .await
        .unwrap_or_else(|e| panic!("no cluster for the test: {e}"));
    for i in 0..3 {
        wait_ready(&cluster, i, Duration::from_secs(60)).await;
    }
    let mut workers = HashSet::new();
    for node in cluster.nodes() {
        workers.insert(worker_id(node).await);
    }
    assert_eq!(
        workers.len(),
        3,
        "three nodes, three worker ids: {workers:?}"
    );
    report(format_args!(
        "{coordination:?}: 3 nodes ready with worker ids {workers:?} in {:.1} s",
        started.elapsed().as_secs_f64()
    ));

    let clients = Clients::new(segment);
    let mut tasks: Vec<_> = (0..3)
        .map(|i| clients.watch(i, cluster.address(i).to_owned()))
        .collect();
    let (mut kills, mut pauses, mut member_stops) = (0, 0, 0);
    tokio::time::sleep(Duration::from_secs(2)).await;
    wait_until("node 1 issued IDs", Duration::from_secs(30), || {
        clients.serving(0, false).contains(&1)
    })
    .await;

    // 1. docker kill node 1 and start it on its volume: nothing below what it issued before.
    let before = clients.ids_of(1);
    let max_before = *before
        .iter()
        .max()
        .expect("node 1 issued IDs before the kill");
    cluster.nodes()[1].kill().await.expect("kill");
    kills += 1;
    let killed_at = clients.samples.lock().unwrap().len();
    cluster.nodes()[1].start().await.expect("start again");
    wait_ready(&cluster, 1, Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    wait_until(
        "node 1 issued IDs after its restart",
        Duration::from_secs(30),
        || {
            clients.serving(killed_at, false).contains(&1)
                && (!segment || clients.serving(killed_at, true).contains(&1))
        },
    )
    .await;
    let after: Vec<i64> = {
        let samples = clients.samples.lock().unwrap();
        samples[killed_at..]
            .iter()
            .filter(|s| s.node == 1 && !s.segment)
            .flat_map(|s| s.ids.iter().copied())
            .collect()
    };
    assert!(!after.is_empty(), "node 1 issued nothing after its restart");
    assert!(
        after.iter().all(|id| *id > max_before),
        "node 1 issued an ID below {max_before} after its restart"
    );

    // 2. One coordination member stops mid-run and comes back.
    cluster.coordination()[0]
        .stop(Duration::from_secs(5))
        .await
        .expect("stop a member");
    member_stops += 1;
    let member_stopped_at = clients.samples.lock().unwrap().len();
    tokio::time::sleep(Duration::from_secs(3)).await;
    if segment {
        wait_until(
            "segment IDs while a member was stopped",
            Duration::from_secs(30),
            || !clients.serving(member_stopped_at, true).is_empty(),
        )
        .await;
    }
    let member_back_at = clients.samples.lock().unwrap().len();
    cluster.coordination()[0]
        .start()
        .await
        .expect("start the member");

    // 3. A spare fills the pool; node 0 freezes past its lease; a fifth node can then only
    // take node 0's worker id.
    let spare = cluster.add_node().await.expect("a spare node");
    wait_ready(&cluster, spare, Duration::from_secs(60)).await;
    tasks.push(clients.watch(spare, cluster.address(spare).to_owned()));
    let frozen_worker = worker_id(&cluster.nodes()[0]).await;
    cluster.nodes()[0].pause().await.expect("pause node 0");
    pauses += 1;
    let taker = cluster.add_node().await.expect("a fifth node");
    wait_ready(&cluster, taker, Duration::from_secs(60)).await;
    assert_eq!(
        worker_id(&cluster.nodes()[taker]).await,
        frozen_worker,
        "the fifth node took the frozen node's worker id"
    );
    tasks.push(clients.watch(taker, cluster.address(taker).to_owned()));
    tokio::time::sleep(Duration::from_secs(1)).await;
    cluster.nodes()[0].unpause().await.expect("unpause node 0");
    let thawed_at = clients.samples.lock().unwrap().len();
    // At once: no ID from a lease it no longer holds.
    let (status, body) = cluster.nodes()[0]
        .endpoint()
        .get("/v1/snowflake?count=1")
        .await
        .expect("an answer from the thawed node");
    assert_eq!(status, 503, "the thawed node answered {status}: {body}");
    let code = serde_json::from_str::<serde_json::Value>(&body).unwrap()["code"].as_i64();
    assert_eq!(code, Some(-4), "{body}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    // The fifth node leaves gracefully (its id back to the pool); node 0 serves again.
    for i in [taker, spare] {
        cluster
            .remove_node(i, Duration::from_secs(10))
            .await
            .expect("remove a node");
    }
    wait_ready(&cluster, 0, Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    wait_until(
        "IDs from all three nodes after the thaw",
        Duration::from_secs(30),
        || {
            let nodes = clients.serving(thawed_at, segment);
            (0..3).all(|i| nodes.contains(&i))
        },
    )
    .await;
    clients.stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    for i in 0..3 {
        wait_ready(&cluster, i, Duration::from_secs(30)).await;
    }

    // Zero duplicates; per worker id, the nodes that used it did so one after another.
    let samples = std::mem::take(&mut *clients.samples.lock().unwrap());
    let mut seen = HashSet::new();
    let mut segment_seen = HashSet::new();
    let mut by_worker: BTreeMap<u64, Vec<(i64, usize)>> = BTreeMap::new();
    let (mut ids, mut unavailable, mut no_answer) = (0, 0, 0);
    for s in &samples {
        match s.status {
            200 => {}
            503 => unavailable += 1,
            0 => no_answer += 1,
            other => panic!("node {} answered {other} (code {:?})", s.node, s.code),
        }
        if s.segment {
            for id in &s.ids {
                assert!(segment_seen.insert(*id), "segment ID {id} issued twice");
            }
            continue;
        }
        for id in &s.ids {
            ids += 1;
            assert!(seen.insert(*id), "ID {id} issued twice");
            by_worker
                .entry(worker_of(*id))
                .or_default()
                .push((*id, s.node));
        }
    }
    for (worker, mut issued) in by_worker {
        issued.sort_unstable();
        let mut blocks: Vec<(usize, u64, u64)> = Vec::new();
        for (id, node) in issued {
            let ts = timestamp_of(id);
            match blocks.last_mut() {
                Some((n, _, last)) if *n == node => *last = ts,
                _ => blocks.push((node, ts, ts)),
            }
        }
        for pair in blocks.windows(2) {
            let ((a, _, a_last), (b, b_first, _)) = (pair[0], pair[1]);
            assert!(
                a_last < b_first,
                "worker id {worker}: node {a} issued at {a_last} ms and node {b} at {b_first} ms"
            );
        }
        assert!(
            blocks.len() <= 4,
            "worker id {worker} changed hands {} times: nodes issued with it at once",
            blocks.len() - 1
        );
    }
    let segment_ids = match segment {
        true => format!("{} segment IDs", segment_seen.len()),
        false => "no segment IDs (segment mode off)".to_owned(),
    };
    report(format_args!(
        "{coordination:?}: {ids} snowflake IDs and {segment_ids} from {} answers, \
         0 duplicates; {kills} kill, {pauses} pause, {member_stops} member stop; \
         {unavailable} answers 503, {no_answer} unanswered; {:.0} s in all",
        samples.len(),
        started.elapsed().as_secs_f64()
    ));
    assert!(ids > 1000, "too few IDs to judge: {ids}");
    if segment {
        assert!(
            segment_seen.len() > 1000,
            "too few segment IDs to judge: {}",
            segment_seen.len()
        );
        // Segment IDs through every fault, not only before the first: from node 1 after its
        // restart, while a member was stopped, and from each of the three nodes after node 0
        // thawed (the spare and the fifth node gone by the end).
        let serving = |from: usize, to: usize| -> HashSet<usize> {
            samples[from..to]
                .iter()
                .filter(|s| s.segment && !s.ids.is_empty())
                .map(|s| s.node)
                .collect()
        };
        let restarted = serving(killed_at, member_stopped_at);
        assert!(
            restarted.contains(&1),
            "no segment IDs from node 1 after its restart"
        );
        let member_down = serving(member_stopped_at, member_back_at);
        assert!(
            !member_down.is_empty(),
            "no segment IDs while a member was stopped"
        );
        let thawed = serving(thawed_at, samples.len());
        assert!(
            (0..3).all(|i| thawed.contains(&i)),
            "after the thaw, segment IDs came from nodes {thawed:?} only"
        );
    }
    cluster.remove().await.expect("remove the cluster");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zk_recycle_cluster_survives_kill_pause_and_a_lost_member_without_a_duplicate() {
    run(Coordination::ZooKeeper).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_cluster_survives_kill_pause_and_a_lost_member_without_a_duplicate() {
    run(Coordination::Etcd).await;
}
