//! The gRPC API on a real loopback socket, through the server's own accept loop: IDs of both
//! modes, streams (all IDs distinct, cancellation, a client that never reads), errors and their
//! details, the token rules, health, per-RPC metrics, and the listener's protocol sniffing.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use leaf_core::{Clock, ManualClock, NodeIdentity, SnowflakeLayout, SystemClock};
use leaf_segment::SegmentAllocator;
use leaf_server::config::Config;
use leaf_server::grpc::pb::admin_client::AdminClient;
use leaf_server::grpc::pb::segment_client::SegmentClient;
use leaf_server::grpc::pb::snowflake_client::SnowflakeClient;
use leaf_server::grpc::pb::{self, ErrorDetail};
use leaf_server::metrics::{Exposition, Metrics};
use leaf_server::server::{Frontend, serve};
use leaf_server::{AppState, SegmentService, SnowflakeService};
use leaf_snowflake::{Snowflake, SnowflakeConfig};
use leaf_testkit::{MemoryRegistryPool, MemoryStore};
use prost::Message as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Request, Status};

/// A server on a loopback port: segment mode from memory (tags `t` and `big`), snowflake mode
/// on an in-memory registry. Stops when dropped.
struct Server {
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    _stop: oneshot::Sender<()>,
}

fn config() -> Config {
    let mut c = Config::default();
    c.server.max_batch = 1000;
    c.server.max_body_bytes = 1024;
    c.server.grpc_max_stream_ids = 1_000_000;
    c.server.grpc_chunk = 100;
    c
}

async fn start(config: Config) -> Server {
    start_on(config, Arc::new(SystemClock::new())).await
}

/// [`start`] with segment mode (and so business tags' periods) on `segment_clock`.
async fn start_on(config: Config, segment_clock: Arc<dyn Clock>) -> Server {
    let store = Arc::new(MemoryStore::with_tags([("t", 1000), ("big", 100_000)]));
    let allocator = SegmentAllocator::new(store, segment_clock, config.segment.allocator_config());
    allocator.init().await.unwrap();
    let pool = MemoryRegistryPool::new(false);
    let generator = Snowflake::start(
        Arc::new(pool.node()),
        NodeIdentity::new("10.0.0.1", 8080),
        Arc::new(SystemClock::new()),
        SnowflakeConfig::default(),
    )
    .await
    .unwrap();
    let metrics = Arc::new(Metrics::new());
    let state = AppState::new(
        &config,
        SnowflakeLayout::default(),
        Some(SegmentService::ready(allocator)),
        Some(SnowflakeService::ready(generator)),
        metrics.clone(),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(async move {
        serve(listener, Frontend::new(&state), &config.server, async {
            let _ = stopped.await;
        })
        .await;
    });
    Server {
        addr,
        metrics,
        _stop: stop,
    }
}

impl Server {
    async fn channel(&self) -> Channel {
        Endpoint::from_shared(format!("http://127.0.0.1:{}", self.addr.port()))
            .unwrap()
            .connect()
            .await
            .unwrap()
    }

    fn metrics_text(&self) -> String {
        let mut e = Exposition::new();
        self.metrics.render(&mut e);
        e.finish()
    }

    /// A sample of the metrics, 0 when absent.
    fn sample(&self, line_start: &str) -> f64 {
        self.metrics_text()
            .lines()
            .find_map(|l| l.strip_prefix(line_start))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0)
    }

    fn issued(&self, tag: &str) -> u64 {
        self.sample(&format!(
            "leaf_ids_issued_total{{mode=\"segment\",tag=\"{tag}\"}} "
        )) as u64
    }

    fn rpcs(&self, method: &str, code: &str) -> u64 {
        self.sample(&format!(
            "leaf_grpc_requests_total{{method=\"{method}\",code=\"{code}\"}} "
        )) as u64
    }

    /// One HTTP/1.1 GET: the status line and the body.
    async fn http1(&self, path: &str) -> (String, String) {
        let mut s = TcpStream::connect(self.addr).await.unwrap();
        let req = format!("GET {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).await.unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        (head.lines().next().unwrap().to_owned(), body.to_owned())
    }
}

/// Leaf's code in the status details: a `google.rpc.Status` with one `leaf.v1.ErrorDetail`.
fn leaf_code(s: &Status) -> ErrorDetail {
    #[derive(Clone, PartialEq, prost::Message)]
    struct RpcStatus {
        #[prost(int32, tag = "1")]
        code: i32,
        #[prost(string, tag = "2")]
        message: String,
        #[prost(message, repeated, tag = "3")]
        details: Vec<prost_types::Any>,
    }
    let rpc = RpcStatus::decode(s.details()).expect("details are a google.rpc.Status");
    assert_eq!(rpc.code, s.code() as i32);
    let any = rpc.details.first().expect("one detail");
    assert_eq!(any.type_url, "type.googleapis.com/leaf.v1.ErrorDetail");
    ErrorDetail::decode(any.value.as_slice()).unwrap()
}

fn with_token<T>(msg: T, token: &str) -> Request<T> {
    let mut r = Request::new(msg);
    r.metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    r
}

fn seg(tag: &str, count: u32) -> pb::NextSegmentIdsRequest {
    pb::NextSegmentIdsRequest {
        tag: tag.into(),
        count,
    }
}

#[tokio::test]
async fn ids_of_both_modes_and_http_on_the_same_port() {
    let s = start(config()).await;
    let mut segment = SegmentClient::new(s.channel().await);
    let first = segment.next_segment_ids(seg("t", 3)).await.unwrap();
    assert_eq!(first.into_inner().ids, [1, 2, 3]);
    // HTTP on the same port takes from the same allocator.
    let (status, body) = s.http1("/api/segment/get/t").await;
    assert!(status.contains("200"), "{status}");
    assert_eq!(body, "4");
    let one = segment.next_segment_ids(seg("t", 1)).await.unwrap();
    assert_eq!(one.into_inner().ids, [5]);

    let mut snowflake = SnowflakeClient::new(s.channel().await);
    let ids = snowflake
        .next_snowflake_ids(pb::NextSnowflakeIdsRequest {
            count: 5,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .ids;
    assert_eq!(ids.len(), 5);
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    let d = snowflake
        .decode_snowflake(pb::DecodeSnowflakeRequest { id: ids[0] })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(d.id, ids[0]);
    assert_eq!(d.worker_id, 0);
    assert!(d.time.ends_with('Z'), "{}", d.time);

    let text = s.metrics_text();
    assert_eq!(s.rpcs("/leaf.v1.Segment/NextSegmentIds", "OK"), 2, "{text}");
    assert_eq!(s.issued("t"), 5);
    assert!(
        text.contains(
            "leaf_grpc_request_duration_seconds_count{method=\"/leaf.v1.Snowflake/NextSnowflakeIds\"} 1"
        ),
        "{text}"
    );
}

#[tokio::test]
async fn snowflake_ids_in_a_format_come_as_formatted_ids_and_decode_to_their_parts() {
    let s = start(config()).await;
    let mut snowflake = SnowflakeClient::new(s.channel().await);
    let layout = SnowflakeLayout::default();
    for (format, form) in [
        ("base36", leaf_format::SnowflakeForm::Base36),
        ("base62", leaf_format::SnowflakeForm::Base62),
        ("friendly", leaf_format::SnowflakeForm::Friendly),
    ] {
        let r = snowflake
            .next_snowflake_ids(pb::NextSnowflakeIdsRequest {
                count: 3,
                format: format.into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert!(r.ids.is_empty(), "{format}: the numbers stay out");
        assert_eq!(r.formatted_ids.len(), 3, "{format}");
        for text in &r.formatted_ids {
            let id = form.parse(text, &layout).unwrap();
            let d = snowflake
                .decode_snowflake(pb::DecodeSnowflakeRequest { id })
                .await
                .unwrap()
                .into_inner();
            assert_eq!(d.worker_id, 0, "{format} {text}");
            assert!(d.timestamp_ms > 1_700_000_000_000, "{format} {text}");
        }
    }
    let plain = snowflake
        .next_snowflake_ids(pb::NextSnowflakeIdsRequest {
            count: 2,
            format: "number".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((plain.ids.len(), plain.formatted_ids.len()), (2, 0));
    let e = snowflake
        .next_snowflake_ids(pb::NextSnowflakeIdsRequest {
            count: 1,
            format: "hex".into(),
        })
        .await
        .expect_err("an unknown format is refused");
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("base62"), "{}", e.message());
    assert_eq!(leaf_code(&e).code, 400);
}

#[tokio::test]
async fn a_streamed_bulk_load_gives_every_id_once_in_order() {
    let s = start(config()).await;
    let mut segment = SegmentClient::new(s.channel().await);
    let mut stream = segment
        .stream_segment_ids(pb::StreamSegmentIdsRequest {
            tag: "big".into(),
            count: 250_000,
            chunk: 0,
        })
        .await
        .unwrap()
        .into_inner();
    let mut all = Vec::new();
    let mut chunks = 0;
    while let Some(chunk) = stream.message().await.unwrap() {
        assert!(
            chunk.ids.len() <= 100,
            "the default chunk is server.grpc_chunk"
        );
        all.extend(chunk.ids);
        chunks += 1;
    }
    assert_eq!(all.len(), 250_000);
    assert_eq!(chunks, 2500);
    assert!(all.windows(2).all(|w| w[0] < w[1]), "ascending");
    assert_eq!(all.iter().collect::<HashSet<_>>().len(), all.len());
    assert_eq!(s.rpcs("/leaf.v1.Segment/StreamSegmentIds", "OK"), 1);

    let mut snowflake = SnowflakeClient::new(s.channel().await);
    let mut stream = snowflake
        .stream_snowflake_ids(pb::StreamSnowflakeIdsRequest {
            count: 5000,
            chunk: 1000,
        })
        .await
        .unwrap()
        .into_inner();
    let mut ids = Vec::new();
    while let Some(chunk) = stream.message().await.unwrap() {
        assert_eq!(chunk.ids.len(), 1000);
        ids.extend(chunk.ids);
    }
    assert_eq!(ids.len(), 5000);
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
}

#[tokio::test]
async fn bad_input_gets_the_right_code_and_the_server_serves_on() {
    let s = start(config()).await;
    let mut segment = SegmentClient::new(s.channel().await);
    let check = |r: Result<tonic::Response<pb::NextSegmentIdsResponse>, Status>,
                 code: Code,
                 leaf: i64,
                 words: &str| {
        let e = r.expect_err("refused");
        assert_eq!(e.code(), code, "{e:?}");
        assert!(e.message().contains(words), "{}", e.message());
        assert_eq!(leaf_code(&e).code, leaf);
    };
    check(
        segment.next_segment_ids(seg("", 1)).await,
        Code::InvalidArgument,
        400,
        "tag is empty",
    );
    check(
        segment.next_segment_ids(seg("t", 0)).await,
        Code::InvalidArgument,
        400,
        "count must be a whole number from 1 to 1000, got 0",
    );
    check(
        segment.next_segment_ids(seg("t", 1001)).await,
        Code::InvalidArgument,
        400,
        "got 1001",
    );
    check(
        segment.next_segment_ids(seg("a/b", 1)).await,
        Code::InvalidArgument,
        400,
        "/",
    );
    check(
        segment.next_segment_ids(seg("nope", 1)).await,
        Code::NotFound,
        -2,
        "nope",
    );
    // A message above server.max_body_bytes (1024 here): RESOURCE_EXHAUSTED, as gRPC says
    // (tonic's own answer would be OUT_OF_RANGE, which here means a tag's IDs ran out).
    let e = segment
        .next_segment_ids(seg(&"x".repeat(2000), 1))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(e.message().contains("1024"), "{}", e.message());
    assert_eq!(leaf_code(&e).http_status, 413);

    let mut stream_req = pb::StreamSegmentIdsRequest {
        tag: "t".into(),
        count: 1_000_001,
        chunk: 0,
    };
    let e = segment
        .stream_segment_ids(stream_req.clone())
        .await
        .map(|_| ())
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("server.grpc_max_stream_ids"), "{e:?}");
    stream_req.count = 10;
    stream_req.chunk = 1001;
    let e = segment
        .stream_segment_ids(stream_req.clone())
        .await
        .map(|_| ())
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("server.max_batch"), "{e:?}");
    stream_req.count = 0;
    stream_req.chunk = 0;
    let e = segment
        .stream_segment_ids(stream_req)
        .await
        .map(|_| ())
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);

    let e = segment
        .allocate_segment(pb::AllocateSegmentRequest {
            tag: "t".into(),
            step: -1,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    let e = SnowflakeClient::new(s.channel().await)
        .decode_snowflake(pb::DecodeSnowflakeRequest { id: -5 })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);

    // Still serving, on the same connection.
    let ids = segment.next_segment_ids(seg("t", 2)).await.unwrap();
    assert_eq!(ids.into_inner().ids.len(), 2);
    assert_eq!(
        s.rpcs("/leaf.v1.Segment/NextSegmentIds", "INVALID_ARGUMENT"),
        4
    );
    assert_eq!(s.rpcs("/leaf.v1.Segment/NextSegmentIds", "NOT_FOUND"), 1);
    assert_eq!(
        s.rpcs("/leaf.v1.Segment/NextSegmentIds", "RESOURCE_EXHAUSTED"),
        1
    );
}

#[tokio::test]
async fn allocate_and_get_tag_twin_the_leasing_routes() {
    let s = start(config()).await;
    let mut segment = SegmentClient::new(s.channel().await);
    let a = segment
        .allocate_segment(pb::AllocateSegmentRequest {
            tag: "t".into(),
            step: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((a.step, a.used_step), (1000, 1000));
    let b = segment
        .allocate_segment(pb::AllocateSegmentRequest {
            tag: "t".into(),
            step: 5,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((b.max_id - b.used_step, b.used_step), (a.max_id, 5));
    let row = segment
        .get_tag(pb::GetTagRequest { tag: "t".into() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(row.max_id, b.max_id);
    let e = segment
        .get_tag(pb::GetTagRequest { tag: "nope".into() })
        .await
        .unwrap_err();
    assert_eq!((e.code(), leaf_code(&e).code), (Code::NotFound, -2));
}

#[tokio::test]
async fn tokens_as_for_http() {
    let mut c = config();
    c.server.client_token = "t0ken".into();
    c.server.admin_token = "adm1n".into();
    let s = start(c).await;
    let mut segment = SegmentClient::new(s.channel().await);
    let e = segment.next_segment_ids(seg("t", 1)).await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated);
    assert!(e.message().contains("server.client_token"), "{e:?}");
    let e = segment
        .next_segment_ids(with_token(seg("t", 1), "wrong"))
        .await
        .unwrap_err();
    assert_eq!((e.code(), leaf_code(&e).code), (Code::Unauthenticated, 401));
    let ok = segment
        .next_segment_ids(with_token(seg("t", 1), "t0ken"))
        .await
        .unwrap();
    assert_eq!(ok.into_inner().ids, [1]);

    let mut admin = AdminClient::new(s.channel().await);
    let e = admin
        .list_tags(with_token(pb::ListTagsRequest {}, "t0ken"))
        .await
        .unwrap_err();
    assert_eq!(
        e.code(),
        Code::Unauthenticated,
        "the client token is no admin token"
    );
    let tags = admin
        .list_tags(with_token(pb::ListTagsRequest {}, "adm1n"))
        .await
        .unwrap()
        .into_inner()
        .tags;
    let t = tags.iter().find(|t| t.tag == "t").unwrap();
    assert!(t.cache.as_ref().is_some_and(|c| c.initialized), "{t:?}");
    let created = admin
        .create_tag(with_token(
            pb::CreateTagRequest {
                tag: "fresh".into(),
                step: Some(10),
                ..Default::default()
            },
            "adm1n",
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((created.tag.as_str(), created.step), ("fresh", 10));
    let e = admin
        .create_tag(with_token(
            pb::CreateTagRequest {
                tag: "fresh".into(),
                ..Default::default()
            },
            "adm1n",
        ))
        .await
        .unwrap_err();
    assert_eq!((e.code(), leaf_code(&e).code), (Code::AlreadyExists, 409));
    let updated = admin
        .update_tag(with_token(
            pb::UpdateTagRequest {
                tag: "fresh".into(),
                step: Some(20),
                description: Some("d".into()),
            },
            "adm1n",
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (updated.step, updated.description.as_deref()),
        (20, Some("d"))
    );
    // A tag created a moment ago serves at once (the miss is forgotten).
    let ids = segment
        .next_segment_ids(with_token(seg("fresh", 2), "t0ken"))
        .await
        .unwrap();
    assert_eq!(ids.into_inner().ids, [1, 2]);
}

#[tokio::test]
async fn without_an_admin_token_admin_takes_loopback_names_only() {
    let s = start(config()).await;
    let mut admin = AdminClient::new(s.channel().await);
    admin.list_tags(pb::ListTagsRequest {}).await.unwrap();
    // The same loopback peer, calling the server by another name (DNS rebinding's shape).
    let rebound = Endpoint::from_shared(format!("http://127.0.0.1:{}", s.addr.port()))
        .unwrap()
        .origin(
            format!("http://leaf.example:{}", s.addr.port())
                .parse()
                .unwrap(),
        )
        .connect()
        .await
        .unwrap();
    let e = AdminClient::new(rebound)
        .list_tags(pb::ListTagsRequest {})
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert!(e.message().contains(":authority"), "{e:?}");
}

#[tokio::test]
async fn allowed_hosts_hold_for_grpc() {
    let mut c = config();
    c.server.allowed_hosts = vec!["leaf.example".into()];
    let s = start(c).await;
    let call_as = |name: &str| {
        Endpoint::from_shared(format!("http://127.0.0.1:{}", s.addr.port()))
            .unwrap()
            .origin(format!("http://{name}:{}", s.addr.port()).parse().unwrap())
    };
    let listed = call_as("leaf.example").connect().await.unwrap();
    SegmentClient::new(listed)
        .next_segment_ids(seg("t", 1))
        .await
        .unwrap();
    let other = call_as("rebind.attacker.example").connect().await.unwrap();
    let e = SegmentClient::new(other)
        .next_segment_ids(seg("t", 1))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
}

/// A stream of `count` IDs of tag `big` in chunks of 100, over a connection with gRPC's usual
/// 64 KiB flow-control windows.
async fn small_window_stream(
    addr: SocketAddr,
    count: u32,
) -> (
    SegmentClient<Channel>,
    tonic::Streaming<pb::StreamSegmentIdsResponse>,
) {
    let channel = Endpoint::from_shared(format!("http://127.0.0.1:{}", addr.port()))
        .unwrap()
        .initial_stream_window_size(65_535)
        .initial_connection_window_size(65_535)
        .connect()
        .await
        .unwrap();
    let mut segment = SegmentClient::new(channel);
    let stream = segment
        .stream_segment_ids(pb::StreamSegmentIdsRequest {
            tag: "big".into(),
            count,
            chunk: 100,
        })
        .await
        .unwrap()
        .into_inner();
    (segment, stream)
}

#[tokio::test]
async fn a_cancelled_stream_takes_no_more_ids() {
    let s = start(config()).await;
    // gRPC's usual 64 KiB windows (hyper's client would open 2 and 5 MiB): what the server
    // may run ahead of the reader.
    let (mut segment, mut stream) = small_window_stream(s.addr, 1_000_000).await;
    let mut received = 0;
    for _ in 0..3 {
        received += stream.message().await.unwrap().unwrap().ids.len();
    }
    drop(stream);
    // Time for the reset to reach the server and the chunk in flight to land, on a busy machine.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after_cancel = s.issued("big");
    tokio::time::sleep(Duration::from_millis(700)).await;
    let later = s.issued("big");
    eprintln!("received {received}, issued {after_cancel} at the cancel, {later} later");
    assert_eq!(
        later, after_cancel,
        "IDs were taken after the client went away"
    );
    // What was taken before the cancel is bounded by the flow-control windows, far from the
    // million asked for.
    assert!(after_cancel < 100_000, "{after_cancel}");
    let cancelled = s.rpcs("/leaf.v1.Segment/StreamSegmentIds", "CANCELLED");
    assert_eq!(cancelled, 1, "{}", s.metrics_text());
    let ids = segment.next_segment_ids(seg("big", 1)).await.unwrap();
    assert_eq!(ids.into_inner().ids, [after_cancel as i64 + 1]);
}

/// The framed gRPC message of `msg`: no compression, 4 bytes of length, the message.
fn grpc_frame(msg: &impl prost::Message) -> bytes::Bytes {
    let body = msg.encode_to_vec();
    let mut framed = vec![0u8];
    framed.extend_from_slice(&(body.len() as u32).to_be_bytes());
    framed.extend_from_slice(&body);
    framed.into()
}

#[tokio::test]
async fn an_http2_client_that_never_reads_holds_the_server_to_its_window() {
    let s = start(config()).await;
    let tcp = TcpStream::connect(s.addr).await.unwrap();
    // A 1 KiB stream window, never released: the server may send 1 KiB of this stream.
    let (client, conn) = h2::client::Builder::new()
        .initial_window_size(1024)
        .handshake::<_, bytes::Bytes>(tcp)
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut client = client.ready().await.unwrap();
    let req = axum::http::Request::post(format!(
        "http://127.0.0.1:{}/leaf.v1.Segment/StreamSegmentIds",
        s.addr.port()
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .body(())
    .unwrap();
    let (resp, mut send) = client.send_request(req, false).unwrap();
    let msg = pb::StreamSegmentIdsRequest {
        tag: "big".into(),
        count: 1_000_000,
        chunk: 100,
    };
    send.send_data(grpc_frame(&msg), true).unwrap();
    let resp = resp.await.unwrap();
    assert_eq!(resp.status(), 200);
    // Never read the body. A server that produced into an unbounded buffer would take the
    // whole million in this time.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let taken = s.issued("big");
    eprintln!("a never-reading client made the server take {taken} IDs");
    assert!(taken > 0 && taken < 100_000, "{taken}");
    // The server serves others meanwhile, and the stalled stream stays where it was.
    let mut segment = SegmentClient::new(s.channel().await);
    let ids = segment.next_segment_ids(seg("t", 2)).await.unwrap();
    assert_eq!(ids.into_inner().ids.len(), 2);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(s.issued("big"), taken);
    drop(resp);
}

#[tokio::test]
async fn health_reports_each_mode_as_readyz_does() {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;

    let mut c = config();
    c.snowflake.enabled = false;
    let store = Arc::new(MemoryStore::with_tags([("t", 10)]));
    let allocator = SegmentAllocator::new(
        store,
        Arc::new(SystemClock::new()),
        c.segment.allocator_config(),
    );
    let err = leaf_core::Error::Unavailable("store down".into());
    let service = SegmentService::starting(allocator.clone(), &err);
    let state = AppState::new(
        &c,
        SnowflakeLayout::default(),
        Some(service.clone()),
        None,
        Arc::new(Metrics::new()),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (_stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(async move {
        serve(listener, Frontend::new(&state), &c.server, async {
            let _ = stopped.await;
        })
        .await;
    });
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = HealthClient::new(channel);
    let check = |name: &str| HealthCheckRequest {
        service: name.into(),
    };
    let status = |r: tonic::Response<tonic_health::pb::HealthCheckResponse>| r.into_inner().status;
    let not_serving = ServingStatus::NotServing as i32;
    let serving = ServingStatus::Serving as i32;
    assert_eq!(status(health.check(check("")).await.unwrap()), not_serving);
    assert_eq!(
        status(health.check(check("leaf.v1.Segment")).await.unwrap()),
        not_serving
    );
    assert_eq!(
        status(health.check(check("leaf.v1.Snowflake")).await.unwrap()),
        not_serving,
        "a disabled mode serves nothing"
    );
    let e = health.check(check("leaf.v1.Nope")).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    let mut watch = health
        .watch(check("leaf.v1.Segment"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(watch.next().await.unwrap().unwrap().status, not_serving);
    allocator.init().await.unwrap();
    service.mark_ready();
    let next = tokio::time::timeout(Duration::from_secs(5), watch.next())
        .await
        .expect("watch sends the change")
        .unwrap()
        .unwrap();
    assert_eq!(next.status, serving);
    assert_eq!(status(health.check(check("")).await.unwrap()), serving);
    // The snowflake RPCs say the mode is off: FAILED_PRECONDITION, not an unknown tag.
    let e = SnowflakeClient::new(health_channel(addr).await)
        .next_snowflake_ids(pb::NextSnowflakeIdsRequest {
            count: 1,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(e.message().contains("snowflake.enabled = false"), "{e:?}");
}

#[tokio::test]
async fn a_health_watch_does_not_hold_up_a_graceful_shutdown() {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_client::HealthClient;

    let c = config();
    assert_eq!(c.server.shutdown_timeout_s, 10);
    let store = Arc::new(MemoryStore::with_tags([("t", 10)]));
    let allocator = SegmentAllocator::new(
        store,
        Arc::new(SystemClock::new()),
        c.segment.allocator_config(),
    );
    allocator.init().await.unwrap();
    let state = AppState::new(
        &c,
        SnowflakeLayout::default(),
        Some(SegmentService::ready(allocator)),
        None,
        Arc::new(Metrics::new()),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let served = tokio::spawn(async move {
        serve(listener, Frontend::new(&state), &c.server, async {
            let _ = stopped.await;
        })
        .await;
    });
    let mut health = HealthClient::new(health_channel(addr).await);
    let mut watch = health
        .watch(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(watch.next().await.is_some());
    let asked = std::time::Instant::now();
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(5), served)
        .await
        .expect("the shutdown waited for the watch")
        .unwrap();
    assert!(asked.elapsed() < Duration::from_secs(5));
    // The watch ended cleanly, with no further message.
    let end = tokio::time::timeout(Duration::from_secs(1), watch.next()).await;
    assert!(matches!(end, Ok(None) | Ok(Some(Err(_)))), "{end:?}");
}

async fn health_channel(addr: SocketAddr) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

#[tokio::test]
async fn with_grpc_off_a_grpc_call_is_unimplemented_saying_so() {
    let mut c = config();
    c.server.grpc = false;
    let s = start(c).await;
    let e = SegmentClient::new(s.channel().await)
        .next_segment_ids(seg("t", 1))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unimplemented, "{e:?}");
    assert!(e.message().contains("server.grpc = false"), "{e:?}");
    assert_eq!(s.issued("t"), 0);
    let (status, _) = s.http1("/api/segment/get/t").await;
    assert!(status.contains("200"), "{status}");
}

#[tokio::test]
async fn http_over_h2c_reaches_the_http_router() {
    let s = start(config()).await;
    let tcp = TcpStream::connect(s.addr).await.unwrap();
    let (client, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    let mut client = client.ready().await.unwrap();
    let req = axum::http::Request::get(format!(
        "http://localhost:{}/v1/segment/t?count=2",
        s.addr.port()
    ))
    .body(())
    .unwrap();
    let (resp, _) = client.send_request(req, true).unwrap();
    let resp = resp.await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/json");
    let mut body = resp.into_body();
    let mut bytes = Vec::new();
    while let Some(chunk) = body.data().await {
        bytes.extend_from_slice(&chunk.unwrap());
    }
    assert_eq!(
        String::from_utf8(bytes).unwrap(),
        r#"{"ids":[1,2],"tag":"t"}"#
    );
}

#[tokio::test]
async fn the_admin_loopback_rule_reads_the_authority_of_h2c_http() {
    let s = start(config()).await;
    let tcp = TcpStream::connect(s.addr).await.unwrap();
    let (client, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    let mut client = client.ready().await.unwrap();
    for (name, status) in [("localhost", 200), ("rebind.attacker.example", 403)] {
        let req = axum::http::Request::get(format!("http://{name}:{}/v1/tags", s.addr.port()))
            .body(())
            .unwrap();
        let (resp, _) = client.send_request(req, true).unwrap();
        assert_eq!(resp.await.unwrap().status(), status, "{name}");
        client = client.ready().await.unwrap();
    }
}

#[tokio::test]
async fn a_connection_that_stalls_in_the_preface_is_closed_within_the_idle_timeout() {
    let mut c = config();
    c.server.idle_timeout_s = 1;
    let s = start(c).await;
    for sent in [&b""[..], b"PRI * HTTP/2.0\r\n"] {
        let mut conn = TcpStream::connect(s.addr).await.unwrap();
        conn.write_all(sent).await.unwrap();
        let mut buf = [0u8; 64];
        // Closed (end of stream or a reset) well before the test's own limit; without the
        // sniffing timeout the read waits for ever.
        let read = tokio::time::timeout(Duration::from_secs(5), conn.read(&mut buf))
            .await
            .unwrap_or_else(|_| panic!("still open after 5 s having sent {sent:?}"));
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    }
    // The listener serves on.
    let (status, _) = s.http1("/healthz").await;
    assert!(status.contains("200"), "{status}");
}

#[tokio::test]
async fn http2_limits_are_announced_and_held() {
    let mut c = config();
    c.server.http2_max_concurrent_streams = 3;
    c.server.max_header_bytes = 8192;
    let s = start(c).await;
    let tcp = TcpStream::connect(s.addr).await.unwrap();
    let (client, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    let mut client = client.ready().await.unwrap();
    // The server's SETTINGS arrive with its first frames; a request makes sure they were read.
    let get = |path: &str, header: Option<String>| {
        let mut b = axum::http::Request::get(format!("http://localhost:{}{path}", s.addr.port()));
        if let Some(v) = header {
            b = b.header("x-big", v);
        }
        b.body(()).unwrap()
    };
    let (resp, _) = client.send_request(get("/healthz", None), true).unwrap();
    assert_eq!(resp.await.unwrap().status(), 200);
    assert_eq!(client.current_max_send_streams(), 3);
    // A header list above server.max_header_bytes is refused, and the connection serves on.
    let (resp, _) = client
        .send_request(get("/healthz", Some("x".repeat(10_000))), true)
        .unwrap();
    match resp.await {
        Ok(r) => assert_eq!(r.status(), 431),
        Err(e) => assert!(e.is_reset() || e.is_remote(), "{e}"),
    }
    let mut client = client.ready().await.unwrap();
    let (resp, _) = client.send_request(get("/healthz", None), true).unwrap();
    assert_eq!(resp.await.unwrap().status(), 200);
}

#[tokio::test]
async fn an_http2_connection_without_a_request_for_the_idle_timeout_is_closed() {
    let mut c = config();
    c.server.idle_timeout_s = 1;
    let s = start(c).await;
    let tcp = TcpStream::connect(s.addr).await.unwrap();
    // h2's client answers every ping: only the idle rule can end this connection.
    let (client, conn) = h2::client::handshake(tcp).await.unwrap();
    let conn = tokio::spawn(conn);
    let mut client = client.ready().await.unwrap();
    let req = axum::http::Request::get(format!("http://localhost:{}/healthz", s.addr.port()))
        .body(())
        .unwrap();
    let (resp, _) = client.send_request(req, true).unwrap();
    assert_eq!(resp.await.unwrap().status(), 200);
    let ended = tokio::time::timeout(Duration::from_secs(6), conn).await;
    assert!(
        ended.is_ok(),
        "an idle HTTP/2 connection still open after 6 s"
    );
    drop(client);
}

#[tokio::test]
async fn a_stream_in_flight_outlives_the_idle_timeout() {
    let mut c = config();
    c.server.idle_timeout_s = 1;
    let s = start(c).await;
    // A 64 KiB window: the server's stream waits on the reader, in flight, through the pause.
    let (_segment, mut stream) = small_window_stream(s.addr, 200_000).await;
    let mut ids = stream.message().await.unwrap().unwrap().ids;
    // A reader that pauses longer than the idle timeout: its stream is in flight, so its
    // connection stays.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    while let Some(chunk) = stream.message().await.unwrap() {
        ids.extend(chunk.ids);
    }
    assert_eq!(ids.len(), 200_000);
}

#[tokio::test]
async fn an_http2_peer_that_answers_no_ping_is_closed() {
    let mut c = config();
    c.server.http2_keepalive_s = 1;
    let s = start(c).await;
    let mut conn = TcpStream::connect(s.addr).await.unwrap();
    // The preface and an empty SETTINGS frame, then silence: no ACK, no PING answer.
    conn.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .await
        .unwrap();
    let closed = tokio::time::timeout(Duration::from_secs(8), async {
        let mut buf = [0u8; 1024];
        loop {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "still open 8 s after a 1 s keep-alive");
}

/// `n` IDs of the business tag `order`, as printed.
async fn order_ids(segment: &SegmentClient<Channel>, n: u32) -> Vec<String> {
    let mut segment = segment.clone();
    let got = segment.next_segment_ids(seg("order", n)).await.unwrap();
    got.into_inner().formatted_ids
}

/// 2026-11-27 10:00 in Asia/Shanghai: the business test's day is its clock's, never the
/// machine's (issue 32: on the wall clock it failed when midnight there, 16:00 UTC, fell between
/// two of its requests).
const SHANGHAI_MORNING_MS: u64 = 1_795_744_800_000;

#[tokio::test]
async fn business_tags_are_created_listed_and_answered_as_formatted_ids() {
    let clock = ManualClock::new(SHANGHAI_MORNING_MS);
    let s = start_on(config(), Arc::new(clock.clone())).await;
    let mut admin = AdminClient::new(s.channel().await);
    let created = admin
        .create_tag(pb::CreateTagRequest {
            tag: "order".into(),
            step: Some(100),
            reset: Some("day".into()),
            time_zone: Some("Asia/Shanghai".into()),
            format: Some("ORD{date:%Y%m%d}{seq:06}".into()),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(created.tag, "order");
    let props = created.business.expect("a business tag's properties");
    assert_eq!(props.reset.as_deref(), Some("day"));
    assert_eq!(
        (props.time_zone.as_str(), props.first),
        ("Asia/Shanghai", 1)
    );

    let mut segment = SegmentClient::new(s.channel().await);
    let got = segment
        .next_segment_ids(seg("order", 3))
        .await
        .unwrap()
        .into_inner();
    assert!(got.ids.is_empty(), "{got:?}");
    assert_eq!(
        got.formatted_ids,
        [
            "ORD20261127000001",
            "ORD20261127000002",
            "ORD20261127000003"
        ]
    );
    // Plain tags answer numbers as before, with no formatted_ids.
    let plain = segment
        .next_segment_ids(seg("t", 2))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((plain.ids.len(), plain.formatted_ids.len()), (2, 0));

    // Streams and leases carry numbers only: a business tag is refused before any ID is taken.
    let e = segment
        .stream_segment_ids(pb::StreamSegmentIdsRequest {
            tag: "order".into(),
            count: 10,
            chunk: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    let e = segment
        .allocate_segment(pb::AllocateSegmentRequest {
            tag: "order".into(),
            step: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    assert_eq!(order_ids(&segment, 1).await, ["ORD20261127000004"]);

    let list = admin
        .list_tags(pb::ListTagsRequest {})
        .await
        .unwrap()
        .into_inner();
    let names: Vec<&str> = list.tags.iter().map(|t| t.tag.as_str()).collect();
    assert!(names.iter().all(|n| !n.contains('@')), "{names:?}");
    let order = list.tags.iter().find(|t| t.tag == "order").expect("order");
    assert!(order.business.is_some());
    let periods: Vec<&str> = order.periods.iter().map(|p| p.tag.as_str()).collect();
    assert_eq!(periods, ["order@20261127"], "{order:?}");
    let row = &order.periods[0];
    assert!(row.cache.as_ref().is_some_and(|c| c.initialized), "{row:?}");
    // At midnight in Shanghai the count restarts, on this clock only.
    clock.set_ms(SHANGHAI_MORNING_MS + 14 * 3_600_000);
    assert_eq!(order_ids(&segment, 1).await, ["ORD20261128000001"]);

    // Its rows never change, refused by their names; nor does any tag take properties as its
    // description (issue 32).
    for (tag, description) in [
        (
            "order@",
            "leaf-props:v1 reset=month zone=UTC first=1 format=O{date:%Y%m}{seq}",
        ),
        ("order@20261127", "x"),
        ("order", "x"),
        ("t", "leaf-props:v1 zone=UTC first=1 format=T{seq}"),
    ] {
        let e = admin
            .update_tag(pb::UpdateTagRequest {
                tag: tag.into(),
                step: None,
                description: Some(description.into()),
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{tag}: {e}");
    }

    // A bad zone is INVALID_ARGUMENT, nothing created.
    let e = admin
        .create_tag(pb::CreateTagRequest {
            tag: "bad".into(),
            reset: Some("day".into()),
            time_zone: Some("Mars/Olympus".into()),
            format: Some("B{date:%Y%m%d}{seq}".into()),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    assert!(e.message().contains("Mars/Olympus"), "{e}");
}
