//! The HTTP routes' rules on a gRPC request before any service sees it.
//!
//! - **HTTP/2 only.** gRPC is HTTP/2; a request of `Content-Type: application/grpc` over
//!   HTTP/1.x is refused (505) before its body is read. Every gRPC client speaks HTTP/2, and a
//!   browser page can reach a plaintext port only over HTTP/1.1, so no page rebound to a node
//!   (its own origin: no preflight) gets a gRPC answer there.
//! - **No browsers.** A request carrying `Origin` or any `Sec-Fetch-*` header was sent by a
//!   browser: `PERMISSION_DENIED` on every method. No gRPC client sends them, and a page cannot
//!   speak gRPC (it cannot read trailers).
//! - **A bounded body.** tonic reads a whole request body before its handler runs, and a unary
//!   RPC's body is drained to its end whatever it holds. [`Bounded`] ends that read with
//!   `DEADLINE_EXCEEDED` when the body has not ended within `server.idle_timeout_s` of the
//!   request's start (HTTP's body timeout, whose twin is the 408), and with `RESOURCE_EXHAUSTED`
//!   when it carries more than one message of `server.max_body_bytes` (HTTP's 413).

use std::future::Future as _;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, Version, header};
use http_body::{Body, Frame, SizeHint};
use tokio::time::Sleep;

use super::status;
use crate::node::error::ApiError;

/// The 5 bytes that frame each gRPC message (a compression flag, a 4-byte length).
const FRAME_HEADER: usize = 5;

/// Why a gRPC request is refused before it reaches a service, if it is.
pub(super) fn refusal(version: Version, headers: &HeaderMap) -> Option<ApiError> {
    if version < Version::HTTP_2 {
        return Some(ApiError::new(
            StatusCode::HTTP_VERSION_NOT_SUPPORTED,
            format!(
                "gRPC is served over HTTP/2 only (h2c, or h2 over TLS), and this request came \
                 over {version:?}; the HTTP API serves HTTP/1.1"
            ),
        ));
    }
    let fetch = headers
        .keys()
        .any(|name| name.as_str().starts_with("sec-fetch-"));
    if headers.contains_key(header::ORIGIN) || fetch {
        return Some(ApiError::new(
            StatusCode::FORBIDDEN,
            "gRPC is not served to browsers (the request carries Origin or Sec-Fetch-* \
             headers); a page uses the HTTP API, which has the rules for browsers",
        ));
    }
    None
}

/// A request body that must end within a time and stay within a size, else fails with the
/// gRPC status of its HTTP twin's answer, which tonic passes on to the client.
pub(super) struct Bounded<B> {
    inner: B,
    deadline: Pin<Box<Sleep>>,
    timeout: Duration,
    left: usize,
    limit: usize,
}

impl<B> Bounded<B> {
    /// `inner`, which must end within `timeout` from now and hold at most one message of
    /// `max_message` bytes with its frame.
    pub(super) fn new(inner: B, timeout: Duration, max_message: usize) -> Self {
        Bounded {
            inner,
            deadline: Box::pin(tokio::time::sleep(timeout)),
            timeout,
            left: max_message.saturating_add(FRAME_HEADER),
            limit: max_message,
        }
    }
}

/// `e` as the error of a body, which tonic turns back into its status.
fn fail(e: ApiError) -> Box<dyn std::error::Error + Send + Sync> {
    Box::new(status(e))
}

impl<B> Body for Bounded<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        // The time first: a body trickled in small frames must not outrun it.
        if this.deadline.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err(fail(ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the request did not end within {} s (server.idle_timeout_s)",
                    this.timeout.as_secs()
                ),
            )))));
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    if data.len() > this.left {
                        return Poll::Ready(Some(Err(fail(ApiError::new(
                            StatusCode::PAYLOAD_TOO_LARGE,
                            format!(
                                "the request holds more than one message of \
                                 server.max_body_bytes ({} bytes)",
                                this.limit
                            ),
                        )))));
                    }
                    this.left -= data.len();
                }
                Poll::Ready(Some(Ok(frame)))
            }
            other => other.map(|o| o.map(|r| r.map_err(Into::into))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use futures::StreamExt as _;
    use http_body_util::{BodyExt as _, Full, StreamBody};

    #[test]
    fn refusals_table() {
        let check = |version: Version, headers: &[(&str, &str)], expect: Option<u16>| {
            let mut h = HeaderMap::new();
            for (k, v) in headers {
                h.insert(
                    axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                    HeaderValue::from_str(v).unwrap(),
                );
            }
            let got = refusal(version, &h).map(|e| e.status.as_u16());
            assert_eq!(got, expect, "{version:?} {headers:?}");
        };
        check(Version::HTTP_2, &[], None);
        check(Version::HTTP_2, &[("te", "trailers")], None);
        check(Version::HTTP_11, &[], Some(505));
        check(Version::HTTP_10, &[], Some(505));
        check(
            Version::HTTP_2,
            &[("origin", "http://a.example")],
            Some(403),
        );
        check(Version::HTTP_2, &[("sec-fetch-mode", "cors")], Some(403));
        check(
            Version::HTTP_2,
            &[("sec-fetch-site", "same-origin")],
            Some(403),
        );
    }

    fn code(e: &(dyn std::error::Error + Send + Sync + 'static)) -> tonic::Code {
        e.downcast_ref::<tonic::Status>().expect("a status").code()
    }

    #[tokio::test]
    async fn a_body_above_one_message_fails_with_resource_exhausted() {
        let ok = Bounded::new(
            Full::new(Bytes::from(vec![0; 15])),
            Duration::from_secs(5),
            10,
        );
        assert_eq!(ok.collect().await.unwrap().to_bytes().len(), 15);
        let big = Bounded::new(
            Full::new(Bytes::from(vec![0; 16])),
            Duration::from_secs(5),
            10,
        );
        let e = big.collect().await.unwrap_err();
        assert_eq!(code(&*e), tonic::Code::ResourceExhausted);
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_without_end_fails_with_deadline_exceeded_at_its_time() {
        let chunks = futures::stream::iter([Ok::<_, std::convert::Infallible>(Frame::data(
            Bytes::from_static(b"\0\0"),
        ))])
        .chain(futures::stream::pending());
        let start = tokio::time::Instant::now();
        let body = Bounded::new(
            StreamBody::new(Box::pin(chunks)),
            Duration::from_secs(7),
            100,
        );
        let e = body.collect().await.unwrap_err();
        assert_eq!(code(&*e), tonic::Code::DeadlineExceeded);
        assert_eq!(start.elapsed(), Duration::from_secs(7));
    }
}
