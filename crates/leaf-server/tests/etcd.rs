//! The server with `segment.store = "etcd"` and `snowflake.mode = "etcd"` on real etcd
//! containers (`leaf_testkit::provision`: the server of `LEAFTEST_ETCD_URL`, else a container of
//! `LEAFTEST_ETCD_IMAGE`), each test under a leaf name and key prefix of its own: two processes
//! share a tag's segments and take distinct worker ids; etcd stopped while serving (segments
//! serve from the buffers, snowflake fences at its lease and resumes); a node frozen past its
//! lease while another takes its worker id issues nothing with it after it resumes. Every ID
//! collected is checked for repeats.

#![cfg(feature = "etcd")]

mod common;

use std::path::Path;
use std::time::Duration;

use common::nodes;
use common::{Server, free_port};
use leaf_testkit::provision::{self, ETCD, EtcdNamespace};

const TAG: &str = "leaf-segment-test";

/// A short lease: above the generator's minimum (renew 1 s + margin 1 s + 1 s), whole seconds.
const TTL_MS: &str = "4000";

async fn namespace() -> EtcdNamespace {
    provision::etcd_namespace()
        .await
        .unwrap_or_else(|e| panic!("no etcd for the leaf-server tests: {e}"))
}

/// A leaf name of the test's own: the segment store keeps a name's tags under `/{name}/`.
fn leaf_name() -> String {
    format!("lt{:012x}", fastrand::u64(..) >> 16)
}

/// Starts the binary with both modes on the etcd of `ns`, its identity `127.0.0.1:{port}`, plus
/// `extra`; does not wait for it to serve.
fn spawn(dir: &Path, n: u32, ns: &EtcdNamespace, name: &str, extra: &[(&str, &str)]) -> Server {
    spawn_on(dir, n, &ns.endpoints, &ns.prefix, name, extra)
}

/// [`spawn`] on `endpoints` and `prefix` given apart (an `EtcdNamespace` deletes its keys
/// when dropped, so none is made for another route to the same keys).
fn spawn_on(
    dir: &Path,
    n: u32,
    endpoints: &[String],
    prefix: &str,
    name: &str,
    extra: &[(&str, &str)],
) -> Server {
    let joined = endpoints.join(",");
    let quoted: Vec<String> = endpoints.iter().map(|e| format!("{e:?}")).collect();
    let list = format!("[{}]", quoted.join(","));
    let mut env: Vec<(&str, &str)> = vec![
        ("LEAF_NAME", name),
        ("LEAF_SEGMENT__STORE", "etcd"),
        ("LEAF_SEGMENT__URL", &joined),
        ("LEAF_SNOWFLAKE__MODE", "etcd"),
        ("LEAF_SNOWFLAKE__IP", "127.0.0.1"),
        ("LEAF_SNOWFLAKE__ETCD__ENDPOINTS", &list),
        ("LEAF_SNOWFLAKE__ETCD__PREFIX", prefix),
        ("LEAF_SNOWFLAKE__ETCD__LEASE_TTL_MS", TTL_MS),
    ];
    env.extend_from_slice(extra);
    Server::spawn(dir, free_port(), n, &env)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_share_the_tags_segments_and_take_distinct_worker_ids() {
    let ns = namespace().await;
    let name = leaf_name();
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut a = spawn(da.path(), 1, &ns, &name, &[]);
    a.wait_for("/readyz", Duration::from_secs(60));
    let mut b = spawn(db.path(), 2, &ns, &name, &[]);
    b.wait_for("/readyz", Duration::from_secs(60));
    nodes::two_servers_share_segments_with_distinct_worker_ids(a, b, TAG);
}

/// etcd stopped while a node serves: segment IDs keep coming from the buffers, snowflake stops
/// within its lease (503, code -4) and comes back once etcd does, and nothing repeats.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_stopped_while_serving_segments_serve_and_snowflake_fences_then_resumes() {
    let etcd = provision::dedicated(&ETCD)
        .await
        .unwrap_or_else(|e| panic!("no etcd container for the fault tests: {e}"));
    let ns = provision::etcd_namespace_on(std::slice::from_ref(&etcd.endpoint().url));
    let dir = tempfile::tempdir().unwrap();
    let mut s = spawn(dir.path(), 1, &ns, &leaf_name(), &[]);
    s.wait_for("/readyz", Duration::from_secs(60));
    let fenced = nodes::WhileDown::FencesWithin(Duration::from_millis(4000));
    nodes::backend_stopped_while_serving(&s, &etcd, TAG, fenced).await;
    let (status, log) = s.sigterm();
    assert!(status.success(), "{log}");
    etcd.remove().await.unwrap();
}

/// A node frozen (SIGSTOP) past its lease while a second node takes its worker id (a pool of
/// one id: `worker_bits = 0`), then resumed (SIGCONT): the resumed node issues not one ID while
/// the other holds the id, and no ID repeats across both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_node_whose_id_was_taken_issues_nothing_after_it_resumes() {
    let ns = namespace().await;
    let name = leaf_name();
    let one_id = [("LEAF_SNOWFLAKE__WORKER_BITS", "0")];
    nodes::a_frozen_node_whose_id_was_taken_issues_nothing_after_it_resumes(|dir, n| {
        spawn(dir, n, &ns, &name, &one_id)
    });
}

/// The monotonic mode on three nodes: the leader killed, the next frozen past its lease, the
/// third stopped; the clients' history holds (`common::monotonic`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_monotonic_cluster_keeps_order_through_a_kill_a_freeze_and_a_release() {
    let ns = namespace().await;
    let name = leaf_name();
    common::monotonic::run(
        "etcd",
        move |dir, n| spawn(dir, n, &ns, &name, &[common::monotonic::LONG_WINDOW]),
        Duration::from_millis(TTL_MS.parse().unwrap()),
    )
    .await;
}

/// The monotonic mode on three nodes, each reaching etcd through a proxy: the leader's link
/// stalled then delivered late, the next leader's cut, then every link cut; the clients'
/// history holds (`common::monotonic`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_monotonic_cluster_keeps_order_through_partitions() {
    let ns = namespace().await;
    let name = leaf_name();
    let target = ns.endpoints[0].trim_start_matches("http://").to_string();
    let prefix = ns.prefix.clone();
    // `ns` lives to the end of the test: its drop deletes the test's keys.
    common::monotonic::run_partitions(
        "etcd",
        &target,
        move |dir, n, addr| {
            let through = [format!("http://{addr}")];
            let long_window = [common::monotonic::LONG_WINDOW];
            spawn_on(dir, n, &through, &prefix, &name, &long_window)
        },
        Duration::from_millis(TTL_MS.parse().unwrap()),
    )
    .await;
}
