//! The admin rule of `/v1/tags*`, `/cache` and `/db`: with a token configured, a request needs
//! `Authorization: Bearer <token>` (compared in constant time); without one, only loopback peers
//! are served. The peer is the socket's address, never a header: behind a reverse proxy on the
//! same host every client looks local, so such deployments must set a token.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};

use crate::error::ApiError;
use crate::state::AppState;

/// Proof that a request passed the admin rule; take it as a handler argument.
#[derive(Debug, Clone, Copy)]
pub struct Admin;

impl FromRequestParts<AppState> for Admin {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(addr)| *addr);
        let auth = parts
            .headers
            .get(header::AUTHORIZATION)
            .map(|v| v.as_bytes());
        check(state.admin_token(), auth, peer).map(|()| Admin)
    }
}

/// The rule itself: `token` as configured (empty: none), the `Authorization` header if any, the
/// socket's peer if known.
pub fn check(
    token: &str,
    authorization: Option<&[u8]>,
    peer: Option<SocketAddr>,
) -> Result<(), ApiError> {
    if !token.is_empty() {
        let presented = authorization.and_then(bearer_token);
        return match presented {
            Some(p) if constant_time_eq(p, token.as_bytes()) => Ok(()),
            Some(_) => Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "the admin token is wrong",
            )),
            None => Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "this route needs Authorization: Bearer <server.admin_token>",
            )),
        };
    }
    // An unknown peer (no socket, as in a test without ConnectInfo) is not trusted.
    let local = peer.is_some_and(|p| p.ip().to_canonical().is_loopback());
    if local {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "admin routes serve loopback clients only while server.admin_token is unset",
        ))
    }
}

/// The token of `Bearer <token>`; the scheme is case-insensitive and one or more spaces follow
/// it (RFC 9110, section 11.4).
fn bearer_token(authorization: &[u8]) -> Option<&[u8]> {
    let space = authorization.iter().position(|&c| c == b' ')?;
    let (scheme, rest) = authorization.split_at(space);
    if !scheme.eq_ignore_ascii_case(b"bearer") {
        return None;
    }
    let start = rest.iter().position(|&c| c != b' ')?;
    Some(&rest[start..])
}

/// Compares without an early exit, so the time taken does not tell how much of a guess was
/// right. The length is not secret enough to hide: it only says how long the token is.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(s: &str) -> Option<SocketAddr> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn constant_time_eq_table() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(constant_time_eq(b"", b""));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
        assert!(!constant_time_eq(b"xbc", b"abc"));
    }

    #[test]
    fn without_a_token_only_loopback_peers_pass() {
        let status = |p| check("", None, p).map_err(|e| e.status.as_u16());
        assert_eq!(status(peer("127.0.0.1:5000")), Ok(()));
        assert_eq!(status(peer("127.8.9.10:5000")), Ok(()));
        assert_eq!(status(peer("[::1]:5000")), Ok(()));
        assert_eq!(status(peer("[::ffff:127.0.0.1]:5000")), Ok(()));
        assert_eq!(status(peer("10.0.0.1:5000")), Err(403));
        assert_eq!(status(peer("[::ffff:10.0.0.1]:5000")), Err(403));
        assert_eq!(status(None), Err(403));
    }

    #[test]
    fn with_a_token_everyone_needs_it() {
        let status = |auth: Option<&str>, p| {
            check("s3cret", auth.map(str::as_bytes), p).map_err(|e| e.status.as_u16())
        };
        assert_eq!(status(Some("Bearer s3cret"), peer("10.0.0.1:1")), Ok(()));
        assert_eq!(status(Some("Bearer s3cret"), None), Ok(()));
        // The scheme is case-insensitive, followed by one or more spaces (RFC 9110 11.4).
        assert_eq!(status(Some("bearer s3cret"), peer("10.0.0.1:1")), Ok(()));
        assert_eq!(status(Some("BEARER s3cret"), peer("10.0.0.1:1")), Ok(()));
        assert_eq!(status(Some("Bearer   s3cret"), peer("10.0.0.1:1")), Ok(()));
        assert_eq!(status(Some("Bearers3cret"), peer("10.0.0.1:1")), Err(401));
        assert_eq!(status(Some("Bearer"), peer("10.0.0.1:1")), Err(401));
        assert_eq!(status(None, peer("127.0.0.1:1")), Err(401));
        assert_eq!(status(Some("Bearer nope"), peer("127.0.0.1:1")), Err(401));
        assert_eq!(status(Some("Basic s3cret"), peer("127.0.0.1:1")), Err(401));
        assert_eq!(
            status(Some("Bearer s3cret "), peer("127.0.0.1:1")),
            Err(401)
        );
    }
}
