//! The HTTP API: Leaf's routes (plain-text IDs), `/v1` (JSON, batches), the admin routes, health,
//! readiness and metrics. [`app`] builds the router; it needs no socket, so tests drive it with
//! `tower::ServiceExt::oneshot`.

use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{
    DefaultBodyLimit, FromRequest, FromRequestParts, MatchedPath, Path, Query, Request, State,
};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, patch};
use axum::{Json, Router};
use leaf_core::layout::{format_utc_ms, utc_parts};
use leaf_core::{NewTag, Tag, TagRecord, TagUpdate};
use leaf_segment::TagSnapshot;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::admin::Admin;
use crate::error::{ApiError, Origin};
use crate::metrics::Exposition;
use crate::pages;
use crate::state::AppState;

/// The router of every route, with request metrics and the body limit.
pub fn app(state: AppState) -> Router {
    let body_limit = state.max_body_bytes();
    Router::new()
        // Leaf's routes. The empty-key variants exist so that an empty key is a 400, not a 404.
        .route(
            "/api/segment/get/{*key}",
            get(leaf_segment).post(leaf_segment),
        )
        .route(
            "/api/segment/get/",
            get(leaf_segment_empty).post(leaf_segment_empty),
        )
        .route(
            "/api/segment/get",
            get(leaf_segment_empty).post(leaf_segment_empty),
        )
        .route(
            "/api/snowflake/get/{*key}",
            get(leaf_snowflake).post(leaf_snowflake),
        )
        .route(
            "/api/snowflake/get/",
            get(leaf_snowflake).post(leaf_snowflake),
        )
        .route(
            "/api/snowflake/get",
            get(leaf_snowflake).post(leaf_snowflake),
        )
        .route("/decodeSnowflakeId", get(leaf_decode))
        // Version 1.
        .route("/v1/segment/{*tag}", get(v1_segment))
        .route("/v1/segment/", get(v1_segment_empty))
        .route("/v1/segment", get(v1_segment_empty))
        .route("/v1/snowflake", get(v1_snowflake))
        .route("/v1/snowflake/{id}/decode", get(v1_decode))
        .route("/v1/tags", get(list_tags).post(create_tag))
        .route("/v1/tags/{*tag}", patch(update_tag))
        .route("/cache", get(cache_page))
        .route("/db", get(db_page))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .fallback(no_route)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(state.clone(), track))
        .layer(DefaultBodyLimit::max(body_limit))
        .with_state(state)
}

/// Counts every request by route pattern and status, and times it.
async fn track(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let start = Instant::now();
    let route = req.extensions().get::<MatchedPath>().cloned();
    let resp = next.run(req).await;
    let route = route.as_ref().map_or("unmatched", MatchedPath::as_str);
    state
        .metrics()
        .observe_request(route, resp.status().as_u16(), start.elapsed());
    resp
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
struct RestPath(String);

impl<S: Send + Sync> FromRequestParts<S> for RestPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Path::<String>::from_request_parts(parts, state)
            .await
            .map(|Path(p)| RestPath(p))
            .map_err(|e: PathRejection| ApiError::bad_request(e.body_text()))
    }
}

/// Query parameters; a malformed query is a 400 in JSON.
struct Params<T>(T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Params<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(q)| Params(q))
            .map_err(|e: QueryRejection| ApiError::bad_request(e.body_text()))
    }
}

/// A JSON body of any content type, within the body limit; errors are JSON.
struct JsonBody<T>(T);

impl<T: DeserializeOwned> FromRequest<AppState> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        // A body trickled in slowly would hold the connection forever; the head has its own
        // timeout in the connection, the body gets the same bound here.
        let limit = state.body_timeout();
        let bytes = tokio::time::timeout(limit, Bytes::from_request(req, state))
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
            .map_err(|e: BytesRejection| ApiError::new(e.status(), e.body_text()))?;
        serde_json::from_slice(&bytes)
            .map(JsonBody)
            .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
    }
}

fn parse_tag(raw: &str) -> Result<Tag, ApiError> {
    Tag::new(raw).map_err(|e| ApiError::from_core(Origin::Segment, e))
}

// ---- Leaf's routes -------------------------------------------------------------------------

async fn leaf_segment(
    State(state): State<AppState>,
    RestPath(key): RestPath,
) -> Result<String, ApiError> {
    let allocator = state.segment()?;
    let tag = parse_tag(&key)?;
    let id = allocator
        .next_id(tag.as_str())
        .await
        .map_err(|e| ApiError::from_core(Origin::Segment, e))?;
    state.metrics().segment_issued(&tag, 1);
    Ok(id.to_string())
}

async fn leaf_segment_empty(State(state): State<AppState>) -> Result<String, ApiError> {
    state.segment()?;
    Err(ApiError::bad_request("tag is empty"))
}

async fn leaf_snowflake(State(state): State<AppState>) -> Result<String, ApiError> {
    // The key is accepted and ignored, as in Leaf.
    let generator = state.snowflake()?;
    let id = generator
        .next_id()
        .await
        .map_err(|e| ApiError::from_core(Origin::Snowflake, e))?;
    state.metrics().snowflake_issued(1);
    Ok(id.to_string())
}

#[derive(Deserialize)]
struct LeafDecodeParams {
    #[serde(rename = "snowflakeId")]
    snowflake_id: Option<String>,
}

fn parse_id(raw: &str) -> Result<i64, ApiError> {
    raw.trim().parse::<i64>().map_err(|_| {
        ApiError::bad_request(format!("{raw:?} is not a snowflake id (a decimal integer)"))
    })
}

async fn leaf_decode(
    State(state): State<AppState>,
    Params(p): Params<LeafDecodeParams>,
) -> Result<Json<Value>, ApiError> {
    let raw = p
        .snowflake_id
        .ok_or_else(|| ApiError::bad_request("the query parameter snowflakeId is required"))?;
    let d = state
        .layout()
        .decode(parse_id(&raw)?)
        .map_err(|e| ApiError::from_core(Origin::Other, e))?;
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

// ---- Version 1 -----------------------------------------------------------------------------

#[derive(Deserialize)]
struct BatchParams {
    count: Option<String>,
    #[serde(rename = "as")]
    as_: Option<String>,
}

struct Batch {
    count: usize,
    as_string: bool,
}

impl BatchParams {
    fn check(self, max: usize) -> Result<Batch, ApiError> {
        let count = match self.count.as_deref() {
            None => 1,
            Some(raw) => match raw.trim().parse::<usize>() {
                Ok(n) if (1..=max).contains(&n) => n,
                _ => {
                    return Err(ApiError::bad_request(format!(
                        "count must be a whole number from 1 to {max}, got {raw:?}"
                    )));
                }
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

async fn v1_segment(
    State(state): State<AppState>,
    RestPath(raw): RestPath,
    Params(p): Params<BatchParams>,
) -> Result<Json<Value>, ApiError> {
    let allocator = state.segment()?;
    let tag = parse_tag(&raw)?;
    let batch = p.check(state.max_batch())?;
    let ids = allocator
        .next_ids(tag.as_str(), batch.count)
        .await
        .map_err(|e| ApiError::from_core(Origin::Segment, e))?;
    state.metrics().segment_issued(&tag, ids.len() as u64);
    Ok(Json(
        json!({ "tag": tag.as_str(), "ids": ids_json(&ids, batch.as_string) }),
    ))
}

async fn v1_segment_empty(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    state.segment()?;
    Err(ApiError::bad_request("tag is empty"))
}

async fn v1_snowflake(
    State(state): State<AppState>,
    Params(p): Params<BatchParams>,
) -> Result<Json<Value>, ApiError> {
    let generator = state.snowflake()?;
    let batch = p.check(state.max_batch())?;
    let ids = generator
        .next_ids(batch.count)
        .await
        .map_err(|e| ApiError::from_core(Origin::Snowflake, e))?;
    state.metrics().snowflake_issued(ids.len() as u64);
    Ok(Json(json!({ "ids": ids_json(&ids, batch.as_string) })))
}

async fn v1_decode(
    State(state): State<AppState>,
    RestPath(raw): RestPath,
) -> Result<Json<Value>, ApiError> {
    let id = parse_id(&raw)?;
    let d = state
        .layout()
        .decode(id)
        .map_err(|e| ApiError::from_core(Origin::Other, e))?;
    Ok(Json(json!({
        "id": id,
        "timestamp_ms": d.timestamp_ms,
        "time": format_utc_ms(d.timestamp_ms),
        "worker_id": d.worker_id,
        "sequence": d.sequence,
    })))
}

// ---- Admin ---------------------------------------------------------------------------------

#[derive(Serialize)]
struct TagJson {
    tag: String,
    max_id: i64,
    step: i64,
    description: Option<String>,
    updated_at_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache: Option<Value>,
}

impl TagJson {
    fn new(r: TagRecord, cache: Option<Value>) -> Self {
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

async fn list_tags(_: Admin, State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
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
struct CreateTag {
    tag: String,
    max_id: Option<i64>,
    step: Option<i64>,
    description: Option<String>,
}

async fn create_tag(
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
struct PatchTag {
    step: Option<i64>,
    description: Option<String>,
}

async fn update_tag(
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
        .map_err(|e| ApiError::from_core(Origin::Other, e))?;
    tracing::info!(tag = %tag, step = record.step, "tag updated");
    Ok(Json(TagJson::new(record, None)))
}

async fn cache_page(_: Admin, State(state): State<AppState>) -> Result<Html<String>, ApiError> {
    let allocator = state.segment()?;
    Ok(Html(pages::cache_page(&allocator.snapshot())))
}

async fn db_page(_: Admin, State(state): State<AppState>) -> Result<Html<String>, ApiError> {
    let allocator = state.segment()?;
    let rows = allocator
        .store()
        .list()
        .await
        .map_err(|e| ApiError::from_core(Origin::Other, e))?;
    Ok(Html(pages::db_page(&rows)))
}

// ---- Health and metrics --------------------------------------------------------------------

async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

async fn readyz(State(state): State<AppState>) -> Response {
    let mut problems = Vec::new();
    let mut retry_after = 1;
    let segment = match state.segment_service() {
        None => json!({ "enabled": false }),
        Some(s) => match s.readiness() {
            Ok(()) => json!({ "enabled": true, "ready": true }),
            Err(why) => {
                problems.push(format!("segment: {why}"));
                json!({ "enabled": true, "ready": false, "reason": why })
            }
        },
    };
    let snowflake = match state.snowflake_service() {
        None => json!({ "enabled": false }),
        Some(s) => match s.readiness() {
            Ok(()) => json!({ "enabled": true, "ready": true }),
            Err((why, after)) => {
                retry_after = retry_after.max(after);
                problems.push(format!("snowflake: {why}"));
                json!({ "enabled": true, "ready": false, "reason": why })
            }
        },
    };
    if problems.is_empty() {
        return Json(json!({ "ready": true, "segment": segment, "snowflake": snowflake }))
            .into_response();
    }
    let message = format!("not ready: {}", problems.join("; "));
    let body = json!({
        "code": 503,
        "message": message,
        "ready": false,
        "segment": segment,
        "snowflake": snowflake,
    });
    let mut resp = (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response();
    resp.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(retry_after.max(1)));
    resp
}

async fn metrics(State(state): State<AppState>) -> Response {
    let mut out = Exposition::new();
    state.metrics().render(&mut out);
    if let Some(s) = state.segment_service() {
        out.family(
            "leaf_segment_ready",
            "Segment mode is initialised (0/1)",
            "gauge",
        );
        out.sample("leaf_segment_ready", &[], f64::from(u8::from(s.is_ready())));
        let snaps = s.allocator().snapshot();
        out.family(
            "leaf_segment_remaining",
            "IDs left in a tag's current and next segment",
            "gauge",
        );
        for t in &snaps {
            out.sample(
                "leaf_segment_remaining",
                &[("tag", t.tag.as_str())],
                t.remaining as f64,
            );
        }
        out.family(
            "leaf_segment_loads_total",
            "Segment loads, by tag and result",
            "counter",
        );
        for t in &snaps {
            let tag = t.tag.as_str();
            out.sample(
                "leaf_segment_loads_total",
                &[("tag", tag), ("result", "ok")],
                t.loads_ok as f64,
            );
            out.sample(
                "leaf_segment_loads_total",
                &[("tag", tag), ("result", "error")],
                t.loads_failed as f64,
            );
        }
        out.family(
            "leaf_segment_ids_per_second",
            "Recent consumption of a tag",
            "gauge",
        );
        for t in &snaps {
            out.sample(
                "leaf_segment_ids_per_second",
                &[("tag", t.tag.as_str())],
                t.ids_per_sec,
            );
        }
        out.family(
            "leaf_segment_buffered_seconds",
            "How long a tag's buffered IDs last at its recent rate",
            "gauge",
        );
        for t in &snaps {
            if let Some(secs) = t.buffered_secs {
                out.sample(
                    "leaf_segment_buffered_seconds",
                    &[("tag", t.tag.as_str())],
                    secs,
                );
            }
        }
    }
    if let Some(s) = state.snowflake_service() {
        out.family(
            "leaf_snowflake_ready",
            "Snowflake mode can issue IDs (0/1)",
            "gauge",
        );
        out.sample(
            "leaf_snowflake_ready",
            &[],
            f64::from(u8::from(s.readiness().is_ok())),
        );
        if let Some(g) = s.generator() {
            let st = g.status();
            out.family(
                "leaf_snowflake_clock_backwards_total",
                "Times the clock was found behind the last issued timestamp",
                "counter",
            );
            out.sample(
                "leaf_snowflake_clock_backwards_total",
                &[],
                st.clock_backwards_total as f64,
            );
            out.family(
                "leaf_snowflake_mark_lag_seconds",
                "How far the durable time mark is ahead of the wall clock",
                "gauge",
            );
            out.sample(
                "leaf_snowflake_mark_lag_seconds",
                &[],
                st.mark_lag_ms as f64 / 1000.0,
            );
            out.family(
                "leaf_worker_lease_valid",
                "The worker id lease is held (0/1)",
                "gauge",
            );
            out.sample(
                "leaf_worker_lease_valid",
                &[],
                f64::from(u8::from(st.lease_valid)),
            );
            out.family("leaf_snowflake_worker_id", "The worker id in use", "gauge");
            out.sample("leaf_snowflake_worker_id", &[], st.worker_id as f64);
        }
    }
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        out.finish(),
    )
        .into_response()
}
