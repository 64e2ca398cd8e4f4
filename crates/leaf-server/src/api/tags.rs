//! The admin routes of the tag table (`/v1/tags`, `PATCH /v1/tags/{tag}`).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use leaf_core::{NewTag, Tag, TagRecord, TagUpdate};
use leaf_segment::TagSnapshot;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{JsonBody, RestPath};
use crate::admin::Admin;
use crate::error::{ApiError, Origin};
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
    let allocator = state.segment()?;
    let rows = allocator
        .store()
        .list()
        .await
        .map_err(|e| ApiError::from_core(Origin::Other, e))?;
    let snapshots = allocator.snapshot();
    let tags: Vec<TagJson> = rows
        .into_iter()
        .map(|r| {
            let cache = snapshots.iter().find(|s| s.tag == r.tag).map(snapshot_json);
            TagJson::new(r, cache)
        })
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
    let allocator = state.segment()?;
    let tag = Tag::new(&body.tag).map_err(|e| ApiError::from_core(Origin::Other, e))?;
    let mut new = NewTag::new(tag.clone());
    if let Some(m) = body.max_id {
        new.max_id = m;
    }
    if let Some(s) = body.step {
        new.step = s;
    }
    new.description = body.description;
    new.validate()
        .map_err(|e| ApiError::from_core(Origin::Other, e))?;
    let record = allocator
        .store()
        .create(&new)
        .await
        .map_err(|e| ApiError::from_core(Origin::Other, e))?;
    // The tag may have been asked for (and remembered as unknown) a moment ago.
    allocator.forget_miss(tag.as_str());
    tracing::info!(tag = %tag, step = record.step, max_id = record.max_id, "tag created");
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
    let allocator = state.segment()?;
    let tag = Tag::new(&raw).map_err(|e| ApiError::from_core(Origin::Other, e))?;
    let update = TagUpdate {
        step: body.step,
        description: body.description,
    };
    update
        .validate()
        .map_err(|e| ApiError::from_core(Origin::Other, e))?;
    let record = allocator
        .store()
        .update(&tag, &update)
        .await
        .map_err(|e| match e {
            // An unknown tag answers as on every route that names one: Leaf's -2, which a
            // client tells apart from a route this server lacks.
            leaf_core::Error::NotFound(_) => ApiError::from_core(Origin::Segment, e),
            e => ApiError::from_core(Origin::Other, e),
        })?;
    // An operator who lowered `max_id` by hand touches the row to end a remembered exhaustion.
    allocator.forget_miss(tag.as_str());
    tracing::info!(tag = %tag, step = record.step, "tag updated");
    Ok(Json(TagJson::new(record, None)))
}
