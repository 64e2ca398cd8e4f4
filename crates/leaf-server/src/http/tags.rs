//! The admin routes of the tag table (`/v1/tags`, `PATCH /v1/tags/{tag}`).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use leaf_business::{Created, Definition};
use leaf_core::{TagRecord, TagUpdate};
use leaf_segment::TagSnapshot;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{JsonBody, RestPath};
use crate::http::admin::Admin;
use crate::node::error::ApiError;
use crate::node::ops;
use crate::node::state::AppState;

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
    let tags: Vec<Value> = ops::list_grouped(&state)
        .await?
        .into_iter()
        .map(|t| {
            let Some(def) = &t.group.definition else {
                return json!(TagJson::new(
                    t.group.record,
                    t.cache.as_ref().map(snapshot_json)
                ));
            };
            let mut v = definition_json(def);
            v["periods"] = t
                .group
                .periods
                .into_iter()
                .zip(t.period_caches)
                .map(|(p, cache)| json!(TagJson::new(p, cache.as_ref().map(snapshot_json))))
                .collect();
            v
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
    reset: Option<String>,
    time_zone: Option<String>,
    first: Option<i64>,
    format: Option<String>,
}

/// A business tag as the admin API shows it.
pub(super) fn definition_json(def: &Definition) -> Value {
    let p = def.props();
    json!({
        "tag": def.base().as_str(),
        "step": def.step(),
        "reset": p.reset().map(|r| r.as_str()),
        "time_zone": p.zone().name(),
        "first": p.first(),
        "format": p.format().as_str(),
    })
}

pub(super) async fn create_tag(
    _: Admin,
    State(state): State<AppState>,
    JsonBody(body): JsonBody<CreateTag>,
) -> Result<Response, ApiError> {
    let created = ops::create_tag(
        &state,
        leaf_business::CreateTag {
            tag: body.tag,
            max_id: body.max_id,
            step: body.step,
            description: body.description,
            reset: body.reset,
            time_zone: body.time_zone,
            first: body.first,
            format: body.format,
        },
    )
    .await?;
    let body = match created {
        Created::Plain(record) => Json(TagJson::new(record, None)).into_response(),
        Created::Business(def) => Json(definition_json(&def)).into_response(),
    };
    Ok((StatusCode::CREATED, body).into_response())
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
