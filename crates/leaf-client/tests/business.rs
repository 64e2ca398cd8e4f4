//! Business tags through `leaf-client` and two servers on one store: the client leases its
//! period rows (created by the server it reads them from, without the admin token) and prints
//! the IDs itself, across a midnight of its own clock, beside the servers' own IDs.

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use common::Cluster;
use leaf_client::LeafClient;
use leaf_core::{Error, ManualClock};
use leaf_format::{Period, Reset, Zone};

const ORDER: &str = r#"{"tag":"order","step":20,"reset":"day","time_zone":"Asia/Shanghai","format":"ORD{date:%Y%m%d}{seq:06}"}"#;

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as i64
}

/// The date part (`20261127`) of an order number.
fn day(id: &str) -> &str {
    &id[3..11]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_and_a_client_across_midnight_print_no_id_twice() {
    let cluster = Cluster::start(2, &[]);
    let (status, body) = cluster.servers[0].post_admin("/v1/tags", ORDER).await;
    assert_eq!(status, 201, "{body}");
    let zone = Zone::new("Asia/Shanghai").unwrap();
    // The servers run on the machine's clock: their day is whichever it is during a request.
    let day_now = || Period::at(Reset::Day, &zone, now_ms()).unwrap().key();
    let today = Period::at(Reset::Day, &zone, now_ms()).unwrap();
    let midnight = today.start_ms(&zone).unwrap();
    // The client's clock starts two seconds before today's midnight in Shanghai: it counts in
    // yesterday's row, then in today's, which the servers (on the real clock) count in too.
    let clock = ManualClock::new((midnight - 2_000) as u64);
    let client = LeafClient::builder()
        .endpoints(cluster.urls())
        .clock(Arc::new(clock.clone()))
        .build()
        .unwrap();
    let mut seen = HashSet::new();
    let mut client_days = HashSet::new();
    let mut record = |ids: Vec<String>, who: &str| {
        for id in ids {
            assert!(seen.insert(id.clone()), "{id} issued twice ({who})");
        }
    };
    for round in 0..12 {
        if round == 6 {
            clock.set_ms((midnight + 1_000) as u64);
        }
        for (i, server) in cluster.servers.iter().enumerate() {
            let before = day_now();
            let (status, body) = server.get("/v1/segment/order?count=15").await;
            let after = day_now();
            assert_eq!(status, 200, "{body}");
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            let ids: Vec<String> = serde_json::from_value(v["ids"].clone()).unwrap();
            let of_then = |id: &String| [&before, &after].contains(&&day(id).to_owned());
            assert!(
                ids.iter().all(of_then),
                "{ids:?} between {before} and {after}"
            );
            record(ids, &format!("server {i}"));
        }
        let ids = client
            .business_ids("order", 15)
            .await
            .expect("the client's IDs");
        client_days.extend(ids.iter().map(|id| day(id).to_owned()));
        record(ids, "client");
    }
    assert_eq!(seen.len(), 12 * 3 * 15);
    // The client's clock crossed its midnight: yesterday's row, then today's.
    let yesterday = Period::at(Reset::Day, &zone, midnight - 1).unwrap().key();
    assert_eq!(client_days, HashSet::from([yesterday.clone(), today.key()]));
    // The client's leases are of the period rows, at their capped step (20 here).
    let (_, body) = cluster.servers[1]
        .get(&format!("/v1/tags/order@{yesterday}"))
        .await;
    let row: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(row["step"], 20, "{row}");

    // A plain tag's name is not a business tag's; an unknown one is not found.
    let e = client.business_ids("nope", 1).await.unwrap_err();
    assert!(matches!(e, Error::NotFound(_)), "{e}");
    // A client clock far off is refused by the servers, never a row years ahead.
    clock.set_ms((midnight + 10 * 86_400_000) as u64);
    let e = client.business_ids("order", 1).await.unwrap_err();
    assert!(matches!(e, Error::InvalidInput(_)), "{e}");
}
