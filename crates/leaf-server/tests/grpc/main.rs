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

/// The framed gRPC message of `msg`: no compression, 4 bytes of length, the message.
fn grpc_frame(msg: &impl prost::Message) -> bytes::Bytes {
    let body = msg.encode_to_vec();
    let mut framed = vec![0u8];
    framed.extend_from_slice(&(body.len() as u32).to_be_bytes());
    framed.extend_from_slice(&body);
    framed.into()
}

/// A gRPC request to `method`, with `headers` besides the usual ones.
fn grpc_request(s: &Server, method: &str, headers: &[(&str, &str)]) -> axum::http::Request<()> {
    let mut b = axum::http::Request::post(format!("http://127.0.0.1:{}{method}", s.addr.port()))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(()).unwrap()
}

/// A `StreamSegmentIds` of a million IDs of `big` in chunks of `chunk`, on a connection of its
/// own whose client never reads: a 1 KiB stream window, never released. The answer's head, and
/// the connection's task, which ends when the connection does.
async fn never_reading_stream(
    s: &Server,
    chunk: u32,
) -> (
    axum::http::Response<h2::RecvStream>,
    tokio::task::JoinHandle<Result<(), h2::Error>>,
) {
    let tcp = TcpStream::connect(s.addr).await.unwrap();
    let (client, conn) = h2::client::Builder::new()
        .initial_window_size(1024)
        .handshake::<_, bytes::Bytes>(tcp)
        .await
        .unwrap();
    let conn = tokio::spawn(conn);
    let mut client = client.ready().await.unwrap();
    let (resp, mut send) = client
        .send_request(
            grpc_request(s, "/leaf.v1.Segment/StreamSegmentIds", &[]),
            false,
        )
        .unwrap();
    let msg = pb::StreamSegmentIdsRequest {
        tag: "big".into(),
        count: 1_000_000,
        chunk,
    };
    send.send_data(grpc_frame(&msg), true).unwrap();
    let resp = resp.await.unwrap();
    assert_eq!(resp.status(), 200);
    (resp, conn)
}

mod business;
mod connection;
mod rules;
mod streams;
