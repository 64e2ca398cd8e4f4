//! Per-RPC metrics: each gRPC call counted by method and final gRPC code, and timed until its
//! status is sent (for a stream, its whole life). Every gRPC answer is an HTTP 200, so the
//! code is read where gRPC puts it: the `grpc-status` header of an answer without a message,
//! else the trailers at the end of the body; a body dropped before them is a call the client
//! cancelled (or whose connection ended), counted as `CANCELLED`.

use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Response};
use http_body::{Frame, SizeHint};
use tonic::Code;

use crate::node::state::AppState;

/// Every method the server answers, as its metrics label (`/package.Service/Method`); any
/// other path is counted as `unknown`, so a client cannot grow the label set.
pub const METHODS: &[&str] = &[
    "/leaf.v1.Segment/NextSegmentIds",
    "/leaf.v1.Segment/StreamSegmentIds",
    "/leaf.v1.Segment/AllocateSegment",
    "/leaf.v1.Segment/GetTag",
    "/leaf.v1.Snowflake/NextSnowflakeIds",
    "/leaf.v1.Snowflake/StreamSnowflakeIds",
    "/leaf.v1.Snowflake/DecodeSnowflake",
    "/leaf.v1.Monotonic/NextMonotonicIds",
    "/leaf.v1.Monotonic/StreamMonotonicIds",
    "/leaf.v1.Monotonic/DecodeMonotonic",
    "/leaf.v1.Admin/CreateTag",
    "/leaf.v1.Admin/UpdateTag",
    "/leaf.v1.Admin/ListTags",
    "/grpc.health.v1.Health/Check",
    "/grpc.health.v1.Health/Watch",
    "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
];

/// The metrics label of a request path.
pub(super) fn method_label(path: &str) -> &'static str {
    METHODS
        .iter()
        .find(|m| **m == path)
        .copied()
        .unwrap_or("unknown")
}

/// The code of `grpc-status` in `headers`, if there is one.
fn code_in(headers: &HeaderMap) -> Option<Code> {
    let v = headers.get("grpc-status")?;
    let n: i32 = v.to_str().ok()?.parse().ok()?;
    Some(Code::from_i32(n))
}

/// `resp`, counted: at once if its headers carry the status, else when its body ends.
pub(super) fn observe(
    resp: Response<Body>,
    state: &AppState,
    method: &'static str,
    start: Instant,
) -> Response<Body> {
    if let Some(code) = code_in(resp.headers()) {
        state.metrics().observe_rpc(method, code, start.elapsed());
        return resp;
    }
    let pending = Pending {
        state: state.clone(),
        method,
        start,
    };
    resp.map(|inner| {
        Body::new(Observed {
            inner,
            pending: Some(pending),
        })
    })
}

/// A call not yet counted.
struct Pending {
    state: AppState,
    method: &'static str,
    start: Instant,
}

impl Pending {
    fn record(self, code: Code) {
        self.state
            .metrics()
            .observe_rpc(self.method, code, self.start.elapsed());
    }
}

/// A response body that counts its call when the trailers pass, or when it is dropped first.
struct Observed {
    inner: Body,
    pending: Option<Pending>,
}

impl http_body::Body for Observed {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let frame = ready!(Pin::new(&mut self.inner).poll_frame(cx));
        let code = match &frame {
            Some(Ok(f)) => f
                .trailers_ref()
                .map(|t| code_in(t).unwrap_or(Code::Unknown)),
            Some(Err(_)) => Some(Code::Internal),
            None => Some(Code::Unknown),
        };
        if let Some(code) = code
            && let Some(pending) = self.pending.take()
        {
            pending.record(code);
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Observed {
    fn drop(&mut self) {
        if let Some(pending) = self.pending.take() {
            pending.record(Code::Cancelled);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use prost::Message as _;

    use super::*;

    /// Every method of every service the server registers is a label, and nothing else.
    #[test]
    fn the_labels_are_the_methods_of_the_descriptor_sets() {
        let mut methods = BTreeSet::new();
        for encoded in [
            super::super::pb::FILE_DESCRIPTOR_SET,
            tonic_health::pb::FILE_DESCRIPTOR_SET,
        ] {
            let fds = prost_types::FileDescriptorSet::decode(encoded).unwrap();
            for file in fds.file {
                for service in &file.service {
                    for m in &service.method {
                        methods.insert(format!(
                            "/{}.{}/{}",
                            file.package(),
                            service.name(),
                            m.name()
                        ));
                    }
                }
            }
        }
        for reflection in ["v1", "v1alpha"] {
            methods.insert(format!(
                "/grpc.reflection.{reflection}.ServerReflection/ServerReflectionInfo"
            ));
        }
        let listed: BTreeSet<String> = METHODS.iter().map(|m| m.to_string()).collect();
        assert_eq!(listed, methods);
        assert_eq!(
            method_label("/leaf.v1.Segment/GetTag"),
            "/leaf.v1.Segment/GetTag"
        );
        assert_eq!(method_label("/leaf.v1.Segment/Nope"), "unknown");
    }
}
