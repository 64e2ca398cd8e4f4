//! The streamed RPCs (`StreamSegmentIds`, `StreamSnowflakeIds`): IDs taken chunk by chunk as
//! the transport asks for the next message, never ahead of it.
//!
//! The stream is pulled: hyper polls the response body only while the HTTP/2 stream has send
//! capacity (the client's flow-control window), tonic polls this stream only to fill the body,
//! and each poll takes one chunk. So a client that reads slowly, or not at all, holds the server
//! to its window plus one encoder buffer, never the whole count; and a client that goes away
//! (a cancel resets the stream) drops the body and this stream with it: no ID is taken after
//! that, beyond the chunk being taken at that moment.
//!
//! A bulk load drains segments faster than a single request does, and may find both of a tag's
//! segments spent before the next is loaded (a 503 over HTTP, after `segment.switch_wait_ms`).
//! A stream asked for all its IDs at once, so such a chunk is tried again, after pauses
//! growing from 5 to 100 ms, for up to [`RETRY_FOR`]; only then does the stream end with
//! `UNAVAILABLE`. Other errors end it at once.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use futures::StreamExt as _;
use futures::stream::BoxStream;
use tonic::Status;

use super::status;
use crate::node::error::ApiError;
use crate::node::state::{AppState, GrpcLimits};

/// How long a stream keeps trying a chunk that finds IDs unavailable (HTTP 503).
pub(super) const RETRY_FOR: Duration = Duration::from_secs(5);

/// The stream of a streamed RPC's answers.
pub(super) type IdStream<T> = BoxStream<'static, Result<T, Status>>;

/// A stream's checked request: how many IDs in all, how many per message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Plan {
    count: u64,
    chunk: usize,
}

/// Checks a stream's `count` (1 to `server.grpc_max_stream_ids`) and `chunk` (0 for the
/// default, else 1 to `server.max_batch`).
pub(super) fn plan(state: &AppState, count: u32, chunk: u32) -> Result<Plan, ApiError> {
    let limits = state.grpc().unwrap_or(GrpcLimits {
        max_stream_ids: 1_000_000,
        chunk: 1000,
        max_watches: 1024,
    });
    check(limits, state.max_batch(), count, chunk)
}

fn check(limits: GrpcLimits, max_batch: usize, count: u32, chunk: u32) -> Result<Plan, ApiError> {
    let max = limits.max_stream_ids;
    let count = u64::from(count);
    if !(1..=max).contains(&count) {
        return Err(ApiError::bad_request(format!(
            "count must be a whole number from 1 to {max} (server.grpc_max_stream_ids), got \
             {count}"
        )));
    }
    let chunk = match usize::try_from(chunk) {
        Ok(0) => limits.chunk.min(max_batch),
        Ok(n) if n <= max_batch => n,
        _ => {
            return Err(ApiError::bad_request(format!(
                "chunk must be 0 (the server's default, {}) or from 1 to {max_batch} \
                 (server.max_batch), got {chunk}",
                limits.chunk.min(max_batch)
            )));
        }
    };
    Ok(Plan { count, chunk })
}

/// The IDs of `plan`, one chunk per message, each taken by `take(n)` only when the transport
/// asks for the next message; an error ends the stream with its status.
pub(super) fn ids<T, F, Fut>(plan: Plan, take: F, wrap: fn(Vec<i64>) -> T) -> IdStream<T>
where
    T: Send + 'static,
    F: FnMut(usize) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Vec<i64>, ApiError>> + Send,
{
    let chunk = plan.chunk as u64;
    futures::stream::unfold((plan.count, take), move |(left, mut take)| async move {
        if left == 0 {
            return None;
        }
        let n = left.min(chunk);
        let started = Instant::now();
        let mut pause = Duration::from_millis(5);
        loop {
            match take(n as usize).await {
                Ok(ids) => return Some((Ok(wrap(ids)), (left - n, take))),
                Err(e) if e.status.as_u16() == 503 && started.elapsed() < RETRY_FOR => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(100));
                }
                Err(e) => return Some((Err(status(e)), (0, take))),
            }
        }
    })
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_table() {
        let limits = GrpcLimits {
            max_stream_ids: 1_000_000,
            chunk: 1000,
            max_watches: 1,
        };
        let check = |count, chunk, expect: Option<(u64, usize)>| {
            let got = check(limits, 10_000, count, chunk);
            assert_eq!(
                got.as_ref().ok().map(|p| (p.count, p.chunk)),
                expect,
                "{count} {chunk}: {got:?}"
            );
            if let Err(e) = got {
                assert_eq!(e.status.as_u16(), 400);
            }
        };
        check(1, 0, Some((1, 1000)));
        check(1_000_000, 0, Some((1_000_000, 1000)));
        check(5, 2, Some((5, 2)));
        check(5, 10_000, Some((5, 10_000)));
        check(0, 0, None);
        check(1_000_001, 0, None);
        check(u32::MAX, 0, None);
        check(5, 10_001, None);
        check(5, u32::MAX, None);
        // The default chunk never exceeds max_batch.
        assert_eq!(
            super::check(limits, 10, 100, 0).map(|p| p.chunk).ok(),
            Some(10)
        );
    }

    #[tokio::test]
    async fn chunks_add_up_to_the_count_and_an_error_ends_the_stream() {
        let plan = check(
            GrpcLimits {
                max_stream_ids: 100,
                chunk: 3,
                max_watches: 1,
            },
            10,
            10,
            0,
        )
        .unwrap();
        let mut next = 0;
        let take = move |n: usize| {
            let ids: Vec<i64> = (next..next + n as i64).collect();
            next += n as i64;
            async move { Ok(ids) }
        };
        let chunks: Vec<_> = ids(plan, take, |ids| ids).collect().await;
        let sizes: Vec<usize> = chunks.iter().map(|c| c.as_ref().unwrap().len()).collect();
        assert_eq!(sizes, [3, 3, 3, 1]);
        let flat: Vec<i64> = chunks.into_iter().flat_map(Result::unwrap).collect();
        assert_eq!(flat, (0..10).collect::<Vec<_>>());

        let mut calls = 0;
        let failing = move |_| {
            calls += 1;
            let r = if calls == 2 {
                Err(ApiError::bad_request("no"))
            } else {
                Ok(vec![1])
            };
            async move { r }
        };
        let got: Vec<_> = ids(plan, failing, |ids| ids).collect().await;
        assert_eq!(got.len(), 2, "nothing after the error");
        assert_eq!(
            got[1].as_ref().unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_chunk_that_finds_ids_unavailable_is_tried_again_for_a_while() {
        let plan = Plan { count: 3, chunk: 1 };
        // Unavailable twice, then served: the stream carries on.
        let mut calls = 0;
        let flaky = move |_| {
            calls += 1;
            let r = if calls == 2 || calls == 3 {
                Err(ApiError::unavailable(-3, "not ready", 1))
            } else {
                Ok(vec![calls])
            };
            async move { r }
        };
        let got: Vec<_> = ids(plan, flaky, |ids| ids).collect().await;
        let got: Vec<Vec<i64>> = got.into_iter().map(Result::unwrap).collect();
        assert_eq!(got, [vec![1], vec![4], vec![5]]);
        // Unavailable for ever: the stream ends with UNAVAILABLE once RETRY_FOR has passed.
        let start = tokio::time::Instant::now();
        let down = |_| async { Err::<Vec<i64>, _>(ApiError::unavailable(-3, "down", 1)) };
        let got: Vec<_> = ids(plan, down, |ids| ids).collect().await;
        assert_eq!(got.len(), 1);
        assert_eq!(
            got[0].as_ref().unwrap_err().code(),
            tonic::Code::Unavailable
        );
        let waited = start.elapsed();
        assert!(
            waited >= RETRY_FOR && waited < RETRY_FOR + Duration::from_millis(200),
            "{waited:?}"
        );
    }
}
