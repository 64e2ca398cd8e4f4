//! `ApiError`: every error answer of the server, as a status code and the JSON body
//! `{"code": <int>, "message": <str>}`, with Leaf's result codes where Leaf had them.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use leaf_core::Error;
use serde::Serialize;

/// Leaf's segment code: the key is unknown.
pub(crate) const CODE_UNKNOWN_KEY: i64 = -2;
/// Leaf's segment code: both segments are not ready.
pub(crate) const CODE_SEGMENTS_NOT_READY: i64 = -3;
/// Leaf's snowflake code: the clock is still behind after the wait.
pub(crate) const CODE_CLOCK_STILL_BEHIND: i64 = -1;
/// Leaf's snowflake code: the clock moved back more than allowed (also used when it jumped
/// forward more than trusted: Leaf's code for a clock that cannot be issued from).
pub(crate) const CODE_CLOCK_MOVED_BACK: i64 = -3;
/// The fork's snowflake code: the worker id's lease was lost.
pub(crate) const CODE_LEASE_LOST: i64 = -4;
/// The fork's code: a finite space ran out (a tag's IDs up to `i64::MAX`, the layout's
/// timestamps); retrying does not help until an operator acts.
pub(crate) const CODE_EXHAUSTED: i64 = -5;
/// A business tag's value no longer fits its format's fixed width: no ID of it is issued until
/// the next period (a wider or cut ID never is).
pub(crate) const CODE_FORMAT_OVERFLOW: i64 = -6;

/// The monotonic mode: the node asked is not the leader (a forwarded call or a range), or the
/// leader a follower forwarded to did not answer with IDs.
pub(crate) const CODE_NOT_LEADER: i64 = -7;

/// Which part of the service an error came from; it decides Leaf's result code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A segment ID route.
    Segment,
    /// A snowflake ID route.
    Snowflake,
    /// Anything else (admin, decode).
    Other,
}

/// An error answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// Leaf's result code, or the status code where Leaf had none.
    pub code: i64,
    /// What went wrong, for the client; never a backend's internals.
    pub message: String,
    /// Seconds for `Retry-After` (only 503s carry it).
    pub retry_after_s: u64,
    /// A 401 that challenges with HTTP Basic (a monitor page, which a browser opens) instead
    /// of Bearer.
    pub basic_challenge: bool,
    /// The answer of a mode that is switched off (a 404 over HTTP, `FAILED_PRECONDITION` over
    /// gRPC, where `NOT_FOUND` means an unknown tag).
    pub mode_disabled: bool,
}

#[derive(Serialize)]
struct Body<'a> {
    code: i64,
    message: &'a str,
}

impl ApiError {
    /// An error whose code is its status.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code: i64::from(status.as_u16()),
            message: message.into(),
            retry_after_s: 1,
            basic_challenge: false,
            mode_disabled: false,
        }
    }

    /// With an HTTP Basic challenge on a 401, so that a browser prompts for the token.
    pub fn with_basic_challenge(mut self) -> Self {
        self.basic_challenge = true;
        self
    }

    /// 400.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    /// 404.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }

    /// 503 with a `Retry-After` of `retry_after_s` seconds.
    pub fn unavailable(code: i64, message: impl Into<String>, retry_after_s: u64) -> Self {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            code,
            message: message.into(),
            retry_after_s: retry_after_s.max(1),
            basic_challenge: false,
            mode_disabled: false,
        }
    }

    /// The answer for a mode that is switched off.
    pub fn disabled(mode: &str) -> Self {
        let mut e = Self::not_found(format!(
            "{mode} mode is disabled on this server ({mode}.enabled = false)"
        ));
        e.mode_disabled = true;
        e
    }

    /// Maps a core error from `origin` to its answer. The message is `public_reason`'s; the
    /// error itself goes to the log.
    pub fn from_core(origin: Origin, err: Error) -> Self {
        let message = public_reason(origin, &err);
        let not_ready = match origin {
            Origin::Segment => CODE_SEGMENTS_NOT_READY,
            _ => 503,
        };
        match err {
            Error::NotFound(_) => {
                let mut e = Self::not_found(message);
                if origin == Origin::Segment {
                    e.code = CODE_UNKNOWN_KEY;
                }
                e
            }
            Error::InvalidInput(_) => Self::bad_request(message),
            Error::AlreadyExists(_) => Self::new(StatusCode::CONFLICT, message),
            Error::Unavailable(why) => {
                // Frequent during an outage, whose cause is logged at warn where it happens
                // (a failed load, a failed renewal).
                tracing::debug!(?origin, error = %why, "answered unavailable");
                Self::unavailable(not_ready, message, 1)
            }
            Error::ClockMovedBackwards { behind_ms, waited } => {
                let code = if waited {
                    CODE_CLOCK_STILL_BEHIND
                } else {
                    CODE_CLOCK_MOVED_BACK
                };
                Self::unavailable(code, message, behind_ms.div_ceil(1000))
            }
            Error::ClockJumpedForward { ahead_ms } => Self::unavailable(
                CODE_CLOCK_MOVED_BACK,
                format!(
                    "the wall clock jumped {ahead_ms} ms ahead; snowflake waits for it to come back"
                ),
                1,
            ),
            Error::LeaseLost(why) => {
                tracing::debug!(error = %why, "answered lease lost");
                Self::unavailable(CODE_LEASE_LOST, message, 1)
            }
            Error::Exhausted(_) => Self::unavailable(CODE_EXHAUSTED, message, 60),
            Error::Backend { backend, source } => {
                tracing::warn!(backend, error = %source, "backend error");
                Self::unavailable(not_ready, message, 1)
            }
            other => {
                tracing::error!(error = %other, "unexpected error");
                Self::new(StatusCode::INTERNAL_SERVER_ERROR, message)
            }
        }
    }
}

/// What a client may learn of `err` from `origin`: its kind in words, never a backend's own text
/// (an OS message with a path, a driver's message with hosts or statements). Every client-facing
/// error text (answers, `/readyz`) comes from here. Kept: names the client sent (a tag) and the
/// numbers of the server's own rules.
pub(crate) fn public_reason(origin: Origin, err: &Error) -> String {
    match err {
        Error::NotFound(what) => format!("not found: {what}"),
        Error::InvalidInput(why) => why.clone(),
        Error::AlreadyExists(what) => format!("already exists: {what}"),
        Error::Unavailable(_) => match origin {
            Origin::Segment => "segment IDs are unavailable for now; retry".into(),
            Origin::Snowflake => "snowflake IDs are unavailable for now; retry".into(),
            Origin::Other => "the store is unavailable for now; retry".into(),
        },
        Error::ClockMovedBackwards { behind_ms, .. } => {
            format!("clock moved backwards by {behind_ms} ms")
        }
        Error::ClockJumpedForward { ahead_ms } => format!(
            "the wall clock jumped {ahead_ms} ms forward; snowflake IDs stop until it comes back"
        ),
        Error::LeaseLost(_) => "worker id lease lost".into(),
        Error::Exhausted(why) => format!("exhausted: {why}"),
        Error::Backend { backend, .. } => format!("the {backend} backend is unavailable"),
        _ => "internal error".into(),
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::to_vec(&Body {
            code: self.code,
            message: &self.message,
        })
        .unwrap_or_else(|_| br#"{"code":500,"message":"internal error"}"#.to_vec());
        let mut resp = (self.status, body).into_response();
        let headers = resp.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(self.retry_after_s));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            let challenge = if self.basic_challenge {
                r#"Basic realm="leaf", charset="UTF-8""#
            } else {
                "Bearer"
            };
            headers.insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static(challenge),
            );
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(origin: Origin, err: Error, status: u16, code: i64) {
        let e = ApiError::from_core(origin, err);
        assert_eq!((e.status.as_u16(), e.code), (status, code), "{e:?}");
    }

    #[test]
    fn kinds_map_to_status_and_leaf_codes() {
        check(Origin::Segment, Error::NotFound("t".into()), 404, -2);
        check(Origin::Other, Error::NotFound("t".into()), 404, 404);
        check(Origin::Segment, Error::InvalidInput("t".into()), 400, 400);
        check(Origin::Other, Error::AlreadyExists("t".into()), 409, 409);
        check(Origin::Segment, Error::Unavailable("t".into()), 503, -3);
        check(Origin::Snowflake, Error::Unavailable("t".into()), 503, 503);
        let back = |waited| Error::ClockMovedBackwards {
            behind_ms: 2500,
            waited,
        };
        check(Origin::Snowflake, back(true), 503, -1);
        check(Origin::Snowflake, back(false), 503, -3);
        let ahead = Error::ClockJumpedForward { ahead_ms: 90_000 };
        check(Origin::Snowflake, ahead, 503, -3);
        check(Origin::Snowflake, Error::LeaseLost("t".into()), 503, -4);
        check(Origin::Segment, Error::Exhausted("t".into()), 503, -5);
        check(Origin::Snowflake, Error::Exhausted("t".into()), 503, -5);
        check(Origin::Segment, Error::backend("sqlite", "locked"), 503, -3);
        check(Origin::Other, Error::Config("x".into()), 500, 500);
    }

    #[test]
    fn backend_details_do_not_leak() {
        let e = ApiError::from_core(
            Origin::Segment,
            Error::backend("mysql", "access denied for root@10.1.2.3"),
        );
        assert!(!e.message.contains("10.1.2.3"), "{}", e.message);
        assert!(e.message.contains("mysql"), "{}", e.message);
    }

    /// A cache-file failure as the OS reports it, path and all.
    const OS_TEXT: &str = "cannot write /srv/secret/leaf-data/worker-leaf.properties: Permission denied (os error 13)";

    #[test]
    fn client_messages_carry_no_backend_text() {
        let kinds = || {
            vec![
                Error::Unavailable(format!(
                    "the clock passed the durable time mark 5 ms and renewing it failed: \
                     cache-file backend: {OS_TEXT}"
                )),
                Error::LeaseLost(OS_TEXT.into()),
                Error::backend("cache-file", OS_TEXT),
                Error::Config(OS_TEXT.into()),
            ]
        };
        for origin in [Origin::Segment, Origin::Snowflake, Origin::Other] {
            for err in kinds() {
                let shown = format!("{err}");
                let e = ApiError::from_core(origin, err);
                assert!(!e.message.is_empty(), "{shown}");
                for secret in ["/srv/secret", "os error", "Permission denied"] {
                    assert!(
                        !e.message.contains(secret),
                        "{origin:?} {shown}: {}",
                        e.message
                    );
                }
                assert_eq!(
                    public_reason(origin, &Error::backend("cache-file", OS_TEXT)),
                    ApiError::from_core(origin, Error::backend("cache-file", OS_TEXT)).message,
                    "one mapping"
                );
            }
        }
    }

    #[test]
    fn every_503_carries_retry_after() {
        let e = ApiError::from_core(
            Origin::Snowflake,
            Error::ClockMovedBackwards {
                behind_ms: 2500,
                waited: false,
            },
        );
        let r = e.into_response();
        assert_eq!(r.headers()[header::RETRY_AFTER], "3");
        let r = ApiError::unavailable(-3, "x", 0).into_response();
        assert_eq!(r.headers()[header::RETRY_AFTER], "1");
        assert_eq!(r.headers()[header::CONTENT_TYPE], "application/json");
    }
}
