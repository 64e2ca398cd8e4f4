//! The admin rule of `/v1/tags`, `PATCH /v1/tags/{tag}` and the monitor pages: with a token
//! configured, a request needs `Authorization: Bearer <token>` (compared in constant time), or on the pages HTTP
//! Basic with the token as the password, which a browser can answer; without one, only loopback
//! peers are served. The peer is the socket's address, never a header: behind a reverse proxy
//! on the same host every client looks local, so such deployments must set a token.
//!
//! Without a token the request must also name the server by a loopback name (`Host:
//! localhost`, `127.0.0.1`, `[::1]`, any port) or by none: a page of another name that DNS then
//! points at 127.0.0.1 (DNS rebinding) reaches the server from a loopback peer, with an
//! `Origin` that matches its own `Host`, and only its `Host` gives it away.
//!
//! Writes (`POST`, `PATCH`, ...) also refuse requests a browser sent from a page of another
//! origin (their `Origin` names another host, or `Sec-Fetch-Site` says so): without a token, a
//! page on the operator's machine could otherwise create tags through the loopback rule.
//!
//! The client rule of the ID routes and of the routes of clients that lease segments is
//! simpler: with `server.client_token` set, a request needs `Authorization: Bearer <it>`
//! (compared in constant time), else 401; with none, everyone is served, as in Leaf. Its writes
//! refuse pages of other origins too. The leasing clients' write, `POST
//! /v1/segment/{tag}/allocate`, refuses every browser ([`lease_origin`]) unless the page is on
//! one of the node's configured names (`server.allowed_hosts`): a page whose name DNS
//! rebinding points at the node is same-origin, and could otherwise burn up to `max_step` IDs
//! a request on a server that only the visitor's browser can reach, and read the range.
//!
//! The metrics rule of `/metrics`, which names every tag: `server.metrics_token` when set, else
//! `server.client_token` when set (Bearer, constant time, 401 otherwise), else open.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, StatusCode, header};
use base64::Engine;

use crate::http::hosts::{AllowedHosts, split_port};
use crate::node::error::ApiError;
use crate::node::state::AppState;
use crate::node::tokens::TokenSet;

/// Proof that a request passed the admin rule (and, for a write, the origin rule); take it as
/// a handler argument of the admin API.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Admin;

/// Proof that a request passed the admin rule of the monitor pages, which also accept HTTP
/// Basic with the token as the password (any user name) and challenge a browser with it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AdminPage;

impl FromRequestParts<AppState> for Admin {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        if !is_safe(&parts.method) {
            same_origin(&parts.headers)?;
        }
        admin_rule(parts, state, Schemes::Bearer).map(|()| Admin)
    }
}

impl FromRequestParts<AppState> for AdminPage {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        admin_rule(parts, state, Schemes::BearerOrBasic).map(|()| AdminPage)
    }
}

/// [`check`] on a request; without a token, also [`loopback_host`].
fn admin_rule(parts: &Parts, state: &AppState, schemes: Schemes) -> Result<(), ApiError> {
    let tokens = &state.tokens().admin;
    check(tokens, authorization(parts), peer(parts), schemes)?;
    if !tokens.is_set() {
        // HTTP/2 (h2c on the same port) names the server in `:authority`, not in `Host`.
        match parts.uri.authority() {
            Some(a) if !parts.headers.contains_key(header::HOST) => {
                loopback_name(Some(a.as_str()), ":authority")?;
            }
            _ => loopback_host(&parts.headers)?,
        }
    }
    Ok(())
}

/// Proof that a request passed the client rule (`server.client_token`); take it as a handler
/// argument of the ID routes and the routes of leasing clients.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClientAccess;

impl FromRequestParts<AppState> for ClientAccess {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        if !is_safe(&parts.method) {
            same_origin(&parts.headers)?;
        }
        check_client(&state.tokens().client, authorization(parts)).map(|()| ClientAccess)
    }
}

/// Proof that a request passed the rule of the leasing clients' write, `POST
/// /v1/segment/{tag}/allocate`: [`lease_origin`], then the client rule.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LeaseAccess;

impl FromRequestParts<AppState> for LeaseAccess {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        lease_origin(&parts.headers, state.allowed_hosts())?;
        check_client(&state.tokens().client, authorization(parts)).map(|()| LeaseAccess)
    }
}

/// The origin rule of the allocate route. Leasing clients send neither `Origin` nor
/// `Sec-Fetch-*`; a browser sends one or the other with every `POST` a page makes. A page whose
/// name DNS rebinding points at the node passes [`same_origin`] (its `Origin` matches its
/// `Host`), so a request from a browser is served only when it is same-origin and its `Origin`
/// names one of the node's own configured names (`server.allowed_hosts`); with none
/// configured, never. 403 otherwise.
pub(crate) fn lease_origin(headers: &HeaderMap, allowed: &AllowedHosts) -> Result<(), ApiError> {
    let origin = headers.get(header::ORIGIN);
    let fetch = headers
        .keys()
        .any(|name| name.as_str().starts_with("sec-fetch-"));
    if origin.is_none() && !fetch {
        return Ok(());
    }
    same_origin(headers)?;
    let origin = origin.map(|o| o.to_str().unwrap_or(""));
    let listed = origin
        .and_then(origin_authority)
        .is_some_and(|(name, port, _)| allowed.lists(&name, Some(port)));
    if listed {
        return Ok(());
    }
    let why = match origin {
        _ if allowed.is_any() => "server.allowed_hosts lists no name".to_owned(),
        Some(o) => format!("Origin {o:?} is not a name in server.allowed_hosts"),
        None => "it names no Origin".to_owned(),
    };
    Err(ApiError::new(
        StatusCode::FORBIDDEN,
        format!(
            "POST /v1/segment/{{tag}}/allocate is for leasing clients, which send neither Origin \
             nor Sec-Fetch-* headers; a browser's request is served only from a page of one of \
             the node's names in server.allowed_hosts, and {why}"
        ),
    ))
}

/// The client rule: the client tokens (none set: open), the `Authorization` header if any.
pub(crate) fn check_client(
    tokens: &TokenSet,
    authorization: Option<&[u8]>,
) -> Result<(), ApiError> {
    check_bearer(tokens, "server.client_token", authorization)
}

/// Proof that a request passed the metrics rule: `/metrics` names every tag, so it takes
/// `server.metrics_token` when that is set, else `server.client_token` when that is set, else
/// it is open. The admin token does not open it: a scraper needs no admin rights.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MetricsAccess;

impl FromRequestParts<AppState> for MetricsAccess {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let tokens = state.tokens();
        let (tokens, key) = if tokens.metrics.is_set() {
            (&tokens.metrics, "server.metrics_token")
        } else {
            (&tokens.client, "server.client_token")
        };
        check_bearer(tokens, key, authorization(parts)).map(|()| MetricsAccess)
    }
}

/// A bearer rule: the tokens configured under `key` (none set: everyone passes), the
/// `Authorization` header if any; 401 naming `key` otherwise.
fn check_bearer(
    tokens: &TokenSet,
    key: &str,
    authorization: Option<&[u8]>,
) -> Result<(), ApiError> {
    if !tokens.is_set() {
        return Ok(());
    }
    let refusal = match authorization.and_then(bearer_token) {
        Some(p) if tokens.accepts(&p) => return Ok(()),
        Some(_) => format!("the bearer token is not {key}"),
        None => format!("this route needs Authorization: Bearer <{key}>"),
    };
    Err(ApiError::new(StatusCode::UNAUTHORIZED, refusal))
}

fn authorization(parts: &Parts) -> Option<&[u8]> {
    parts
        .headers
        .get(header::AUTHORIZATION)
        .map(|v| v.as_bytes())
}

/// The socket's peer, when the server recorded it (never a header).
pub(crate) fn peer(parts: &Parts) -> Option<SocketAddr> {
    parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| *addr)
}

fn is_safe(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// Which credentials a route accepts with a token configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Schemes {
    /// `Authorization: Bearer <token>` only (the API).
    Bearer,
    /// Bearer, or HTTP Basic with the token as the password (the pages, opened in a browser).
    BearerOrBasic,
}

/// The rule itself: the admin tokens (none set: the loopback rule), the `Authorization` header
/// if any, the socket's peer if known, the schemes the route accepts.
pub(crate) fn check(
    tokens: &TokenSet,
    authorization: Option<&[u8]>,
    peer: Option<SocketAddr>,
    schemes: Schemes,
) -> Result<(), ApiError> {
    if tokens.is_set() {
        let basic = schemes == Schemes::BearerOrBasic;
        let presented = authorization
            .and_then(|a| bearer_token(a).or_else(|| basic.then(|| basic_password(a)).flatten()));
        let refusal = match presented {
            Some(p) if tokens.accepts(&p) => return Ok(()),
            Some(_) => "the admin token is wrong",
            None if basic => {
                "this page needs the admin token: Authorization: Bearer <server.admin_token>, or \
                 HTTP Basic with it as the password"
            }
            None => "this route needs Authorization: Bearer <server.admin_token>",
        };
        let e = ApiError::new(StatusCode::UNAUTHORIZED, refusal);
        return Err(if basic { e.with_basic_challenge() } else { e });
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

/// The loopback rule's `Host` check: the request names the server by `localhost`, a loopback
/// address (`127.0.0.1`, `[::1]`), with any port, or sends no `Host` (HTTP/1.0 tools; browsers
/// always send one). Anything else is refused (403), naming the rule.
pub(crate) fn loopback_host(headers: &HeaderMap) -> Result<(), ApiError> {
    let host = headers.get(header::HOST).map(|h| h.to_str().unwrap_or(""));
    loopback_name(host, "Host")
}

/// The loopback rule on the name a request calls the server by (`Host` over HTTP/1.1,
/// `:authority` over HTTP/2), `what` naming where it came from in the refusal.
pub(crate) fn loopback_name(host: Option<&str>, what: &str) -> Result<(), ApiError> {
    let Some(host) = host else {
        return Ok(());
    };
    if is_loopback_name(host) {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::FORBIDDEN,
        format!(
            "while server.admin_token is unset, admin routes serve requests to a loopback name \
             (localhost, 127.0.0.1, [::1]) only, not {what} {host:?}"
        ),
    ))
}

/// Whether `host[:port]` is `localhost` or a loopback address.
fn is_loopback_name(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        // `[v6]` or `[v6]:port`.
        Some(rest) => match rest.split_once(']') {
            Some((v6, port)) if port.is_empty() || port.starts_with(':') => v6,
            _ => return false,
        },
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.to_canonical().is_loopback())
}

/// The origin rule of writes: a request whose `Origin` names another host than its
/// `Host` (or is `null`), or whose `Sec-Fetch-Site` says another site or origin sent it, is
/// refused (403). Requests without these headers (curl, scripts) pass: only browsers send them,
/// and a browser always sends `Origin` with a cross-origin `POST`.
pub(crate) fn same_origin(headers: &HeaderMap) -> Result<(), ApiError> {
    let refuse = |why: String| {
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            format!("writes are refused from pages of other origins: {why}"),
        ))
    };
    if let Some(site) = headers.get("sec-fetch-site") {
        let site = site.to_str().unwrap_or("");
        if !site.eq_ignore_ascii_case("same-origin") && !site.eq_ignore_ascii_case("none") {
            return refuse(format!("Sec-Fetch-Site is {site:?}"));
        }
    }
    let Some(origin) = headers.get(header::ORIGIN) else {
        return Ok(());
    };
    let origin = origin.to_str().unwrap_or("");
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    match origin_authority(origin) {
        Some(authority) if !host.is_empty() && same_authority(&authority, host) => Ok(()),
        _ => refuse(format!("Origin {origin:?} is not this server ({host:?})")),
    }
}

/// A serialized origin's host, port (the scheme's default when absent) and scheme's default
/// port.
type Authority = (String, u16, u16);

/// The [`Authority`] of a serialized origin (`scheme://host[:port]`); `None` for `null`,
/// another scheme or junk.
fn origin_authority(origin: &str) -> Option<Authority> {
    let (scheme, rest) = origin.split_once("://")?;
    let default = if scheme.eq_ignore_ascii_case("http") {
        80
    } else if scheme.eq_ignore_ascii_case("https") {
        443
    } else {
        return None;
    };
    if rest.is_empty() || rest.contains('/') {
        return None;
    }
    let (name, port) = split_port(rest)?;
    Some((name.to_ascii_lowercase(), port.unwrap_or(default), default))
}

/// Whether the `Host` header names the origin's host and port. A `Host` without a port means
/// the default port of the scheme the browser used, which for the same origin is the origin's
/// scheme: so it matches an origin on its scheme's default port only (`http://h` and `h`, not
/// `http://h:443` and `h`); a port in `Host` must be the origin's (`https://h` and `h:443`).
fn same_authority((name, port, default): &Authority, host: &str) -> bool {
    let Some((host_name, host_port)) = split_port(host) else {
        return false;
    };
    host_name.eq_ignore_ascii_case(name) && host_port.unwrap_or(*default) == *port
}

/// The token of `Bearer <token>`; the scheme is case-insensitive and one or more spaces follow
/// it (RFC 9110, section 11.4).
fn bearer_token(authorization: &[u8]) -> Option<Vec<u8>> {
    scheme_value(authorization, b"bearer").map(<[u8]>::to_vec)
}

/// The password of `Basic base64(user:password)` (RFC 7617); the user name is ignored.
fn basic_password(authorization: &[u8]) -> Option<Vec<u8>> {
    let encoded = scheme_value(authorization, b"basic")?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()?;
    let colon = decoded.iter().position(|&c| c == b':')?;
    Some(decoded[colon + 1..].to_vec())
}

fn scheme_value<'a>(authorization: &'a [u8], scheme_name: &[u8]) -> Option<&'a [u8]> {
    let space = authorization.iter().position(|&c| c == b' ')?;
    let (scheme, rest) = authorization.split_at(space);
    if !scheme.eq_ignore_ascii_case(scheme_name) {
        return None;
    }
    let start = rest.iter().position(|&c| c != b' ')?;
    Some(&rest[start..])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compose::config::Tokens;
    use axum::http::HeaderValue;

    fn peer(s: &str) -> Option<SocketAddr> {
        Some(s.parse().unwrap())
    }

    /// The set of one token (`""`: none).
    fn set(token: &str) -> TokenSet {
        TokenSet::new("test", &Tokens::from(token), None)
    }

    #[test]
    fn a_list_of_tokens_takes_each_of_them() {
        let two = TokenSet::new(
            "test",
            &Tokens::from(vec!["old".to_owned(), "new".to_owned()]),
            None,
        );
        for (auth, ok) in [
            ("Bearer old", true),
            ("Bearer new", true),
            ("Bearer neo", false),
        ] {
            assert_eq!(
                check_client(&two, Some(auth.as_bytes())).is_ok(),
                ok,
                "{auth}"
            );
            let admin = check(
                &two,
                Some(auth.as_bytes()),
                peer("10.0.0.1:1"),
                Schemes::Bearer,
            );
            assert_eq!(admin.is_ok(), ok, "{auth}");
        }
    }

    #[test]
    fn without_a_token_only_loopback_peers_pass() {
        let status = |p| check(&set(""), None, p, Schemes::Bearer).map_err(|e| e.status.as_u16());
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
            check(&set("s3cret"), auth.map(str::as_bytes), p, Schemes::Bearer)
                .map_err(|e| e.status.as_u16())
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
        assert_eq!(
            status(Some("Bearer s3cret "), peer("127.0.0.1:1")),
            Err(401)
        );
        // Basic is for the pages only: the API never accepts it.
        let basic = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode("admin:s3cret")
        );
        assert_eq!(status(Some(&basic), peer("127.0.0.1:1")), Err(401));
    }

    #[test]
    fn client_rule_table() {
        let status = |token: &str, auth: Option<&str>| {
            check_client(&set(token), auth.map(str::as_bytes)).map_err(|e| e.status.as_u16())
        };
        // No token: open to everyone, whatever they send.
        assert_eq!(status("", None), Ok(()));
        assert_eq!(status("", Some("Bearer anything")), Ok(()));
        assert_eq!(status("t0ken", Some("Bearer t0ken")), Ok(()));
        assert_eq!(status("t0ken", Some("bearer   t0ken")), Ok(()));
        assert_eq!(status("t0ken", None), Err(401));
        assert_eq!(status("t0ken", Some("Bearer t0ke")), Err(401));
        assert_eq!(status("t0ken", Some("Bearer t0ken ")), Err(401));
        assert_eq!(status("t0ken", Some("Bearer")), Err(401));
        let basic = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode("client:t0ken")
        );
        assert_eq!(status("t0ken", Some(&basic)), Err(401), "Bearer only");
    }

    #[test]
    fn pages_take_basic_with_the_token_as_the_password() {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let check_page = |auth: Option<String>| {
            check(
                &set("s3cret"),
                auth.as_deref().map(str::as_bytes),
                peer("10.0.0.1:1"),
                Schemes::BearerOrBasic,
            )
        };
        assert!(check_page(Some(format!("Basic {}", b64("admin:s3cret")))).is_ok());
        assert!(check_page(Some(format!("basic {}", b64(":s3cret")))).is_ok());
        assert!(check_page(Some(format!("Basic {}", b64("anyone:s3cret")))).is_ok());
        assert!(check_page(Some("Bearer s3cret".into())).is_ok());
        for bad in [
            format!("Basic {}", b64("admin:nope")),
            format!("Basic {}", b64("s3cret")),
            format!("Basic {}", b64("s3cret:")),
            "Basic !!!not-base64".into(),
            "Basic".into(),
        ] {
            let e = check_page(Some(bad.clone())).unwrap_err();
            assert_eq!(e.status, StatusCode::UNAUTHORIZED, "{bad}");
        }
        let e = check_page(None).unwrap_err();
        assert_eq!(e.status, StatusCode::UNAUTHORIZED);
        assert!(
            e.basic_challenge,
            "a page's 401 challenges the browser with Basic"
        );
    }

    #[test]
    fn loopback_host_table() {
        let ok = |host: Option<&str>| {
            let mut h = HeaderMap::new();
            if let Some(v) = host {
                h.insert("host", HeaderValue::from_str(v).unwrap());
            }
            let r = loopback_host(&h);
            if let Err(e) = &r {
                assert_eq!(e.status, StatusCode::FORBIDDEN);
            }
            r.is_ok()
        };
        for good in [
            None,
            Some("localhost"),
            Some("LOCALHOST:8080"),
            Some("127.0.0.1"),
            Some("127.0.0.1:8080"),
            Some("127.8.9.10:1"),
            Some("[::1]"),
            Some("[::1]:8080"),
            Some("[::ffff:127.0.0.1]:8080"),
        ] {
            assert!(ok(good), "{good:?}");
        }
        // A rebound name, the machine's own name or address, and junk.
        for bad in [
            "rebind.attacker.example:8080",
            "localhost.attacker.example",
            "10.0.0.1:8080",
            "[::2]:8080",
            "[::1]x",
            "",
            "127.0.0.1.nip.io:8080",
        ] {
            assert!(!ok(Some(bad)), "{bad:?}");
        }
    }

    #[test]
    fn origin_rule_table() {
        let check = |origin: Option<&str>, host: Option<&str>, site: Option<&str>, ok: bool| {
            let mut h = HeaderMap::new();
            for (name, value) in [("origin", origin), ("host", host), ("sec-fetch-site", site)] {
                if let Some(v) = value {
                    h.insert(name, HeaderValue::from_str(v).unwrap());
                }
            }
            let r = same_origin(&h);
            assert_eq!(r.is_ok(), ok, "{origin:?} {host:?} {site:?}: {r:?}");
            if let Err(e) = r {
                assert_eq!(e.status, StatusCode::FORBIDDEN);
            }
        };
        // curl and scripts send neither Origin nor Sec-Fetch-Site.
        check(None, Some("localhost:8080"), None, true);
        check(None, None, None, true);
        check(
            Some("http://localhost:8080"),
            Some("localhost:8080"),
            None,
            true,
        );
        check(
            Some("http://LOCALHOST:8080"),
            Some("localhost:8080"),
            None,
            true,
        );
        check(
            Some("https://leaf.example"),
            Some("leaf.example:443"),
            None,
            true,
        );
        check(
            Some("http://leaf.example"),
            Some("leaf.example"),
            Some("same-origin"),
            true,
        );
        check(None, Some("localhost:8080"), Some("none"), true);
        // Another port of the same host is another origin (the attack of issue 18).
        check(
            Some("http://localhost:18750"),
            Some("localhost:8080"),
            None,
            false,
        );
        check(
            Some("http://evil.example"),
            Some("localhost:8080"),
            None,
            false,
        );
        check(Some("null"), Some("localhost:8080"), None, false);
        check(Some("http://localhost:8080"), None, None, false);
        check(
            Some("http://localhost:8080/x"),
            Some("localhost:8080"),
            None,
            false,
        );
        check(None, Some("localhost:8080"), Some("cross-site"), false);
        check(None, Some("localhost:8080"), Some("same-site"), false);
        check(
            Some("http://localhost:8080"),
            Some("localhost:8080"),
            Some("cross-site"),
            false,
        );
        // The default port is the origin's scheme's: https://h is h:443, never h:80.
        check(
            Some("https://leaf.example"),
            Some("leaf.example:80"),
            None,
            false,
        );
        check(
            Some("http://leaf.example:443"),
            Some("leaf.example:80"),
            None,
            false,
        );
        check(
            Some("http://leaf.example:443"),
            Some("leaf.example"),
            None,
            false,
        );
        check(
            Some("https://leaf.example:80"),
            Some("leaf.example"),
            None,
            false,
        );
        check(
            Some("http://leaf.example"),
            Some("leaf.example:80"),
            None,
            true,
        );
        check(
            Some("https://leaf.example"),
            Some("leaf.example"),
            None,
            true,
        );
        check(Some("http://[::1]:8080"), Some("[::1]:8080"), None, true);
        check(Some("http://[::1]:8080"), Some("[::1]:8081"), None, false);
        check(Some("http://localhost:x"), Some("localhost:x"), None, false);
    }
}
