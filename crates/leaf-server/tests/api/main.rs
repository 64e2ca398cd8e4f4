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

/// `user:password` as an HTTP Basic `Authorization` value.
fn basic(credentials: &str) -> String {
    use base64::Engine;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(credentials)
    )
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

/// The text of `/metrics`, which must hold each of `lines`.
async fn metrics_with(app: &Router, lines: &[&str]) -> String {
    let text = get(app, "/metrics").await.text();
    for line in lines {
        assert!(text.lines().any(|l| l == *line), "{line}\n{text}");
    }
    text
}

mod admin;
mod business;
mod clients;
mod health;
mod ids;
mod safety;
