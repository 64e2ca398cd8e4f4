//! The failover rules, each on real servers: a 503 moves on at once and its `Retry-After` is
//! honoured; an unknown tag (404 -2) is final; a server that does not answer is given up after
//! the request timeout; the tokens; the pass-through snowflake calls.

mod common;

use std::time::{Duration, Instant};

use common::{Cluster, client, create_tag};
use leaf_core::{Error, NewTag, SegmentStore, SnowflakeLayout, Tag, TagUpdate};
use sqlx::Connection;

const ALLOCATE_ROUTE: &str = "/v1/segment/{*tag}";
const TAG_ROUTE: &str = "/v1/tags/{*tag}";

fn tag(name: &str) -> Tag {
    Tag::new(name).unwrap()
}

/// Holds SQLite's write lock on `db` until dropped (or `release`d): every allocation of a
/// server on it fails at once (busy timeout 0), as with a store that is down.
struct WriteLock(sqlx::SqliteConnection);

impl WriteLock {
    async fn take(db: &std::path::Path) -> WriteLock {
        let mut c = sqlx::SqliteConnection::connect(&format!("sqlite://{}", db.display()))
            .await
            .expect("open the database");
        sqlx::query("BEGIN EXCLUSIVE")
            .execute(&mut c)
            .await
            .expect("lock");
        WriteLock(c)
    }

    async fn release(mut self) {
        sqlx::query("ROLLBACK").execute(&mut self.0).await.unwrap();
    }
}

const NO_BUSY_WAIT: &[(&str, &str)] = &[("LEAF_SEGMENT__BUSY_TIMEOUT_MS", "0")];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_503_is_retried_only_after_its_retry_after() {
    let cluster = Cluster::start(1, NO_BUSY_WAIT);
    let server = &cluster.servers[0];
    // Without Retry-After the back-off alone would ask again after 50, 100, 200 ms...
    let c = client(cluster.urls())
        .backoff(Duration::from_millis(50), Duration::from_millis(50))
        .build()
        .unwrap();
    create_tag(&c, "t", 10).await;
    let lock = WriteLock::take(&cluster.db()).await;
    let store = c.store().clone();
    let started = Instant::now();
    let call = tokio::spawn(async move { store.allocate(&tag("t"), None).await });
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.requests(ALLOCATE_ROUTE, 503).await == 0 {
        assert!(
            Instant::now() < deadline,
            "the first attempt never got its 503"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    lock.release().await;
    let a = call
        .await
        .unwrap()
        .expect("the second attempt, after Retry-After: 1");
    let took = started.elapsed();
    assert_eq!(a.range(), 1..11);
    assert!(took >= Duration::from_secs(1), "asked again after {took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_eq!(
        server.requests(ALLOCATE_ROUTE, 503).await,
        1,
        "asked once in that second"
    );
    assert_eq!(server.requests(ALLOCATE_ROUTE, 200).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_503_moves_on_at_once_and_the_server_is_skipped_for_its_retry_after() {
    // Two stores: the first server's is locked, the second's serves.
    let (a, b) = (Cluster::start(1, NO_BUSY_WAIT), Cluster::start(1, &[]));
    let urls = vec![a.urls()[0].clone(), b.urls()[0].clone()];
    for url in &urls {
        create_tag(&client(vec![url.clone()]).build().unwrap(), "t", 10).await;
    }
    let c = client(urls).build().unwrap();
    let lock = WriteLock::take(&a.db()).await;
    let started = Instant::now();
    let first = c.store().allocate(&tag("t"), None).await.expect("from b");
    // At once: not after a's Retry-After of one second.
    let took = started.elapsed();
    assert!(took < Duration::from_secs(1), "{took:?}");
    assert_eq!(first.range(), 1..11);
    let status = c.endpoints();
    assert!(!status[0].preferred && status[1].preferred, "{status:?}");
    assert!(
        status[0].skipped_for > Duration::ZERO,
        "Retry-After: 1 keeps it skipped: {status:?}"
    );
    assert!(
        status[0]
            .last_error
            .as_deref()
            .unwrap()
            .starts_with("503 (code -3)"),
        "{status:?}"
    );
    // The next calls go to b only, the last good one.
    for _ in 0..5 {
        c.store().allocate(&tag("t"), None).await.unwrap();
    }
    assert_eq!(a.servers[0].requests(ALLOCATE_ROUTE, 503).await, 1);
    assert_eq!(b.servers[0].requests(ALLOCATE_ROUTE, 200).await, 6);
    lock.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_tag_is_final_and_the_next_server_is_not_asked() {
    let (a, b) = (Cluster::start(1, &[]), Cluster::start(1, &[]));
    create_tag(&client(b.urls()).build().unwrap(), "only-on-b", 10).await;
    let c = client(vec![a.urls()[0].clone(), b.urls()[0].clone()])
        .build()
        .unwrap();
    let e = c.segment().next_id("only-on-b").await.unwrap_err();
    assert!(matches!(e, Error::NotFound(_)), "{e}");
    assert_eq!(c.store().get(&tag("only-on-b")).await.unwrap(), None);
    let e = c
        .store()
        .allocate(&tag("only-on-b"), None)
        .await
        .unwrap_err();
    assert!(matches!(e, Error::NotFound(_)), "{e}");
    assert!(e.to_string().contains("only-on-b"), "{e}");
    assert_eq!(a.servers[0].requests(TAG_ROUTE, 404).await, 2);
    assert_eq!(a.servers[0].requests(ALLOCATE_ROUTE, 404).await, 1);
    let (_, metrics) = b.servers[0].get("/metrics").await;
    assert!(!metrics.contains(TAG_ROUTE), "b was asked: {metrics}");
    assert!(!metrics.contains(ALLOCATE_ROUTE), "b was asked: {metrics}");
    let status = c.endpoints();
    assert!(status[0].preferred && status[0].failed == 0, "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_does_not_answer_is_given_up_after_the_request_timeout() {
    let cluster = Cluster::start(2, &[]);
    let c = client(cluster.urls())
        .request_timeout(Duration::from_millis(2000))
        .build()
        .unwrap();
    create_tag(&c, "t", 10).await;
    cluster.servers[0].freeze(Duration::from_secs(8));
    let started = Instant::now();
    let a = c
        .store()
        .allocate(&tag("t"), None)
        .await
        .expect("from the second");
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(2000), "{took:?}");
    assert!(took < Duration::from_millis(5000), "{took:?}");
    assert_eq!(a.range(), 1..11);
    let status = c.endpoints();
    assert!(status[1].preferred, "{status:?}");
    assert!(
        status[0].last_error.as_deref() == Some("no answer within 2000 ms"),
        "{status:?}"
    );
    // The frozen one is skipped now: the next call does not wait its request timeout for it.
    let started = Instant::now();
    c.store().allocate(&tag("t"), None).await.unwrap();
    let took = started.elapsed();
    assert!(took < Duration::from_millis(1000), "{took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_every_server_down_a_call_ends_unavailable_within_the_call_timeout() {
    let mut cluster = Cluster::start(2, &[]);
    let c = client(cluster.urls())
        .call_timeout(Duration::from_millis(2000))
        .request_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    create_tag(&c, "t", 10).await;
    for s in &mut cluster.servers {
        s.kill();
    }
    let started = Instant::now();
    let e = c.store().allocate(&tag("t"), None).await.unwrap_err();
    let took = started.elapsed();
    assert!(matches!(e, Error::Unavailable(_)), "{e}");
    assert!(e.is_retryable());
    let text = e.to_string();
    // Each endpoint once, with its last reason and how often it was tried in the call.
    for url in cluster.urls() {
        assert_eq!(text.matches(&url).count(), 1, "{text}");
    }
    assert!(text.contains("attempts)"), "{text}");
    assert!(text.contains("within 2000 ms"), "{text}");
    // Within the call timeout, give or take a busy machine's scheduling.
    assert!(took <= Duration::from_millis(3500), "{took:?}");
    cluster.servers[1].restart();
    // Asked again once its back-off ends, within the call.
    let a = c
        .store()
        .allocate(&tag("t"), None)
        .await
        .expect("the restarted server");
    assert_eq!(
        a.range(),
        1..11,
        "nothing was reserved while every server was down"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_token_is_sent_and_a_refusal_names_the_setting() {
    let cluster = Cluster::start(1, &[("LEAF_SERVER__CLIENT_TOKEN", "leaftest-client")]);
    let admin = client(cluster.urls()).build().unwrap();
    create_tag(&admin, "t", 10).await;
    for token in [None, Some("leaftest-wrong")] {
        let mut b = client(cluster.urls());
        if let Some(t) = token {
            b = b.client_token(t);
        }
        let c = b.build().unwrap();
        let started = Instant::now();
        let e = c.segment().next_id("t").await.unwrap_err();
        assert!(matches!(e, Error::Config(_)), "{token:?}: {e}");
        assert!(e.to_string().contains("client_token"), "{e}");
        // Which endpoint refused, and with which status, in the message and typed.
        let url = cluster.servers[0].url();
        assert!(
            e.to_string()
                .starts_with(&format!("configuration error: {url}: ")),
            "{e}"
        );
        assert_eq!(
            c.endpoints()[0].last_status,
            Some(401),
            "{:?}",
            c.endpoints()
        );
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "final, not retried"
        );
        let e = c.snowflake_ids(1).await.unwrap_err();
        assert!(matches!(e, Error::Config(_)), "{token:?}: {e}");
    }
    let c = client(cluster.urls())
        .client_token("leaftest-client")
        .build()
        .unwrap();
    assert_eq!(c.segment().next_id("t").await.unwrap(), 1);
    assert_eq!(c.snowflake_ids(3).await.unwrap().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_admin_token_the_admin_calls_fail_before_any_request() {
    let cluster = Cluster::start(1, &[]);
    create_tag(&client(cluster.urls()).build().unwrap(), "t", 10).await;
    let (_, before) = cluster.servers[0].get("/metrics").await;
    let c = leaf_client::LeafClient::builder()
        .endpoints(cluster.urls())
        .build()
        .unwrap();
    let t = tag("t");
    let errors = [
        c.store().list().await.unwrap_err(),
        c.store().create(&NewTag::new(tag("u"))).await.unwrap_err(),
        c.store()
            .update(
                &t,
                &TagUpdate {
                    step: Some(5),
                    description: None,
                },
            )
            .await
            .unwrap_err(),
    ];
    for (e, method) in errors.iter().zip(["list", "create", "update"]) {
        assert!(matches!(e, Error::Config(_)), "{e}");
        let text = e.to_string();
        assert!(
            text.contains(method) && text.contains("admin_token"),
            "{text}"
        );
    }
    let (_, after) = cluster.servers[0].get("/metrics").await;
    assert_eq!(
        admin_requests(&after),
        admin_requests(&before),
        "no request was sent"
    );
    // The allocator's init() lists the tags: it says plainly that it needs the token, and
    // tags still work at first use.
    let e = c.segment().init().await.unwrap_err();
    assert!(
        e.to_string().contains("init() and spawn_refresher()"),
        "{e}"
    );
    // allocate and get need no admin token.
    assert!(c.store().get(&t).await.unwrap().is_some());
    assert_eq!(c.store().allocate(&t, None).await.unwrap().range(), 1..11);
}

/// The request counts of `/v1/tags` in a metrics page.
fn admin_requests(metrics: &str) -> Vec<&str> {
    metrics
        .lines()
        .filter(|l| l.starts_with("leaf_requests_total{route=\"/v1/tags\""))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snowflake_ids_and_decode_pass_through_with_failover() {
    let mut cluster = Cluster::start(2, &[]);
    let c = client(cluster.urls()).build().unwrap();
    let layout = SnowflakeLayout::default();
    let first = c.snowflake_ids(100).await.unwrap();
    assert_eq!(first.len(), 100);
    assert!(first.windows(2).all(|w| w[0] < w[1]), "ascending");
    let d = c.decode(first[0]).await.unwrap();
    assert_eq!(d, layout.decode(first[0]).unwrap(), "the server's layout");
    assert_eq!(d.worker_id, 1, "the first server's worker id");
    cluster.servers[0].kill();
    let second = c.snowflake_ids(100).await.unwrap();
    assert_eq!(layout.decode(second[0]).unwrap().worker_id, 2);
    assert_eq!(c.decode(second[99]).await.unwrap().worker_id, 2);
    let mut all: Vec<i64> = first.into_iter().chain(second).collect();
    common::assert_unique(&mut all);
    for n in [0, 10_001] {
        let e = c.snowflake_ids(n).await.unwrap_err();
        assert!(matches!(e, Error::InvalidInput(_)), "{n}: {e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_segment_mode_is_passed_over() {
    let mut cluster = Cluster::start(0, &[]);
    cluster.add(&[("LEAF_SEGMENT__ENABLED", "false")]);
    cluster.add(&[]);
    let c = client(cluster.urls()).build().unwrap();
    create_tag(&c, "t", 10).await;
    assert_eq!(c.segment().next_id("t").await.unwrap(), 1);
    let status = c.endpoints();
    assert!(
        status[0]
            .last_error
            .as_deref()
            .unwrap()
            .contains("segment mode is disabled"),
        "{status:?}"
    );
}

/// A proxy in front of an endpoint that answers every request with `status` and a body of its
/// own (a WAF's HTML page, a load balancer's text), on a real loopback socket: its URL.
async fn foreign_answerer(status: u16, content_type: &'static str, body: &'static str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                // The request's head (the client's bodies are small), then one answer.
                let mut buf = vec![0; 64 * 1024];
                let _ = socket.read(&mut buf).await;
                let answer = format!(
                    "HTTP/1.1 {status} Foreign\r\ncontent-type: {content_type}\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(answer.as_bytes()).await;
            });
        }
    });
    url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_4xx_moves_on_to_the_next_server() {
    let b = Cluster::start(1, &[]);
    create_tag(&client(b.urls()).build().unwrap(), "t", 10).await;
    let foreign = [
        (
            403,
            "text/html",
            "<html><body>Request blocked by WAF</body></html>",
        ),
        (401, "text/plain", "login required"),
        (400, "text/html", "<h1>Bad Request</h1>"),
        (413, "text/html", "<h1>413 Request Entity Too Large</h1>"),
        (415, "text/plain", "unsupported"),
        (409, "text/plain", "conflict"),
        (404, "application/json", r#"{"error":"no route"}"#),
    ];
    for (status, content_type, body) in foreign {
        let proxy = foreign_answerer(status, content_type, body).await;
        let c = client(vec![proxy, b.urls()[0].clone()]).build().unwrap();
        let a = c
            .store()
            .allocate(&tag("t"), None)
            .await
            .unwrap_or_else(|e| panic!("{status} {body}: the second server serves: {e}"));
        assert!(!a.range().is_empty());
        let ids = c.snowflake_ids(2).await;
        assert!(ids.is_ok(), "{status}: {ids:?}");
        let status_now = c.endpoints();
        assert!(
            status_now[1].preferred && !status_now[0].preferred,
            "{status}: {status_now:?}"
        );
        assert_eq!(status_now[0].last_status, Some(status), "{status_now:?}");
        assert!(status_now[0].failed >= 1, "{status}: {status_now:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn monotonic_ids_of_concurrent_callers_keep_real_time_order() {
    use leaf_testkit::history::{Recorder, check, describe};
    use std::time::Instant;

    // One server on the one-node default's worker id: the only `local` node that serves
    // monotonic IDs (every local node is its own leader).
    let cluster = Cluster::start(1, &[("LEAF_SNOWFLAKE__LOCAL__WORKER_ID", "0")]);
    let c = client(cluster.urls()).build().unwrap();
    let history = std::sync::Arc::new(Recorder::new());
    let tasks: Vec<_> = (0..4)
        .map(|t| {
            let (c, history) = (c.clone(), history.clone());
            tokio::spawn(async move {
                for k in 0..100 {
                    let n = 1 + (t * 13 + k) % 50;
                    let invoked = Instant::now();
                    let ids = c.monotonic_ids(n).await.unwrap();
                    assert_eq!(ids.len(), n);
                    history.record(&format!("task {t}"), "server", invoked, Instant::now(), ids);
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let ops = history.ops();
    let checked = check(&ops).unwrap_or_else(|v| panic!("{}", describe(&ops, &v)));
    assert_eq!(checked.requests, 400);
    for n in [0, 10_001] {
        let e = c.monotonic_ids(n).await.unwrap_err();
        assert!(matches!(e, Error::InvalidInput(_)), "{n}: {e}");
    }
}
