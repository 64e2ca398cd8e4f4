//! Every route of `app(state)`, driven with `tower::ServiceExt::oneshot` and no socket. The peer
//! address for the admin rule is injected as `ConnectInfo` in the request's extensions.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use async_trait::async_trait;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::ConnectInfo;
use axum::http::{HeaderMap, Method, Request, StatusCode, header};
use http_body_util::BodyExt;
use leaf_core::{
    AcquireRequest, Clock, Error, Lease, ManualClock, NodeIdentity, RegistryCapabilities, Renewal,
    Result as CoreResult, SegmentStore, SnowflakeLayout, SystemClock, WorkerIdRegistry,
};
use leaf_segment::{SegmentAllocator, SegmentConfig};
use leaf_server::config::Config;
use leaf_server::metrics::Metrics;
use leaf_server::{AppState, SegmentService, SnowflakeService, app};
use leaf_snowflake::{Snowflake, SnowflakeConfig};
use leaf_testkit::MemoryStore;
use serde_json::Value;
use tower::ServiceExt;

const WORKER: u64 = 5;

/// A registry that hands out worker id 5 with a chosen previous mark, and can lose the lease.
#[derive(Debug, Default)]
struct FakeRegistry {
    prev_mark_ms: Option<u64>,
    lost: AtomicBool,
    /// The registry's own copy of the mark (0: none), as the mysql row.
    confirmed_ms: AtomicU64,
}

#[async_trait]
impl WorkerIdRegistry for FakeRegistry {
    fn mode(&self) -> &'static str {
        "local"
    }
    fn capabilities(&self) -> RegistryCapabilities {
        RegistryCapabilities::new(false, false)
    }
    async fn acquire(&self, _req: &AcquireRequest) -> CoreResult<Lease> {
        Ok(Lease::new(WORKER, self.prev_mark_ms))
    }
    async fn renew(&self, _lease: &Lease, _mark_ms: u64) -> CoreResult<Renewal> {
        Ok(if self.lost.load(Ordering::SeqCst) {
            Renewal::LeaseLost
        } else {
            Renewal::OK
        })
    }
    async fn release(&self, _lease: &Lease, _final_mark_ms: u64) -> CoreResult<()> {
        Ok(())
    }
    fn confirmed_mark_ms(&self) -> Option<u64> {
        Some(self.confirmed_ms.load(Ordering::SeqCst)).filter(|m| *m > 0)
    }
    async fn abandon(&self, _lease: &Lease) {}
}

struct Fixture {
    app: Router,
    store: Arc<MemoryStore>,
    registry: Arc<FakeRegistry>,
    generator: Option<Snowflake>,
}

struct Setup {
    config: Config,
    segment: bool,
    snowflake: bool,
    prev_mark_ms: Option<u64>,
    clock: Option<ManualClock>,
    /// The segment allocator's clock (the system's if none): business tags read periods off it.
    segment_clock: Option<ManualClock>,
    /// The store (a fresh one with the test tags if none): another node's, to share it.
    store: Option<Arc<MemoryStore>>,
    generator: SnowflakeConfig,
}

impl Default for Setup {
    fn default() -> Self {
        let mut config = Config::default();
        config.server.max_batch = 50;
        config.server.max_body_bytes = 1024;
        Setup {
            config,
            segment: true,
            snowflake: true,
            prev_mark_ms: None,
            clock: None,
            segment_clock: None,
            store: None,
            generator: SnowflakeConfig::default(),
        }
    }
}

impl Setup {
    async fn build(self) -> Fixture {
        let store = self.store.clone().unwrap_or_else(|| {
            Arc::new(MemoryStore::with_tags([
                ("t", 10),
                ("leaf-segment-test", 2000),
            ]))
        });
        let metrics = Arc::new(Metrics::new());
        let segment = if self.segment {
            let clock: Arc<dyn Clock> = match &self.segment_clock {
                Some(c) => Arc::new(c.clone()),
                None => Arc::new(SystemClock::new()),
            };
            let allocator =
                SegmentAllocator::new(store.clone(), clock, self.config.segment.allocator_config());
            allocator.init().await.unwrap();
            Some(SegmentService::ready(allocator))
        } else {
            None
        };
        let registry = Arc::new(FakeRegistry {
            prev_mark_ms: self.prev_mark_ms,
            ..FakeRegistry::default()
        });
        let (snowflake, generator) = if self.snowflake {
            let clock: Arc<dyn Clock> = match self.clock {
                Some(c) => Arc::new(c),
                None => Arc::new(SystemClock::new()),
            };
            let g = Snowflake::start(
                registry.clone(),
                NodeIdentity::new("10.0.0.1", 8080),
                clock,
                self.generator.clone(),
            )
            .await
            .unwrap();
            (Some(SnowflakeService::ready(g.clone())), Some(g))
        } else {
            (None, None)
        };
        let state = AppState::new(
            &self.config,
            self.generator.layout,
            segment,
            snowflake,
            metrics,
        );
        Fixture {
            app: app(state),
            store,
            registry,
            generator,
        }
    }
}

async fn fixture() -> Fixture {
    Setup::default().build().await
}

/// The default fixture with its generator on a manual clock at `t0`, one snowflake ID issued
/// and ready.
async fn serving_on_manual_clock(t0: u64) -> (Fixture, ManualClock) {
    let clock = ManualClock::new(t0);
    let f = Setup {
        clock: Some(clock.clone()),
        ..Setup::default()
    }
    .build()
    .await;
    plain_id(&get(&f.app, "/api/snowflake/get/x").await);
    assert_eq!(get(&f.app, "/readyz").await.status, 200);
    (f, clock)
}

struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl Reply {
    fn text(&self) -> String {
        String::from_utf8(self.body.to_vec()).unwrap()
    }
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.text()))
    }
    /// Checks the status and that the body is `{"code": <int>, "message": <str>}` with `code`.
    fn error(&self, status: u16, code: i64) -> String {
        assert_eq!(self.status.as_u16(), status, "{}", self.text());
        assert_eq!(
            self.headers[header::CONTENT_TYPE],
            "application/json",
            "{}",
            self.text()
        );
        let v = self.json();
        assert_eq!(v["code"].as_i64(), Some(code), "{v}");
        let message = v["message"].as_str().expect("message is a string");
        assert!(!message.is_empty());
        if status == 503 {
            let after: u64 = self.headers[header::RETRY_AFTER]
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            assert!(after >= 1);
        }
        message.to_string()
    }
}

async fn send(
    app: &Router,
    method: Method,
    uri: &str,
    peer: Option<&str>,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Reply {
    let mut req = Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let mut req = req
        .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
        .unwrap();
    if let Some(p) = peer {
        req.extensions_mut()
            .insert(ConnectInfo(p.parse::<SocketAddr>().unwrap()));
    }
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    Reply {
        status,
        headers,
        body,
    }
}

const LOCAL: Option<&str> = Some("127.0.0.1:40000");
const REMOTE: Option<&str> = Some("192.0.2.7:40000");
const JSON: &[(&str, &str)] = &[("content-type", "application/json")];

async fn get(app: &Router, uri: &str) -> Reply {
    send(app, Method::GET, uri, LOCAL, &[], None).await
}

fn plain_id(r: &Reply) -> i64 {
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert!(
        r.headers[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/plain"),
        "{:?}",
        r.headers
    );
    r.text().parse().expect("a decimal id")
}

#[tokio::test]
async fn leaf_segment_route_answers_get_and_post_in_plain_text() {
    let f = fixture().await;
    let a = plain_id(&get(&f.app, "/api/segment/get/t").await);
    let b = plain_id(&send(&f.app, Method::POST, "/api/segment/get/t", None, &[], None).await);
    let c = plain_id(&get(&f.app, "/api/segment/get/leaf-segment-test").await);
    assert_eq!(a, 1, "the first segment of a fresh tag starts at max_id 1");
    assert_eq!(b, 2);
    assert_eq!(c, 1, "tags count separately");
    // Past the step of 10: the segment switch is invisible to the client.
    let mut last = b;
    for _ in 0..25 {
        let id = plain_id(&get(&f.app, "/api/segment/get/t").await);
        assert!(id > last);
        last = id;
    }
}

#[tokio::test]
async fn leaf_snowflake_route_ignores_the_key() {
    let f = fixture().await;
    let layout = SnowflakeLayout::default();
    let mut seen = Vec::new();
    for (method, uri) in [
        (Method::GET, "/api/snowflake/get/anything"),
        (Method::POST, "/api/snowflake/get/x"),
        (Method::GET, "/api/snowflake/get/a/b"),
        (Method::GET, "/api/snowflake/get/"),
        (Method::GET, "/api/snowflake/get"),
    ] {
        let id = plain_id(&send(&f.app, method, uri, None, &[], None).await);
        assert_eq!(layout.decode(id).unwrap().worker_id, WORKER);
        seen.push(id);
    }
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
}

#[tokio::test]
async fn unknown_tag_is_404_with_leafs_code() {
    let f = fixture().await;
    let m = get(&f.app, "/api/segment/get/nope").await.error(404, -2);
    assert!(m.contains("nope"), "{m}");
    get(&f.app, "/v1/segment/nope").await.error(404, -2);
    send(
        &f.app,
        Method::POST,
        "/api/segment/get/nope",
        None,
        &[],
        None,
    )
    .await
    .error(404, -2);
}

#[tokio::test]
async fn malformed_tags_are_400() {
    let f = fixture().await;
    let long = "x".repeat(300);
    for tag in [
        "".to_string(),
        long.clone(),
        "a/b".into(),
        "a%2Fb".into(),
        "a%0Ab".into(),
        "a%00b".into(),
        "a%7Fb".into(),
        "%FF%FE".into(),
        // Not percent-encoding at all (the README's "bad percent-encoding").
        "%zz".into(),
        "%".into(),
        "a%2".into(),
        "a%g0b".into(),
    ] {
        for base in ["/api/segment/get/", "/v1/segment/"] {
            let uri = format!("{base}{tag}");
            get(&f.app, &uri).await.error(400, 400);
        }
        let uri = format!("/api/segment/get/{tag}");
        send(&f.app, Method::POST, &uri, None, &[], None)
            .await
            .error(400, 400);
    }
    get(&f.app, "/api/segment/get").await.error(400, 400);
    get(&f.app, "/v1/segment").await.error(400, 400);
    let m = get(&f.app, &format!("/v1/segment/{long}"))
        .await
        .error(400, 400);
    assert!(m.contains("300"), "{m}");
}

#[tokio::test]
async fn v1_segment_batches() {
    let f = fixture().await;
    let r = get(&f.app, "/v1/segment/t?count=25").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["tag"], "t");
    let ids: Vec<i64> = v["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_i64().unwrap())
        .collect();
    assert_eq!(
        ids,
        (1..=25).collect::<Vec<_>>(),
        "ascending across segments of 10"
    );
    let r = get(&f.app, "/v1/segment/t").await;
    assert_eq!(
        r.json()["ids"],
        serde_json::json!([26]),
        "count defaults to 1"
    );
    let r = get(&f.app, "/v1/segment/t?count=2&as=string").await;
    assert_eq!(r.json()["ids"], serde_json::json!(["27", "28"]));
    let r = get(&f.app, "/v1/segment/t?count=50").await;
    assert_eq!(
        r.json()["ids"].as_array().unwrap().len(),
        50,
        "the maximum is allowed"
    );
}

#[tokio::test]
async fn bad_counts_are_400() {
    let f = fixture().await;
    for q in [
        "count=0",
        "count=51",
        "count=abc",
        "count=-1",
        "count=1.5",
        "count=",
        "count=99999999999999999999999",
        "count=1&count=2",
        "as=hex",
    ] {
        let m = get(&f.app, &format!("/v1/segment/t?{q}"))
            .await
            .error(400, 400);
        if q.starts_with("count=") && !q.contains('&') {
            assert!(m.contains("50"), "{q}: the message names the maximum: {m}");
        }
        get(&f.app, &format!("/v1/snowflake?{q}"))
            .await
            .error(400, 400);
    }
}

#[tokio::test]
async fn v1_snowflake_batches() {
    let f = fixture().await;
    let r = get(&f.app, "/v1/snowflake?count=20").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let ids: Vec<i64> = r.json()["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_i64().unwrap())
        .collect();
    assert_eq!(ids.len(), 20);
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    let r = get(&f.app, "/v1/snowflake?as=string").await;
    let s = r.json()["ids"][0].as_str().unwrap().to_string();
    assert!(s.parse::<i64>().unwrap() > ids[19]);
}

#[tokio::test]
async fn decode_routes() {
    let f = fixture().await;
    let layout = SnowflakeLayout::default();
    let id = layout.encode(1_700_000_000_123, 7, 42).unwrap();
    let r = get(&f.app, &format!("/decodeSnowflakeId?snowflakeId={id}")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["timestamp"], "1700000000123(2023-11-14 22:13:20.123)");
    assert_eq!(v["workerId"], "7");
    assert_eq!(v["sequenceId"], "42");

    let r = get(&f.app, &format!("/v1/snowflake/{id}/decode")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["id"], id);
    assert_eq!(v["timestamp_ms"], 1_700_000_000_123u64);
    assert_eq!(v["time"], "2023-11-14T22:13:20.123Z");
    assert_eq!(v["worker_id"], 7);
    assert_eq!(v["sequence"], 42);

    for q in [
        "snowflakeId=abc",
        "snowflakeId=",
        "snowflakeId=-5",
        "other=1",
        "snowflakeId=1e5",
    ] {
        get(&f.app, &format!("/decodeSnowflakeId?{q}"))
            .await
            .error(400, 400);
    }
    for raw in ["abc", "-1", "99999999999999999999"] {
        get(&f.app, &format!("/v1/snowflake/{raw}/decode"))
            .await
            .error(400, 400);
    }
}

/// The JSON strings of `ids` in a 200 answer.
fn text_ids(r: &Reply) -> Vec<String> {
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().expect("a formatted ID is a string").to_owned())
        .collect()
}

#[tokio::test]
async fn snowflake_ids_in_each_format_decode_to_the_parts_of_the_plain_id() {
    // 2026-11-26 13:17:30.192 UTC, as in the friendly example.
    let t0 = 1_795_699_050_192;
    let (f, _clock) = serving_on_manual_clock(t0).await;
    let layout = SnowflakeLayout::default();
    for (format, width) in [
        ("base36", 1..=13),
        ("base62", 1..=11),
        ("friendly", 21..=30),
    ] {
        let app = &f.app;
        let take = |q: &str| {
            let uri = format!("/v1/snowflake?format={format}&{q}");
            async move { get(app, &uri).await }
        };
        let texts = text_ids(&take("count=3").await);
        assert_eq!(texts.len(), 3, "{format}");
        let one = text_ids(&take("as=string").await);
        assert_eq!(
            one.len(),
            1,
            "{format}: as=string is what a format answers anyway"
        );
        for text in texts {
            assert!(width.contains(&text.len()), "{format}: {text}");
            let r = get(
                &f.app,
                &format!("/v1/snowflake/{text}/decode?format={format}"),
            )
            .await;
            assert_eq!(r.status, 200, "{format} {text}: {}", r.text());
            let by_text = r.json();
            let id = by_text["id"].as_i64().unwrap();
            let plain = get(&f.app, &format!("/v1/snowflake/{id}/decode"))
                .await
                .json();
            assert_eq!(by_text, plain, "{format} {text}");
            assert_eq!(plain["worker_id"], WORKER, "{format} {text}");
            assert_eq!(plain["timestamp_ms"], t0, "{format} {text}");
            if format == "friendly" {
                let seq = layout.decode(id).unwrap().sequence;
                assert_eq!(text, format!("20261126131730192-{WORKER}-{seq}"));
            }
        }
    }
}

#[tokio::test]
async fn an_unknown_snowflake_format_is_a_400_and_takes_no_id() {
    let f = fixture().await;
    let issued = |text: String| {
        text.lines()
            .find_map(|l| l.strip_prefix(r#"leaf_ids_issued_total{mode="snowflake",tag=""} "#))
            .map(str::to_owned)
    };
    let before = issued(get(&f.app, "/metrics").await.text());
    for q in [
        "format=hex",
        "format=",
        "format=BASE36",
        "format=base62&format=base36",
        "count=5&format=decimal",
        "format=base62&as=number",
    ] {
        let m = get(&f.app, &format!("/v1/snowflake?{q}"))
            .await
            .error(400, 400);
        if q.contains("hex") || q.contains("decimal") {
            assert!(
                m.contains("base36, base62, friendly"),
                "{q}: the message lists the formats: {m}"
            );
        }
    }
    assert_eq!(issued(get(&f.app, "/metrics").await.text()), before);
    let layout = SnowflakeLayout::default();
    let id = layout.encode(1_700_000_000_123, 7, 42).unwrap();
    for (path, query) in [
        (id.to_string(), "format=hex"),
        ("!".to_owned(), "format=base62"),
        ("ABC".to_owned(), "format=base36"),
        // Above i64::MAX.
        ("zzzzzzzzzzzzzz".to_owned(), "format=base36"),
        (id.to_string(), "format=friendly"),
        ("20231114221320123-7".to_owned(), "format=friendly"),
        ("20231114221320123-7-99999".to_owned(), "format=friendly"),
        ("20231399221320123-7-42".to_owned(), "format=friendly"),
    ] {
        get(&f.app, &format!("/v1/snowflake/{path}/decode?{query}"))
            .await
            .error(400, 400);
    }
}

#[tokio::test]
async fn snowflake_ids_without_a_format_answer_as_before() {
    let f = fixture().await;
    let plain = |r: Reply| {
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.headers[header::CONTENT_TYPE], "application/json");
        r.text()
    };
    // Byte for byte what the route answered before formats: numbers in `ids`, nothing else.
    for q in ["", "?count=3", "?format=number&count=3", "?as=number"] {
        let body = plain(get(&f.app, &format!("/v1/snowflake{q}")).await);
        let ids: Vec<i64> =
            serde_json::from_value(serde_json::from_str::<Value>(&body).unwrap()["ids"].clone())
                .unwrap();
        assert_eq!(body, serde_json::json!({ "ids": ids }).to_string(), "{q}");
        let numbers: Vec<String> = ids.iter().map(i64::to_string).collect();
        assert_eq!(body, format!("{{\"ids\":[{}]}}", numbers.join(",")), "{q}");
    }
    let body = plain(get(&f.app, "/v1/snowflake?as=string&format=number").await);
    assert!(
        body.starts_with("{\"ids\":[\"") && body.ends_with("\"]}"),
        "{body}"
    );
    plain_id(&get(&f.app, "/api/snowflake/get/x?format=base62").await);
}

#[tokio::test]
async fn disabled_modes_answer_404_saying_so() {
    let f = Setup {
        segment: false,
        snowflake: false,
        ..Setup::default()
    }
    .build()
    .await;
    for uri in [
        "/api/segment/get/t",
        "/api/segment/get/",
        "/v1/segment/t?count=2",
        "/v1/tags",
    ] {
        let m = get(&f.app, uri).await.error(404, 404);
        assert!(m.contains("segment mode is disabled"), "{uri}: {m}");
    }
    for uri in ["/api/snowflake/get/x", "/v1/snowflake"] {
        let m = get(&f.app, uri).await.error(404, 404);
        assert!(m.contains("snowflake mode is disabled"), "{uri}: {m}");
    }
    let r = get(&f.app, "/readyz").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["segment"]["enabled"], false);
    assert_eq!(r.json()["snowflake"]["enabled"], false);
    // The console's pages say so, as pages.
    for (uri, says) in [
        ("/", "disabled"),
        ("/cache", "Segment mode is disabled"),
        ("/db", "Segment mode is disabled"),
        ("/snowflake", "Snowflake mode is disabled"),
    ] {
        let r = get(&f.app, uri).await;
        assert_eq!(r.status, 200, "{uri}");
        assert!(r.text().contains(says), "{uri}: {}", r.text());
    }

    // One mode off leaves the other serving.
    let f = Setup {
        segment: false,
        ..Setup::default()
    }
    .build()
    .await;
    plain_id(&get(&f.app, "/api/snowflake/get/x").await);
    get(&f.app, "/api/segment/get/t").await.error(404, 404);
}

#[tokio::test]
async fn descriptions_over_256_characters_are_400() {
    let f = fixture().await;
    let create = |tag: &str, description: String| {
        format!(r#"{{"tag":"{tag}","description":"{description}"}}"#)
    };
    let post = |body: String| {
        let app = f.app.clone();
        async move { send(&app, Method::POST, "/v1/tags", LOCAL, JSON, Some(&body)).await }
    };
    let m = post(create("d1", "x".repeat(257))).await.error(400, 400);
    assert!(m.contains("256"), "{m}");
    assert_eq!(post(create("d2", "\u{e9}".repeat(256))).await.status, 201);
    let patch = |body: String| {
        let app = f.app.clone();
        async move { send(&app, Method::PATCH, "/v1/tags/d2", LOCAL, JSON, Some(&body)).await }
    };
    patch(format!(r#"{{"description":"{}"}}"#, "y".repeat(257)))
        .await
        .error(400, 400);
    assert_eq!(
        patch(format!(r#"{{"description":"{}"}}"#, "y".repeat(256)))
            .await
            .status,
        200
    );
}

#[tokio::test]
async fn admin_rule_without_a_token() {
    let f = fixture().await;
    for uri in ["/v1/tags", "/cache", "/db"] {
        let r = send(&f.app, Method::GET, uri, LOCAL, &[], None).await;
        assert_eq!(r.status, 200, "{uri}: {}", r.text());
        let r = send(&f.app, Method::GET, uri, Some("[::1]:1"), &[], None).await;
        assert_eq!(r.status, 200, "{uri} from ::1");
        send(&f.app, Method::GET, uri, REMOTE, &[], None)
            .await
            .error(403, 403);
        // A header cannot make a remote peer local.
        send(
            &f.app,
            Method::GET,
            uri,
            REMOTE,
            &[("x-forwarded-for", "127.0.0.1"), ("x-real-ip", "127.0.0.1")],
            None,
        )
        .await
        .error(403, 403);
        send(&f.app, Method::GET, uri, None, &[], None)
            .await
            .error(403, 403);
    }
    send(
        &f.app,
        Method::POST,
        "/v1/tags",
        REMOTE,
        JSON,
        Some(r#"{"tag":"x"}"#),
    )
    .await
    .error(403, 403);
    let x = leaf_core::Tag::new("x").unwrap();
    assert!(
        f.store.get(&x).await.unwrap().is_none(),
        "a refused request changes nothing"
    );
}

#[tokio::test]
async fn admin_rule_with_a_token() {
    let mut s = Setup::default();
    s.config.server.admin_token = "s3cret".into();
    let f = s.build().await;
    for uri in ["/v1/tags", "/cache", "/db"] {
        for peer in [LOCAL, REMOTE] {
            let r = send(&f.app, Method::GET, uri, peer, &[], None).await;
            r.error(401, 401);
            // A page challenges with Basic, which a browser answers with a prompt.
            let challenge = if uri.starts_with("/v1") {
                "Bearer"
            } else {
                r#"Basic realm="leaf", charset="UTF-8""#
            };
            assert_eq!(r.headers[header::WWW_AUTHENTICATE], challenge, "{uri}");
            send(
                &f.app,
                Method::GET,
                uri,
                peer,
                &[("authorization", "Bearer wrong")],
                None,
            )
            .await
            .error(401, 401);
            let r = send(
                &f.app,
                Method::GET,
                uri,
                peer,
                &[("authorization", "Bearer s3cret")],
                None,
            )
            .await;
            assert_eq!(r.status, 200, "{uri} {peer:?}: {}", r.text());
        }
    }
}

/// `user:password` as an HTTP Basic `Authorization` value.
fn basic(credentials: &str) -> String {
    use base64::Engine;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(credentials)
    )
}

#[tokio::test]
async fn pages_accept_basic_with_the_token_as_password_and_the_api_does_not() {
    let mut s = Setup::default();
    s.config.server.admin_token = "s3cret".into();
    let f = s.build().await;
    let good = basic("operator:s3cret");
    for uri in ["/cache", "/db"] {
        let r = send(
            &f.app,
            Method::GET,
            uri,
            REMOTE,
            &[("authorization", &good)],
            None,
        )
        .await;
        assert_eq!(r.status, 200, "{uri}: {}", r.text());
        for bad in [
            basic("operator:wrong"),
            basic("s3cret:"),
            "Basic %%%".into(),
        ] {
            let r = send(
                &f.app,
                Method::GET,
                uri,
                REMOTE,
                &[("authorization", &bad)],
                None,
            )
            .await;
            r.error(401, 401);
            assert!(
                r.headers[header::WWW_AUTHENTICATE]
                    .to_str()
                    .unwrap()
                    .starts_with("Basic "),
                "{uri} {bad}"
            );
        }
    }
    // The API keeps to Bearer: credentials a browser remembers never authorise a write.
    send(
        &f.app,
        Method::GET,
        "/v1/tags",
        REMOTE,
        &[("authorization", &good)],
        None,
    )
    .await
    .error(401, 401);
    let headers = [
        ("authorization", good.as_str()),
        ("content-type", "application/json"),
    ];
    send(
        &f.app,
        Method::POST,
        "/v1/tags",
        REMOTE,
        &headers,
        Some(r#"{"tag":"b"}"#),
    )
    .await
    .error(401, 401);
}

/// A loopback client's create of `tag` and update of `t` with `headers`, each refused with
/// `status`; the create's message.
async fn writes_refused(app: &Router, headers: &[(&str, &str)], tag: &str, status: u16) -> String {
    let body = format!(r#"{{"tag":"{tag}"}}"#);
    let m = send(app, Method::POST, "/v1/tags", LOCAL, headers, Some(&body))
        .await
        .error(status, i64::from(status));
    send(
        app,
        Method::PATCH,
        "/v1/tags/t",
        LOCAL,
        headers,
        Some(r#"{"step":9}"#),
    )
    .await
    .error(status, i64::from(status));
    m
}

#[tokio::test]
async fn admin_writes_need_a_json_content_type() {
    let f = fixture().await;
    // What a browser sends cross-site without a preflight: text/plain, forms.
    for content_type in [
        None,
        Some("text/plain"),
        Some("text/plain;charset=UTF-8"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
    ] {
        let headers: Vec<(&str, &str)> = content_type
            .map(|t| ("content-type", t))
            .into_iter()
            .collect();
        let m = writes_refused(&f.app, &headers, "plain", 415).await;
        assert!(m.contains("application/json"), "{m}");
    }
    let plain = leaf_core::Tag::new("plain").unwrap();
    assert!(
        f.store.get(&plain).await.unwrap().is_none(),
        "a refused request changes nothing"
    );
    let headers = [("content-type", "application/json; charset=utf-8")];
    let r = send(
        &f.app,
        Method::POST,
        "/v1/tags",
        LOCAL,
        &headers,
        Some(r#"{"tag":"plain"}"#),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text());
}

#[tokio::test]
async fn admin_writes_from_pages_of_other_origins_are_refused() {
    let f = fixture().await;
    let json = ("content-type", "application/json");
    let host = ("host", "127.0.0.1:8080");
    for headers in [
        vec![json, host, ("origin", "http://localhost:18750")],
        vec![json, host, ("origin", "http://127.0.0.1:18750")],
        vec![json, host, ("origin", "null")],
        vec![json, host, ("sec-fetch-site", "cross-site")],
        vec![json, host, ("sec-fetch-site", "same-site")],
    ] {
        let m = writes_refused(&f.app, &headers, "csrf", 403).await;
        assert!(m.contains("other origins"), "{m}");
    }
    let csrf = leaf_core::Tag::new("csrf").unwrap();
    assert!(
        f.store.get(&csrf).await.unwrap().is_none(),
        "a refused request changes nothing"
    );
    // The server's own pages (same origin), and clients that send no Origin, may write.
    let same = [
        json,
        host,
        ("origin", "http://127.0.0.1:8080"),
        ("sec-fetch-site", "same-origin"),
    ];
    let r = send(
        &f.app,
        Method::POST,
        "/v1/tags",
        LOCAL,
        &same,
        Some(r#"{"tag":"csrf"}"#),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text());
    // Reads are not writes: a page of another origin cannot read the answer anyway.
    let r = send(
        &f.app,
        Method::GET,
        "/v1/tags",
        LOCAL,
        &[("origin", "http://localhost:18750")],
        None,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
}

#[tokio::test]
async fn without_a_token_a_rebound_host_name_is_refused_on_admin_routes_and_pages() {
    let f = fixture().await;
    // DNS rebinding: the attacker's name now resolves to 127.0.0.1, so the peer is loopback
    // and the page's Origin matches its Host; only the Host names another server.
    let rebound = [
        ("content-type", "application/json"),
        ("host", "rebind.attacker.example:8080"),
        ("origin", "http://rebind.attacker.example:8080"),
        ("sec-fetch-site", "same-origin"),
    ];
    let m = writes_refused(&f.app, &rebound, "rebound", 403).await;
    assert!(m.contains("loopback name"), "{m}");
    for uri in ["/v1/tags", "/", "/cache", "/db", "/snowflake"] {
        let r = send(&f.app, Method::GET, uri, LOCAL, &rebound[1..2], None).await;
        assert!(r.error(403, 403).contains("loopback name"), "{uri}");
    }
    let rebound_tag = leaf_core::Tag::new("rebound").unwrap();
    assert!(f.store.get(&rebound_tag).await.unwrap().is_none());
    // The loopback names still pass.
    for host in ["localhost:8080", "127.0.0.1:8080", "[::1]:8080"] {
        let r = send(
            &f.app,
            Method::GET,
            "/v1/tags",
            LOCAL,
            &[("host", host)],
            None,
        )
        .await;
        assert_eq!(r.status, 200, "{host}: {}", r.text());
    }
    // With a token, the token is the rule, whatever the name.
    let mut s = Setup::default();
    s.config.server.admin_token = "s3cret".into();
    let f = s.build().await;
    let headers = [
        ("host", "leaf.example:8080"),
        ("authorization", "Bearer s3cret"),
    ];
    let r = send(&f.app, Method::GET, "/v1/tags", REMOTE, &headers, None).await;
    assert_eq!(r.status, 200, "{}", r.text());
}

#[tokio::test]
async fn a_page_of_another_origin_cannot_make_a_browser_allocate_segments() {
    let f = fixture().await;
    let before = f.store.allocations();
    // An empty form post or a no-cors fetch from another site needs no preflight.
    for headers in [
        vec![("origin", "http://evil.example")],
        vec![("origin", "null")],
        vec![("sec-fetch-site", "cross-site")],
        vec![
            ("host", "127.0.0.1:8080"),
            ("origin", "http://localhost:18750"),
        ],
    ] {
        let r = allocate(
            &f.app,
            "/v1/segment/t/allocate?step=1000000",
            &headers,
            None,
        )
        .await;
        r.error(403, 403);
        assert!(r.text().contains("other origins"), "{}", r.text());
    }
    // Same-origin is not enough (a rebound page is same-origin): with no name in
    // server.allowed_hosts, no page of any origin allocates.
    let same = [
        ("host", "127.0.0.1:8080"),
        ("origin", "http://127.0.0.1:8080"),
    ];
    allocate(&f.app, "/v1/segment/t/allocate", &same, None)
        .await
        .error(403, 403);
    assert_eq!(f.store.allocations(), before, "nothing was reserved");
    // Leasing clients send no Origin.
    let r = allocate(&f.app, "/v1/segment/t/allocate", &[], None).await;
    range_of(&r, "t", 10, 10);
}

#[tokio::test]
async fn tags_admin_create_patch_list() {
    let f = fixture().await;
    // Asked for before it exists: unknown, and remembered as such for a moment.
    get(&f.app, "/api/segment/get/new").await.error(404, -2);
    let r = send(
        &f.app,
        Method::POST,
        "/v1/tags",
        LOCAL,
        JSON,
        Some(r#"{"tag":"new","max_id":100,"step":5,"description":"d"}"#),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text());
    let v = r.json();
    assert_eq!(
        (v["tag"].as_str(), v["max_id"].as_i64(), v["step"].as_i64()),
        (Some("new"), Some(100), Some(5))
    );
    // Creating the tag clears the remembered miss: it serves at once.
    assert_eq!(plain_id(&get(&f.app, "/api/segment/get/new").await), 100);

    send(
        &f.app,
        Method::POST,
        "/v1/tags",
        LOCAL,
        JSON,
        Some(r#"{"tag":"new"}"#),
    )
    .await
    .error(409, 409);
    for bad in [
        "not json",
        r#"{"tag":"a/b"}"#,
        r#"{"tag":""}"#,
        r#"{"tag":"z","step":0}"#,
        r#"{"tag":"z","max_id":-1}"#,
        r#"{"tag":"z","stepp":3}"#,
        r#"{"step":3}"#,
        "",
    ] {
        send(&f.app, Method::POST, "/v1/tags", LOCAL, JSON, Some(bad))
            .await
            .error(400, 400);
    }
    let big = format!(r#"{{"tag":"z","description":"{}"}}"#, "d".repeat(2000));
    send(&f.app, Method::POST, "/v1/tags", LOCAL, JSON, Some(&big))
        .await
        .error(413, 413);

    let r = send(
        &f.app,
        Method::PATCH,
        "/v1/tags/new",
        LOCAL,
        JSON,
        Some(r#"{"step":7}"#),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["step"], 7);
    send(
        &f.app,
        Method::PATCH,
        "/v1/tags/ghost",
        LOCAL,
        JSON,
        Some(r#"{"step":7}"#),
    )
    .await
    .error(404, -2);
    send(
        &f.app,
        Method::PATCH,
        "/v1/tags/a/b",
        LOCAL,
        JSON,
        Some(r#"{"step":7}"#),
    )
    .await
    .error(400, 400);
    send(
        &f.app,
        Method::PATCH,
        "/v1/tags/new",
        LOCAL,
        JSON,
        Some(r#"{"step":-7}"#),
    )
    .await
    .error(400, 400);

    let r = get(&f.app, "/v1/tags").await;
    assert_eq!(r.status, 200);
    let tags = r.json()["tags"].as_array().unwrap().clone();
    let names: Vec<&str> = tags.iter().map(|t| t["tag"].as_str().unwrap()).collect();
    assert_eq!(names, ["leaf-segment-test", "new", "t"]);
    let new = &tags[1];
    assert_eq!(new["step"], 7);
    assert_eq!(new["description"], "d");
    assert_eq!(new["cache"]["initialized"], true, "{new}");
}

#[tokio::test]
async fn monitor_pages_are_escaped_html() {
    let f = fixture().await;
    send(
        &f.app,
        Method::POST,
        "/v1/tags",
        LOCAL,
        JSON,
        Some(r#"{"tag":"<b>x<b>","description":"<script>alert(1)<script>"}"#),
    )
    .await;
    plain_id(&get(&f.app, "/api/segment/get/%3Cb%3Ex%3Cb%3E").await);
    for uri in ["/cache", "/db"] {
        let r = get(&f.app, uri).await;
        assert_eq!(r.status, 200);
        assert!(
            r.headers[header::CONTENT_TYPE]
                .to_str()
                .unwrap()
                .starts_with("text/html")
        );
        let html = r.text();
        assert!(html.contains("&lt;b&gt;x&lt;b&gt;"), "{uri}: {html}");
        assert!(
            !html.contains("<b>x") && !html.contains("<script>"),
            "{uri}: {html}"
        );
    }
}

#[tokio::test]
async fn the_console_shows_the_node_and_every_page_links_to_the_others() {
    let f = fixture().await;
    plain_id(&get(&f.app, "/api/segment/get/t").await);
    let pages = ["/", "/cache", "/db", "/snowflake"];
    for uri in pages {
        let r = get(&f.app, uri).await;
        assert_eq!(r.status, 200, "{uri}: {}", r.text());
        assert!(
            r.headers[header::CONTENT_TYPE]
                .to_str()
                .unwrap()
                .starts_with("text/html"),
            "{uri}"
        );
        let html = r.text();
        assert!(html.contains("name=\"viewport\""), "{uri}");
        assert!(
            html.contains("Generated 20"),
            "{uri}: no time of generation"
        );
        for href in pages.iter().chain(&["/metrics"]) {
            assert!(
                html.contains(&format!("href=\"{href}\"")),
                "{uri} lacks {href}"
            );
        }
        assert!(!html.contains("<script"), "{uri}");
        // Pages reveal business volume: the admin rule applies.
        send(&f.app, Method::GET, uri, REMOTE, &[], None)
            .await
            .error(403, 403);
    }
    let index = get(&f.app, "/").await.text();
    for shown in [
        "10.0.0.1:8080",
        concat!("leaf-server ", env!("CARGO_PKG_VERSION")),
        "store <code>sqlite</code>",
        "workerId mode <code>local</code>",
        "worker id 5",
        "<dt>gRPC</dt><dd>on, this port",
    ] {
        assert!(index.contains(shown), "{shown}: {index}");
    }
    let cache = get(&f.app, "/cache").await.text();
    assert!(cache.contains("data-label=\"stored step\">10<"), "{cache}");
    assert!(
        cache.contains("not loaded"),
        "leaf-segment-test was never asked for: {cache}"
    );
    let sf = get(&f.app, "/snowflake").await.text();
    assert!(sf.contains("issuing"), "{sf}");
    assert!(sf.contains("Worker id</dt><dd>5 (of 0..=1,023)"), "{sf}");
}

/// The embedded default is for one node: the index says so, naming what to set, and says
/// nothing once the configuration leaves it.
#[tokio::test]
async fn the_index_warns_on_the_one_node_default_and_only_there() {
    let index = get(&fixture().await.app, "/").await.text();
    assert!(index.contains("For one node only"), "{index}");
    for named in [
        "segment.store",
        "snowflake.local.worker_id",
        "snowflake.mode",
    ] {
        assert!(index.contains(named), "{named}: {index}");
    }
    let mut config = Setup::default().config;
    config.segment.store = "mysql".into();
    config.snowflake.mode = "zk_recycle".into();
    let f = Setup {
        config,
        ..Setup::default()
    }
    .build()
    .await;
    let index = get(&f.app, "/").await.text();
    assert!(!index.contains("For one node only"), "{index}");
}

#[tokio::test]
async fn console_refresh_is_opt_in_and_checked() {
    let f = fixture().await;
    let html = get(&f.app, "/cache?refresh=5").await.text();
    assert!(
        html.contains("http-equiv=\"refresh\" content=\"5\""),
        "{html}"
    );
    assert!(!get(&f.app, "/cache").await.text().contains("http-equiv"));
    for bad in [
        "/cache?refresh=0",
        "/?refresh=x",
        "/db?refresh=3601",
        "/snowflake?color=red",
    ] {
        get(&f.app, bad).await.error(400, 400);
    }
}

#[tokio::test]
async fn segment_store_down_is_503_with_retry_after() {
    let f = fixture().await;
    f.store.fail(true);
    let m = get(&f.app, "/api/segment/get/t").await.error(503, -3);
    assert!(
        !m.contains("injected"),
        "backend details stay in the log: {m}"
    );
    get(&f.app, "/v1/segment/t").await.error(503, -3);
    f.store.fail(false);
    plain_id(&get(&f.app, "/api/segment/get/t").await);
}

#[tokio::test]
async fn segment_not_started_is_503() {
    let store = Arc::new(MemoryStore::with_tags([("t", 10)]));
    let allocator = SegmentAllocator::new(
        store,
        Arc::new(SystemClock::new()),
        SegmentConfig::default(),
    );
    let service = SegmentService::starting(allocator, &Error::backend("sqlite", "locked"));
    let state = AppState::new(
        &Config::default(),
        SnowflakeLayout::default(),
        Some(service.clone()),
        None,
        Arc::new(Metrics::new()),
    );
    let app = app(state);
    let m = get(&app, "/api/segment/get/t").await.error(503, -3);
    assert!(m.contains("starting") && m.contains("sqlite"), "{m}");
    let r = get(&app, "/readyz").await;
    r.error(503, 503);
    assert_eq!(r.json()["segment"]["ready"], false);
    service.allocator().init().await.unwrap();
    service.mark_ready();
    assert_eq!(plain_id(&get(&app, "/api/segment/get/t").await), 1);
    assert_eq!(get(&app, "/readyz").await.status, 200);
}

#[tokio::test]
async fn snowflake_too_far_behind_its_mark_is_503_and_not_ready() {
    let now = SystemClock::new().now_ms();
    let f = Setup {
        prev_mark_ms: Some(now + 3_600_000),
        ..Setup::default()
    }
    .build()
    .await;
    get(&f.app, "/api/snowflake/get/x").await.error(503, 503);
    get(&f.app, "/v1/snowflake?count=2").await.error(503, 503);
    let r = get(&f.app, "/readyz").await;
    let m = r.error(503, 503);
    assert!(m.contains("snowflake"), "{m}");
    assert_eq!(r.json()["snowflake"]["ready"], false);
    assert_eq!(r.json()["segment"]["ready"], true);
    // Segment mode serves meanwhile.
    plain_id(&get(&f.app, "/api/segment/get/t").await);
}

#[tokio::test]
async fn snowflake_past_the_end_of_its_timestamp_field_is_503_and_not_ready() {
    // 16 timestamp bits: the field ends 65,535 ms after the epoch; the clock starts 1 s before.
    let t0 = 1_700_000_000_000;
    let clock = ManualClock::new(t0);
    let f = Setup {
        clock: Some(clock.clone()),
        generator: SnowflakeConfig {
            layout: SnowflakeLayout::new(16, 10, 12, t0 - 64_535).unwrap(),
            ..SnowflakeConfig::default()
        },
        ..Setup::default()
    }
    .build()
    .await;
    plain_id(&get(&f.app, "/api/snowflake/get/x").await);
    assert_eq!(get(&f.app, "/readyz").await.status, 200);
    clock.advance(std::time::Duration::from_millis(2000));
    let g = f.generator.as_ref().unwrap();
    assert!(g.renew_once().await.unwrap().is_ok());
    let m = get(&f.app, "/api/snowflake/get/x").await.error(503, -5);
    assert!(m.contains("exhausted"), "{m}");
    let r = get(&f.app, "/readyz").await;
    let m = r.error(503, 503);
    assert!(m.contains("ran out"), "{m}");
    assert_eq!(r.json()["snowflake"]["ready"], false);
}

#[tokio::test]
async fn wall_clock_jump_forward_is_503_minus_3_and_not_ready_until_undone() {
    let t0 = 1_700_000_000_000;
    let (f, clock) = serving_on_manual_clock(t0).await;
    let g = f.generator.as_ref().unwrap();
    clock.set_ms(t0 + 3_600_000);
    g.renew_once().await.ok();
    let m = get(&f.app, "/api/snowflake/get/x").await.error(503, -3);
    assert!(m.contains("jumped"), "{m}");
    let m = get(&f.app, "/readyz").await.error(503, 503);
    assert!(m.contains("jumped"), "{m}");
    let metrics = get(&f.app, "/metrics").await.text();
    assert!(
        metrics.contains("leaf_snowflake_clock_jumps_total 1"),
        "{metrics}"
    );
    clock.set_ms(t0);
    assert!(g.renew_once().await.unwrap().is_ok());
    assert_eq!(get(&f.app, "/readyz").await.status, 200);
    plain_id(&get(&f.app, "/api/snowflake/get/x").await);
}

#[tokio::test]
async fn snowflake_not_started_is_503() {
    let service = SnowflakeService::pending(&Error::Unavailable("the registry is down".into()));
    let state = AppState::new(
        &Config::default(),
        SnowflakeLayout::default(),
        None,
        Some(service),
        Arc::new(Metrics::new()),
    );
    let app = app(state);
    let m = get(&app, "/api/snowflake/get/x").await.error(503, 503);
    assert!(m.contains("not available"), "{m}");
    get(&app, "/readyz").await.error(503, 503);
}

#[tokio::test]
async fn backend_error_text_never_reaches_clients() {
    // A cache-file failure as the OS words it, and a driver's message with a host.
    let os = "cannot lock /srv/secret/leaf-data/worker-leaf.lock: Permission denied (os error 13)";
    let sql =
        "error returned from database: 1045 (28000): Access denied for user 'leaf'@'10.9.8.7'";
    let store = Arc::new(MemoryStore::with_tags([("t", 10)]));
    let allocator = SegmentAllocator::new(
        store,
        Arc::new(SystemClock::new()),
        SegmentConfig::default(),
    );
    let segment = SegmentService::starting(allocator, &Error::Unavailable(format!("mysql: {sql}")));
    let snowflake = SnowflakeService::pending(&Error::backend("cache-file", os));
    let app = app(AppState::new(
        &Config::default(),
        SnowflakeLayout::default(),
        Some(segment.clone()),
        Some(snowflake.clone()),
        Arc::new(Metrics::new()),
    ));
    let check = |what: &str, body: &str| {
        for secret in ["/srv/secret", "os error", "10.9.8.7", "Access denied"] {
            assert!(!body.contains(secret), "{what}: {body}");
        }
    };
    for uri in [
        "/api/snowflake/get/x",
        "/v1/snowflake",
        "/api/segment/get/t",
        "/v1/segment/t",
    ] {
        let r = get(&app, uri).await;
        assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{uri}");
        check(uri, &r.text());
    }
    let r = get(&app, "/readyz").await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    check("/readyz", &r.text());
    // The reasons a retrying start-up records later are cleaned the same way.
    segment.set_not_ready_reason(&Error::backend("sqlite", os));
    snowflake.set_pending_reason(&Error::Unavailable(format!("cache file: {os}")));
    check("/readyz", &get(&app, "/readyz").await.text());
    check("segment", &get(&app, "/api/segment/get/t").await.text());
    check("snowflake", &get(&app, "/api/snowflake/get/x").await.text());
}

#[tokio::test]
async fn lease_lost_is_503_with_code_minus_4() {
    let f = fixture().await;
    plain_id(&get(&f.app, "/api/snowflake/get/x").await);
    f.registry.lost.store(true, Ordering::SeqCst);
    let g = f.generator.as_ref().unwrap();
    assert_eq!(g.renew_once().await.unwrap(), Renewal::LeaseLost);
    get(&f.app, "/api/snowflake/get/x").await.error(503, -4);
    get(&f.app, "/readyz").await.error(503, 503);
}

#[tokio::test]
async fn clock_moved_back_is_503_with_code_minus_3_until_it_catches_up() {
    let (f, clock) = serving_on_manual_clock(1_700_000_000_000).await;
    clock.back(1500);
    let r = get(&f.app, "/api/snowflake/get/x").await;
    let m = r.error(503, -3);
    assert!(m.contains("1500"), "{m}");
    assert_eq!(r.headers[header::RETRY_AFTER], "2");
    let r = get(&f.app, "/readyz").await;
    r.error(503, 503);
    assert_eq!(r.headers[header::RETRY_AFTER], "2");
    clock.advance(std::time::Duration::from_millis(1501));
    assert_eq!(get(&f.app, "/readyz").await.status, 200);
    plain_id(&get(&f.app, "/api/snowflake/get/x").await);
}

#[tokio::test]
async fn registry_mark_lag_is_a_metric_where_the_registry_keeps_a_copy() {
    let f = fixture().await;
    let name = "leaf_snowflake_registry_mark_lag_seconds";
    let text = get(&f.app, "/metrics").await.text();
    assert!(!text.contains(name), "no copy, no metric:\n{text}");
    let durable = f.generator.as_ref().unwrap().status().durable_mark_ms;
    f.registry
        .confirmed_ms
        .store(durable - 2500, Ordering::SeqCst);
    let text = get(&f.app, "/metrics").await.text();
    assert!(
        text.lines().any(|l| l == format!("{name} 2.5")),
        "{name} 2.5 expected:\n{text}"
    );
}

#[tokio::test]
async fn health_ready_and_metrics() {
    let f = fixture().await;
    let r = get(&f.app, "/healthz").await;
    assert_eq!(
        (r.status.as_u16(), r.json()["status"].as_str()),
        (200, Some("ok"))
    );
    let r = get(&f.app, "/readyz").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["ready"], true);
    get(&f.app, "/api/segment/get/t").await;
    get(&f.app, "/v1/segment/t?count=4").await;
    get(&f.app, "/api/snowflake/get/x").await;
    get(&f.app, "/api/segment/get/nope").await;
    let r = get(&f.app, "/metrics").await;
    assert_eq!(r.status, 200);
    assert!(
        r.headers[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/plain; version=0.0.4")
    );
    let text = r.text();
    let has = |line: &str| assert!(text.lines().any(|l| l == line), "{line}\n{text}");
    has("leaf_ids_issued_total{mode=\"segment\",tag=\"t\"} 5");
    has("leaf_ids_issued_total{mode=\"snowflake\",tag=\"\"} 1");
    has("leaf_requests_total{route=\"/api/segment/get/{*key}\",status=\"200\"} 1");
    has("leaf_requests_total{route=\"/api/segment/get/{*key}\",status=\"404\"} 1");
    has("leaf_requests_total{route=\"/v1/segment/{*tag}\",status=\"200\"} 1");
    has("leaf_worker_lease_valid 1");
    has("leaf_snowflake_clock_backwards_total 0");
    for name in [
        "leaf_request_duration_seconds_bucket{route=\"/api/segment/get/{*key}\",le=\"+Inf\"} 2",
        "# TYPE leaf_segment_remaining gauge",
        "# TYPE leaf_segment_loads_total counter",
        "# TYPE leaf_segment_load_duration_seconds histogram",
        "# TYPE leaf_snowflake_mark_lag_seconds gauge",
    ] {
        has(name);
    }
    assert!(
        text.contains("leaf_segment_remaining{tag=\"t\"} "),
        "{text}"
    );
    // A tag nobody asked for is known but not loaded: no "remaining 0" to alert on.
    has("leaf_segment_loaded{tag=\"t\"} 1");
    has("leaf_segment_loaded{tag=\"leaf-segment-test\"} 0");
    assert!(
        !text.contains("leaf_segment_remaining{tag=\"leaf-segment-test\"}"),
        "{text}"
    );
    assert!(
        text.contains("leaf_segment_loads_total{tag=\"t\",result=\"ok\"} "),
        "{text}"
    );
    assert!(text.contains("leaf_snowflake_mark_lag_seconds "), "{text}");
    assert!(
        !text.contains("nope"),
        "an unknown tag never becomes a label"
    );
}

#[tokio::test]
async fn unknown_routes_and_methods_are_json_errors() {
    let f = fixture().await;
    get(&f.app, "/nowhere").await.error(404, 404);
    get(&f.app, "/api/segment").await.error(404, 404);
    send(&f.app, Method::DELETE, "/v1/tags/t", LOCAL, &[], None)
        .await
        .error(405, 405);
    send(
        &f.app,
        Method::DELETE,
        "/api/segment/get/t",
        LOCAL,
        &[],
        None,
    )
    .await
    .error(405, 405);
    send(&f.app, Method::POST, "/v1/snowflake", LOCAL, &[], None)
        .await
        .error(405, 405);
}

/// `POST uri` from a loopback peer with `headers` and an optional body.
async fn allocate(app: &Router, uri: &str, headers: &[(&str, &str)], body: Option<&str>) -> Reply {
    send(app, Method::POST, uri, LOCAL, headers, body).await
}

/// The `[start, end)` of a 200 answer of the allocate route, its fields checked.
fn range_of(r: &Reply, tag: &str, step: i64, used_step: i64) -> (i64, i64) {
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["tag"], tag, "{v}");
    assert_eq!(
        (v["step"].as_i64(), v["used_step"].as_i64()),
        (Some(step), Some(used_step)),
        "{v}"
    );
    let max = v["max_id"].as_i64().unwrap();
    (max - used_step, max)
}

#[tokio::test]
async fn allocate_reserves_ranges_from_the_store_never_from_the_servers_buffers() {
    let f = fixture().await;
    let a = range_of(
        &allocate(&f.app, "/v1/segment/t/allocate", &[], None).await,
        "t",
        10,
        10,
    );
    assert_eq!(a, (1, 11));
    // The server's own buffer loads after it, from the store.
    assert_eq!(plain_id(&get(&f.app, "/api/segment/get/t").await), 11);
    let b = range_of(
        &allocate(&f.app, "/v1/segment/t/allocate", &[], None).await,
        "t",
        10,
        10,
    );
    assert!(b.0 >= 21, "{b:?} overlaps the server's segment 11..21");
    let before = f.store.allocations();
    let c = range_of(
        &allocate(&f.app, "/v1/segment/t/allocate", &[], None).await,
        "t",
        10,
        10,
    );
    assert_eq!(c.0, b.1, "consecutive allocations are contiguous");
    assert_eq!(
        f.store.allocations(),
        before + 1,
        "one store allocation per request"
    );
    // The server keeps serving from its own segment, untouched by the clients' ranges.
    assert_eq!(plain_id(&get(&f.app, "/api/segment/get/t").await), 12);
}

#[tokio::test]
async fn allocate_takes_a_step_in_the_query_or_the_body() {
    let f = fixture().await;
    let uri = "/v1/segment/t/allocate";
    let r = allocate(&f.app, "/v1/segment/t/allocate?step=5", &[], None).await;
    assert_eq!(range_of(&r, "t", 10, 5), (1, 6));
    let r = allocate(&f.app, uri, JSON, Some(r#"{"step":7}"#)).await;
    assert_eq!(range_of(&r, "t", 10, 7), (6, 13));
    let r = allocate(&f.app, uri, JSON, Some(r#"{}"#)).await;
    assert_eq!(range_of(&r, "t", 10, 10), (13, 23));
    let r = allocate(&f.app, uri, &[], Some("")).await;
    assert_eq!(
        range_of(&r, "t", 10, 10),
        (23, 33),
        "an empty body needs no type"
    );
    let max = format!("{uri}?step=1000000");
    range_of(&allocate(&f.app, &max, &[], None).await, "t", 10, 1_000_000);
    for (q, body) in [
        ("?step=0", None),
        ("?step=-1", None),
        ("?step=abc", None),
        ("?step=", None),
        ("?step=1.5", None),
        ("?step=2", Some(r#"{"step":2}"#)),
        ("", Some(r#"{"step":0}"#)),
        ("", Some(r#"{"step":"5"}"#)),
        ("", Some(r#"{"stepp":5}"#)),
        ("", Some("not json")),
    ] {
        let m = allocate(&f.app, &format!("{uri}{q}"), JSON, body)
            .await
            .error(400, 400);
        if q == "?step=0" {
            assert!(m.contains("1000000"), "the message names the maximum: {m}");
        }
    }
    allocate(
        &f.app,
        uri,
        &[("content-type", "text/plain")],
        Some("step=5"),
    )
    .await
    .error(415, 415);
    let row = f
        .store
        .get(&leaf_core::Tag::new("t").unwrap())
        .await
        .unwrap();
    assert_eq!(
        row.unwrap().max_id,
        1_000_033,
        "refused requests changed nothing"
    );
}

#[tokio::test]
async fn allocate_errors_follow_the_servers_codes() {
    let f = fixture().await;
    allocate(&f.app, "/v1/segment/nope/allocate", &[], None)
        .await
        .error(404, -2);
    for bad in [
        "a%2Fb/allocate",
        "%zz/allocate",
        "/allocate",
        &"x".repeat(129),
    ] {
        let uri = if bad.ends_with("/allocate") {
            format!("/v1/segment/{bad}")
        } else {
            format!("/v1/segment/{bad}/allocate")
        };
        allocate(&f.app, &uri, &[], None).await.error(400, 400);
    }
    // Only `.../allocate` takes a POST; an escaped slash is part of the tag, not the route.
    for uri in [
        "/v1/segment/t",
        "/v1/segment/t%2Fallocate",
        "/v1/segment/t/other",
    ] {
        allocate(&f.app, uri, &[], None).await.error(405, 405);
    }
    f.store.fail(true);
    let m = allocate(&f.app, "/v1/segment/t/allocate", &[], None)
        .await
        .error(503, -3);
    assert!(
        !m.contains("injected"),
        "backend details stay in the log: {m}"
    );
    f.store.fail(false);
    let end = leaf_core::NewTag {
        max_id: i64::MAX - 4,
        step: 10,
        ..leaf_core::NewTag::new(leaf_core::Tag::new("end").unwrap())
    };
    f.store.create(&end).await.unwrap();
    let r = allocate(&f.app, "/v1/segment/end/allocate", &[], None).await;
    assert_eq!(range_of(&r, "end", 10, 4), (i64::MAX - 4, i64::MAX));
    let r = allocate(&f.app, "/v1/segment/end/allocate", &[], None).await;
    r.error(503, -5);
}

#[tokio::test]
async fn one_tags_row_is_open_to_clients() {
    let f = fixture().await;
    for peer in [LOCAL, REMOTE] {
        let r = send(&f.app, Method::GET, "/v1/tags/t", peer, &[], None).await;
        assert_eq!(r.status, 200, "{}", r.text());
        let v = r.json();
        assert_eq!(
            (v["tag"].as_str(), v["max_id"].as_i64(), v["step"].as_i64()),
            (Some("t"), Some(1), Some(10)),
            "{v}"
        );
        assert!(v.get("cache").is_none(), "no cached state: {v}");
    }
    get(&f.app, "/v1/tags/nope").await.error(404, -2);
    get(&f.app, "/v1/tags/a/b").await.error(400, 400);
    // Its neighbours stay admin routes.
    send(&f.app, Method::GET, "/v1/tags", REMOTE, &[], None)
        .await
        .error(403, 403);
    send(
        &f.app,
        Method::PATCH,
        "/v1/tags/t",
        REMOTE,
        JSON,
        Some(r#"{"step":7}"#),
    )
    .await
    .error(403, 403);
}

#[tokio::test]
async fn the_client_token_guards_the_id_and_allocate_routes() {
    let mut s = Setup::default();
    s.config.server.client_token = "t0ken".into();
    let f = s.build().await;
    let routes: &[(Method, &str)] = &[
        (Method::GET, "/api/segment/get/t"),
        (Method::POST, "/api/segment/get/t"),
        (Method::GET, "/api/snowflake/get/x"),
        (Method::GET, "/v1/segment/t"),
        (Method::GET, "/v1/snowflake"),
        (Method::POST, "/v1/segment/t/allocate"),
        (Method::GET, "/v1/tags/t"),
    ];
    for (method, uri) in routes {
        for peer in [LOCAL, REMOTE] {
            let r = send(&f.app, method.clone(), uri, peer, &[], None).await;
            r.error(401, 401);
            assert_eq!(r.headers[header::WWW_AUTHENTICATE], "Bearer", "{uri}");
            send(
                &f.app,
                method.clone(),
                uri,
                peer,
                &[("authorization", "Bearer t0ke")],
                None,
            )
            .await
            .error(401, 401);
            let r = send(
                &f.app,
                method.clone(),
                uri,
                peer,
                &[("authorization", "Bearer t0ken")],
                None,
            )
            .await;
            assert_eq!(r.status, 200, "{method} {uri} {peer:?}: {}", r.text());
        }
    }
    // Decoding reveals nothing the ID does not carry; the admin routes keep their own rule.
    assert_eq!(get(&f.app, "/v1/snowflake/1/decode").await.status, 200);
    assert_eq!(get(&f.app, "/v1/tags").await.status, 200);
    send(
        &f.app,
        Method::GET,
        "/v1/tags",
        REMOTE,
        &[("authorization", "Bearer t0ken")],
        None,
    )
    .await
    .error(403, 403);
}

/// The text of `/metrics`, which must hold each of `lines`.
async fn metrics_with(app: &Router, lines: &[&str]) -> String {
    let text = get(app, "/metrics").await.text();
    for line in lines {
        assert!(text.lines().any(|l| l == *line), "{line}\n{text}");
    }
    text
}

#[tokio::test]
async fn client_allocations_are_counted_by_tag_and_address_family() {
    let f = fixture().await;
    let uri = "/v1/segment/t/allocate";
    allocate(&f.app, uri, &[], None).await;
    allocate(&f.app, &format!("{uri}?step=5"), &[], None).await;
    send(&f.app, Method::POST, uri, Some("[::1]:40000"), &[], None).await;
    allocate(&f.app, "/v1/segment/nope/allocate", &[], None).await;
    let text = metrics_with(
        &f.app,
        &[
            "leaf_client_allocations_total{tag=\"t\",family=\"ipv4\"} 2",
            "leaf_client_allocations_total{tag=\"t\",family=\"ipv6\"} 1",
            "leaf_client_allocated_ids_total{tag=\"t\",family=\"ipv4\"} 15",
            "leaf_client_allocated_ids_total{tag=\"t\",family=\"ipv6\"} 10",
            "leaf_requests_total{route=\"/v1/segment/{*tag}\",status=\"404\"} 1",
        ],
    )
    .await;
    assert!(
        !text.contains("nope"),
        "an unknown tag never becomes a label"
    );
}

#[tokio::test]
async fn allocate_lowers_a_step_above_max_step_to_it_and_reports_the_step_used() {
    // Issue 24 item 3: rows may hold steps up to i32::MAX, and after its first load a leasing
    // client asks at least the row's step; a 400 there ended its leases.
    let mut s = Setup::default();
    s.config.segment.max_step = 100;
    let f = s.build().await;
    let big = leaf_core::Tag::new("big").unwrap();
    let new = leaf_core::NewTag {
        step: 200,
        ..leaf_core::NewTag::new(big.clone())
    };
    f.store.create(&new).await.unwrap();
    let uri = "/v1/segment/big/allocate";
    // No step: the stored one, as before.
    let r = allocate(&f.app, uri, &[], None).await;
    let mut end = range_of(&r, "big", 200, 200).1;
    for (query, body, used) in [
        ("?step=200", None, 100),
        ("?step=100", None, 100),
        ("?step=7", None, 7),
        ("?step=2147483647", None, 100),
        ("?step=9223372036854775807", None, 100),
        ("", Some(r#"{"step":500}"#), 100),
    ] {
        let r = allocate(&f.app, &format!("{uri}{query}"), JSON, body).await;
        let (start, next) = range_of(&r, "big", 200, used);
        assert_eq!(start, end, "{query} {body:?}: contiguous");
        end = next;
    }
    // Below 1 and non-numbers stay client mistakes, and change nothing.
    for (query, body) in [
        ("?step=0", None),
        ("?step=-1", None),
        ("?step=abc", None),
        ("?step=1.5", None),
        ("?step=", None),
        ("?step=99999999999999999999", None),
        ("", Some(r#"{"step":0}"#)),
        ("", Some(r#"{"step":"200"}"#)),
    ] {
        let m = allocate(&f.app, &format!("{uri}{query}"), JSON, body)
            .await
            .error(400, 400);
        if body.is_none() {
            assert!(m.contains("step must be"), "{query}: {m}");
        }
    }
    let row = f.store.get(&big).await.unwrap().unwrap();
    assert_eq!(row.max_id, end, "refused requests reserved nothing");
}

/// The first ID of a 200 answer of an ID route: the plain-text ID, or `ids[0]` of the JSON.
fn first_id(r: &Reply) -> i64 {
    if r.headers[header::CONTENT_TYPE] == "application/json" {
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        r.json()["ids"][0].as_i64().expect("an id")
    } else {
        plain_id(r)
    }
}

#[tokio::test]
async fn head_takes_no_id_on_any_id_route() {
    // Issue 24 item 8: axum answers HEAD with the GET handler and drops the body, so a HEAD
    // took IDs nobody saw. The snowflake clock stands still, so its IDs go up by one.
    let (f, _clock) = serving_on_manual_clock(1_700_000_000_000).await;
    let mut took = Vec::new();
    for uri in [
        "/api/segment/get/t",
        "/api/snowflake/get/x",
        "/api/snowflake/get/",
        "/api/snowflake/get",
        "/v1/segment/t",
        "/v1/segment/t?count=3",
        "/v1/snowflake",
        "/v1/snowflake?count=3",
    ] {
        let before = get(&f.app, uri).await;
        let count = if before.headers[header::CONTENT_TYPE] == "application/json" {
            before.json()["ids"].as_array().unwrap().len() as i64
        } else {
            1
        };
        let last = first_id(&before) + count - 1;
        let head = send(&f.app, Method::HEAD, uri, LOCAL, &[], None).await;
        let next = first_id(&get(&f.app, uri).await);
        let allow = head.headers.get(header::ALLOW).map(|a| a.to_str().unwrap());
        let listed = allow.is_some_and(|a| a.contains("GET") && !a.contains("HEAD"));
        if head.status == StatusCode::METHOD_NOT_ALLOWED && !listed {
            took.push(format!("HEAD {uri}: Allow {allow:?}"));
        }
        if head.status != StatusCode::METHOD_NOT_ALLOWED || next != last + 1 {
            took.push(format!(
                "HEAD {uri}: {}, then GET from {next} where the last GET stopped at {last}",
                head.status
            ));
        }
    }
    // The routes that take no ID answer HEAD the same way.
    for uri in [
        "/api/segment/get/",
        "/api/segment/get",
        "/v1/segment/",
        "/v1/segment",
    ] {
        let head = send(&f.app, Method::HEAD, uri, LOCAL, &[], None).await;
        if head.status != StatusCode::METHOD_NOT_ALLOWED {
            took.push(format!("HEAD {uri}: {}", head.status));
        }
    }
    // The allocate route: a HEAD reserves nothing, and the next range follows the last one.
    let uri = "/v1/segment/t/allocate";
    let (_, end) = range_of(&allocate(&f.app, uri, &[], None).await, "t", 10, 10);
    let before = f.store.allocations();
    let head = send(&f.app, Method::HEAD, uri, LOCAL, &[], None).await;
    let allocations = f.store.allocations() - before;
    let (start, _) = range_of(&allocate(&f.app, uri, &[], None).await, "t", 10, 10);
    if head.status != StatusCode::METHOD_NOT_ALLOWED || allocations != 0 || start != end {
        took.push(format!(
            "HEAD {uri}: {}, {allocations} store allocations, then a range from {start} \
             where the last ended at {end}",
            head.status
        ));
    }
    assert!(took.is_empty(), "{}", took.join("\n"));
}

/// What `r` lacks of `X-Content-Type-Options: nosniff` and `Cache-Control: no-store`.
fn lacks_safety_headers(r: &Reply) -> Option<String> {
    let nosniff = r.headers.get("x-content-type-options");
    let cache = r.headers.get(header::CACHE_CONTROL);
    (nosniff.is_none_or(|v| v != "nosniff") || cache.is_none_or(|v| v != "no-store")).then(|| {
        format!(
            "{}: X-Content-Type-Options {nosniff:?}, Cache-Control {cache:?}",
            r.status
        )
    })
}

/// The answers of `app` to `requests` (method, uri, peer) that lack a safety header.
async fn without_safety_headers(
    app: &Router,
    requests: &[(Method, &str, Option<&str>)],
) -> Vec<String> {
    let mut missing = Vec::new();
    for (method, uri, peer) in requests {
        let r = send(app, method.clone(), uri, *peer, &[], None).await;
        if let Some(m) = lacks_safety_headers(&r) {
            missing.push(format!("{method} {uri}: {m}"));
        }
    }
    missing
}

#[tokio::test]
async fn every_answer_says_nosniff_and_no_store() {
    // Issue 24 item 10: a caching proxy that serves one ID twice breaks uniqueness, and a
    // browser that sniffs a type may run an error body that echoes a tag.
    let f = fixture().await;
    let mut missing = without_safety_headers(
        &f.app,
        &[
            // IDs, plain and JSON, and ranges.
            (Method::GET, "/api/segment/get/t", LOCAL),
            (Method::POST, "/api/segment/get/t", LOCAL),
            (Method::GET, "/api/snowflake/get/x", LOCAL),
            (Method::GET, "/v1/segment/t?count=2", LOCAL),
            (Method::GET, "/v1/snowflake", LOCAL),
            (Method::POST, "/v1/segment/t/allocate", LOCAL),
            // Pages.
            (Method::GET, "/", LOCAL),
            (Method::GET, "/cache", LOCAL),
            (Method::GET, "/db", LOCAL),
            (Method::GET, "/snowflake", LOCAL),
            // JSON errors: 400, 403, 404 (route and tag), 405.
            (Method::GET, "/api/segment/get/%zz", LOCAL),
            (Method::GET, "/v1/tags", REMOTE),
            (Method::GET, "/cache", REMOTE),
            (Method::GET, "/nowhere", LOCAL),
            (Method::GET, "/v1/segment/nope", LOCAL),
            (Method::DELETE, "/v1/tags/t", LOCAL),
            // The rest.
            (Method::GET, "/v1/tags/t", LOCAL),
            (Method::GET, "/v1/tags", LOCAL),
            (Method::GET, "/v1/snowflake/1/decode", LOCAL),
            (Method::GET, "/decodeSnowflakeId?snowflakeId=1", LOCAL),
            (Method::GET, "/healthz", LOCAL),
            (Method::GET, "/readyz", LOCAL),
            (Method::GET, "/metrics", LOCAL),
            (Method::GET, "/v1/time", LOCAL),
        ],
    )
    .await;
    // 401 and 503.
    let mut s = Setup::default();
    s.config.server.client_token = "t0ken".into();
    let f = s.build().await;
    f.store.fail(true);
    missing.extend(
        without_safety_headers(
            &f.app,
            &[
                (Method::GET, "/api/segment/get/t", LOCAL),
                (Method::GET, "/api/segment/get/nope", LOCAL),
            ],
        )
        .await,
    );
    let down = send(
        &f.app,
        Method::POST,
        "/v1/segment/t/allocate",
        LOCAL,
        &[("authorization", "Bearer t0ken")],
        None,
    )
    .await;
    down.error(503, -3);
    missing.extend(lacks_safety_headers(&down).map(|m| format!("POST allocate: {m}")));
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

/// The rebinding page's request of issue 24 item 7: same-origin, to a name of the attacker's
/// that now resolves to the node, as a browser sends it (with `Sec-Fetch-*` where the browser
/// sends them, on a secure context, and without).
fn rebound_requests() -> [Vec<(&'static str, &'static str)>; 3] {
    let host = ("host", "rebind.attacker.example:8080");
    let origin = ("origin", "http://rebind.attacker.example:8080");
    [
        vec![host, origin],
        vec![host, origin, ("content-type", "text/plain;charset=UTF-8")],
        vec![
            host,
            origin,
            ("sec-fetch-site", "same-origin"),
            ("sec-fetch-mode", "cors"),
            ("sec-fetch-dest", "empty"),
        ],
    ]
}

#[tokio::test]
async fn a_rebound_page_cannot_allocate_even_without_allowed_hosts() {
    let f = fixture().await;
    let t = leaf_core::Tag::new("t").unwrap();
    let max_id = f.store.get(&t).await.unwrap().unwrap().max_id;
    let allocations = f.store.allocations();
    for headers in rebound_requests() {
        for peer in [LOCAL, REMOTE] {
            let r = send(
                &f.app,
                Method::POST,
                "/v1/segment/t/allocate?step=1000000",
                peer,
                &headers,
                Some(""),
            )
            .await;
            r.error(403, 403);
        }
    }
    assert_eq!(f.store.get(&t).await.unwrap().unwrap().max_id, max_id);
    assert_eq!(
        f.store.allocations(),
        allocations,
        "nothing reached the store"
    );
    // A request that names no origin is a leasing client's, and is served.
    let r = allocate(&f.app, "/v1/segment/t/allocate", &[], None).await;
    assert_eq!(range_of(&r, "t", 10, 10).0, max_id);
}

#[tokio::test]
async fn metrics_need_the_metrics_token_else_the_client_token() {
    // Issue 24 item 9: /metrics names every tag (in effect the admin list) and stayed open
    // with server.client_token set. Each case: client_token, metrics_token, the Authorization
    // values that open /metrics (None: no header), and those refused with a 401.
    let bearer = |t: &str| Some(format!("Bearer {t}"));
    let cases = [
        ("", "", vec![None, bearer("anything")], vec![]),
        (
            "t0ken",
            "",
            vec![bearer("t0ken"), Some("bearer   t0ken".into())],
            vec![
                None,
                bearer("t0ke"),
                bearer("s3cret"),
                Some(basic(":t0ken")),
            ],
        ),
        (
            "",
            "m3trics",
            vec![bearer("m3trics")],
            vec![
                None,
                bearer("t0ken"),
                bearer("s3cret"),
                Some(basic(":m3trics")),
            ],
        ),
        (
            "t0ken",
            "m3trics",
            vec![bearer("m3trics")],
            vec![None, bearer("t0ken"), bearer("s3cret"), bearer("m3tric")],
        ),
    ];
    for (client, metrics, opening, refused) in cases {
        let mut s = Setup::default();
        s.config.server.admin_token = "s3cret".into();
        s.config.server.client_token = client.into();
        s.config.server.metrics_token = metrics.into();
        let f = s.build().await;
        let id_auth = (!client.is_empty()).then(|| format!("Bearer {client}"));
        let id_headers: Vec<(&str, &str)> = id_auth
            .iter()
            .map(|a| ("authorization", a.as_str()))
            .collect();
        plain_id(
            &send(
                &f.app,
                Method::GET,
                "/api/segment/get/t",
                LOCAL,
                &id_headers,
                None,
            )
            .await,
        );
        let case = format!("client_token {client:?}, metrics_token {metrics:?}");
        for peer in [LOCAL, REMOTE] {
            for auth in &opening {
                let headers: Vec<(&str, &str)> =
                    auth.iter().map(|a| ("authorization", a.as_str())).collect();
                let r = send(&f.app, Method::GET, "/metrics", peer, &headers, None).await;
                assert_eq!(r.status, 200, "{case}, {auth:?}: {}", r.text());
                assert!(
                    r.text().contains("leaf_segment_loaded{tag=\"t\"} 1"),
                    "{case}"
                );
            }
            for auth in &refused {
                let headers: Vec<(&str, &str)> =
                    auth.iter().map(|a| ("authorization", a.as_str())).collect();
                let r = send(&f.app, Method::GET, "/metrics", peer, &headers, None).await;
                let m = r.error(401, 401);
                assert_eq!(r.headers[header::WWW_AUTHENTICATE], "Bearer", "{case}");
                let key = if metrics.is_empty() {
                    "server.client_token"
                } else {
                    "server.metrics_token"
                };
                assert!(
                    auth.is_some() || m.contains(key),
                    "{case}: the message names {key}: {m}"
                );
                assert!(!r.text().contains("leaf_segment"), "{case}, {auth:?}");
            }
        }
        // The metrics token opens nothing else; GET /v1/tags/{tag} stays a client route.
        if !metrics.is_empty() {
            let m3 = [("authorization", "Bearer m3trics")];
            for uri in ["/api/segment/get/t", "/v1/tags/t", "/v1/snowflake"] {
                let r = send(&f.app, Method::GET, uri, REMOTE, &m3, None).await;
                if client.is_empty() {
                    assert_eq!(r.status, 200, "{case}: {uri}: {}", r.text());
                } else {
                    r.error(401, 401);
                }
            }
            send(&f.app, Method::GET, "/v1/tags", REMOTE, &m3, None)
                .await
                .error(401, 401);
        }
    }
}

#[tokio::test]
async fn with_allowed_hosts_a_rebound_name_is_refused_on_every_route() {
    let mut s = Setup::default();
    s.config.server.allowed_hosts = vec!["leaf.internal".into(), "LEAF2.internal:8080".into()];
    let f = s.build().await;
    let t = leaf_core::Tag::new("t").unwrap();
    let max_id = f.store.get(&t).await.unwrap().unwrap().max_id;
    let allocations = f.store.allocations();
    // The exact request of the issue, from the operator's machine and from afar.
    for headers in rebound_requests() {
        for peer in [LOCAL, REMOTE] {
            let r = send(
                &f.app,
                Method::POST,
                "/v1/segment/t/allocate?step=1000000",
                peer,
                &headers,
                Some(""),
            )
            .await;
            r.error(403, 403);
        }
    }
    // Every route, read or write, by the rebound name.
    let rebound = [("host", "rebind.attacker.example:8080")];
    let mut served = Vec::new();
    for (method, uri) in [
        (Method::GET, "/api/segment/get/t"),
        (Method::POST, "/api/segment/get/t"),
        (Method::GET, "/api/snowflake/get/x"),
        (Method::GET, "/v1/segment/t?count=5"),
        (Method::GET, "/v1/snowflake"),
        (Method::GET, "/v1/tags/t"),
        (Method::GET, "/metrics"),
        (Method::GET, "/v1/tags"),
        (Method::POST, "/v1/tags"),
        (Method::GET, "/"),
        (Method::GET, "/cache"),
        (Method::GET, "/db"),
        (Method::GET, "/snowflake"),
        (Method::GET, "/healthz"),
        (Method::GET, "/readyz"),
        (Method::GET, "/v1/time"),
        (Method::GET, "/decodeSnowflakeId?snowflakeId=1"),
        (Method::GET, "/v1/snowflake/1/decode"),
        (Method::GET, "/nowhere"),
    ] {
        let r = send(&f.app, method.clone(), uri, LOCAL, &rebound, None).await;
        if r.status != StatusCode::FORBIDDEN || !r.text().contains("server.allowed_hosts") {
            let body: String = r.text().chars().take(60).collect();
            served.push(format!("{method} {uri}: {} {body}", r.status));
        } else {
            r.error(403, 403);
        }
    }
    assert!(served.is_empty(), "{}", served.join("\n"));
    assert_eq!(f.store.get(&t).await.unwrap().unwrap().max_id, max_id);
    assert_eq!(
        f.store.allocations(),
        allocations,
        "nothing reached the store"
    );
    // Listed names in any letter case (a name alone: any port), IP addresses and localhost
    // pass; other names, other ports of a name listed with one, and no name do not.
    for host in [
        "leaf.internal",
        "LEAF.Internal:8080",
        "leaf.internal:1234",
        "leaf.internal.",
        "leaf2.internal:8080",
        "127.0.0.1:8080",
        "10.1.2.3",
        "[::1]:8080",
        "[2001:db8::1]",
        "localhost:8080",
    ] {
        let r = send(
            &f.app,
            Method::GET,
            "/v1/segment/t",
            LOCAL,
            &[("host", host)],
            None,
        )
        .await;
        assert_eq!(r.status, 200, "{host}: {}", r.text());
    }
    for host in [
        "leaf2.internal",
        "leaf2.internal:8081",
        "leaf.internal.attacker.example",
        "attacker.leaf.internal",
        "127.0.0.1.nip.io:8080",
        "localhost.attacker.example",
        "leaf.internal:x",
        "",
    ] {
        send(
            &f.app,
            Method::GET,
            "/v1/segment/t",
            LOCAL,
            &[("host", host)],
            None,
        )
        .await
        .error(403, 403);
    }
    get(&f.app, "/v1/segment/t").await.error(403, 403);
}

#[tokio::test]
async fn only_a_page_of_a_listed_host_may_allocate_from_a_browser() {
    let same = [
        ("host", "leaf.internal:8080"),
        ("origin", "http://leaf.internal:8080"),
        ("sec-fetch-site", "same-origin"),
    ];
    // Nothing listed: no page is the node's own.
    let f = fixture().await;
    allocate(&f.app, "/v1/segment/t/allocate", &same, None)
        .await
        .error(403, 403);
    let mut s = Setup::default();
    s.config.server.allowed_hosts = vec!["leaf.internal".into()];
    let f = s.build().await;
    let r = allocate(&f.app, "/v1/segment/t/allocate", &same, None).await;
    range_of(&r, "t", 10, 10);
    // An address passes the Host rule, but is not a listed origin; and the origin must still
    // be the request's own.
    for headers in [
        vec![
            ("host", "10.0.0.1:8080"),
            ("origin", "http://10.0.0.1:8080"),
        ],
        vec![
            ("host", "10.0.0.1:8080"),
            ("origin", "http://leaf.internal:8080"),
        ],
        vec![
            ("host", "leaf.internal:8080"),
            ("sec-fetch-site", "cross-site"),
        ],
        vec![
            ("host", "leaf.internal:8080"),
            ("sec-fetch-mode", "navigate"),
        ],
    ] {
        allocate(&f.app, "/v1/segment/t/allocate", &headers, None)
            .await
            .error(403, 403);
    }
}

/// 2026-11-27 00:00:00 in Asia/Shanghai.
const SHANGHAI_MIDNIGHT_MS: u64 = 1_795_708_800_000;

async fn on_segment_clock(now_ms: u64) -> (Fixture, ManualClock) {
    let clock = ManualClock::new(now_ms);
    let f = Setup {
        segment_clock: Some(clock.clone()),
        ..Setup::default()
    }
    .build()
    .await;
    (f, clock)
}

async fn post_tag(app: &Router, body: &str) -> Reply {
    send(app, Method::POST, "/v1/tags", LOCAL, JSON, Some(body)).await
}

const ORDER: &str = r#"{"tag":"order","step":100,"reset":"day","time_zone":"Asia/Shanghai","format":"ORD{date:%Y%m%d}{seq:06}"}"#;

#[tokio::test]
async fn an_order_number_tag_restarts_after_midnight_in_its_zone_and_decodes() {
    let (f, clock) = on_segment_clock(SHANGHAI_MIDNIGHT_MS - 60_000).await;
    let r = post_tag(&f.app, ORDER).await;
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(
        r.json(),
        serde_json::json!({"tag": "order", "step": 100, "reset": "day",
            "time_zone": "Asia/Shanghai", "first": 1, "format": "ORD{date:%Y%m%d}{seq:06}"})
    );
    // Leaf's route answers the text; version 1 answers strings.
    let r = get(&f.app, "/api/segment/get/order").await;
    assert_eq!(
        (r.status.as_u16(), r.text()),
        (200, "ORD20261126000001".into())
    );
    assert_eq!(
        text_ids(&get(&f.app, "/v1/segment/order?count=2").await),
        ["ORD20261126000002", "ORD20261126000003"]
    );
    clock.set_ms(SHANGHAI_MIDNIGHT_MS);
    assert_eq!(
        get(&f.app, "/api/segment/get/order").await.text(),
        "ORD20261127000001"
    );
    let d = get(&f.app, "/v1/decode/order?id=ORD20261126000003").await;
    assert_eq!(d.status, 200, "{}", d.text());
    assert_eq!(
        d.json(),
        serde_json::json!({"tag": "order", "id": "ORD20261126000003", "period": "20261126",
            "date": "2026-11-26", "value": 3})
    );
    get(&f.app, "/v1/decode/order?id=ORD2026112600003")
        .await
        .error(400, 400);
    get(&f.app, "/v1/decode/order").await.error(400, 400);
    // A plain tag has nothing to decode.
    get(&f.app, "/v1/decode/t?id=1").await.error(404, -2);
    // Text cannot be numbers, a format is not chosen per request, and the rows are not tags.
    let m = get(&f.app, "/v1/segment/order?as=number")
        .await
        .error(400, 400);
    assert!(m.contains("as=number"), "{m}");
    // ... and took no ID.
    assert_eq!(
        get(&f.app, "/api/segment/get/order").await.text(),
        "ORD20261127000002"
    );
    get(&f.app, "/v1/segment/t?format=base36")
        .await
        .error(400, 400);
    get(&f.app, "/api/segment/get/order@20261127")
        .await
        .error(400, 400);
    // Plain tags answer as before.
    plain_id(&get(&f.app, "/api/segment/get/t").await);
}

#[tokio::test]
async fn bad_business_tags_are_400_and_store_nothing() {
    let (f, clock) = on_segment_clock(SHANGHAI_MIDNIGHT_MS).await;
    let rows = || async { f.store.list().await.unwrap().len() };
    let before = rows().await;
    for (body, says) in [
        (
            r#"{"tag":"b1","reset":"day","time_zone":"Mars/Olympus","format":"B{date:%Y%m%d}{seq}"}"#,
            "Mars/Olympus",
        ),
        (r#"{"tag":"b2","format":"B{seq"}"#, "format"),
        (
            r#"{"tag":"b3","reset":"day","format":"B{date:%Y%m}{seq}"}"#,
            "format",
        ),
        (r#"{"tag":"b4","first":1000,"format":"B{seq:03}"}"#, "1000"),
        (r#"{"tag":"b5","reset":"day"}"#, "format"),
        (r#"{"tag":"b6","reset":"hour","format":"B{seq}"}"#, "hour"),
        (r#"{"tag":"b7","max_id":5,"format":"B{seq}"}"#, "first"),
        (
            r#"{"tag":"b8","description":"x","format":"B{seq}"}"#,
            "description",
        ),
        (r#"{"tag":"b@9","format":"B{seq}"}"#, "@"),
        (
            r#"{"tag":"b10","reset":"day","format":"B{date:%y%m%d}{seq}"}"#,
            "%y repeats",
        ),
        (r#"{"tag":"x@20261126"}"#, "reserved"),
        (r#"{"tag":"x@"}"#, "reserved"),
    ] {
        let m = post_tag(&f.app, body).await.error(400, 400);
        assert!(m.contains(says), "{body}: {m}");
    }
    assert_eq!(rows().await, before, "nothing was stored");
    // A plain tag's name cannot become a business tag's, nor the other way round.
    post_tag(&f.app, r#"{"tag":"t","format":"T{seq}"}"#)
        .await
        .error(409, 409);
    assert_eq!(post_tag(&f.app, ORDER).await.status, 201);
    post_tag(&f.app, r#"{"tag":"order"}"#).await.error(409, 409);
    post_tag(&f.app, ORDER).await.error(409, 409);
    // Its properties and its rows never change, and leasing clients get plain tags only.
    get(&f.app, "/api/segment/get/order").await;
    for tag in ["order", "order@", "order@20261127"] {
        let uri = format!("/v1/tags/{tag}");
        let r = send(
            &f.app,
            Method::PATCH,
            &uri,
            LOCAL,
            JSON,
            Some(r#"{"step":9}"#),
        )
        .await;
        r.error(400, 400);
    }
    let row = |name: &'static str| {
        let store = f.store.clone();
        async move {
            store
                .get(&leaf_core::Tag::new(name).unwrap())
                .await
                .unwrap()
        }
    };
    // One ID taken: a first range, a tenth of the row's step.
    assert_eq!(
        row("order@20261127").await.map(|r| (r.step, r.max_id)),
        Some((100, 11)),
        "untouched"
    );
    // Leases are of period rows (leaf-client's business tags), never of the base or the
    // definition, and never past the row's capped step.
    let allocate = |tag: &str, step: &str| {
        let (app, uri) = (
            f.app.clone(),
            format!("/v1/segment/{tag}/allocate?step={step}"),
        );
        async move { send(&app, Method::POST, &uri, LOCAL, &[], None).await }
    };
    for tag in ["order", "order@"] {
        allocate(tag, "10").await.error(400, 400);
    }
    let a = allocate("order@20261127", "100000").await;
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(a.json()["used_step"], 100, "capped at the row's step");
    assert_eq!(a.json()["max_id"], 111);
    // A period within one of the server's clock is created on first use, as a node would.
    assert!(row("order@20261128").await.is_none());
    let r = get(&f.app, "/v1/tags/order@20261128").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        (r.json()["max_id"].as_i64(), r.json()["step"].as_i64()),
        (Some(1), Some(100))
    );
    // Before its day starts here, a lease of it is a first range at most, whatever the client
    // asks: clients preloading a day hold no more of it than nodes do (issue 32).
    let a = allocate("order@20261128", "100000").await;
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(a.json()["used_step"], 10, "{}", a.text());
    let a = allocate("order@20261126", "10").await;
    assert_eq!(a.status, 200, "the day before: {}", a.text());
    // Farther, or not a period of this tag: 400, nothing created.
    for tag in [
        "order@20261130",
        "order@20261120",
        "order@202611",
        "order@all",
    ] {
        allocate(tag, "10").await.error(400, 400);
        get(&f.app, &format!("/v1/tags/{tag}"))
            .await
            .error(400, 400);
    }
    assert!(row("order@20261130").await.is_none());
    // A stored row is read whatever its period (the window bounds what is created).
    clock.set_ms(SHANGHAI_MIDNIGHT_MS + 10 * 86_400_000);
    let r = get(&f.app, "/v1/tags/order@20261127").await;
    assert_eq!(r.status, 200, "{}", r.text());
    clock.set_ms(SHANGHAI_MIDNIGHT_MS);
}

#[tokio::test]
async fn a_value_past_the_width_is_503_with_its_own_code_and_metric() {
    let (f, _clock) = on_segment_clock(SHANGHAI_MIDNIGHT_MS).await;
    let r = post_tag(&f.app, r#"{"tag":"tiny","first":8,"format":"T{seq:01}"}"#).await;
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(
        text_ids(&get(&f.app, "/v1/segment/tiny?count=2").await),
        ["T8", "T9"]
    );
    let m = get(&f.app, "/v1/segment/tiny").await.error(503, -6);
    assert!(m.contains("T{seq:01}"), "{m}");
    let metrics = get(&f.app, "/metrics").await.text();
    assert!(
        metrics.contains("leaf_format_overflows_total{tag=\"tiny\"} 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn listings_show_business_tags_with_their_periods_under_them() {
    let (f, clock) = on_segment_clock(SHANGHAI_MIDNIGHT_MS - 60_000).await;
    assert_eq!(post_tag(&f.app, ORDER).await.status, 201);
    get(&f.app, "/api/segment/get/order").await;
    clock.set_ms(SHANGHAI_MIDNIGHT_MS);
    get(&f.app, "/api/segment/get/order").await;
    let list = get(&f.app, "/v1/tags").await.json();
    let tags = list["tags"].as_array().unwrap();
    let names: Vec<&str> = tags.iter().map(|t| t["tag"].as_str().unwrap()).collect();
    assert!(names.contains(&"order"), "{list}");
    assert!(names.iter().all(|n| !n.contains('@')), "{list}");
    let order = tags.iter().find(|t| t["tag"] == "order").unwrap();
    assert_eq!(order["format"], "ORD{date:%Y%m%d}{seq:06}", "{order}");
    assert_eq!(order["reset"], "day", "{order}");
    let periods = tag_names(&order["periods"]);
    assert_eq!(periods, ["order@20261126", "order@20261127"], "{order}");
    let today = &order["periods"][1];
    assert_eq!(today["cache"]["initialized"], true, "{today}");
    assert_eq!(today["step"], 100, "{today}");
    let db = get(&f.app, "/db").await.text();
    assert!(db.contains("↳ order@20261127"), "{db}");
    assert!(db.contains(">order<"), "{db}");
}

#[tokio::test]
async fn a_business_tag_claims_its_name_on_every_node_and_before_it() {
    let (a, clock) = on_segment_clock(SHANGHAI_MIDNIGHT_MS).await;
    let b = Setup {
        segment_clock: Some(clock.clone()),
        store: Some(a.store.clone()),
        ..Setup::default()
    }
    .build()
    .await;
    // Node B asks first: nothing yet, and it remembers so for a second.
    get(&b.app, "/api/segment/get/order").await.error(404, -2);
    // A node's first range is a tenth of the step: 100 here, so that taking one ID starts no
    // preload that would race with node B's first range.
    let r = post_tag(&a.app, r#"{"tag":"order","step":1000,"format":"O{seq}"}"#).await;
    assert_eq!(r.status, 201, "{}", r.text());
    // Node B, still remembering no definition, cannot make a plain tag of the name: the
    // business tag claimed it in the store, with no ID left.
    post_tag(&b.app, r#"{"tag":"order"}"#).await.error(409, 409);
    let claim = a
        .store
        .get(&leaf_core::Tag::new("order").unwrap())
        .await
        .unwrap()
        .expect("the claim");
    assert_eq!(claim.max_id, i64::MAX, "{claim:?}");
    // A node that knows no business tags (Java Leaf, an older server) gets no number from it.
    let e = a
        .store
        .allocate(&leaf_core::Tag::new("order").unwrap(), None)
        .await
        .unwrap_err();
    assert!(matches!(e, leaf_core::Error::Exhausted(_)), "{e}");
    clock.advance(std::time::Duration::from_secs(2));
    assert_eq!(get(&a.app, "/api/segment/get/order").await.text(), "O1");
    assert_eq!(get(&b.app, "/api/segment/get/order").await.text(), "O101");
    // The claim is not listed as a tag of its own.
    let list = get(&b.app, "/v1/tags").await.json();
    let orders = list["tags"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["tag"] == "order")
        .count();
    assert_eq!(orders, 1, "{list}");
}

#[tokio::test]
async fn plain_tags_named_like_business_rows_before_them_are_served_as_ever() {
    let store = Arc::new(MemoryStore::with_tags([("job@2024", 10), ("mail@", 10)]));
    let f = Setup {
        store: Some(store),
        ..Setup::default()
    }
    .build()
    .await;
    assert_eq!(plain_id(&get(&f.app, "/api/segment/get/job@2024").await), 1);
    assert_eq!(plain_id(&get(&f.app, "/api/segment/get/mail@").await), 1);
    // Their rows are not changed through the API: a name of that shape is refused by itself
    // (issue 32), since no lookup can tell it from a business tag's row created a moment ago.
    let m = patch_tag(&f.app, "job@2024", &serde_json::json!({ "step": 20 }))
        .await
        .error(400, 400);
    assert!(m.contains("in its database"), "{m}");
    // New names of that shape are refused, and a business tag cannot take such rows over.
    post_tag(&f.app, r#"{"tag":"job@2025"}"#)
        .await
        .error(400, 400);
    for base in ["job", "mail"] {
        let body = format!(r#"{{"tag":"{base}","reset":"year","format":"J{{date:%Y}}{{seq}}"}}"#);
        post_tag(&f.app, &body).await.error(409, 409);
        assert!(
            f.store
                .get(&leaf_core::Tag::new(base).unwrap())
                .await
                .unwrap()
                .is_none(),
            "no claim left behind"
        );
    }
    assert_eq!(plain_id(&get(&f.app, "/api/segment/get/job@2024").await), 2);
}

/// A node as `server::start` builds it from its configuration: segment mode only, on the SQLite
/// file `file` shared with other nodes, with `seeds` as `segment.seed_tags`.
async fn sqlite_node(
    file: &std::path::Path,
    seeds: &[&str],
) -> anyhow::Result<(leaf_server::server::Running, Router)> {
    let mut config = Config::default();
    config.snowflake.enabled = false;
    config.segment.store = "sqlite".into();
    config
        .segment
        .stores
        .insert("url", format!("sqlite://{}", file.display()));
    config.segment.seed_tags = seeds.iter().map(|s| s.to_string()).collect();
    let running = leaf_server::server::start(&config, "127.0.0.1:8080".parse().unwrap()).await?;
    let app = app(running.state.clone());
    Ok((running, app))
}

async fn patch_tag(app: &Router, tag: &str, body: &Value) -> Reply {
    let uri = format!("/v1/tags/{tag}");
    send(
        app,
        Method::PATCH,
        &uri,
        LOCAL,
        JSON,
        Some(&body.to_string()),
    )
    .await
}

/// Issue 32: a definition created on another node within the second a node remembers "no such
/// tag" was missed by the PATCH guard, and `order@` could be turned from daily to monthly (whose
/// rows print the same IDs). The rows of business tags are refused by name alone, and no tag
/// may hold a description that reads as properties or as a claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_node_changes_a_business_tags_rows_and_no_tag_holds_properties() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("leaf.db");
    let (_a, a) = sqlite_node(&file, &[]).await.unwrap();
    let (_b, b) = sqlite_node(&file, &[]).await.unwrap();
    // Node B asks first, and remembers for a second that there is no such tag.
    get(&b, "/api/segment/get/order").await.error(404, -2);
    let r = post_tag(&a, ORDER).await;
    assert_eq!(r.status, 201, "{}", r.text());
    let daily = get(&a, "/v1/tags/order@").await.json()["description"].clone();
    let monthly = "leaf-props:v1 reset=month zone=Asia/Shanghai first=1 \
                   format=ORD{date:%Y%m}{seq:06}";
    for tag in [
        "order@",
        "order@20261127",
        "order@202611",
        "order@all",
        "order",
    ] {
        for body in [
            serde_json::json!({ "description": monthly }),
            serde_json::json!({ "step": 5 }),
        ] {
            let r = patch_tag(&b, tag, &body).await;
            assert_eq!(r.status, 400, "PATCH {tag} {body} on node B: {}", r.text());
        }
    }
    let stored = get(&a, "/v1/tags/order@").await.json();
    assert_eq!(stored["description"], daily, "{stored}");
    // Text that reads as a definition or a claim is no plain tag's description.
    assert_eq!(
        post_tag(&a, r#"{"tag":"plain","description":"made by hand"}"#)
            .await
            .status,
        201
    );
    for text in [
        monthly,
        "leaf-props:v2 anything",
        "leaf-business: counted in plain@",
    ] {
        let body = serde_json::json!({ "tag": "other", "description": text });
        let m = post_tag(&b, &body.to_string()).await.error(400, 400);
        assert!(m.contains("description"), "{m}");
        let m = patch_tag(&b, "plain", &serde_json::json!({ "description": text }))
            .await
            .error(400, 400);
        assert!(m.contains("description"), "{m}");
    }
    assert_eq!(
        get(&a, "/v1/tags/other").await.status,
        404,
        "nothing created"
    );
    let plain = get(&a, "/v1/tags/plain").await.json();
    assert_eq!(plain["description"], "made by hand", "{plain}");
}

/// Issue 32: `segment.seed_tags = ["seeded@"]` created a row of a business definition's shape,
/// which a PATCH could then make a business tag with no claim. Seeds go through the checks of
/// `POST /v1/tags`, and a bad one stops start-up naming the key, before anything is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_tags_pass_the_checks_of_a_created_tag() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("leaf.db");
    for seed in ["seeded@", "seeded@2026", "seeded@20261127", "seeded@all"] {
        match sqlite_node(&file, &["fine", seed]).await {
            Ok(_) => panic!("segment.seed_tags = [\"fine\", {seed:?}] started"),
            Err(e) => {
                let m = format!("{e:#}");
                assert!(
                    m.contains("segment.seed_tags") && m.contains(seed) && m.contains("reserved"),
                    "{m}"
                );
            }
        }
    }
    let (_node, app) = sqlite_node(&file, &["fine"]).await.unwrap();
    let list = get(&app, "/v1/tags").await.json();
    assert_eq!(tag_names(&list["tags"]), ["fine"], "{list}");
}

/// The `tag` of each object of a JSON array (a listing's tags, a business tag's periods).
fn tag_names(list: &Value) -> Vec<&str> {
    let rows = list.as_array().expect("an array of tags");
    rows.iter().map(|t| t["tag"].as_str().unwrap()).collect()
}

/// Issue 32: `/v1/decode` validates an ID, so it reads only the text the tag prints: wrong
/// widths, leading zeros, a day in a monthly tag's date are 400, as are a snowflake form's
/// leading zeros and signs.
#[tokio::test]
async fn decode_reads_only_the_text_a_tag_prints() {
    let (f, _clock) = on_segment_clock(SHANGHAI_MIDNIGHT_MS).await;
    for body in [
        r#"{"tag":"n","reset":"day","format":"N{date:%Y%m%d}-{seq}"}"#,
        r#"{"tag":"w","reset":"day","format":"W{date:%Y%m%d}-{seq:03}"}"#,
        r#"{"tag":"m","reset":"month","format":"M{date:%Y%m%d}{seq:04}"}"#,
        r#"{"tag":"b","format":"B{seq:base62}"}"#,
    ] {
        let r = post_tag(&f.app, body).await;
        assert_eq!(r.status, 201, "{body}: {}", r.text());
    }
    let decode = |tag: &str, id: &str| {
        let (app, uri) = (f.app.clone(), format!("/v1/decode/{tag}?id={id}"));
        async move { get(&app, &uri).await }
    };
    for (tag, id, value) in [
        ("n", "N20261127-1", 1),
        ("w", "W20261127-001", 1),
        ("m", "M202611010007", 7),
        ("b", "Bzz", 3843),
    ] {
        let r = decode(tag, id).await;
        assert_eq!(r.status, 200, "{tag} {id}: {}", r.text());
        assert_eq!(r.json()["value"], value, "{tag} {id}");
    }
    for (tag, id) in [
        ("n", "N20261127-01"),
        ("w", "W20261127-01"),
        ("w", "W20261127-0001"),
        ("m", "M202611150007"),
        ("b", "B0zz"),
    ] {
        let m = decode(tag, id).await.error(400, 400);
        assert!(m.contains("not an ID"), "{tag} {id}: {m}");
    }
    let layout = SnowflakeLayout::default();
    let id = layout.encode(1_795_699_050_192, 3, 17).unwrap();
    for (format, text, ok) in [
        ("friendly", "20261126131730192-3-17", true),
        ("friendly", "20261126131730192-+3-17", false),
        ("friendly", "20261126131730192-03-17", false),
        (
            "base62",
            &leaf_format::Radix::Base62.encode(id as u64),
            true,
        ),
        (
            "base62",
            &format!("0{}", leaf_format::Radix::Base62.encode(id as u64)),
            false,
        ),
    ] {
        let r = get(
            &f.app,
            &format!("/v1/snowflake/{text}/decode?format={format}"),
        )
        .await;
        if ok {
            assert_eq!(r.status, 200, "{format} {text}: {}", r.text());
            assert_eq!(r.json()["id"], id, "{format} {text}");
        } else {
            r.error(400, 400);
        }
    }
}

/// Issue 32: the metrics of a business tag carry its base tag, never one label per period row
/// (a new one each day, forever), and its period rows' loads are counted like a plain tag's.
#[tokio::test]
async fn business_tags_are_counted_by_base_tag_in_the_metrics() {
    let (f, clock) = on_segment_clock(SHANGHAI_MIDNIGHT_MS).await;
    assert_eq!(post_tag(&f.app, ORDER).await.status, 201);
    for day in 0..3u64 {
        clock.set_ms(SHANGHAI_MIDNIGHT_MS + day * 86_400_000);
        // One ID: a take that crosses no preload point, so that each day loads once.
        text_ids(&get(&f.app, "/v1/segment/order").await);
        let key = if day == 0 { "20261127" } else { "20261128" };
        let uri = format!("/v1/segment/order@{key}/allocate?step=5");
        let r = allocate(&f.app, &uri, &[], None).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let text = metrics_with(
        &f.app,
        &[
            "leaf_client_allocations_total{tag=\"order\",family=\"ipv4\"} 3",
            "leaf_client_allocated_ids_total{tag=\"order\",family=\"ipv4\"} 15",
            "leaf_ids_issued_total{mode=\"segment\",tag=\"order\"} 3",
            "leaf_segment_loads_total{tag=\"order\",result=\"ok\"} 3",
            "leaf_segment_loads_total{tag=\"order\",result=\"error\"} 0",
        ],
    )
    .await;
    let rows: Vec<&str> = text.lines().filter(|l| l.contains("order@")).collect();
    assert!(rows.is_empty(), "labels of period rows: {rows:?}");
}

/// Issue 32: a node starting on a store with business tags reads their definitions before it
/// fills its plain cache, so that their rows never count as plain tags there, not even for the
/// first refresh interval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_starting_node_never_caches_business_rows_as_plain_tags() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("leaf.db");
    let (_a, a) = sqlite_node(&file, &["fine"]).await.unwrap();
    let r = post_tag(&a, r#"{"tag":"ticket","step":1000,"format":"T{seq:05}"}"#).await;
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(text_ids(&get(&a, "/v1/segment/ticket").await), ["T00001"]);
    let (node_b, b) = sqlite_node(&file, &["fine"]).await.unwrap();
    let metrics = get(&b, "/metrics").await.text();
    let plain: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("leaf_segment_loaded{"))
        .collect();
    assert_eq!(plain, ["leaf_segment_loaded{tag=\"fine\"} 0"], "{metrics}");
    let service = node_b.state.segment_service().unwrap();
    let cached: Vec<String> = (service.allocator().snapshot().into_iter())
        .map(|s| s.tag.to_string())
        .collect();
    assert_eq!(cached, ["fine"], "the plain cache");
    assert_eq!(text_ids(&get(&b, "/v1/segment/ticket").await), ["T00101"]);
}
