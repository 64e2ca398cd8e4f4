//! Version 1 ID routes: JSON answers and batches (`/v1/segment/{tag}`, `/v1/snowflake`,
//! `/v1/snowflake/{id}/decode`), snowflake IDs also in base 36, base 62 and `friendly` form.

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use leaf_business::Joined;
use leaf_core::format_utc_ms;
use leaf_format::SnowflakeForm;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{Params, RestPath, parse_id};
use crate::http::admin::ClientAccess;
use crate::node::error::ApiError;
use crate::node::ops;
use crate::node::state::AppState;

#[derive(Deserialize)]
pub(super) struct BatchParams {
    count: Option<String>,
    #[serde(rename = "as")]
    as_: Option<String>,
    /// Read by the snowflake route only: a segment tag's form is fixed when it is created
    /// (issue 27), never chosen per request.
    format: Option<String>,
}

pub(super) struct Batch {
    pub(super) count: u64,
    /// `as`: `Some(true)` for strings, `Some(false)` for numbers, `None` when not asked.
    pub(super) as_string: Option<bool>,
    pub(super) format: Option<String>,
}

impl BatchParams {
    /// The count as a number (its range is checked by `ops`, with gRPC's) and the ID format.
    pub(super) fn check(self, max: usize) -> Result<Batch, ApiError> {
        let count = match self.count.as_deref() {
            None => 1,
            Some(raw) => match raw.trim().parse::<u64>() {
                Ok(n) => n,
                Err(_) => return Err(ops::count_error(max, &format!("{raw:?}"))),
            },
        };
        let as_string = match self.as_.as_deref() {
            None => None,
            Some("number") => Some(false),
            Some("string") => Some(true),
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "as must be \"string\" or \"number\", got {other:?}"
                )));
            }
        };
        Ok(Batch {
            count,
            as_string,
            format: self.format,
        })
    }
}

pub(super) fn ids_json(ids: &[i64], as_string: Option<bool>) -> Value {
    if as_string == Some(true) {
        Value::from(ids.iter().map(i64::to_string).collect::<Vec<_>>())
    } else {
        Value::from(ids.to_vec())
    }
}

/// A business tag's answer, `{"ids": [..], "tag": ".."}` as `json!` writes a plain tag's.
#[derive(Serialize)]
struct TextIds<'a> {
    #[serde(serialize_with = "joined")]
    ids: &'a Joined,
    tag: &'a str,
}

fn joined<S: serde::Serializer>(ids: &&Joined, s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(ids.iter())
}

pub(super) async fn v1_segment(
    _: ClientAccess,
    State(state): State<AppState>,
    RestPath(raw): RestPath,
    Params(p): Params<BatchParams>,
) -> Result<Response, ApiError> {
    // The mode's and the tag's errors come before the count's, as they always did.
    state.segment()?;
    ops::parse_tag(&raw)?;
    let batch = p.check(state.max_batch())?;
    if batch.format.is_some() {
        return Err(ApiError::bad_request(
            "format is fixed when a segment tag is created (POST /v1/tags), never chosen per \
             request",
        ));
    }
    // as=number asks for numbers only: a business tag is refused before any ID is taken.
    let text_ok = batch.as_string != Some(false);
    let answer = match ops::segment_batch(&state, &raw, batch.count, text_ok).await? {
        (tag, ops::SegmentIds::Numbers(ids)) => {
            json!({ "tag": tag.as_str(), "ids": ids_json(&ids, batch.as_string) })
        }
        // Written straight from the printed buffer, in the same shape.
        (tag, ops::SegmentIds::Text(ids)) => {
            return Ok(Json(TextIds {
                ids: &ids,
                tag: tag.as_str(),
            })
            .into_response());
        }
    };
    Ok(Json(answer).into_response())
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
    let form = ops::snowflake_form(batch.format.as_deref())?;
    if form != SnowflakeForm::Number && batch.as_string == Some(false) {
        return Err(ApiError::bad_request(format!(
            "as=number cannot go with format={}, whose IDs are text: leave one out",
            batch.format.as_deref().unwrap_or_default()
        )));
    }
    let ids = ops::snowflake_ids(&state, batch.count).await?;
    if form == SnowflakeForm::Number {
        return Ok(Json(json!({ "ids": ids_json(&ids, batch.as_string) })));
    }
    let text = ops::render_snowflake(&state, &ids, form)?;
    Ok(Json(json!({ "ids": text })))
}

#[derive(Deserialize)]
pub(super) struct DecodeParams {
    format: Option<String>,
}

/// The parts of a snowflake ID. Without `format` the path is the decimal number, as before
/// forms existed. The form is never guessed: `1234` and `zz` are IDs in base 36 and in base 62
/// both (different ones), so only the caller knows which was meant.
pub(super) async fn v1_decode(
    State(state): State<AppState>,
    RestPath(raw): RestPath,
    Params(p): Params<DecodeParams>,
) -> Result<Json<Value>, ApiError> {
    let id = match ops::snowflake_form(p.format.as_deref())? {
        SnowflakeForm::Number => parse_id(&raw)?,
        form => ops::parse_snowflake(&state, &raw, form)?,
    };
    let d = ops::decode(&state, id)?;
    Ok(Json(json!({
        "id": id,
        "timestamp_ms": d.timestamp_ms,
        "time": format_utc_ms(d.timestamp_ms),
        "worker_id": d.worker_id,
        "sequence": d.sequence,
    })))
}

#[derive(Deserialize)]
pub(super) struct SegmentDecodeParams {
    id: Option<String>,
}

/// The period and value of a business tag's ID (`GET /v1/decode/{tag}?id=ORD20261126000123`).
pub(super) async fn v1_segment_decode(
    _: ClientAccess,
    State(state): State<AppState>,
    RestPath(raw): RestPath,
    Params(p): Params<SegmentDecodeParams>,
) -> Result<Json<Value>, ApiError> {
    let text =
        p.id.ok_or_else(|| ApiError::bad_request("the query parameter id is required"))?;
    let def = ops::business_definition(&state, &raw).await?;
    let (period, value) = def
        .decode(&text)
        .map_err(|e| ApiError::from_core(crate::node::error::Origin::Other, e))?;
    Ok(Json(json!({
        "tag": def.base().as_str(),
        "id": text,
        "period": period.map(|p| p.key()),
        "date": period.map(|p| p.first_day().to_string()),
        "value": value,
    })))
}
