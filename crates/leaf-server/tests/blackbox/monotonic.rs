//! The monotonic routes on the embedded default (SQLite + `local`: the node is its own
//! leader): their answers and refusals, a history of concurrent clients checked for order,
//! and restarts, after kill -9 and after SIGTERM, that start above every ID issued before.

use std::sync::Arc;
use std::time::Instant;

use leaf_testkit::history::{Recorder, check, describe};

use crate::common::{Server, http};

fn one(s: &Server) -> i64 {
    let r = s.get("/api/monotonic/get");
    assert_eq!(r.status, 200, "{}", r.body);
    r.body.trim().parse().unwrap()
}

#[test]
fn the_monotonic_routes_answer_and_refuse_as_documented() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), 1);
    let ids = s.get("/v1/monotonic?count=5").ids();
    assert_eq!(ids.len(), 5);
    assert!(ids.windows(2).all(|w| w[1] == w[0] + 1), "{ids:?}");
    let text = s.get("/v1/monotonic?count=2&as=string").json();
    assert!(text["ids"][0].is_string(), "{text}");
    let next = one(&s);
    assert!(next > ids[4]);
    assert_eq!(s.post("/api/monotonic/get/any-key").status, 200);
    let range = s.get("/v1/monotonic/range?count=1000").json();
    let (first, last) = (
        range["first"].as_i64().unwrap(),
        range["last"].as_i64().unwrap(),
    );
    assert_eq!(last - first + 1, 1000);
    assert!(first > next);
    // The time part is the issuing millisecond, at most the window ahead of it.
    let decoded = s.get(&format!("/v1/monotonic/{first}/decode")).json();
    let ms = decoded["timestamp_ms"].as_u64().unwrap();
    let now = crate::common::now_ms();
    assert!(ms <= now + 3000 && ms + 60_000 > now, "{decoded}");
    assert!(decoded["time"].as_str().unwrap().ends_with('Z'));
    for (path, status) in [
        ("/v1/monotonic?count=0", 400),
        ("/v1/monotonic?count=10001", 400),
        ("/v1/monotonic?count=x", 400),
        ("/v1/monotonic?format=base36", 400),
        ("/v1/monotonic?as=text", 400),
        ("/v1/monotonic/range?count=4194305", 400),
        ("/v1/monotonic/range?count=3&as=string", 400),
        ("/v1/monotonic/-5/decode", 400),
        ("/v1/monotonic/abc/decode", 400),
    ] {
        let r = s.get(path);
        assert_eq!(r.status, status, "{path}: {}", r.body);
        assert_eq!(r.json()["code"], status, "{path}: {}", r.body);
    }
    let head = http(s.port, "HEAD", "/v1/monotonic").unwrap();
    assert_eq!(head.status, 405);
    let scrape = s.get("/metrics").body;
    assert_eq!(crate::common::gauge(&scrape, "leaf_monotonic_leader"), 1.0);
    assert!(crate::common::gauge(&scrape, "leaf_monotonic_issued_total") >= 1009.0);
    let (status, log) = s.sigterm();
    assert!(status.success(), "{log}");
}

#[test]
fn a_node_with_the_mode_off_answers_404_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start_with(dir.path(), 1, &[("LEAF_MONOTONIC__ENABLED", "false")]);
    let r = s.get("/v1/monotonic");
    assert_eq!(r.status, 404, "{}", r.body);
    assert!(r.body.contains("monotonic.enabled"), "{}", r.body);
    assert_eq!(s.get("/api/monotonic/get").status, 404);
}

#[test]
fn concurrent_clients_get_ids_in_real_time_order() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), 1);
    let history = Arc::new(Recorder::new());
    let port = s.port;
    let clients: Vec<_> = (0..6)
        .map(|c| {
            let history = Arc::clone(&history);
            std::thread::spawn(move || {
                for k in 0..150 {
                    let count = 1 + (c * 7 + k) % 40;
                    let invoked = Instant::now();
                    let r = http(port, "GET", &format!("/v1/monotonic?count={count}")).unwrap();
                    assert_eq!(r.status, 200, "{}", r.body);
                    history.record(
                        &format!("client {c}"),
                        "node",
                        invoked,
                        Instant::now(),
                        r.ids(),
                    );
                }
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    let ops = history.ops();
    let checked = check(&ops).unwrap_or_else(|v| panic!("{}", describe(&ops, &v)));
    assert_eq!(checked.requests, 900);
    assert!(checked.ordered_requests > 0);
}

#[test]
fn restarts_after_a_kill_and_after_a_sigterm_start_above_every_id_issued() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), 1);
    // Ranges of a millisecond's worth run the IDs ahead of the clock (up to the window, 3 s):
    // a restart is above them only if it starts above the confirmed window in the cache file,
    // not merely by its clock.
    let window_ms: i64 = 3000;
    let mut before: i64 = 0;
    let epoch = 1_288_834_974_657;
    while (before >> 22) + epoch < crate::common::now_ms() as i64 + window_ms - 500 {
        let r = s.get("/v1/monotonic/range?count=4194304");
        assert_eq!(r.status, 200, "{}", r.body);
        before = r.json()["last"].as_i64().unwrap();
    }
    s.sigkill();
    let s = Server::start(dir.path(), 2);
    let after_kill = one(&s);
    assert!(after_kill > before, "{after_kill} <= {before}");
    let gap_ms = (after_kill - before) >> 22;
    assert!(gap_ms <= 2 * window_ms + 5_000, "{gap_ms} ms ahead");
    let (status, log) = s.sigterm();
    assert!(status.success(), "{log}");
    assert!(log.contains("monotonic leader claim released"), "{log}");
    let s = Server::start(dir.path(), 3);
    let after_term = one(&s);
    assert!(after_term > after_kill);
    // A clean stop releases the claim just above its last ID: no window is skipped.
    assert!(
        (after_term - after_kill) >> 22 < window_ms,
        "{} ms ahead",
        (after_term - after_kill) >> 22
    );
    let (status, log) = s.sigterm();
    assert!(status.success(), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grpc_monotonic_service_is_the_routes_twin() {
    use leaf_server::grpc::pb::monotonic_client::MonotonicClient;
    use leaf_server::grpc::pb::{
        DecodeMonotonicRequest, NextMonotonicIdsRequest, StreamMonotonicIdsRequest,
    };

    let dir = tempfile::tempdir().unwrap();
    let s = tokio::task::block_in_place(|| Server::start(dir.path(), 1));
    let channel = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{}", s.port))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = MonotonicClient::new(channel);
    let ids = client
        .next_monotonic_ids(NextMonotonicIdsRequest { count: 4 })
        .await
        .unwrap()
        .into_inner()
        .ids;
    assert_eq!(ids.len(), 4);
    assert!(ids.windows(2).all(|w| w[1] == w[0] + 1), "{ids:?}");
    // A stream's chunks ascend, each above the call before.
    let mut stream = client
        .stream_monotonic_ids(StreamMonotonicIdsRequest {
            count: 2500,
            chunk: 1000,
        })
        .await
        .unwrap()
        .into_inner();
    let mut all = Vec::new();
    while let Some(chunk) = stream.message().await.unwrap() {
        all.extend(chunk.ids);
    }
    assert_eq!(all.len(), 2500);
    assert!(all[0] > ids[3] && all.windows(2).all(|w| w[1] > w[0]));
    let d = client
        .decode_monotonic(DecodeMonotonicRequest { id: all[0] })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(d.id, all[0]);
    assert!(d.time.ends_with('Z'));
    let http = tokio::task::block_in_place(|| s.get(&format!("/v1/monotonic/{}/decode", all[0])));
    assert_eq!(http.json()["timestamp_ms"], d.timestamp_ms);
    assert_eq!(http.json()["logical"], d.logical);
    for (count, code) in [
        (0, tonic::Code::InvalidArgument),
        (10_001, tonic::Code::InvalidArgument),
    ] {
        let e = client
            .next_monotonic_ids(NextMonotonicIdsRequest { count })
            .await
            .unwrap_err();
        assert_eq!(e.code(), code, "{e:?}");
    }
    let e = client
        .decode_monotonic(DecodeMonotonicRequest { id: -1 })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    let scrape = tokio::task::block_in_place(|| s.get("/metrics").body);
    assert!(
        scrape.contains(
            "leaf_grpc_requests_total{method=\"/leaf.v1.Monotonic/NextMonotonicIds\",code=\"OK\"} 1"
        ),
        "{scrape}"
    );
    let (status, log) = tokio::task::block_in_place(|| s.sigterm());
    assert!(status.success(), "{log}");
}

#[test]
fn a_local_node_made_for_a_cluster_refuses_monotonic_ids_and_exports_no_leader_gauge() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start_with(dir.path(), 1, &[("LEAF_SNOWFLAKE__LOCAL__WORKER_ID", "3")]);
    let r = s.get("/v1/monotonic");
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(r.body.contains("zk_recycle, etcd or redis"), "{}", r.body);
    // Snowflake IDs are served as ever on worker id 3.
    assert_eq!(s.get("/api/snowflake/get/x").status, 200);
    let scrape = s.get("/metrics").body;
    assert!(!scrape.contains("leaf_monotonic_leader"), "{scrape}");
    let (status, log) = s.sigterm();
    assert!(status.success(), "{log}");
    assert!(
        log.contains("monotonic IDs are not served on the local workerId mode"),
        "{log}"
    );
}
