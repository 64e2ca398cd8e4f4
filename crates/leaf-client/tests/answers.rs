//! What the client does with answers it must not trust, and with time it still has: a range
//! below one it already had (an endpoint on another store), a 2xx that is not the route's
//! answer, a range larger than asked, a refused endpoint while the call has time left, and the
//! tags `.` and `..` in paths.

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::{Cluster, Stub, StubAnswer, client, create_tag, refusing_url};
use leaf_core::{BoxFuture, Clock, Error, SegmentStore, Tag};

fn tag(name: &str) -> Tag {
    Tag::new(name).unwrap()
}

/// The allocate route's answer for tag `t`: `max_id` with a range of `used` ids, step `step`.
fn allocation(max_id: i64, step: i64, used: i64) -> StubAnswer {
    let body = format!(r#"{{"tag":"t","max_id":{max_id},"step":{step},"used_step":{used}}}"#);
    (200, "application/json", body)
}

/// A row of tag `t` with step `step` (`GET /v1/tags/t`).
fn row(step: i64) -> StubAnswer {
    let body = format!(
        r#"{{"tag":"t","max_id":1,"step":{step},"description":null,"updated_at_ms":null}}"#
    );
    (200, "application/json", body)
}

/// An endpoint whose store hands out the range `1..11` again and again (a store of its own
/// that restarted empty, an older copy): after the first, every such range is refused, and no
/// ID is handed out twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_range_below_one_already_had_is_never_handed_out() {
    let stub = Stub::start(|method, path| match (method, path) {
        ("POST", "/v1/segment/t/allocate") => allocation(11, 10, 10),
        (_, "/v1/tags/t") => row(10),
        _ => (404, "text/plain", "no".into()),
    })
    .await;
    let c = client(vec![stub.url.clone()])
        .request_timeout(Duration::from_millis(300))
        .call_timeout(Duration::from_millis(600))
        .build()
        .unwrap();
    let mut seen = HashSet::new();
    let mut refused = None;
    for _ in 0..40 {
        match c.segment().next_id("t").await {
            Ok(id) => assert!(seen.insert(id), "id {id} handed out twice"),
            Err(e) => refused = Some(e),
        }
    }
    assert_eq!(seen.len(), 10, "the first range, once");
    let e = refused.expect("the repeated ranges were handed out");
    assert!(matches!(e, Error::Unavailable(_)), "{e}");
    // The store's own call says why.
    let e = c.store().allocate(&tag("t"), None).await.unwrap_err();
    assert!(
        e.to_string()
            .contains("starts below 11, the end of a range this client already had"),
        "{e}"
    );
    assert!(stub.requests() > 2, "the endpoint was asked again");
}

/// The default store is one SQLite file per node: two servers that do not share a store hand
/// out the same IDs. The client takes ranges from the first; once it is gone, the second's
/// ranges (from its own file, below them) are refused, never handed out again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_on_separate_stores_never_hand_an_id_out_twice() {
    let mut first = Cluster::start(1, &[]);
    let second = Cluster::start(1, &[]);
    for cluster in [&first, &second] {
        let admin = client(cluster.urls()).build().unwrap();
        create_tag(&admin, "t", 10).await;
    }
    let c = client(vec![first.servers[0].url(), second.servers[0].url()])
        .request_timeout(Duration::from_millis(500))
        .call_timeout(Duration::from_millis(1000))
        .build()
        .unwrap();
    let mut seen = HashSet::new();
    for _ in 0..25 {
        let id = c
            .segment()
            .next_id("t")
            .await
            .expect("from the first server");
        assert!(seen.insert(id));
    }
    first.servers[0].kill();
    // The buffers (ranges preloaded from the first server) run out well before this many; the
    // second server's first range (from its own file, from 1) is refused, its later ones are
    // above every ID this client handed out.
    for _ in 0..2000 {
        if let Ok(id) = c.segment().next_id("t").await {
            assert!(seen.insert(id), "id {id} handed out twice");
        }
    }
    let second = &c.endpoints()[1];
    assert!(
        second.failed > 0
            && second
                .last_error
                .as_deref()
                .is_some_and(|e| e.contains("every endpoint must use one store")),
        "the second server's range from 1 was not refused: {second:?}"
    );
}

/// An endpoint that answers 200 with a page to every request (a maintenance page, a wrong port
/// behind a proxy) is skipped like a failed one; the next endpoint serves, and is preferred.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2xx_that_is_not_the_routes_answer_moves_on_to_the_next_endpoint() {
    let page = Stub::start(|_, _| (200, "text/html", "<html>maintenance</html>".into())).await;
    let cluster = Cluster::start(1, &[]);
    let c = client(vec![page.url.clone(), cluster.servers[0].url()])
        .build()
        .unwrap();
    create_tag(&c, "t", 100).await;
    for expect in 1..=5 {
        assert_eq!(c.segment().next_id("t").await.unwrap(), expect);
    }
    let ids = c.snowflake_ids(3).await.unwrap();
    assert_eq!(ids.len(), 3);
    let status = c.endpoints();
    assert!(status[1].preferred, "{status:?}");
    assert!(status[0].failed > 0 && !status[0].preferred, "{status:?}");
    assert!(
        status[0]
            .last_error
            .as_deref()
            .is_some_and(|e| e.starts_with("200 but")),
        "{status:?}"
    );
}

/// A range larger than the step asked for is refused (it would overlap what the store gives
/// others); one of 1 up to the step asked is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_range_larger_than_asked_is_refused() {
    let stub = Stub::start(|method, path| match (method, path) {
        ("POST", "/v1/segment/t/allocate") => allocation(1001, 10, 1000),
        _ => (404, "text/plain", "no".into()),
    })
    .await;
    let c = client(vec![stub.url.clone()])
        .call_timeout(Duration::from_millis(300))
        .request_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let e = c.store().allocate(&tag("t"), Some(10)).await.unwrap_err();
    assert!(
        e.to_string()
            .contains("a range of 1000 ids of tag t, asked for 1 to 10"),
        "{e}"
    );
    let e = c.store().allocate(&tag("t"), None).await.unwrap_err();
    assert!(e.to_string().contains("asked for 1 to 10"), "{e}");
}

/// A clock for the call loop: each reading of the monotonic clock moves it 2 ms, as a loaded
/// machine's would between two looks, and a sleep moves it by its length.
#[derive(Debug, Default)]
struct SteppingClock {
    mono_us: AtomicU64,
}

impl Clock for SteppingClock {
    fn now_ms(&self) -> u64 {
        1_800_000_000_000 + self.mono_us.load(Ordering::SeqCst) / 1000
    }
    fn monotonic(&self) -> Duration {
        Duration::from_micros(self.mono_us.fetch_add(2000, Ordering::SeqCst))
    }
    fn sleep(&self, d: Duration) -> BoxFuture<'_, ()> {
        self.mono_us
            .fetch_add(d.as_micros() as u64, Ordering::SeqCst);
        Box::pin(tokio::task::yield_now())
    }
}

/// A refusing endpoint with a 1 ms back-off: by the time the call looks, the back-off is over
/// and no endpoint is skipped. The call goes on asking until its time is up, not a moment less.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_asks_again_until_its_time_is_up() {
    let clock = Arc::new(SteppingClock::default());
    let c = client(vec![refusing_url()])
        .backoff(Duration::from_millis(1), Duration::from_millis(1))
        .request_timeout(Duration::from_millis(200))
        .call_timeout(Duration::from_millis(400))
        .clock(clock.clone())
        .build()
        .unwrap();
    let started = clock.monotonic();
    let e = c.store().get(&tag("t")).await.unwrap_err();
    let lasted = clock.monotonic() - started;
    assert!(matches!(e, Error::Unavailable(_)), "{e}");
    assert!(
        lasted >= Duration::from_millis(400),
        "the call gave up after {lasted:?} of its 400 ms"
    );
    let asked = c.endpoints()[0].failed;
    assert!(asked > 10, "asked {asked} times");
}

/// The tags `.` and `..` reach the server as tags, not as path steps: encoded on the wire (a
/// normalising proxy would take `/v1/tags/..` for `/v1`), and decoded by the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dot_tags_are_tags() {
    let paths = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = paths.clone();
    let stub = Stub::start(move |_, path| {
        seen.lock().unwrap().push(path.to_owned());
        (
            404,
            "application/json",
            r#"{"code":-2,"message":"not found"}"#.into(),
        )
    })
    .await;
    let c = client(vec![stub.url.clone()]).build().unwrap();
    for name in [".", ".."] {
        assert!(c.store().get(&tag(name)).await.unwrap().is_none());
    }
    assert_eq!(*paths.lock().unwrap(), ["/v1/tags/%2E", "/v1/tags/%2E%2E"]);

    let cluster = Cluster::start(1, &[]);
    let c = client(cluster.urls()).build().unwrap();
    for (name, step) in [(".", 10), ("..", 20)] {
        create_tag(&c, name, step).await;
    }
    assert_eq!(c.segment().next_id(".").await.unwrap(), 1);
    assert_eq!(c.segment().next_id("..").await.unwrap(), 1);
    let row = c.store().get(&tag("..")).await.unwrap().expect("the row");
    assert_eq!(row.step, 20);
}

/// A row whose step is above the servers' `segment.max_step`: the servers cut the step a lease
/// asks for to theirs and say so in `used_step`, and the client takes the smaller range, lease
/// after lease (it asks for at least the row's step).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_step_above_the_servers_max_step_serves_lease_after_lease() {
    let cluster = Cluster::start(2, &[("LEAF_SEGMENT__MAX_STEP", "100")]);
    let c = client(cluster.urls()).build().unwrap();
    create_tag(&c, "t", 200).await;
    let mut seen = HashSet::new();
    for _ in 0..500 {
        let id = c.segment().next_id("t").await.expect("served");
        assert!(seen.insert(id), "id {id} twice");
    }
    let a = c.store().allocate(&tag("t"), Some(300)).await.unwrap();
    assert_eq!((a.step, a.used_step), (200, 100));
}
