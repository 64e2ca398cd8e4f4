//! What the server's tests on MySQL and on PostgreSQL share: the router started with both modes
//! on the database, with the checks every SQL store passes, and a start-up refused for a wrong
//! password that must not show it.
#![allow(
    dead_code,
    reason = "only the MySQL and PostgreSQL test binaries call it"
)]

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use axum::http::StatusCode;
use leaf_server::app;
use leaf_server::config::Config;
use leaf_server::server::Running;

use super::router::{call, ok};
use super::{Server, command, free_port};

/// The seed tag of the default configuration.
pub(crate) const SEED_TAG: &str = "leaf-segment-test";

/// The router started through `server::start` (the one place that picks backends, as the binary
/// does) with both modes on the SQL backend `kind` at `url`, identity `10.0.0.7:8080`, its cache
/// directory `dir`; checked as every SQL store is: ready, the seed tag's first IDs, a tag
/// created over HTTP (once: again is 409) serving from its `max_id`, an unknown tag 404.
pub(crate) async fn router_on(kind: &str, url: &str, dir: &Path) -> (Running, axum::Router) {
    let mut config = Config::default();
    config.segment.store = kind.into();
    config.segment.stores.insert("url", url);
    config.segment.stores.insert("max_connections", 2);
    config.snowflake.mode = kind.into();
    config.snowflake.backends.set(kind, "url", url);
    config.snowflake.ip = "10.0.0.7".into();
    config.snowflake.port = 8080;
    config.snowflake.cache_dir = dir.to_path_buf();
    config.validate().unwrap();
    let running = leaf_server::server::start(&config, "127.0.0.1:8080".parse().unwrap())
        .await
        .unwrap_or_else(|e| panic!("start on {kind}: {e:#}"));
    let app = app(running.state.clone());
    let ready = ok(&app, "/readyz").await;
    assert!(ready.contains("\"ready\":true"), "{ready}");

    // Segment mode: the seed tag, created in leaf_alloc by the server with Leaf's step.
    assert_eq!(ok(&app, &format!("/api/segment/get/{SEED_TAG}")).await, "1");
    let batch: serde_json::Value =
        serde_json::from_str(&ok(&app, &format!("/v1/segment/{SEED_TAG}?count=5")).await).unwrap();
    assert_eq!(batch["ids"], serde_json::json!([2, 3, 4, 5, 6]));
    let (status, body) = call(
        &app,
        "POST",
        "/v1/tags",
        r#"{"tag":"order","max_id":100,"step":50,"description":"made over http"}"#,
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = call(&app, "POST", "/v1/tags", r#"{"tag":"order"}"#).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let first: i64 = ok(&app, "/api/segment/get/order").await.parse().unwrap();
    assert_eq!(first, 100, "the range after the row's max_id");
    let (status, body) = call(&app, "GET", "/api/segment/get/absent", "").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    (running, app)
}

/// The binary started with segment mode on `kind` at `url`, whose password `wrong` the server
/// refuses: start-up fails naming `segment.url`, and the log shows the URL redacted, never the
/// password (the URL shown makes the check not vacuous).
pub(crate) async fn a_refused_password_fails_start_up_without_showing_it(
    kind: &str,
    url: String,
    wrong: &str,
) {
    assert!(url.contains(wrong));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    let (shown, kind) = (url.clone(), kind.to_owned());
    let (status, log) = tokio::task::spawn_blocking(move || {
        let env = [
            ("LEAF_SEGMENT__STORE", kind),
            ("LEAF_SEGMENT__URL", url),
            ("LEAF_SNOWFLAKE__ENABLED", "false".to_string()),
            ("LEAF_LOG__LEVEL", "debug".to_string()),
        ];
        let out = command(&path, free_port(), &env)
            .stderr(Stdio::piped())
            .output()
            .expect("the binary runs");
        (
            out.status,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    })
    .await
    .unwrap();
    assert!(!status.success(), "start-up must fail: {log}");
    assert!(log.contains("segment.url"), "names the key: {log}");
    assert!(!log.contains(wrong), "the password is in the log:\n{log}");
    let redacted = leaf_server::config::redact_url(&shown);
    assert!(log.contains(&redacted), "the log shows {redacted}:\n{log}");
}

/// `node`, a README's node, answers the first ID of its tag `order` and a snowflake ID, then
/// stops cleanly on SIGTERM.
pub(crate) async fn serves_the_readmes_order_tag_then_stops(node: Server) {
    let (segment, snowflake) = tokio::task::spawn_blocking(move || {
        let got = (
            node.get("/api/segment/get/order").body,
            node.get("/api/snowflake/get/x").status,
        );
        assert!(node.sigterm().0.success());
        got
    })
    .await
    .unwrap();
    assert_eq!((segment.as_str(), snowflake), ("1", 200));
}

/// The lease of the monotonic leader in the SQL cluster tests (`lease_ttl_ms`), as the other
/// backends' tests have it.
pub(crate) const MONOTONIC_LEASE: Duration = Duration::from_millis(4000);

/// Starts the binary with the workerId mode `kind` on the database at `url` with
/// `fence_on_disconnect` and a lease of [`MONOTONIC_LEASE`] (the monotonic leader's claim is
/// then a row of `leaf_workerid_lease`), its identity `127.0.0.1:{its port}` (where it serves,
/// so that followers can forward to it) and a window longer than the lease; segment mode off.
/// Does not wait for it to serve.
pub(crate) fn spawn_monotonic(dir: &Path, n: u32, kind: &str, url: &str) -> Server {
    let upper = kind.to_ascii_uppercase();
    let (url_key, fence_key, lease_key) = (
        format!("LEAF_SNOWFLAKE__{upper}__URL"),
        format!("LEAF_SNOWFLAKE__{upper}__FENCE_ON_DISCONNECT"),
        format!("LEAF_SNOWFLAKE__{upper}__LEASE_TTL_MS"),
    );
    let lease = MONOTONIC_LEASE.as_millis().to_string();
    let env = [
        ("LEAF_SEGMENT__ENABLED", "false"),
        ("LEAF_SNOWFLAKE__MODE", kind),
        ("LEAF_SNOWFLAKE__IP", "127.0.0.1"),
        (url_key.as_str(), url),
        (fence_key.as_str(), "true"),
        (lease_key.as_str(), lease.as_str()),
        super::monotonic::LONG_WINDOW,
    ];
    Server::spawn(dir, free_port(), n, &env)
}

/// The monotonic cluster on the SQL backend `kind` at `url` (`common::monotonic`): the leader
/// killed, the next frozen past its lease, the third stopped.
pub(crate) async fn monotonic_faults(kind: &'static str, url: &str) {
    let url = url.to_owned();
    super::monotonic::run(
        kind,
        move |dir, n| spawn_monotonic(dir, n, kind, &url),
        MONOTONIC_LEASE,
    )
    .await;
}

/// The monotonic cluster on the SQL backend `kind` at `url`, each node reaching the server
/// through a proxy of its own (`common::monotonic`): the links stalled, cut, restored.
pub(crate) async fn monotonic_partitions(kind: &'static str, url: &str) {
    let owned = url.to_owned();
    super::monotonic::run_partitions(
        kind,
        leaf_testkit::identity_cases::authority(url),
        move |dir, n, addr| {
            let through = leaf_testkit::identity_cases::through(&owned, addr);
            spawn_monotonic(dir, n, kind, &through)
        },
        MONOTONIC_LEASE,
    )
    .await;
}
