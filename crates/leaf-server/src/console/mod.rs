//! The console's routes: `/`, `/cache`, `/db` and `/snowflake`, behind the admin rule of the
//! pages (Bearer, or HTTP Basic with the token as the password), each with an opt-in
//! `?refresh=N`.

mod html;
pub(crate) mod pages;

use axum::extract::State;
use axum::response::Html;
use leaf_core::Clock as _;
use serde::Deserialize;

use crate::http::Params;
use crate::http::admin::AdminPage;
use crate::node::error::{ApiError, Origin};
use crate::node::state::AppState;
use html::Page;
use pages::{ModeInfo, NodeInfo, SnowflakeView};

/// The longest refresh period a page accepts, in seconds.
const MAX_REFRESH_S: u32 = 3600;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PageQuery {
    refresh: Option<u32>,
}

impl PageQuery {
    fn refresh(&self) -> Result<Option<u32>, ApiError> {
        match self.refresh {
            Some(s) if !(1..=MAX_REFRESH_S).contains(&s) => Err(ApiError::bad_request(format!(
                "refresh must be a number of seconds from 1 to {MAX_REFRESH_S}"
            ))),
            r => Ok(r),
        }
    }
}

fn now_ms() -> u64 {
    leaf_core::SystemClock::new().now_ms()
}

pub(super) async fn index(
    _: AdminPage,
    State(state): State<AppState>,
    Params(q): Params<PageQuery>,
) -> Result<Html<String>, ApiError> {
    let refresh = q.refresh()?;
    let node = state.node();
    let generator = state.snowflake_service().and_then(|s| s.generator());
    let info = NodeInfo {
        name: &node.name,
        version: env!("CARGO_PKG_VERSION"),
        identity: generator.map(|g| g.identity().to_string()),
        listen: node.listen.clone(),
        started_ms: node.started_ms,
        one_node: state.one_node_warnings(),
        segment: state.segment_service().map(|s| ModeInfo {
            kind: &node.segment_store,
            readiness: s.readiness(),
        }),
        snowflake: state.snowflake_service().map(|s| {
            let mode = ModeInfo {
                kind: &node.snowflake_mode,
                readiness: s.readiness().map_err(|(why, _)| why),
            };
            (mode, generator.map(|g| g.worker_id()))
        }),
        monotonic: state
            .monotonic_service()
            .map(|m| match (m.status(), m.refused_reason()) {
                (Some(st), _) if st.leader => pages::MonotonicLine::Leading {
                    window_end_ms: st.window_end_ms,
                    elections: st.elections,
                },
                (Some(st), _) => pages::MonotonicLine::Following {
                    leader: st.leader_hint,
                },
                (None, why) => pages::MonotonicLine::Refused(why.unwrap_or_default().to_string()),
            }),
        grpc: state.grpc().is_some(),
    };
    Ok(Html(pages::index_page(&info, now_ms(), refresh)))
}

/// The answer of a segment page while segment mode is disabled.
fn segment_disabled(page: Page, title: &str, refresh: Option<u32>) -> Html<String> {
    let body = "<p class=\"muted\">Segment mode is disabled (<code>segment.enabled = \
                false</code>).</p>\n";
    Html(html::page(page, title, now_ms(), refresh, body))
}

pub(super) async fn cache(
    _: AdminPage,
    State(state): State<AppState>,
    Params(q): Params<PageQuery>,
) -> Result<Html<String>, ApiError> {
    let refresh = q.refresh()?;
    let Some(service) = state.segment_service() else {
        return Ok(segment_disabled(Page::Cache, "Segment cache", refresh));
    };
    let allocator = service.allocator();
    let snapshots = allocator.snapshot();
    // The stored steps beside the dynamic ones; the page still shows the buffers (served from
    // memory) when the store cannot be read.
    let rows = allocator.store().list().await;
    if let Err(e) = &rows {
        tracing::debug!(error = %e, "the cache page could not read the stored rows");
    }
    let stored = rows.as_deref().map_err(|_| "the store cannot be read now");
    Ok(Html(pages::cache_page(
        &snapshots,
        stored,
        now_ms(),
        refresh,
    )))
}

pub(super) async fn db(
    _: AdminPage,
    State(state): State<AppState>,
    Params(q): Params<PageQuery>,
) -> Result<Html<String>, ApiError> {
    let refresh = q.refresh()?;
    let Some(service) = state.segment_service() else {
        return Ok(segment_disabled(Page::Db, "Segment table", refresh));
    };
    let rows = service
        .allocator()
        .store()
        .list()
        .await
        .map_err(|e| ApiError::from_core(Origin::Other, e))?;
    Ok(Html(pages::db_page(
        &leaf_business::group_rows(rows),
        now_ms(),
        refresh,
    )))
}

pub(super) async fn snowflake(
    _: AdminPage,
    State(state): State<AppState>,
    Params(q): Params<PageQuery>,
) -> Result<Html<String>, ApiError> {
    let refresh = q.refresh()?;
    let now = now_ms();
    let html = match state.snowflake_service() {
        None => pages::snowflake_page(&SnowflakeView::Disabled, now, refresh),
        Some(s) => match s.generator() {
            Some(g) => {
                let status = g.status();
                pages::snowflake_page(&SnowflakeView::Running(&status, g.layout()), now, refresh)
            }
            None => {
                let why = s.readiness().err().map(|(why, _)| why).unwrap_or_default();
                pages::snowflake_page(&SnowflakeView::NotStarted(&why), now, refresh)
            }
        },
    };
    Ok(Html(html))
}
