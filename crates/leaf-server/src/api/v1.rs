//! Version 1 ID routes: JSON answers and batches (`/v1/segment/{tag}`, `/v1/snowflake`,
//! `/v1/snowflake/{id}/decode`).

use axum::Json;
use axum::extract::State;
use leaf_core::format_utc_ms;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Params, RestPath, parse_id};
use crate::admin::ClientAccess;
use crate::error::ApiError;
use crate::ops;
use crate::state::AppState;

#[derive(Deserialize)]
pub(super) struct BatchParams {
    count: Option<String>,
    #[serde(rename = "as")]
    as_: Option<String>,
}

struct Batch {
    count: u64,
    as_string: bool,
}

impl BatchParams {
    /// The count as a number (its range is checked by `ops`, with gRPC's) and the ID format.
    fn check(self, max: usize) -> Result<Batch, ApiError> {
        let count = match self.count.as_deref() {
            None => 1,
            Some(raw) => match raw.trim().parse::<u64>() {
                Ok(n) => n,
                Err(_) => return Err(ops::count_error(max, &format!("{raw:?}"))),
            },
        };
        let as_string = match self.as_.as_deref() {
            None | Some("number") => false,
            Some("string") => true,
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "as must be \"string\" or \"number\", got {other:?}"
                )));
            }
        };
        Ok(Batch { count, as_string })
    }
}

fn ids_json(ids: &[i64], as_string: bool) -> Value {
    if as_string {
        Value::from(ids.iter().map(i64::to_string).collect::<Vec<_>>())
    } else {
        Value::from(ids.to_vec())
    }
}

pub(super) async fn v1_segment(
    _: ClientAccess,
    State(state): State<AppState>,
    RestPath(raw): RestPath,
    Params(p): Params<BatchParams>,
) -> Result<Json<Value>, ApiError> {
    // The mode's and the tag's errors come before the count's, as they always did.
    state.segment()?;
    ops::parse_tag(&raw)?;
    let batch = p.check(state.max_batch())?;
    let (tag, ids) = ops::segment_ids(&state, &raw, batch.count).await?;
    Ok(Json(
        json!({ "tag": tag.as_str(), "ids": ids_json(&ids, batch.as_string) }),
    ))
}

pub(super) async fn v1_segment_empty(
    _: ClientAccess,
    State(state): State<AppState>,
) -> Result<Json<Value>, ApiError> {
    state.segment()?;
    Err(ApiError::bad_request("tag is empty"))
}

pub(super) async fn v1_snowflake(
    _: ClientAccess,
    State(state): State<AppState>,
    Params(p): Params<BatchParams>,
) -> Result<Json<Value>, ApiError> {
    state.snowflake()?;
    let batch = p.check(state.max_batch())?;
    let ids = ops::snowflake_ids(&state, batch.count).await?;
    Ok(Json(json!({ "ids": ids_json(&ids, batch.as_string) })))
}

pub(super) async fn v1_decode(
    State(state): State<AppState>,
    RestPath(raw): RestPath,
) -> Result<Json<Value>, ApiError> {
    let id = parse_id(&raw)?;
    let d = ops::decode(&state, id)?;
    Ok(Json(json!({
        "id": id,
        "timestamp_ms": d.timestamp_ms,
        "time": format_utc_ms(d.timestamp_ms),
        "worker_id": d.worker_id,
        "sequence": d.sequence,
    })))
}
