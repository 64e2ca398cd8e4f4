//! The alert rules and the dashboard (`deploy/monitoring/`) against the real binary: a node on
//! its embedded default is driven through the states the rules watch that it can reach (IDs of
//! both modes over HTTP and gRPC, a 404, a business tag run past its format's width, a tag
//! asked for the rest of the buffer), then `/metrics` must have every metric and label the
//! files name. The two that only other setups expose are checked by the tests of those setups,
//! named here and required to scrape them.

use std::time::Duration;

use leaf_server::grpc::pb::NextSnowflakeIdsRequest;
use leaf_server::grpc::pb::snowflake_client::SnowflakeClient;

use super::common::monitoring::assert_scrape_has_named_metrics;
use super::common::{self, Server, free_port, http};

/// Metrics the default node does not expose, and the test file whose scrape checks each.
const ELSEWHERE: &[(&str, &str)] = &[
    // Only with [server.tls].
    (
        "leaf_tls_certificate_expiry_timestamp_seconds",
        "tests/blackbox/tls.rs",
    ),
    // Only in the mysql and postgres workerId modes (the row's copy of the mark).
    (
        "leaf_snowflake_registry_mark_lag_seconds",
        "tests/postgres.rs",
    ),
    // Only in the modes that list their peers (the ZooKeeper modes).
    ("leaf_snowflake_peer_clock_skew_seconds", "tests/zk.rs"),
    ("leaf_snowflake_peers_compared", "tests/zk.rs"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_rules_and_the_dashboard_name_is_in_the_scrape() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = tokio::task::spawn_blocking({
        let dir = dir.path().to_owned();
        move || {
            let mut s = Server::spawn::<&str>(&dir, port, 1, &[]);
            s.wait_for("/readyz", Duration::from_secs(30));
            s
        }
    })
    .await
    .unwrap();

    let scrape = tokio::task::spawn_blocking(move || {
        for path in [
            "/api/segment/get/leaf-segment-test",
            "/v1/segment/leaf-segment-test?count=1500",
            "/api/snowflake/get/any",
            "/v1/snowflake?count=10",
            "/api/segment/get/no-such-tag",
        ] {
            http(port, "GET", path).unwrap();
        }
        // A business tag whose one-digit counter runs out after 9 IDs a day: 503 code -6.
        let body = r#"{"tag":"narrow","format":"N{date:%Y%m%d}{seq:01}","reset":"day"}"#;
        let created = common::post_json(port, "/v1/tags", body);
        assert_eq!(created.status, 201, "{}", created.body);
        let mut overflowed = false;
        for _ in 0..12 {
            let r = http(port, "GET", "/v1/segment/narrow").unwrap();
            overflowed |= r.status == 503 && r.body.contains("-6");
        }
        assert!(overflowed, "the narrow tag never overflowed");
        port
    })
    .await
    .unwrap();
    // A gRPC call, for its families.
    let channel = tonic::transport::Channel::from_shared(format!("http://127.0.0.1:{scrape}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = SnowflakeClient::new(channel);
    grpc.next_snowflake_ids(NextSnowflakeIdsRequest {
        count: 3,
        ..Default::default()
    })
    .await
    .unwrap();
    let text = tokio::task::spawn_blocking(move || {
        let r = http(scrape, "GET", "/metrics").unwrap();
        assert_eq!(r.status, 200);
        drop(server);
        r.body
    })
    .await
    .unwrap();
    let elsewhere: Vec<&str> = ELSEWHERE.iter().map(|(m, _)| *m).collect();
    assert_scrape_has_named_metrics(&text, &elsewhere);
    for (metric, file) in ELSEWHERE {
        let path = format!("{}/{file}", env!("CARGO_MANIFEST_DIR"));
        let source = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert!(
            source.contains(metric),
            "{file} must scrape {metric}, which the rules name and the default node lacks"
        );
    }
}
