//! Errors over gRPC: each [`ApiError`] (the HTTP answer of the same failure) as a gRPC status,
//! with Leaf's numeric code in the status details, and the same message, which never carries
//! a backend's text (`crate::node::error::public_reason`).
//!
//! | `leaf_core::Error` kind or server rule | HTTP | gRPC |
//! |---|---|---|
//! | `NotFound` (an unknown tag, Leaf's -2) | 404 | `NOT_FOUND` |
//! | `InvalidInput` (a bad tag, count, step, id) | 400 | `INVALID_ARGUMENT` |
//! | `AlreadyExists` (`CreateTag`) | 409 | `ALREADY_EXISTS` |
//! | `Unavailable`, `ClockMovedBackwards`, `ClockJumpedForward`, `LeaseLost`, `Backend` | 503 | `UNAVAILABLE` |
//! | `Exhausted` (a tag's IDs or the layout's timestamps run out, -5) | 503 | `OUT_OF_RANGE` |
//! | a business tag past its width until the next period (-6) | 503 | `OUT_OF_RANGE` |
//! | a mode switched off (`segment.enabled = false`) | 404 | `FAILED_PRECONDITION` |
//! | no token, or the wrong one | 401 | `UNAUTHENTICATED` |
//! | the loopback rule, `server.allowed_hosts`, a browser's request | 403 | `PERMISSION_DENIED` |
//! | a request that did not end within `server.idle_timeout_s` | 408 | `DEADLINE_EXCEEDED` |
//! | more than one message of `server.max_body_bytes`; too many health watches | 413, 429 | `RESOURCE_EXHAUSTED` |
//! | anything else (`Config`: a bug) | 500 | `INTERNAL` |
//!
//! The details (`grpc-status-details-bin`) are a `google.rpc.Status` holding one
//! `leaf.v1.ErrorDetail`: Leaf's code, the HTTP status, and for `UNAVAILABLE` the seconds of
//! the twin's `Retry-After`.

use axum::body::Bytes;
use prost::Message as _;
use tonic::{Code, Status};

use super::pb::ErrorDetail;
use crate::node::error::{ApiError, CODE_EXHAUSTED, CODE_FORMAT_OVERFLOW};

/// The type URL of [`ErrorDetail`] in a `google.protobuf.Any`.
pub(crate) const ERROR_DETAIL_TYPE: &str = "type.googleapis.com/leaf.v1.ErrorDetail";

/// `google.rpc.Status`, written here to encode the details (three fields; no crate needed).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct RpcStatus {
    #[prost(int32, tag = "1")]
    pub(crate) code: i32,
    #[prost(string, tag = "2")]
    pub(crate) message: String,
    #[prost(message, repeated, tag = "3")]
    pub(crate) details: Vec<prost_types::Any>,
}

/// The gRPC code of an error answer.
pub(crate) fn code(e: &ApiError) -> Code {
    match e.status.as_u16() {
        _ if e.mode_disabled => Code::FailedPrecondition,
        // Neither comes back by asking again: a tag's IDs ran out, or a business tag's values
        // passed their width for the rest of this period.
        _ if e.code == CODE_EXHAUSTED || e.code == CODE_FORMAT_OVERFLOW => Code::OutOfRange,
        400 => Code::InvalidArgument,
        401 => Code::Unauthenticated,
        403 => Code::PermissionDenied,
        404 => Code::NotFound,
        405 => Code::Unimplemented,
        408 => Code::DeadlineExceeded,
        409 => Code::AlreadyExists,
        413 | 429 => Code::ResourceExhausted,
        503 => Code::Unavailable,
        _ => Code::Internal,
    }
}

/// `e` as a gRPC status with its details.
pub(crate) fn status(e: ApiError) -> Status {
    let code = code(&e);
    let detail = ErrorDetail {
        code: e.code,
        http_status: u32::from(e.status.as_u16()),
        retry_after_s: if code == Code::Unavailable {
            u32::try_from(e.retry_after_s).unwrap_or(u32::MAX)
        } else {
            0
        },
    };
    let details = RpcStatus {
        code: code as i32,
        message: e.message.clone(),
        details: vec![prost_types::Any {
            type_url: ERROR_DETAIL_TYPE.into(),
            value: detail.encode_to_vec(),
        }],
    };
    Status::with_details(code, e.message, Bytes::from(details.encode_to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::error::Origin;
    use leaf_core::Error;

    /// The table of the module's docs, kind by kind, with Leaf's code in the details.
    #[test]
    fn every_kind_maps_to_its_code_with_leafs_code_in_the_details() {
        let check = |e: ApiError, expect: Code, leaf: i64| {
            let shown = format!("{e:?}");
            let s = status(e);
            assert_eq!(s.code(), expect, "{shown}");
            let rpc = RpcStatus::decode(s.details()).expect("details are a google.rpc.Status");
            assert_eq!(rpc.code, expect as i32);
            assert_eq!(rpc.message, s.message());
            assert_eq!(rpc.details.len(), 1);
            assert_eq!(rpc.details[0].type_url, ERROR_DETAIL_TYPE);
            let d = ErrorDetail::decode(rpc.details[0].value.as_slice()).unwrap();
            assert_eq!(d.code, leaf, "{shown}");
        };
        let core = |origin, e| ApiError::from_core(origin, e);
        check(
            core(Origin::Segment, Error::NotFound("tag t".into())),
            Code::NotFound,
            -2,
        );
        check(
            core(Origin::Segment, Error::InvalidInput("tag is empty".into())),
            Code::InvalidArgument,
            400,
        );
        check(
            core(Origin::Other, Error::AlreadyExists("tag t".into())),
            Code::AlreadyExists,
            409,
        );
        check(
            core(Origin::Segment, Error::Unavailable("x".into())),
            Code::Unavailable,
            -3,
        );
        let back = Error::ClockMovedBackwards {
            behind_ms: 2500,
            waited: false,
        };
        check(core(Origin::Snowflake, back), Code::Unavailable, -3);
        check(
            core(Origin::Snowflake, Error::ClockJumpedForward { ahead_ms: 9 }),
            Code::Unavailable,
            -3,
        );
        check(
            core(Origin::Snowflake, Error::LeaseLost("x".into())),
            Code::Unavailable,
            -4,
        );
        check(
            core(Origin::Segment, Error::backend("mysql", "down")),
            Code::Unavailable,
            -3,
        );
        check(
            core(Origin::Segment, Error::Exhausted("tag t".into())),
            Code::OutOfRange,
            -5,
        );
        check(
            core(Origin::Snowflake, Error::Exhausted("timestamps".into())),
            Code::OutOfRange,
            -5,
        );
        // A business tag past its width until the next period: asking again does not help.
        let mut overflow = core(Origin::Segment, Error::Unavailable("width".into()));
        overflow.code = crate::node::error::CODE_FORMAT_OVERFLOW;
        check(overflow, Code::OutOfRange, -6);
        check(ApiError::disabled("segment"), Code::FailedPrecondition, 404);
        let http =
            |status: u16| ApiError::new(axum::http::StatusCode::from_u16(status).unwrap(), "no");
        check(http(408), Code::DeadlineExceeded, 408);
        check(http(413), Code::ResourceExhausted, 413);
        check(http(429), Code::ResourceExhausted, 429);
        check(
            ApiError::new(axum::http::StatusCode::UNAUTHORIZED, "no"),
            Code::Unauthenticated,
            401,
        );
        check(
            ApiError::new(axum::http::StatusCode::FORBIDDEN, "no"),
            Code::PermissionDenied,
            403,
        );
        check(
            core(Origin::Other, Error::Config("a bug".into())),
            Code::Internal,
            500,
        );
    }

    #[test]
    fn unavailable_carries_the_retry_after_and_no_backend_text() {
        let e = ApiError::from_core(
            Origin::Snowflake,
            Error::ClockMovedBackwards {
                behind_ms: 2500,
                waited: true,
            },
        );
        let s = status(e);
        let rpc = RpcStatus::decode(s.details()).unwrap();
        let d = ErrorDetail::decode(rpc.details[0].value.as_slice()).unwrap();
        assert_eq!((d.code, d.http_status, d.retry_after_s), (-1, 503, 3));
        let s = status(ApiError::from_core(
            Origin::Segment,
            Error::backend("mysql", "access denied for root@10.1.2.3"),
        ));
        assert!(!s.message().contains("10.1.2.3"), "{}", s.message());
    }
}
