//! Health, shutdown and the HTTP/2 connection gRPC shares with HTTP: limits, idle timeouts, pings.

use super::*;

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
