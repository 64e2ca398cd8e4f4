//! Streams held to the transport's flow control: a cancelled stream, a client that never reads.

use super::*;

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
