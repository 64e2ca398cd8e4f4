//! The gRPC API (`proto/leaf/v1/leaf.proto`, package `leaf.v1`) on the HTTP port: services
//! `leaf.v1.Segment`, `leaf.v1.Snowflake` and `leaf.v1.Admin`, each RPC the twin of an HTTP
//! route and answered by the same code (`crate::node::ops`); `grpc.health.v1.Health` with each
//! mode's readiness as `/readyz` gives it; and server reflection (v1 and v1alpha), so that
//! tools such as `grpcurl` need no copy of the `.proto`.
//!
//! The server's accept loop hands a request here when its `Content-Type` is
//! `application/grpc` (and `server.grpc` is on), before the HTTP router and its layers: the
//! JSON 404 fallback and the safety headers are HTTP's. Here the request gets HTTP's rules in
//! their gRPC form: HTTP/2 only and no browsers (`limits`), the host rule
//! (`server.allowed_hosts`, on `:authority`), the body's time and size (`limits::Bounded`,
//! `server.idle_timeout_s` and `server.max_body_bytes`), the token rules in the services, and
//! per-RPC metrics.

mod auth;
mod health;
mod limits;
mod observe;
mod services;
mod status;
mod stream;

use std::convert::Infallible;
use std::time::Instant;

use axum::body::Body;
use axum::http::{HeaderMap, Request, Response, StatusCode, header};
use tonic::service::Routes;
use tower::Service as _;

pub use observe::METHODS;
pub(crate) use status::status;

use crate::node::error::ApiError;
use crate::node::state::AppState;

/// The code generated from `proto/leaf/v1/leaf.proto` (committed; `tests/proto.rs` fails when it
/// drifts from the `.proto`): the messages, a client and a server trait per service.
#[allow(missing_docs, unreachable_pub, clippy::all)]
pub mod pb {
    include!("generated/leaf.v1.rs");

    /// The encoded `FileDescriptorSet` of `leaf.proto`, which reflection serves.
    pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!("generated/leaf.v1.bin");
}

/// The name a request called the server by (`:authority`, else `Host`), for the loopback rule
/// of the admin service.
#[derive(Clone, Debug)]
pub(crate) struct CalledAs(pub(crate) Option<String>);

/// The gRPC services of one server. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Grpc {
    routes: Routes,
    state: AppState,
    closing: std::sync::Arc<tokio::sync::watch::Sender<bool>>,
}

impl Grpc {
    /// Every service, on `state`.
    pub(crate) fn new(state: &AppState) -> Self {
        let (closing, closed) = tokio::sync::watch::channel(false);
        Grpc {
            routes: services::routes(state, closed),
            state: state.clone(),
            closing: std::sync::Arc::new(closing),
        }
    }

    /// The server is shutting down: streams without an end of their own (health's `Watch`)
    /// end now, so that a graceful shutdown does not wait `server.shutdown_timeout_s` for a
    /// load balancer's watch.
    pub(crate) fn close(&self) {
        self.closing.send_replace(true);
    }

    /// Answers one gRPC request, counting it by method and final code.
    pub(crate) async fn call<B>(&self, mut req: Request<B>) -> Result<Response<Body>, Infallible>
    where
        B: http_body::Body<Data = axum::body::Bytes> + Send + Unpin + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let start = Instant::now();
        let method = observe::method_label(req.uri().path());
        let called_as = req
            .uri()
            .authority()
            .map(|a| a.as_str().to_owned())
            .or_else(|| {
                let host = req.headers().get(header::HOST)?;
                Some(host.to_str().unwrap_or("").to_owned())
            });
        if let Some(refusal) = limits::refusal(req.version(), req.headers()) {
            // Over HTTP/1.x the answer is HTTP's (the client is not speaking gRPC's transport).
            let resp = if req.version() < axum::http::Version::HTTP_2 {
                axum::response::IntoResponse::into_response(refusal)
            } else {
                status(refusal).into_http::<Body>()
            };
            return Ok(observe::observe(resp, &self.state, method, start));
        }
        if let Err(refusal) = auth::allowed_host(&self.state, called_as.as_deref()) {
            let resp = status(refusal).into_http::<Body>();
            return Ok(observe::observe(resp, &self.state, method, start));
        }
        req.extensions_mut().insert(CalledAs(called_as));
        let (timeout, max) = (self.state.body_timeout(), self.state.max_body_bytes());
        let req = req.map(|body| limits::Bounded::new(body, timeout, max));
        let Ok(resp) = self.routes.clone().call(req).await;
        let resp = if is_tonics_size_refusal(resp.headers()) {
            let limit = self.state.max_body_bytes();
            status(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the message is larger than server.max_body_bytes ({limit} bytes)"),
            ))
            .into_http::<Body>()
        } else {
            resp.map(Body::new)
        };
        Ok(observe::observe(resp, &self.state, method, start))
    }
}

/// Whether an answer is tonic's refusal of a request message above the size limit: tonic says
/// `OUT_OF_RANGE` (which here means a tag's IDs ran out, and always carries Leaf's details),
/// where gRPC's status codes say `RESOURCE_EXHAUSTED`.
fn is_tonics_size_refusal(headers: &HeaderMap) -> bool {
    headers
        .get("grpc-status")
        .is_some_and(|c| c.as_bytes() == b"11")
        && !headers.contains_key("grpc-status-details-bin")
}

/// Whether a request is gRPC: `Content-Type: application/grpc`, alone or with a `+format`
/// or `;parameters`. gRPC-Web (`application/grpc-web`) is not, and goes to the HTTP router.
pub(crate) fn is_grpc(headers: &HeaderMap) -> bool {
    let Some(ct) = headers.get(header::CONTENT_TYPE) else {
        return false;
    };
    let ct = ct.as_bytes();
    let prefix = b"application/grpc";
    ct.len() >= prefix.len()
        && ct[..prefix.len()].eq_ignore_ascii_case(prefix)
        && matches!(ct.get(prefix.len()), None | Some(b'+' | b';'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn grpc_content_types() {
        let check = |ct: Option<&str>, expect: bool| {
            let mut h = HeaderMap::new();
            if let Some(ct) = ct {
                h.insert(header::CONTENT_TYPE, HeaderValue::from_str(ct).unwrap());
            }
            assert_eq!(is_grpc(&h), expect, "{ct:?}");
        };
        check(Some("application/grpc"), true);
        check(Some("application/grpc+proto"), true);
        check(Some("Application/GRPC"), true);
        check(Some("application/grpc;charset=utf-8"), true);
        check(Some("application/grpc-web"), false);
        check(Some("application/grpc-web+proto"), false);
        check(Some("application/grpcx"), false);
        check(Some("application/json"), false);
        check(Some("text/plain"), false);
        check(None, false);
    }
}
