//! Leaf's routes: plain-text IDs (`/api/segment/get/{key}`, `/api/snowflake/get/{key}`) and
//! `/decodeSnowflakeId`, answered as Leaf answered them.

use axum::Json;
use axum::extract::State;
use leaf_core::utc_parts;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Params, RestPath, parse_id};
use crate::http::admin::ClientAccess;
use crate::node::error::ApiError;
use crate::node::ops;
use crate::node::state::AppState;

pub(super) async fn leaf_segment(
    _: ClientAccess,
    State(state): State<AppState>,
    RestPath(key): RestPath,
) -> Result<String, ApiError> {
    // A business tag's ID is its text (such tags are new: no Leaf client meets one unasked).
    ops::segment_id_text(&state, &key).await
}

pub(super) async fn leaf_segment_empty(
    _: ClientAccess,
    State(state): State<AppState>,
) -> Result<String, ApiError> {
    state.segment()?;
    Err(ApiError::bad_request("tag is empty"))
}

pub(super) async fn leaf_snowflake(
    _: ClientAccess,
    State(state): State<AppState>,
) -> Result<String, ApiError> {
    // The key is accepted and ignored, as in Leaf.
    Ok(ops::snowflake_id(&state).await?.to_string())
}

#[derive(Deserialize)]
pub(super) struct LeafDecodeParams {
    #[serde(rename = "snowflakeId")]
    snowflake_id: Option<String>,
}
pub(super) async fn leaf_decode(
    State(state): State<AppState>,
    Params(p): Params<LeafDecodeParams>,
) -> Result<Json<Value>, ApiError> {
    let raw = p
        .snowflake_id
        .ok_or_else(|| ApiError::bad_request("the query parameter snowflakeId is required"))?;
    let d = ops::decode(&state, parse_id(&raw)?)?;
    let (y, mo, day, h, mi, s, ms) = utc_parts(d.timestamp_ms);
    Ok(Json(json!({
        "timestamp": format!(
            "{}({y:04}-{mo:02}-{day:02} {h:02}:{mi:02}:{s:02}.{ms:03})",
            d.timestamp_ms
        ),
        "workerId": d.worker_id.to_string(),
        "sequenceId": d.sequence.to_string(),
    })))
}
