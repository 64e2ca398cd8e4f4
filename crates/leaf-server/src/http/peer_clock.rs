//! The server's part of the peer clock check (`leaf_snowflake::peers`): the route the peers ask,
//! [`time_route`], and how a peer is asked, [`http_time`].

use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::rt::TokioIo;
use leaf_core::{Clock, SystemClock};
use serde::{Deserialize, Serialize};

/// The answer of `GET /v1/time`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimeAnswer {
    /// The answering node's wall clock, Unix milliseconds.
    pub now_ms: u64,
}

/// `GET /v1/time`: this node's wall clock, for its peers' start-up check.
pub async fn time_route() -> Json<TimeAnswer> {
    Json(TimeAnswer {
        now_ms: SystemClock::new().now_ms(),
    })
}

/// How long the start-up check waits for one peer's answer.
pub const PEER_TIMEOUT: Duration = Duration::from_secs(2);

/// The largest `/v1/time` answer read from a peer.
const MAX_ANSWER_BYTES: usize = 4096;

/// Asks `peer` (`ip:port`) for its clock: one HTTP/1.1 `GET /v1/time` on a connection of its
/// own, within `timeout`; over TLS when `tls` (this node's port speaks it), without verifying
/// the peer's certificate (`crate::http::tls::unverified_client` says why). A peer that speaks
/// the other (a cluster while TLS is rolled out node by node) is asked again in its own, so
/// that the check does not pass unseen for want of an answer.
pub async fn http_time(peer: String, timeout: Duration, tls: bool) -> Result<u64, String> {
    tokio::time::timeout(timeout, async {
        match ask(&peer, tls).await {
            Err(Ask::OtherMode(why)) => ask(&peer, !tls).await.map_err(|e| {
                let e = match e {
                    Ask::OtherMode(e) | Ask::Failed(e) => e,
                };
                format!(
                    "{why}; then, {}: {e}",
                    if tls { "in plain text" } else { "over TLS" }
                )
            }),
            Err(Ask::Failed(e)) => Err(e),
            Ok(t) => Ok(t),
        }
    })
    .await
    .map_err(|_| format!("no answer within {} ms", timeout.as_millis()))?
}

/// Why a peer gave no time: it speaks the other mode (plain text against TLS, or the
/// reverse), or anything else.
enum Ask {
    OtherMode(String),
    Failed(String),
}

/// One `GET /v1/time` to `peer`, over TLS when `tls`.
async fn ask(peer: &str, tls: bool) -> Result<u64, Ask> {
    let stream = tokio::net::TcpStream::connect(peer)
        .await
        .map_err(|e| Ask::Failed(format!("cannot connect: {e}")))?;
    if !tls {
        return time_over(TokioIo::new(stream), peer).await.map_err(|e| {
            if e.contains("this port speaks TLS") {
                Ask::OtherMode(e)
            } else {
                Ask::Failed(e)
            }
        });
    }
    let host = peer.rsplit_once(':').map_or(peer, |(h, _)| h);
    let name = crate::http::tls::server_name(host).map_err(|e| Ask::Failed(format!("TLS: {e}")))?;
    let stream = tokio_rustls::TlsConnector::from(crate::http::tls::unverified_client())
        .connect(name, stream)
        .await
        .map_err(|e| Ask::OtherMode(format!("TLS handshake: {e}")))?;
    time_over(TokioIo::new(stream), peer)
        .await
        .map_err(Ask::Failed)
}

/// One `GET /v1/time` over `io`.
async fn time_over<I>(io: I, peer: &str) -> Result<u64, String>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    {
        let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
            .await
            .map_err(|e| format!("http handshake: {e}"))?;
        // The connection is driven beside the request; it ends with the sender.
        tokio::spawn(conn);
        let request = hyper::Request::get("/v1/time")
            .header(hyper::header::HOST, peer)
            .body(Empty::<Bytes>::new())
            .map_err(|e| format!("request: {e}"))?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| format!("request: {e}"))?;
        if !response.status().is_success() {
            let status = response.status();
            let body = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
                .collect()
                .await
                .map(|b| String::from_utf8_lossy(&b.to_bytes()).trim().to_owned())
                .unwrap_or_default();
            return Err(format!("/v1/time answered {status}: {body}"));
        }
        let body = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
            .collect()
            .await
            .map_err(|e| format!("reading the answer: {e}"))?
            .to_bytes();
        serde_json::from_slice::<TimeAnswer>(&body)
            .map(|t| t.now_ms)
            .map_err(|e| format!("not a /v1/time answer: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn http_time_explains_what_is_not_a_peer() {
        // Nothing listens on port 1.
        let e = http_time("127.0.0.1:1".into(), Duration::from_secs(2), false)
            .await
            .unwrap_err();
        assert!(e.starts_with("cannot connect"), "{e}");
    }
}
