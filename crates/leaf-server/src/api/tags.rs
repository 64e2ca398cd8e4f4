//! The admin routes of the tag table (`/v1/tags`, `PATCH /v1/tags/{tag}`).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use leaf_core::{TagRecord, TagUpdate};
use leaf_segment::TagSnapshot;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{JsonBody, RestPath};
use crate::admin::Admin;
use crate::error::ApiError;
use crate::ops;
use crate::state::AppState;

#[derive(Serialize)]
pub(super) struct TagJson {
    tag: String,
    max_id: i64,
    step: i64,
    description: Option<String>,
    updated_at_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache: Option<Value>,
}

impl TagJson {
    pub(super) fn new(r: TagRecord, cache: Option<Value>) -> Self {
        TagJson {
            tag: r.tag.as_str().to_string(),
            max_id: r.max_id,
            step: r.step,
            description: r.description,
            updated_at_ms: r.updated_at_ms,
            cache,
        }
    }
}

fn snapshot_json(s: &TagSnapshot) -> Value {
    let buffer = |b: &Option<leaf_segment::SegmentView>| match b {
        Some(v) => json!({ "value": v.value, "max": v.max, "step": v.step }),
        None => Value::Null,
    };
    json!({
        "initialized": s.initialized,
        "buffers": [buffer(&s.buffers[0]), buffer(&s.buffers[1])],
        "current": s.current,
        "next_ready": s.next_ready,
        "loading": s.loading,
        "step": s.step,
        "remaining": s.remaining,
        "ids_per_sec": s.ids_per_sec,
        "buffered_secs": s.buffered_secs,
        "loads_ok": s.loads_ok,
        "loads_failed": s.loads_failed,
    })
}

pub(super) async fn list_tags(
    _: Admin,
    State(state): State<AppState>,
) -> Result<Json<Value>, ApiError> {
    let tags: Vec<TagJson> = ops::list_tags(&state)
        .await?
        .into_iter()
        .map(|(r, cache)| TagJson::new(r, cache.as_ref().map(snapshot_json)))
        .collect();
    Ok(Json(json!({ "tags": tags })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CreateTag {
    tag: String,
    max_id: Option<i64>,
    step: Option<i64>,
    description: Option<String>,
}

pub(super) async fn create_tag(
    _: Admin,
    State(state): State<AppState>,
    JsonBody(body): JsonBody<CreateTag>,
) -> Result<Response, ApiError> {
    let record = ops::create_tag(
        &state,
        ops::CreateTag {
            tag: body.tag,
            max_id: body.max_id,
            step: body.step,
            description: body.description,
        },
    )
    .await?;
    Ok((StatusCode::CREATED, Json(TagJson::new(record, None))).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PatchTag {
    step: Option<i64>,
    description: Option<String>,
}

pub(super) async fn update_tag(
    _: Admin,
    State(state): State<AppState>,
    RestPath(raw): RestPath,
    JsonBody(body): JsonBody<PatchTag>,
) -> Result<Json<TagJson>, ApiError> {
    let update = TagUpdate {
        step: body.step,
        description: body.description,
    };
    let record = ops::update_tag(&state, &raw, update).await?;
    Ok(Json(TagJson::new(record, None)))
}
