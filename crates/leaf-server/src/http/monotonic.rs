//! The monotonic routes: `GET /v1/monotonic?count=N` (JSON), `/api/monotonic/get` (one ID, in
//! text, as Leaf's routes answer), `GET /v1/monotonic/range?count=N` (a range issued by this
//! node, the call a follower makes to its leader) and `GET /v1/monotonic/{id}/decode`.

use axum::Json;
use axum::extract::State;
use leaf_core::format_utc_ms;
use serde_json::{Value, json};

use super::v1::{BatchParams, ids_json};
use super::{Params, RestPath, parse_id};
use crate::http::admin::ClientAccess;
use crate::node::error::ApiError;
use crate::node::ops;
use crate::node::state::AppState;

pub(super) async fn v1_monotonic(
    _: ClientAccess,
    State(state): State<AppState>,
    Params(p): Params<BatchParams>,
) -> Result<Json<Value>, ApiError> {
    state.monotonic()?;
    let batch = p.check(state.max_batch())?;
    if batch.format.is_some() {
        return Err(ApiError::bad_request(
            "format is not taken by /v1/monotonic: its IDs are numbers (as=string for text)",
        ));
    }
    let ids: Vec<i64> = ops::monotonic_ids(&state, batch.count)
        .await?
        .map(|id| id as i64)
        .collect();
    Ok(Json(json!({ "ids": ids_json(&ids, batch.as_string) })))
}

pub(super) async fn v1_monotonic_range(
    _: ClientAccess,
    State(state): State<AppState>,
    Params(p): Params<BatchParams>,
) -> Result<Json<Value>, ApiError> {
    state.monotonic()?;
    let max = leaf_snowflake::monotonic::MAX_ISSUE as usize;
    let batch = p.check(max)?;
    if batch.format.is_some() || batch.as_string.is_some() {
        return Err(ApiError::bad_request(
            "the range route takes count only: its answer is {\"first\", \"last\"}",
        ));
    }
    let ids = ops::monotonic_range(&state, batch.count).await?;
    Ok(Json(json!({ "first": ids.start(), "last": ids.end() })))
}

pub(super) async fn leaf_monotonic(
    _: ClientAccess,
    State(state): State<AppState>,
) -> Result<String, ApiError> {
    // A key after the route is accepted and ignored, as on Leaf's snowflake route.
    Ok(ops::monotonic_ids(&state, 1).await?.start().to_string())
}

pub(super) async fn v1_monotonic_decode(
    State(state): State<AppState>,
    RestPath(raw): RestPath,
) -> Result<Json<Value>, ApiError> {
    let id = parse_id(&raw)?;
    let (ms, logical) = ops::decode_monotonic(&state, id)?;
    Ok(Json(json!({
        "id": id,
        "timestamp_ms": ms,
        "time": format_utc_ms(ms),
        "logical": logical,
    })))
}
