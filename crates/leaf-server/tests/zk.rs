//! The server in the ZooKeeper modes on a real ZooKeeper (`leaf_testkit::provision`: the server
//! of `LEAFTEST_ZK_URL`, else a container of `LEAFTEST_ZK_IMAGE`), each test under a root of
//! its own: two processes get distinct worker ids and the second checks its clock against the
//! first (and says what it found in `/metrics`); a peer whose clock is an hour ahead keeps snowflake mode off while segment mode serves.

#![cfg(all(feature = "zk-normal", feature = "zk-recycle"))]

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::time::{Duration, Instant};

use common::nodes::worker_id;
use common::{Server, free_port, gauge, now_ms};
use leaf_testkit::provision::{self, ZkNamespace};
use zookeeper_client as zk;

async fn namespace() -> ZkNamespace {
    provision::zk_namespace()
        .await
        .unwrap_or_else(|e| panic!("no ZooKeeper for the leaf-server tests: {e}"))
}

/// Starts the binary in `mode` on the test's root, its identity `127.0.0.1:{port}`, without
/// waiting for it to serve.
fn spawn(dir: &Path, n: u32, mode: &str, ns: &ZkNamespace) -> Server {
    let env = [
        ("LEAF_SNOWFLAKE__MODE", mode),
        ("LEAF_SNOWFLAKE__IP", "127.0.0.1"),
        ("LEAF_SNOWFLAKE__ZK__ADDRESS", ns.connect.as_str()),
        ("LEAF_SNOWFLAKE__ZK__ROOT", ns.root.as_str()),
    ];
    Server::spawn(dir, free_port(), n, &env)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_get_distinct_worker_ids_and_the_second_checks_its_clock_with_the_first() {
    for mode in ["zk_normal", "zk_recycle"] {
        let ns = namespace().await;
        let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let mut a = spawn(da.path(), 1, mode, &ns);
        a.wait_for("/readyz", Duration::from_secs(60));
        let mut b = spawn(db.path(), 2, mode, &ns);
        b.wait_for("/readyz", Duration::from_secs(60));
        assert_ne!(worker_id(&a), worker_id(&b), "{mode}");
        let (la, lb) = (a.log_text(), b.log_text());
        assert!(
            la.contains("no running peer to compare the clock with"),
            "{mode}: the first server starts alone:\n{la}"
        );
        assert!(
            lb.contains("the clock agrees with the running peers'"),
            "{mode}: the second server asks the first:\n{lb}"
        );
        // What the comparison found, for the skew alert: the second compared one peer within
        // a second, the first none (it started alone; its next round, 30 s on, sees the second).
        for (node, peers) in [(&a, 0.0), (&b, 1.0)] {
            let scrape = node.get("/metrics").body;
            assert_eq!(
                gauge(&scrape, "leaf_snowflake_peers_compared"),
                peers,
                "{mode}"
            );
            let skew = gauge(&scrape, "leaf_snowflake_peer_clock_skew_seconds");
            assert!(
                skew.abs() < 1.0,
                "{mode}: {skew} s off a peer on this machine"
            );
        }
        let (status, log) = b.sigterm();
        assert!(status.success(), "{mode}:\n{log}");
        let (status, log) = a.sigterm();
        assert!(status.success(), "{mode}:\n{log}");
    }
}

/// A peer that answers every request with a clock an hour ahead.
fn peer_an_hour_ahead() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut buf = [0u8; 1024];
            let _ = conn.read(&mut buf);
            let body = format!("{{\"now_ms\":{}}}", now_ms() + 3_600_000);
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                 content-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_an_hour_ahead_keeps_snowflake_off_while_segment_serves() {
    let ns = namespace().await;
    // List the fake peer as Leaf lists a running node: an ephemeral `temporary/{ip}:{port}`.
    let port = peer_an_hour_ahead();
    let client = zk::Client::connector()
        .with_session_timeout(Duration::from_secs(20))
        .connect(&ns.connect)
        .await
        .unwrap();
    let dir_opts = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    let temporary = format!("{}/leaf/temporary", ns.root);
    client.mkdir(&temporary, &dir_opts).await.unwrap();
    let eph = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
    client
        .create(&format!("{temporary}/127.0.0.1:{port}"), b"{}", &eph)
        .await
        .unwrap();

    let d = tempfile::tempdir().unwrap();
    let mut s = spawn(d.path(), 1, "zk_normal", &ns);
    s.wait_for("/healthz", Duration::from_secs(60));
    let deadline = Instant::now() + Duration::from_secs(30);
    let ready = loop {
        let r = s.get("/readyz");
        if r.body.contains("max_peer_skew_ms") || Instant::now() > deadline {
            break r;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(ready.status, 503, "{}", ready.body);
    let why = ready.json()["snowflake"]["reason"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        why.contains("off the average of its 1 running peers'"),
        "{why}"
    );
    assert_eq!(s.get("/v1/snowflake").status, 503);
    assert_eq!(s.get("/api/segment/get/leaf-segment-test").status, 200);
    // Refused, the node did not list itself for the others.
    let listed = client.list_children(&temporary).await.unwrap();
    assert_eq!(listed, vec![format!("127.0.0.1:{port}")]);
    let (status, log) = s.sigterm();
    assert!(status.success(), "{log}");
}

/// The monotonic mode on three `zk_recycle` nodes with a 4 s lease: the leader killed, the next
/// frozen past its lease, the third stopped; the clients' history holds (`common::monotonic`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_monotonic_cluster_keeps_order_through_a_kill_a_freeze_and_a_release() {
    let ns = namespace().await;
    common::monotonic::run(
        "zk_recycle",
        move |dir, n| {
            let env = [
                ("LEAF_SNOWFLAKE__MODE", "zk_recycle"),
                ("LEAF_SNOWFLAKE__IP", "127.0.0.1"),
                ("LEAF_SNOWFLAKE__ZK__ADDRESS", ns.connect.as_str()),
                ("LEAF_SNOWFLAKE__ZK__ROOT", ns.root.as_str()),
                ("LEAF_SNOWFLAKE__ZK__RECYCLE_IDLE_TIMEOUT_MS", "4000"),
                common::monotonic::LONG_WINDOW,
            ];
            Server::spawn(dir, free_port(), n, &env)
        },
        Duration::from_millis(4000),
    )
    .await;
}

/// The monotonic mode on three `zk_normal` nodes with `fence_on_disconnect` (the leader's
/// claim is then a `zk_recycle` pool of one on the same ensemble), a 4 s lease: the leader
/// killed, the next frozen past its lease, the third stopped; the history holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_monotonic_cluster_on_zk_normal_with_the_fence_keeps_order() {
    let ns = namespace().await;
    common::monotonic::run(
        "zk_normal",
        move |dir, n| {
            let env = [
                ("LEAF_SNOWFLAKE__MODE", "zk_normal"),
                ("LEAF_SNOWFLAKE__IP", "127.0.0.1"),
                ("LEAF_SNOWFLAKE__ZK__ADDRESS", ns.connect.as_str()),
                ("LEAF_SNOWFLAKE__ZK__ROOT", ns.root.as_str()),
                ("LEAF_SNOWFLAKE__ZK__FENCE_ON_DISCONNECT", "true"),
                ("LEAF_SNOWFLAKE__ZK__RECYCLE_IDLE_TIMEOUT_MS", "4000"),
                common::monotonic::LONG_WINDOW,
            ];
            Server::spawn(dir, free_port(), n, &env)
        },
        Duration::from_millis(4000),
    )
    .await;
}

/// The monotonic mode on three `zk_recycle` nodes, each reaching ZooKeeper through a proxy:
/// the leader's link stalled then delivered late, the next leader's cut, then every link cut;
/// the clients' history holds (`common::monotonic`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_monotonic_cluster_keeps_order_through_partitions() {
    let ns = namespace().await;
    let root = ns.root.clone();
    common::monotonic::run_partitions(
        "zk_recycle",
        &ns.connect,
        move |dir, n, addr| {
            let env = [
                ("LEAF_SNOWFLAKE__MODE", "zk_recycle"),
                ("LEAF_SNOWFLAKE__IP", "127.0.0.1"),
                ("LEAF_SNOWFLAKE__ZK__ADDRESS", addr),
                ("LEAF_SNOWFLAKE__ZK__ROOT", root.as_str()),
                ("LEAF_SNOWFLAKE__ZK__RECYCLE_IDLE_TIMEOUT_MS", "4000"),
                ("LEAF_SNOWFLAKE__ZK__SESSION_TIMEOUT_MS", "4000"),
                common::monotonic::LONG_WINDOW,
            ];
            Server::spawn(dir, free_port(), n, &env)
        },
        Duration::from_millis(4000),
    )
    .await;
}
