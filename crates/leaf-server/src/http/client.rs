//! The routes of clients that lease segments (`leaf-client`): `POST /v1/segment/{tag}/allocate`
//! reserves a fresh range straight from the store, and `GET /v1/tags/{tag}` gives one stored row.
//! Both follow the client rule (`server.client_token`), not the admin rule.

use axum::Json;
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{StatusCode, Uri};
use serde::Deserialize;
use serde_json::{Value, json};

use super::tags::TagJson;
use super::{OptionalJsonBody, Params, RestPath};
use crate::http::admin::{ClientAccess, LeaseAccess, peer};
use crate::node::error::ApiError;
use crate::node::metrics::Family;
use crate::node::ops;
use crate::node::state::AppState;

/// The last segment of the allocate route's path.
const ALLOCATE: &str = "/allocate";

/// The address family of the socket's peer, for the allocation counters.
pub(super) struct PeerFamily(Family);

impl<S: Send + Sync> FromRequestParts<S> for PeerFamily {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        Ok(PeerFamily(Family::of(peer(parts))))
    }
}

#[derive(Deserialize)]
pub(super) struct StepQuery {
    step: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StepBody {
    step: Option<i64>,
}

/// The step asked for, from the query or the body (not both), as a number and as sent; the
/// rule on its value is `ops::check_step`, shared with gRPC.
fn requested_step(
    query: Option<String>,
    body: Option<i64>,
) -> Result<(Option<i64>, String), ApiError> {
    let raw = match (query, body) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request(
                "step is given twice; give it in the query or in the JSON body",
            ));
        }
        (Some(q), None) => q,
        (None, Some(b)) => b.to_string(),
        (None, None) => return Ok((None, String::new())),
    };
    let shown = format!("{raw:?}");
    match raw.trim().parse::<i64>() {
        Ok(n) => Ok((Some(n), shown)),
        // Not a number: the same error as a number out of range.
        Err(_) => Ok((Some(0), shown)),
    }
}

/// `POST /v1/segment/{tag}/allocate` with an optional `step`: one allocation from the store
/// (never from this server's buffers), `{"tag", "max_id", "step", "used_step"}`; the range is
/// `[max_id - used_step, max_id)`.
pub(super) async fn allocate(
    _: LeaseAccess,
    State(state): State<AppState>,
    PeerFamily(family): PeerFamily,
    uri: Uri,
    RestPath(rest): RestPath,
    Params(query): Params<StepQuery>,
    OptionalJsonBody(body): OptionalJsonBody<StepBody>,
) -> Result<Json<Value>, ApiError> {
    // Checked on the raw path: `x%2Fallocate` is a tag named `x/allocate` (a 400 on GET), not
    // this route.
    let raw_tag = match rest.strip_suffix(ALLOCATE) {
        Some(tag) if uri.path().ends_with(ALLOCATE) => tag,
        _ => {
            return Err(ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "POST on /v1/segment is only POST /v1/segment/{tag}/allocate",
            ));
        }
    };
    let (step, shown) = requested_step(query.step, body.and_then(|b| b.step))?;
    let a = ops::allocate(&state, raw_tag, step, &shown, family).await?;
    Ok(Json(json!({
        "tag": a.tag.as_str(),
        "max_id": a.max_id,
        "step": a.step,
        "used_step": a.used_step,
    })))
}

/// `GET /v1/tags/{tag}`: the stored row (`max_id`, `step`, ...), 404 with Leaf's -2 if unknown.
pub(super) async fn get_tag(
    _: ClientAccess,
    State(state): State<AppState>,
    RestPath(raw): RestPath,
) -> Result<Json<TagJson>, ApiError> {
    let row = ops::get_tag(&state, &raw).await?;
    Ok(Json(TagJson::new(row, None)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_table() {
        let check = |query: Option<&str>, body: Option<i64>, expect: Result<Option<i64>, ()>| {
            let got = requested_step(query.map(str::to_owned), body)
                .and_then(|(step, shown)| ops::check_step(step, 1000, &shown));
            match (&got, &expect) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{query:?} {body:?}"),
                (Err(e), Err(())) => assert_eq!(e.status, StatusCode::BAD_REQUEST),
                _ => panic!("{query:?} {body:?}: {got:?}"),
            }
        };
        check(None, None, Ok(None));
        check(Some("5"), None, Ok(Some(5)));
        check(Some(" 1000"), None, Ok(Some(1000)));
        check(None, Some(1), Ok(Some(1)));
        // Above max_step: lowered to it (the answer's used_step says so).
        check(Some("1001"), None, Ok(Some(1000)));
        check(None, Some(1001), Ok(Some(1000)));
        check(Some("9223372036854775807"), None, Ok(Some(1000)));
        check(Some("9223372036854775808"), None, Err(()));
        check(Some("0"), None, Err(()));
        check(None, Some(-1), Err(()));
        check(Some("x"), None, Err(()));
        check(Some(""), None, Err(()));
        check(Some("1.5"), None, Err(()));
        check(Some("5"), Some(5), Err(()));
    }
}
