//! The HTTP API: Leaf's routes (plain-text IDs), `/v1` (JSON, batches), the admin routes, health,
//! readiness and metrics. [`app`] builds the router; it needs no socket, so tests drive it with
//! `tower::ServiceExt::oneshot`.

pub(crate) mod admin;
mod client;
pub(crate) mod connection;
mod health;
pub(crate) mod hosts;
mod leaf;
mod monotonic;
pub mod peer_clock;
pub(crate) mod sniff;
mod tags;
pub(crate) mod tls;
mod v1;
pub(crate) mod write_timeout;

use std::time::Instant;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{
    DefaultBodyLimit, FromRequest, FromRequestParts, MatchedPath, Path, Query, Request, State,
};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get};
use serde::de::DeserializeOwned;

use crate::http::hosts::AllowedHosts;
use crate::node::error::ApiError;
use crate::node::state::AppState;

/// The router of every route, with request metrics and the body limit.
pub fn app(state: AppState) -> Router {
    let body_limit = state.max_body_bytes();
    Router::new()
        // Leaf's routes. The empty-key variants exist so that an empty key is a 400, not a 404.
        .route(
            "/api/segment/get/{*key}",
            ids(
                get(leaf::leaf_segment).post(leaf::leaf_segment),
                "GET, POST",
            ),
        )
        .route(
            "/api/segment/get/",
            ids(
                get(leaf::leaf_segment_empty).post(leaf::leaf_segment_empty),
                "GET, POST",
            ),
        )
        .route(
            "/api/segment/get",
            ids(
                get(leaf::leaf_segment_empty).post(leaf::leaf_segment_empty),
                "GET, POST",
            ),
        )
        .route(
            "/api/snowflake/get/{*key}",
            ids(
                get(leaf::leaf_snowflake).post(leaf::leaf_snowflake),
                "GET, POST",
            ),
        )
        .route(
            "/api/snowflake/get/",
            ids(
                get(leaf::leaf_snowflake).post(leaf::leaf_snowflake),
                "GET, POST",
            ),
        )
        .route(
            "/api/snowflake/get",
            ids(
                get(leaf::leaf_snowflake).post(leaf::leaf_snowflake),
                "GET, POST",
            ),
        )
        .route("/decodeSnowflakeId", get(leaf::leaf_decode))
        .route(
            "/api/monotonic/get/{*key}",
            ids(
                get(monotonic::leaf_monotonic).post(monotonic::leaf_monotonic),
                "GET, POST",
            ),
        )
        .route(
            "/api/monotonic/get/",
            ids(
                get(monotonic::leaf_monotonic).post(monotonic::leaf_monotonic),
                "GET, POST",
            ),
        )
        .route(
            "/api/monotonic/get",
            ids(
                get(monotonic::leaf_monotonic).post(monotonic::leaf_monotonic),
                "GET, POST",
            ),
        )
        // Version 1.
        .route(
            "/v1/segment/{*tag}",
            ids(get(v1::v1_segment).post(client::allocate), "GET, POST"),
        )
        .route("/v1/segment/", ids(get(v1::v1_segment_empty), "GET"))
        .route("/v1/segment", ids(get(v1::v1_segment_empty), "GET"))
        .route("/v1/snowflake", ids(get(v1::v1_snowflake), "GET"))
        .route("/v1/snowflake/{id}/decode", get(v1::v1_decode))
        .route("/v1/monotonic", ids(get(monotonic::v1_monotonic), "GET"))
        .route(
            "/v1/monotonic/range",
            ids(get(monotonic::v1_monotonic_range), "GET"),
        )
        .route(
            "/v1/monotonic/{id}/decode",
            get(monotonic::v1_monotonic_decode),
        )
        .route("/v1/decode/{*tag}", get(v1::v1_segment_decode))
        .route("/v1/time", get(crate::http::peer_clock::time_route))
        .route("/v1/tags", get(tags::list_tags).post(tags::create_tag))
        .route(
            "/v1/tags/{*tag}",
            get(client::get_tag).patch(tags::update_tag),
        )
        // The console.
        .route("/", get(crate::console::index))
        .route("/cache", get(crate::console::cache))
        .route("/db", get(crate::console::db))
        .route("/snowflake", get(crate::console::snowflake))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(health::metrics))
        .fallback(no_route)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(middleware::from_fn_with_state(state.clone(), frame))
        .with_state(state)
}

/// What every request of the router passes through, in one layer (each layer of its own moves
/// the request and the future of the layers inside it once more, and boxes them: three of them
/// were about a tenth of a single-ID request's CPU): the `server.allowed_hosts` rule, the
/// request's count and time by route and status, and the safety headers, on every answer the
/// first two give as well.
async fn frame(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let start = Instant::now();
    let route = req.extensions().get::<MatchedPath>().cloned();
    let mut resp = match host_refusal(state.allowed_hosts(), &req) {
        None => next.run(req).await,
        Some(refusal) => ApiError::new(StatusCode::FORBIDDEN, refusal).into_response(),
    };
    let route = route.as_ref().map_or("unmatched", MatchedPath::as_str);
    state
        .metrics()
        .observe_request(route, resp.status().as_u16(), start.elapsed());
    safety_headers(&mut resp);
    resp
}

/// `X-Content-Type-Options: nosniff` and `Cache-Control: no-store` on every answer of the
/// router. A browser that sniffs a type could run an error body or a page that echoes a tag
/// as a script; a cache (a proxy, a CDN, a browser) that stores an ID answer hands one ID to
/// two callers, which breaks uniqueness. No answer here is worth caching, so the rule has no
/// exception that a new route could fall into.
fn safety_headers(resp: &mut Response) {
    let headers = resp.headers_mut();
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
}

/// The `server.allowed_hosts` rule, on every route (`crate::http::hosts` says why): a request that
/// calls the server by a name not listed, in `Host` or in an absolute request target, or by
/// none, is refused (403) before any handler runs: why, or `None` to serve it.
fn host_refusal(allowed: &AllowedHosts, req: &Request) -> Option<String> {
    if allowed.is_any() {
        return None;
    }
    let host = req
        .headers()
        .get(header::HOST)
        .map(|h| h.to_str().unwrap_or(""));
    let authority = req.uri().authority().map(|a| a.as_str());
    let refusal = match (host, authority) {
        (None, None) => {
            "the request names no host (Host), and server.allowed_hosts is set".to_owned()
        }
        (Some(name), _) | (None, Some(name)) if !allowed.admits(name) => {
            format!("Host {name:?} is not a name in server.allowed_hosts")
        }
        (_, Some(name)) if !allowed.admits(name) => {
            format!("the request target names {name:?}, not a name in server.allowed_hosts")
        }
        _ => return None,
    };
    Some(refusal)
}

/// An ID route's `methods` with `HEAD` refused (405, `Allow: allow`). axum answers `HEAD` with
/// the `GET` handler and drops the body, so a `HEAD` (a link checker, an uptime monitor, a
/// proxy's revalidation) would take IDs that nobody sees; answering 200 without the work would
/// claim a success that a `GET` may not have.
fn ids(methods: MethodRouter<AppState>, allow: &'static str) -> MethodRouter<AppState> {
    methods.head(move || async move {
        (
            [(header::ALLOW, allow)],
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "HEAD is refused on the ID routes (it would take an ID and send none); use GET",
            ),
        )
    })
}

async fn no_route() -> ApiError {
    ApiError::not_found("no such route")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method not allowed on this route",
    )
}

/// The rest of the path (a tag), percent-decoded; a malformed one is a 400 in JSON.
pub(super) struct RestPath(pub(super) String);

impl<S: Send + Sync> FromRequestParts<S> for RestPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        // The router's decoding keeps a `%` that starts no escape (`%zz`) as it is, which would
        // make a malformed path an unknown tag (404) instead of a client mistake.
        if !well_escaped(parts.uri.path()) {
            return Err(ApiError::bad_request(
                "the path has malformed percent-encoding (a % not followed by two hex digits)",
            ));
        }
        Path::<String>::from_request_parts(parts, state)
            .await
            .map(|Path(p)| RestPath(p))
            .map_err(|e: PathRejection| ApiError::bad_request(e.body_text()))
    }
}

/// Whether every `%` in `path` starts a `%XX` escape.
fn well_escaped(path: &str) -> bool {
    let b = path.as_bytes();
    b.iter().enumerate().all(|(i, &c)| {
        c != b'%'
            || (b.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                && b.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
    })
}

/// Query parameters; a malformed query is a 400 in JSON.
pub(super) struct Params<T>(pub(super) T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Params<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(q)| Params(q))
            .map_err(|e: QueryRejection| ApiError::bad_request(e.body_text()))
    }
}

/// A JSON body sent as `application/json` (415 otherwise), within the body limit; errors are
/// JSON.
pub(super) struct JsonBody<T>(pub(super) T);

impl<T: DeserializeOwned> FromRequest<AppState> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        // Only JSON: a browser sends `text/plain` (and form types) cross-site without asking
        // first, so accepting them would let any page write here.
        json_content_type(&req)?;
        parse_json(&read_body(req, state).await?).map(JsonBody)
    }
}

/// [`JsonBody`] where the body may be left out: an empty body is `None`, with any or no
/// `Content-Type`.
pub(super) struct OptionalJsonBody<T>(pub(super) Option<T>);

impl<T: DeserializeOwned> FromRequest<AppState> for OptionalJsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let content_type = json_content_type(&req);
        let bytes = read_body(req, state).await?;
        if bytes.is_empty() {
            return Ok(OptionalJsonBody(None));
        }
        content_type?;
        parse_json(&bytes).map(|v| OptionalJsonBody(Some(v)))
    }
}

/// `Ok` if the request says its body is `application/json`, else the 415.
fn json_content_type(req: &Request) -> Result<(), ApiError> {
    let content_type = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    if content_type.is_some_and(is_json) {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        format!(
            "the body must be JSON, sent with Content-Type: application/json (got {})",
            content_type.map_or_else(|| "none".to_owned(), |t| format!("{t:?}"))
        ),
    ))
}

/// The body, within the body limit and the body timeout.
async fn read_body(req: Request, state: &AppState) -> Result<Bytes, ApiError> {
    // A body trickled in slowly would hold the connection forever; the head has its own
    // timeout in the connection, the body gets the same bound here.
    let limit = state.body_timeout();
    tokio::time::timeout(limit, Bytes::from_request(req, state))
        .await
        .map_err(|_| {
            ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the request body did not arrive within {} s",
                    limit.as_secs()
                ),
            )
        })?
        .map_err(|e: BytesRejection| ApiError::new(e.status(), e.body_text()))
}

fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes)
        .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
}

/// Whether a `Content-Type` is `application/json`, parameters (`charset`) allowed.
fn is_json(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or("").trim();
    essence.eq_ignore_ascii_case("application/json")
}

pub(super) fn parse_id(raw: &str) -> Result<i64, ApiError> {
    raw.trim().parse::<i64>().map_err(|_| {
        ApiError::bad_request(format!("{raw:?} is not a snowflake id (a decimal integer)"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_content_types() {
        for ok in [
            "application/json",
            "Application/JSON",
            "application/json; charset=utf-8",
        ] {
            assert!(is_json(ok), "{ok}");
        }
        for bad in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data",
            "application/jsonp",
            "",
            "text/plain; application/json",
        ] {
            assert!(!is_json(bad), "{bad}");
        }
    }

    #[test]
    fn escape_table() {
        let check = |path: &str, ok: bool| assert_eq!(well_escaped(path), ok, "{path}");
        check("/api/segment/get/t", true);
        check("/api/segment/get/a%2Fb", true);
        check("/api/segment/get/%e9%FF", true);
        check("/api/segment/get/%", false);
        check("/api/segment/get/%zz", false);
        check("/api/segment/get/a%2", false);
        check("/api/segment/get/%g0", false);
        check("/api/segment/get/%0g", false);
    }
}
