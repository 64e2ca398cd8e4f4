//! The server with `segment.store = "redis"` and `snowflake.mode = "redis"` on a real Redis
//! (`leaf_testkit::provision`: the server of `LEAFTEST_REDIS_URL`, else a container of
//! `LEAFTEST_REDIS_IMAGE`), each test under a key prefix of its own: two processes share the
//! tag's segments and take distinct worker ids; Redis stopped while serving (segments serve from
//! the buffers, snowflake fences at its lease and resumes); a node frozen past its lease while
//! another takes its worker id issues nothing with it after it resumes; a Redis without
//! `appendfsync always` stops start-up naming the key that would accept it, and that key lets
//! the server run.

#![cfg(feature = "redis")]

mod common;

use std::path::Path;
use std::time::Duration;

use common::nodes;
use common::{Server, free_port, wait_exit};
use leaf_testkit::provision::{self, RedisNamespace};

const TAG: &str = "leaf-segment-test";

/// A short lease: above the generator's minimum (renew 1 s + margin 1 s + 1 s).
const TTL_MS: &str = "4000";

async fn namespace() -> RedisNamespace {
    provision::redis_namespace()
        .await
        .unwrap_or_else(|e| panic!("no Redis for the leaf-server tests: {e}"))
}

/// Starts the binary with both modes on the Redis at `url` under `prefix`, its identity
/// `127.0.0.1:{port}`, plus `extra`; does not wait for it to serve.
fn spawn(dir: &Path, n: u32, url: &str, prefix: &str, extra: &[(&str, &str)]) -> Server {
    let mut env = vec![
        ("LEAF_SEGMENT__STORE", "redis"),
        ("LEAF_SEGMENT__URL", url),
        ("LEAF_SEGMENT__REDIS__KEY_PREFIX", prefix),
        ("LEAF_SNOWFLAKE__MODE", "redis"),
        ("LEAF_SNOWFLAKE__IP", "127.0.0.1"),
        ("LEAF_SNOWFLAKE__REDIS__URL", url),
        ("LEAF_SNOWFLAKE__REDIS__KEY_PREFIX", prefix),
        ("LEAF_SNOWFLAKE__REDIS__LEASE_TTL_MS", TTL_MS),
    ];
    env.extend_from_slice(extra);
    Server::spawn(dir, free_port(), n, &env)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_share_the_tags_segments_and_take_distinct_worker_ids() {
    let ns = namespace().await;
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut a = spawn(da.path(), 1, &ns.url, &ns.prefix, &[]);
    a.wait_for("/readyz", Duration::from_secs(60));
    let mut b = spawn(db.path(), 2, &ns.url, &ns.prefix, &[]);
    b.wait_for("/readyz", Duration::from_secs(60));

    // Both seed the same tag (the second finds it).
    nodes::two_servers_share_segments_with_distinct_worker_ids(a, b, TAG);
}

/// Redis stopped while a node serves: segment IDs keep coming from the buffers, snowflake
/// stops within its lease (503, code -4) and comes back once Redis does, and nothing repeats.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stopped_while_serving_segments_serve_and_snowflake_fences_then_resumes() {
    let redis = provision::redis_dedicated()
        .await
        .unwrap_or_else(|e| panic!("no Redis container for the fault tests: {e}"));
    let ns = provision::redis_namespace_on(&redis.endpoint().url);
    let dir = tempfile::tempdir().unwrap();
    let mut s = spawn(dir.path(), 1, &ns.url, &ns.prefix, &[]);
    s.wait_for("/readyz", Duration::from_secs(60));
    let fenced = nodes::WhileDown::FencesWithin(Duration::from_millis(4000));
    nodes::backend_stopped_while_serving(&s, &redis, TAG, fenced).await;
    let (status, log) = s.sigterm();
    assert!(status.success(), "{log}");
    redis.remove().await.unwrap();
}

/// A node frozen (SIGSTOP) past its lease while a second node takes its worker id (a pool of
/// one id: `worker_bits = 0`), then resumed (SIGCONT): the resumed node issues not one ID while
/// the other holds the id, and no ID repeats across both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_node_whose_id_was_taken_issues_nothing_after_it_resumes() {
    let ns = namespace().await;
    let one_id = [("LEAF_SNOWFLAKE__WORKER_BITS", "0")];
    nodes::a_frozen_node_whose_id_was_taken_issues_nothing_after_it_resumes(|dir, n| {
        spawn(dir, n, &ns.url, &ns.prefix, &one_id)
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_without_appendfsync_always_stops_start_up_unless_accepted() {
    let weak = provision::redis_dedicated_with(&["--appendfsync", "everysec"])
        .await
        .unwrap_or_else(|e| panic!("no Redis for the leaf-server tests: {e}"));
    let url = weak.endpoint().url.clone();
    let ns = provision::redis_namespace_on(&url);
    let dir = tempfile::tempdir().unwrap();
    let segment_only = [("LEAF_SNOWFLAKE__ENABLED", "false")];

    let mut refused = spawn(dir.path(), 1, &url, &ns.prefix, &segment_only);
    let status = wait_exit(&mut refused.child, Duration::from_secs(30))
        .unwrap_or_else(|| panic!("still running on a weak Redis:\n{}", refused.log_text()));
    let log = refused.log_text();
    assert!(!status.success(), "{log}");
    for needed in [
        "appendfsync everysec",
        "segment.redis.accept_weak_durability",
    ] {
        assert!(log.contains(needed), "the refusal names {needed:?}:\n{log}");
    }

    let accept = [
        ("LEAF_SNOWFLAKE__ENABLED", "false"),
        ("LEAF_SEGMENT__REDIS__ACCEPT_WEAK_DURABILITY", "true"),
    ];
    let mut accepted = spawn(dir.path(), 2, &url, &ns.prefix, &accept);
    accepted.wait_for("/readyz", Duration::from_secs(60));
    assert_eq!(accepted.get(&format!("/api/segment/get/{TAG}")).status, 200);
    let (status, log) = accepted.sigterm();
    assert!(status.success(), "{log}");
    assert!(
        log.contains("running anyway because accept_weak_durability is set"),
        "a warning at every start:\n{log}"
    );
    weak.remove().await.unwrap();
}

/// The monotonic mode on three nodes: the leader killed, the next frozen past its lease, the
/// third stopped; the clients' history holds (`common::monotonic`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_monotonic_cluster_keeps_order_through_a_kill_a_freeze_and_a_release() {
    let ns = namespace().await;
    common::monotonic::run(
        "redis",
        move |dir, n| {
            spawn(
                dir,
                n,
                &ns.url,
                &ns.prefix,
                &[common::monotonic::LONG_WINDOW],
            )
        },
        Duration::from_millis(TTL_MS.parse().unwrap()),
    )
    .await;
}

/// A new monotonic leader whose clock is 8 s behind the old one's (libfaketime) starts above
/// the old one's IDs after a kill -9 (`common::monotonic`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_monotonic_leader_whose_clock_is_behind_starts_above_the_old_one() {
    let ns = namespace().await;
    let ids = tokio::task::spawn_blocking(move || {
        common::monotonic::a_new_leader_whose_clock_is_behind_starts_above_the_old_one(
            |dir, n, more| {
                let mut env: Vec<(&str, String)> =
                    vec![("LEAF_SNOWFLAKE__MAX_STARTUP_WAIT_MS", "30000".into())];
                env.extend(more.iter().cloned());
                let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
                spawn(dir, n, &ns.url, &ns.prefix, &env)
            },
            Duration::from_millis(TTL_MS.parse().unwrap()),
        )
    })
    .await
    .unwrap();
    eprintln!("redis monotonic clock-behind takeover: {ids} IDs checked");
}

/// With `[server.tls]` on every node and client certificates required, a follower forwards
/// its monotonic requests to the leader over TLS, verifying the leader's certificate against
/// `server.tls.client_ca_file` and presenting its own; a follower told to trust another CA
/// (`monotonic.forward_ca_file`), or to expect another name (`monotonic.forward_server_name`),
/// forwards nothing and answers 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_forwards_to_its_leader_over_verified_tls() {
    use common::certs::{Ca, client_config, https, put};
    let ns = namespace().await;
    tokio::task::spawn_blocking(move || {
        let dir = tempfile::tempdir().unwrap();
        let (ca, other) = (Ca::new("leaf-nodes"), Ca::new("another"));
        let ca_file = put(dir.path(), "ca.pem", &ca.pem());
        let other_file = put(dir.path(), "other-ca.pem", &other.pem());
        let client = ca.client("test-client", false);
        let h1 = client_config(&ca.pem(), Some(&client), &[b"http/1.1"]);
        let node = |n: u32, extra: &[(&str, &str)]| {
            let pair = ca.server(&format!("node-{n}"));
            let nd = dir.path().join(format!("n{n}"));
            std::fs::create_dir_all(&nd).unwrap();
            let (cert, key) = (
                put(&nd, "server.pem", &pair.cert),
                put(&nd, "server.key", &pair.key),
            );
            let mut env = vec![
                (
                    "LEAF_SERVER__TLS__CERT_FILE",
                    cert.to_str().unwrap().to_string(),
                ),
                (
                    "LEAF_SERVER__TLS__KEY_FILE",
                    key.to_str().unwrap().to_string(),
                ),
                (
                    "LEAF_SERVER__TLS__CLIENT_CA_FILE",
                    ca_file.to_str().unwrap().to_string(),
                ),
            ];
            env.extend(extra.iter().map(|(k, v)| (*k, v.to_string())));
            let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let s = spawn(&nd, n, &ns.url, &ns.prefix, &env);
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            while !https(s.port, &h1, "/readyz").is_ok_and(|r| r.status == 200) {
                assert!(
                    std::time::Instant::now() < deadline,
                    "node {n} not ready over TLS:\n{}",
                    s.log_text()
                );
                std::thread::sleep(Duration::from_millis(50));
            }
            s
        };
        let forwarded = |s: &Server| {
            let scrape = https(s.port, &h1, "/metrics").unwrap().body;
            common::gauge(&scrape, "leaf_monotonic_forwarded_calls_total")
        };
        // The first node leads.
        let leader = node(0, &[]);
        let led = https(leader.port, &h1, "/v1/monotonic/range?count=1").unwrap();
        assert_eq!(led.status, 200, "{}", led.body);
        // A follower forwards over TLS: answered, and counted as forwarded.
        let follower = node(1, &[]);
        let mut last = 0;
        for _ in 0..20 {
            let r = https(follower.port, &h1, "/v1/monotonic?count=3").unwrap();
            assert_eq!(r.status, 200, "{}\n{}", r.body, follower.log_text());
            let ids = r.ids();
            assert!(ids[0] > last, "{ids:?} after {last}");
            last = ids[2];
        }
        assert!(forwarded(&follower) >= 20.0, "{}", follower.log_text());
        // The leader's certificate is verified: against another CA, or for another name,
        // nothing is forwarded.
        let other_ca = other_file.to_str().unwrap();
        for (n, extra) in [
            (2, ("LEAF_MONOTONIC__FORWARD_CA_FILE", other_ca)),
            (
                3,
                ("LEAF_MONOTONIC__FORWARD_SERVER_NAME", "not-a-node.example"),
            ),
        ] {
            let refused = node(n, &[extra]);
            let r = https(refused.port, &h1, "/v1/monotonic").unwrap();
            assert_eq!(r.status, 503, "{extra:?}: {}", r.body);
            assert!(r.body.contains("could not be reached"), "{}", r.body);
            let log = refused.log_text();
            assert!(log.contains("TLS with the leader"), "{extra:?}:\n{log}");
        }
    })
    .await
    .unwrap();
}

/// The monotonic mode on three nodes, each reaching Redis through a proxy: the leader's link
/// stalled then delivered late, the next leader's cut, then every link cut; the clients'
/// history holds (`common::monotonic`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_monotonic_cluster_keeps_order_through_partitions() {
    let ns = namespace().await;
    let target = ns.url.trim_start_matches("redis://").to_string();
    let prefix = ns.prefix.clone();
    common::monotonic::run_partitions(
        "redis",
        &target,
        move |dir, n, addr| {
            let url = format!("redis://{addr}");
            spawn(dir, n, &url, &prefix, &[common::monotonic::LONG_WINDOW])
        },
        Duration::from_millis(TTL_MS.parse().unwrap()),
    )
    .await;
}
