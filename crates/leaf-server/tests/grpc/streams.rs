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

#[tokio::test]
async fn an_http2_client_that_never_reads_holds_the_server_to_its_window() {
    let s = start(config()).await;
    // A 1 KiB stream window, never released: the server may send 1 KiB of this stream.
    let (resp, _conn) = never_reading_stream(&s, 100).await;
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
