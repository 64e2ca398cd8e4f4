//! Health, readiness and metrics: `/healthz`, `/readyz`, `/metrics`.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::http::admin::MetricsAccess;
use crate::node::metrics::Exposition;
use crate::node::monotonic::MonotonicService;
use crate::node::state::AppState;

pub(super) async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

pub(super) async fn readyz(State(state): State<AppState>) -> Response {
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

pub(super) async fn metrics(_: MetricsAccess, State(state): State<AppState>) -> Response {
    let mut out = Exposition::new();
    state.metrics().render(&mut out);
    if let Some(s) = state.segment_service() {
        out.family(
            "leaf_segment_ready",
            "Segment mode is initialised (0/1)",
            "gauge",
        );
        out.sample("leaf_segment_ready", &[], f64::from(u8::from(s.is_ready())));
        // A business tag's rows are its own allocator's; a base asked for by name before its
        // definition was known may sit in the plain cache until the next refresh.
        let snaps: Vec<_> = s
            .allocator()
            .snapshot()
            .into_iter()
            .filter(|t| !s.business().owns(t.tag.as_str()))
            .collect();
        out.family(
            "leaf_segment_loaded",
            "A tag holds a segment (0: known, never used since start-up)",
            "gauge",
        );
        for t in &snaps {
            out.sample(
                "leaf_segment_loaded",
                &[("tag", t.tag.as_str())],
                f64::from(u8::from(t.initialized)),
            );
        }
        // Only loaded tags: a tag nobody asked for has nothing left, and an alert on
        // "remaining = 0" must not fire for it.
        out.family(
            "leaf_segment_remaining",
            "IDs left in a loaded tag's current and next segment",
            "gauge",
        );
        for t in snaps.iter().filter(|t| t.initialized) {
            out.sample(
                "leaf_segment_remaining",
                &[("tag", t.tag.as_str())],
                t.remaining as f64,
            );
        }
        // How close a tag's counter is to its end (i64::MAX: 503 code -5 there).
        out.family(
            "leaf_segment_max_id",
            "The end (exclusive) of the last segment a loaded tag holds",
            "gauge",
        );
        for t in snaps.iter().filter(|t| t.initialized) {
            let max = t.buffers.iter().flatten().map(|b| b.max).max();
            if let Some(max) = max {
                out.sample(
                    "leaf_segment_max_id",
                    &[("tag", t.tag.as_str())],
                    max as f64,
                );
            }
        }
        out.family(
            "leaf_segment_loads_total",
            "Segment loads, by tag and result",
            "counter",
        );
        let plain = snaps
            .iter()
            .map(|t| (t.tag.clone(), t.loads_ok, t.loads_failed));
        for (tag, ok, failed) in plain.chain(state.metrics().business_loads()) {
            let tag = tag.as_str();
            out.sample(
                "leaf_segment_loads_total",
                &[("tag", tag), ("result", "ok")],
                ok as f64,
            );
            out.sample(
                "leaf_segment_loads_total",
                &[("tag", tag), ("result", "error")],
                failed as f64,
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
        if let Some(p) = s.peer_clock() {
            out.family(
                "leaf_snowflake_peer_clock_skew_seconds",
                "This node's clock minus the average of its running peers' at the last \
                 comparison (ZooKeeper modes; every 30 s)",
                "gauge",
            );
            out.sample(
                "leaf_snowflake_peer_clock_skew_seconds",
                &[],
                p.skew_ms as f64 / 1000.0,
            );
            out.family(
                "leaf_snowflake_peers_compared",
                "Running peers whose clocks the last comparison read (0: none listed or none \
                 answered)",
                "gauge",
            );
            out.sample("leaf_snowflake_peers_compared", &[], p.peers as f64);
        }
        if let Some(g) = s.generator() {
            let st = g.status();
            out.family(
                "leaf_snowflake_clock_backwards_total",
                "Times the clock was found behind its reading at the last issued ID (a step back)",
                "counter",
            );
            out.sample(
                "leaf_snowflake_clock_backwards_total",
                &[],
                st.clock_backwards_total as f64,
            );
            out.family(
                "leaf_snowflake_clock_jumps_total",
                "Times the wall clock jumped forward further than snowflake.max_forward_step_ms",
                "counter",
            );
            out.sample(
                "leaf_snowflake_clock_jumps_total",
                &[],
                st.clock_jumps_total as f64,
            );
            out.family(
                "leaf_snowflake_borrowed_ms_total",
                "Milliseconds whose sequence was spent and that were taken ahead of the wall clock \
                 (snowflake.max_borrow_ms) instead of waiting for it",
                "counter",
            );
            out.sample(
                "leaf_snowflake_borrowed_ms_total",
                &[],
                st.borrowed_ms_total as f64,
            );
            out.family(
                "leaf_snowflake_lead_seconds",
                "How far the last issued timestamp is ahead of the wall clock on borrowed \
                 milliseconds (at most snowflake.max_borrow_ms)",
                "gauge",
            );
            out.sample(
                "leaf_snowflake_lead_seconds",
                &[],
                st.lead_ms as f64 / 1000.0,
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
            if let Some(confirmed) = st.registry_mark_ms {
                out.family(
                    "leaf_snowflake_registry_mark_lag_seconds",
                    "How far the registry's copy of the time mark (the mysql row) lags the \
                     durable mark in the cache file",
                    "gauge",
                );
                out.sample(
                    "leaf_snowflake_registry_mark_lag_seconds",
                    &[],
                    st.durable_mark_ms.saturating_sub(confirmed) as f64 / 1000.0,
                );
            }
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
    if let Some(m) = state.monotonic_service() {
        monotonic_metrics(&mut out, m);
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

/// The monotonic mode's series: whether this node leads, its election's counters, and what a
/// follower forwarded (IDs and requests per call are the batch sizes coalescing made).
fn monotonic_metrics(out: &mut Exposition, m: &MonotonicService) {
    let mut put = |name: &str, help: &str, kind: &str, value: f64| {
        out.family(name, help, kind);
        out.sample(name, &[], value);
    };
    // Only a node that takes part in the election says whether it leads: where the mode is
    // refused, no gauge, so that `sum(leaf_monotonic_leader) == 0` means no leader.
    if let Some(st) = &m.status() {
        put(
            "leaf_monotonic_leader",
            "This node is the monotonic leader and may issue now (0/1)",
            "gauge",
            f64::from(u8::from(st.leader)),
        );
        put(
            "leaf_monotonic_elections_total",
            "Times this node became the monotonic leader",
            "counter",
            st.elections as f64,
        );
        put(
            "leaf_monotonic_window_renewals_total",
            "Monotonic windows the backend confirmed for this node",
            "counter",
            st.window_renewals as f64,
        );
        put(
            "leaf_monotonic_fences_total",
            "Times this node stopped leading: its lease lost, or its fence reached",
            "counter",
            st.fences as f64,
        );
    }
    let c = m.counters();
    let n = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed) as f64;
    put(
        "leaf_monotonic_issued_total",
        "Monotonic IDs this node issued as the leader",
        "counter",
        n(&c.issued),
    );
    put(
        "leaf_monotonic_forwarded_calls_total",
        "Calls this follower made to the monotonic leader",
        "counter",
        n(&c.forwarded_calls),
    );
    put(
        "leaf_monotonic_forwarded_requests_total",
        "Requests answered from those calls (more than the calls when coalesced)",
        "counter",
        n(&c.forwarded_requests),
    );
    put(
        "leaf_monotonic_forwarded_ids_total",
        "Monotonic IDs asked for in those calls",
        "counter",
        n(&c.forwarded_ids),
    );
    put(
        "leaf_monotonic_forward_failures_total",
        "Forwarded calls (or batches) that got no IDs",
        "counter",
        n(&c.forward_failures),
    );
}
