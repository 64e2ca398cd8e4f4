//! The HTTP routes' rules held on the gRPC path (issue 33), each on a real socket: no gRPC over
//! HTTP/1.x and none for browsers (a page rebound to a node cannot lease a range), a request
//! body bounded in time and size, an answer left unread, the connection cap, and the health
//! watches' cap.

use super::*;

/// The tag `t`'s next ID over HTTP, which tells whether anything was taken meanwhile.
async fn next_t(s: &Server) -> u64 {
    let (status, body) = s.http1("/api/segment/get/t").await;
    assert!(status.contains("200"), "{status}");
    body.trim().parse().unwrap()
}

/// Reads what the server sends on `tcp` until it closes the connection or `within` passes:
/// the text, and whether it closed.
async fn read_until_closed(tcp: &mut TcpStream, within: Duration) -> (String, bool) {
    let mut got = Vec::new();
    let closed = tokio::time::timeout(within, async {
        let mut buf = [0u8; 4096];
        loop {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .is_ok();
    (String::from_utf8_lossy(&got).into_owned(), closed)
}

#[tokio::test]
async fn a_rebound_page_gets_no_range_over_http1_grpc() {
    let s = start(config()).await;
    let before = next_t(&s).await;
    // What a page of `rebind.attacker.example`, pointed at the node, can send: its own origin,
    // so no preflight; HTTP/1.1, since a page cannot speak h2c.
    let msg = grpc_frame(&pb::AllocateSegmentRequest {
        tag: "t".into(),
        step: 1000,
    });
    let head = format!(
        "POST /leaf.v1.Segment/AllocateSegment HTTP/1.1\r\nhost: rebind.attacker.example:{port}\r\n\
         origin: http://rebind.attacker.example:{port}\r\ncontent-type: application/grpc\r\n\
         content-length: {}\r\n\r\n",
        msg.len(),
        port = s.addr.port()
    );
    let mut tcp = TcpStream::connect(s.addr).await.unwrap();
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp.write_all(&msg).await.unwrap();
    let (answer, _) = read_until_closed(&mut tcp, Duration::from_secs(3)).await;
    let status_line = answer.lines().next().unwrap_or_default();
    assert!(
        status_line.starts_with("HTTP/1.1 505"),
        "gRPC over HTTP/1.1 was served: {answer}"
    );
    assert!(answer.contains("HTTP/2"), "{answer}");
    // Nothing was leased: the tag's next ID follows the one before.
    assert_eq!(next_t(&s).await, before + 1);
}

#[tokio::test]
async fn a_chunked_http1_grpc_body_without_end_does_not_hold_the_connection() {
    let mut c = config();
    c.server.idle_timeout_s = 2;
    let s = start(c).await;
    let mut tcp = TcpStream::connect(s.addr).await.unwrap();
    // The head, then one chunk that promises 16 bytes and brings 3, then nothing.
    let req = "POST /leaf.v1.Segment/NextSegmentIds HTTP/1.1\r\nhost: localhost\r\n\
               content-type: application/grpc\r\ntransfer-encoding: chunked\r\n\r\n10\r\nabc";
    tcp.write_all(req.as_bytes()).await.unwrap();
    let (answer, closed) = read_until_closed(&mut tcp, Duration::from_secs(8)).await;
    assert!(
        closed,
        "the connection was still open after 8 s (idle_timeout_s = 2): {answer:?}"
    );
    assert!(answer.starts_with("HTTP/1.1 505"), "{answer}");
}

/// An h2c connection to `s` whose requests are built by hand.
async fn h2_client(s: &Server) -> h2::client::SendRequest<bytes::Bytes> {
    let tcp = TcpStream::connect(s.addr).await.unwrap();
    let (client, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    client.ready().await.unwrap()
}

/// The `grpc-status` of an answer: from its headers (a trailers-only answer) or its trailers.
async fn grpc_status(resp: axum::http::Response<h2::RecvStream>) -> (i32, String) {
    let code = |h: &axum::http::HeaderMap| {
        let code = h.get("grpc-status")?.to_str().ok()?.parse().ok()?;
        let message = h
            .get("grpc-message")
            .map(|m| m.to_str().unwrap_or_default().to_owned())
            .unwrap_or_default();
        Some((code, message))
    };
    if let Some(c) = code(resp.headers()) {
        return c;
    }
    let mut body = resp.into_body();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        let _ = body.flow_control().release_capacity(chunk.len());
    }
    let trailers = body.trailers().await.unwrap().expect("trailers");
    code(&trailers).expect("grpc-status in the trailers")
}

#[tokio::test]
async fn a_browsers_grpc_request_over_h2_is_refused_on_every_method() {
    let s = start(config()).await;
    let before = next_t(&s).await;
    let mut client = h2_client(&s).await;
    let lease = grpc_frame(&pb::AllocateSegmentRequest {
        tag: "t".into(),
        step: 1000,
    });
    let ids = grpc_frame(&seg("t", 5));
    let browsers: [&[(&str, &str)]; 3] = [
        &[("origin", "http://rebind.attacker.example")],
        &[
            ("sec-fetch-site", "same-origin"),
            ("sec-fetch-mode", "cors"),
        ],
        &[("origin", "null")],
    ];
    for headers in browsers {
        for (method, msg) in [
            ("/leaf.v1.Segment/AllocateSegment", &lease),
            ("/leaf.v1.Segment/NextSegmentIds", &ids),
        ] {
            let (resp, mut send) = client
                .send_request(grpc_request(&s, method, headers), false)
                .unwrap();
            send.send_data(msg.clone(), true).unwrap();
            let (code, message) = grpc_status(resp.await.unwrap()).await;
            assert_eq!(code, Code::PermissionDenied as i32, "{method} {headers:?}");
            assert!(message.contains("browsers"), "{message}");
        }
    }
    assert_eq!(next_t(&s).await, before + 1, "a browser's request took IDs");
    // Without those headers the same connection is served.
    let (resp, mut send) = client
        .send_request(
            grpc_request(&s, "/leaf.v1.Segment/NextSegmentIds", &[]),
            false,
        )
        .unwrap();
    send.send_data(ids, true).unwrap();
    assert_eq!(grpc_status(resp.await.unwrap()).await.0, 0);
}

#[tokio::test]
async fn an_h2_request_body_without_end_is_deadline_exceeded_and_lets_go() {
    let mut c = config();
    c.server.idle_timeout_s = 2;
    let s = start(c).await;
    let tcp = TcpStream::connect(s.addr).await.unwrap();
    let (client, conn) = h2::client::handshake(tcp).await.unwrap();
    let conn = tokio::spawn(conn);
    let mut client = client.ready().await.unwrap();
    let (resp, mut send) = client
        .send_request(
            grpc_request(&s, "/leaf.v1.Segment/NextSegmentIds", &[]),
            false,
        )
        .unwrap();
    // Half a message, and the stream never ends.
    let msg = grpc_frame(&seg("t", 1));
    send.send_data(msg.slice(..3), false).unwrap();
    let started = std::time::Instant::now();
    let answered = tokio::time::timeout(Duration::from_secs(8), resp).await;
    let resp = answered.expect("no answer 8 s after a body that never ends (idle_timeout_s = 2)");
    let (code, message) = grpc_status(resp.unwrap()).await;
    assert_eq!(code, Code::DeadlineExceeded as i32, "{message}");
    assert!(message.contains("server.idle_timeout_s"), "{message}");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    // With no request in flight any more, the idle rule ends the connection.
    drop(send);
    drop(client);
    let ended = tokio::time::timeout(Duration::from_secs(6), conn).await;
    assert!(ended.is_ok(), "the connection outlived its idle timeout");
}

#[tokio::test]
async fn a_unary_body_of_many_messages_is_resource_exhausted() {
    // max_body_bytes = 1024: each message below it, all of them far above.
    let s = start(config()).await;
    let before = next_t(&s).await;
    let mut client = h2_client(&s).await;
    let (resp, mut send) = client
        .send_request(
            grpc_request(&s, "/leaf.v1.Segment/NextSegmentIds", &[]),
            false,
        )
        .unwrap();
    let one = grpc_frame(&pb::NextSegmentIdsRequest {
        tag: "t".repeat(900),
        count: 1,
    });
    let mut many = Vec::new();
    for _ in 0..40 {
        many.extend_from_slice(&one);
    }
    // Sent from a task: the server may answer before it has read it all.
    tokio::spawn(async move {
        send.reserve_capacity(many.len());
        let _ = send.send_data(many.into(), true);
        // Keep the stream's sender until the answer is in.
        tokio::time::sleep(Duration::from_secs(5)).await;
    });
    let (code, message) = grpc_status(resp.await.unwrap()).await;
    assert_eq!(code, Code::ResourceExhausted as i32, "{message}");
    assert!(message.contains("server.max_body_bytes"), "{message}");
    assert_eq!(next_t(&s).await, before + 1);
}

#[tokio::test]
async fn an_answer_left_unread_ends_its_connection_at_the_write_timeout() {
    let mut c = config();
    c.server.write_timeout_s = 2;
    c.server.idle_timeout_s = 2;
    let s = start(c).await;
    let (resp, conn) = never_reading_stream(&s, 1000).await;
    let started = std::time::Instant::now();
    let ended = tokio::time::timeout(Duration::from_secs(10), conn).await;
    assert!(
        ended.is_ok(),
        "a stream left unread held its connection for 10 s (write_timeout_s = 2)"
    );
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(1500), "{took:?}");
    eprintln!("the connection ended {took:?} after the stream stalled");
    drop(resp);
    // The server serves others.
    let mut segment = SegmentClient::new(s.channel().await);
    segment.next_segment_ids(seg("t", 1)).await.unwrap();
}

#[tokio::test]
async fn connections_above_the_cap_are_closed_at_once() {
    let mut c = config();
    c.server.max_connections = 3;
    let s = start(c).await;
    // Three kept-alive HTTP/1.1 connections, each having had an answer.
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut tcp = TcpStream::connect(s.addr).await.unwrap();
        tcp.write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 1024];
        let n = tcp.read(&mut buf).await.unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
        held.push(tcp);
    }
    // A fourth is accepted by the kernel and closed by the server before any answer.
    let mut fourth = TcpStream::connect(s.addr).await.unwrap();
    let _ = fourth
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\n\r\n")
        .await;
    let (answer, closed) = read_until_closed(&mut fourth, Duration::from_secs(3)).await;
    assert!(closed && answer.is_empty(), "{closed} {answer:?}");
    assert_eq!(s.sample("leaf_connections_refused_total "), 1.0);
    assert_eq!(s.sample("leaf_connections_open "), 3.0);
    // One closes: the next is served.
    drop(held.pop());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, _) = s.http1("/healthz").await;
    assert!(status.contains("200"), "{status}");
}

#[tokio::test]
async fn health_watches_are_capped_and_a_closed_one_frees_its_place() {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_client::HealthClient;

    let mut c = config();
    c.server.grpc_max_watches = 2;
    let s = start(c).await;
    let mut health = HealthClient::new(s.channel().await);
    let watch = |service: &str| HealthCheckRequest {
        service: service.into(),
    };
    let mut first = health.watch(watch("")).await.unwrap().into_inner();
    let mut second = health
        .watch(watch("leaf.v1.Segment"))
        .await
        .unwrap()
        .into_inner();
    assert!(first.next().await.unwrap().is_ok());
    assert!(second.next().await.unwrap().is_ok());
    let e = health.watch(watch("")).await.unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(e.message().contains("server.grpc_max_watches"), "{e:?}");
    // Check needs no place.
    health.check(watch("")).await.unwrap();
    drop(first);
    // The reset reaches the server and drops the watch.
    let mut third = None;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if let Ok(w) = health.watch(watch("")).await {
            third = Some(w.into_inner());
            break;
        }
    }
    let mut third = third.expect("a closed watch's place was never freed");
    assert!(third.next().await.unwrap().is_ok());
}
