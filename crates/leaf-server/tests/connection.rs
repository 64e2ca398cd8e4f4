//! Connection-level behaviour of the server's own `serve` loop on a real loopback socket: what
//! happens before or around the router (write stalls, hyper's own errors).

use std::sync::Arc;
use std::time::Duration;

use leaf_core::{SnowflakeLayout, SystemClock};
use leaf_segment::{SegmentAllocator, SegmentConfig};
use leaf_server::config::Config;
use leaf_server::metrics::Metrics;
use leaf_server::server::serve;
use leaf_server::{AppState, SegmentService, app};
use leaf_testkit::MemoryStore;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

/// A server on a loopback port serving segment mode from memory; stops when the sender drops.
async fn serve_app(config: Config) -> (std::net::SocketAddr, oneshot::Sender<()>) {
    let store = Arc::new(MemoryStore::with_tags([("t", 1_000_000)]));
    let allocator = SegmentAllocator::new(
        store,
        Arc::new(SystemClock::new()),
        SegmentConfig::default(),
    );
    allocator.init().await.unwrap();
    let state = AppState::new(
        &config,
        SnowflakeLayout::default(),
        Some(SegmentService::ready(allocator)),
        None,
        Arc::new(Metrics::new()),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(async move {
        serve(listener, app(state), &config.server, async {
            let _ = stopped.await;
        })
        .await;
    });
    (addr, stop)
}

#[tokio::test]
async fn a_client_that_never_reads_its_responses_is_closed_within_the_write_timeout() {
    let mut config = Config::default();
    config.server.max_batch = 10_000;
    config.server.write_timeout_s = 1;
    let (addr, _stop) = serve_app(config).await;
    let mut conn = TcpStream::connect(addr).await.unwrap();
    // Pipelined batches of about 80 kB each, never read: the socket buffers fill, then the
    // server's write of a response stalls.
    let request = "GET /v1/segment/t?count=10000 HTTP/1.1\r\nhost: x\r\n\r\n";
    let writer = async {
        loop {
            if let Err(e) = conn.write_all(request.as_bytes()).await {
                return e;
            }
        }
    };
    // Once the server closes, the client's writes fail (reset or broken pipe). The bound is the
    // write timeout plus the time to fill the buffers, with room for a loaded machine; without
    // a write timeout the connection lives forever.
    let err = tokio::time::timeout(Duration::from_secs(20), writer)
        .await
        .expect("the server closed the stalled connection");
    assert!(
        matches!(
            err.kind(),
            std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
        ),
        "{err}"
    );
}

#[tokio::test]
async fn a_client_that_reads_is_served_past_the_write_timeout() {
    // The timeout bounds a stall, not a connection's life: a reading client keeps it.
    let mut config = Config::default();
    config.server.write_timeout_s = 1;
    let (addr, _stop) = serve_app(config).await;
    let mut conn = TcpStream::connect(addr).await.unwrap();
    for _ in 0..3 {
        conn.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = vec![0u8; 4096];
        let n = conn.read(&mut buf).await.unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "{:?}", &buf[..n]);
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
}

/// Sends `raw` on a fresh connection and reads until the server closes it.
async fn exchange(addr: std::net::SocketAddr, raw: &[u8]) -> String {
    let mut conn = TcpStream::connect(addr).await.unwrap();
    conn.write_all(raw).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), conn.read_to_end(&mut out))
        .await
        .expect("hyper closes the connection after a parse error")
        .unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn requests_hyper_cannot_parse_get_their_status_and_an_empty_body() {
    // hyper 1.x answers these from its parser (`Server::on_error`) before any route runs, with a
    // head and no body, and has no hook to supply one: the README says so. If this test starts
    // failing because a body appears, hyper grew a hook; give it the JSON error body.
    let (addr, _stop) = serve_app(Config::default()).await;
    let big = format!(
        "GET /healthz HTTP/1.1\r\nhost: x\r\nx-big: {}\r\n\r\n",
        "a".repeat(20_000)
    );
    let cases: [(&[u8], &str); 3] = [
        (big.as_bytes(), "HTTP/1.1 431 "),
        (
            b"GET /healthz HTTP/1.1 extra\r\nhost: x\r\n\r\n",
            "HTTP/1.1 400 ",
        ),
        (
            b"POST /v1/tags HTTP/1.1\r\nhost: x\r\ncontent-length: ten\r\n\r\n",
            "HTTP/1.1 400 ",
        ),
    ];
    for (raw, status) in cases {
        let answer = exchange(addr, raw).await;
        assert!(answer.starts_with(status), "{answer}");
        assert!(answer.contains("content-length: 0\r\n"), "{answer}");
        assert!(answer.ends_with("\r\n\r\n"), "{answer}");
    }
}
