//! The services of `leaf.v1`: each RPC reads its request, applies the token rule of its HTTP
//! twin, and calls the twin's operation in `crate::node::ops`.

use axum::extract::ConnectInfo;
use leaf_business::{CreateTag, Created, Definition};
use leaf_core::{TagRecord, TagUpdate, format_utc_ms};
use leaf_segment::TagSnapshot;
use tonic::service::Routes;
use tonic::{Request, Response, Status};

use super::pb::admin_server::{Admin, AdminServer};
use super::pb::monotonic_server::{Monotonic, MonotonicServer};
use super::pb::segment_server::{Segment, SegmentServer};
use super::pb::snowflake_server::{Snowflake, SnowflakeServer};
use super::pb::{self, *};
use super::stream::{self, IdStream};
use super::{auth, health, status};
use crate::node::metrics::Family;
use crate::node::ops;
use crate::node::state::AppState;

/// Every service of the gRPC API, requests limited to `server.max_body_bytes`.
pub(super) fn routes(state: &AppState, closing: tokio::sync::watch::Receiver<bool>) -> Routes {
    let limit = state.max_body_bytes();
    let rpc = Rpc {
        state: state.clone(),
    };
    let mut routes = Routes::new(SegmentServer::new(rpc.clone()).max_decoding_message_size(limit))
        .add_service(SnowflakeServer::new(rpc.clone()).max_decoding_message_size(limit))
        .add_service(MonotonicServer::new(rpc.clone()).max_decoding_message_size(limit))
        .add_service(AdminServer::new(rpc).max_decoding_message_size(limit))
        .add_service(health::server(state, closing).max_decoding_message_size(limit));
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    // Both versions: grpcurl asks v1 first, grpcio-reflection's client v1alpha.
    match (reflection().build_v1(), reflection().build_v1alpha()) {
        (Ok(v1), Ok(v1alpha)) => {
            routes = routes
                .add_service(v1.max_decoding_message_size(limit))
                .add_service(v1alpha.max_decoding_message_size(limit));
        }
        (Err(e), _) | (_, Err(e)) => {
            // The descriptor sets are committed and tested; this is a bug, not an outage.
            tracing::error!(error = %e, "gRPC reflection is off: the descriptor sets do not load");
        }
    }
    routes.prepare()
}

/// The services' shared state.
#[derive(Clone)]
struct Rpc {
    state: AppState,
}

fn family<T>(req: &Request<T>) -> Family {
    Family::of(
        req.extensions()
            .get::<ConnectInfo<std::net::SocketAddr>>()
            .map(|ConnectInfo(p)| *p),
    )
}

#[tonic::async_trait]
impl Segment for Rpc {
    async fn next_segment_ids(
        &self,
        req: Request<NextSegmentIdsRequest>,
    ) -> Result<Response<NextSegmentIdsResponse>, Status> {
        auth::client(&self.state, &req)?;
        let r = req.into_inner();
        let answer = match ops::segment_batch(&self.state, &r.tag, u64::from(r.count), true)
            .await
            .map_err(status)?
        {
            (_, ops::SegmentIds::Numbers(ids)) => NextSegmentIdsResponse {
                ids,
                formatted_ids: Vec::new(),
            },
            (_, ops::SegmentIds::Text(joined)) => NextSegmentIdsResponse {
                ids: Vec::new(),
                formatted_ids: joined.iter().map(str::to_owned).collect(),
            },
        };
        Ok(Response::new(answer))
    }

    type StreamSegmentIdsStream = IdStream<StreamSegmentIdsResponse>;

    async fn stream_segment_ids(
        &self,
        req: Request<StreamSegmentIdsRequest>,
    ) -> Result<Response<Self::StreamSegmentIdsStream>, Status> {
        auth::client(&self.state, &req)?;
        let r = req.into_inner();
        // The HTTP order: the mode, the tag, the count.
        self.state.segment().map_err(status)?;
        let tag = ops::plain_tag(
            &self.state,
            &r.tag,
            "its IDs are text, which streams do not carry",
        )
        .await
        .map_err(status)?;
        let plan = stream::plan(&self.state, r.count, r.chunk).map_err(status)?;
        let state = self.state.clone();
        let take = move |n| {
            let (state, tag) = (state.clone(), tag.clone());
            async move { ops::take_segment_ids(&state, &tag, n).await }
        };
        Ok(Response::new(stream::ids(plan, take, |ids| {
            StreamSegmentIdsResponse { ids }
        })))
    }

    async fn allocate_segment(
        &self,
        req: Request<AllocateSegmentRequest>,
    ) -> Result<Response<AllocateSegmentResponse>, Status> {
        auth::client(&self.state, &req)?;
        let family = family(&req);
        let r = req.into_inner();
        // 0 is proto3's unset: the stored step.
        let step = (r.step != 0).then_some(r.step);
        let a = ops::allocate(&self.state, &r.tag, step, &r.step.to_string(), family)
            .await
            .map_err(status)?;
        Ok(Response::new(AllocateSegmentResponse {
            tag: a.tag.as_str().to_owned(),
            max_id: a.max_id,
            step: a.step,
            used_step: a.used_step,
        }))
    }

    async fn get_tag(&self, req: Request<GetTagRequest>) -> Result<Response<Tag>, Status> {
        auth::client(&self.state, &req)?;
        let row = ops::get_tag(&self.state, &req.into_inner().tag)
            .await
            .map_err(status)?;
        Ok(Response::new(tag_message(row, None)))
    }
}

#[tonic::async_trait]
impl Monotonic for Rpc {
    async fn next_monotonic_ids(
        &self,
        req: Request<NextMonotonicIdsRequest>,
    ) -> Result<Response<NextMonotonicIdsResponse>, Status> {
        auth::client(&self.state, &req)?;
        let count = req.into_inner().count;
        let ids = ops::monotonic_ids(&self.state, u64::from(count))
            .await
            .map_err(status)?;
        Ok(Response::new(NextMonotonicIdsResponse {
            ids: ids.map(|id| id as i64).collect(),
        }))
    }

    type StreamMonotonicIdsStream = IdStream<StreamMonotonicIdsResponse>;

    async fn stream_monotonic_ids(
        &self,
        req: Request<StreamMonotonicIdsRequest>,
    ) -> Result<Response<Self::StreamMonotonicIdsStream>, Status> {
        auth::client(&self.state, &req)?;
        let r = req.into_inner();
        self.state.monotonic().map_err(status)?;
        let plan = stream::plan(&self.state, r.count, r.chunk).map_err(status)?;
        let state = self.state.clone();
        let take = move |n: usize| {
            let state = state.clone();
            async move {
                let ids = ops::monotonic_ids(&state, n as u64).await?;
                Ok(ids.map(|id| id as i64).collect())
            }
        };
        Ok(Response::new(stream::ids(plan, take, |ids| {
            StreamMonotonicIdsResponse { ids }
        })))
    }

    async fn decode_monotonic(
        &self,
        req: Request<DecodeMonotonicRequest>,
    ) -> Result<Response<DecodeMonotonicResponse>, Status> {
        // As `GET /v1/monotonic/{id}/decode`: no token.
        let id = req.into_inner().id;
        let (ms, logical) = ops::decode_monotonic(&self.state, id).map_err(status)?;
        Ok(Response::new(DecodeMonotonicResponse {
            id,
            timestamp_ms: ms,
            time: format_utc_ms(ms),
            logical,
        }))
    }
}

#[tonic::async_trait]
impl Snowflake for Rpc {
    async fn next_snowflake_ids(
        &self,
        req: Request<NextSnowflakeIdsRequest>,
    ) -> Result<Response<NextSnowflakeIdsResponse>, Status> {
        auth::client(&self.state, &req)?;
        let r = req.into_inner();
        // The twin's order: the mode, then the form, both before any ID is taken.
        self.state.snowflake().map_err(status)?;
        let form = ops::snowflake_form(Some(r.format.as_str()).filter(|f| !f.is_empty()))
            .map_err(status)?;
        let ids = ops::snowflake_ids(&self.state, u64::from(r.count))
            .await
            .map_err(status)?;
        if form == leaf_format::SnowflakeForm::Number {
            return Ok(Response::new(NextSnowflakeIdsResponse {
                ids,
                formatted_ids: Vec::new(),
            }));
        }
        let formatted_ids = ops::render_snowflake(&self.state, &ids, form).map_err(status)?;
        Ok(Response::new(NextSnowflakeIdsResponse {
            ids: Vec::new(),
            formatted_ids,
        }))
    }

    type StreamSnowflakeIdsStream = IdStream<StreamSnowflakeIdsResponse>;

    async fn stream_snowflake_ids(
        &self,
        req: Request<StreamSnowflakeIdsRequest>,
    ) -> Result<Response<Self::StreamSnowflakeIdsStream>, Status> {
        auth::client(&self.state, &req)?;
        let r = req.into_inner();
        self.state.snowflake().map_err(status)?;
        let plan = stream::plan(&self.state, r.count, r.chunk).map_err(status)?;
        let state = self.state.clone();
        let take = move |n| {
            let state = state.clone();
            async move { ops::take_snowflake_ids(&state, n).await }
        };
        Ok(Response::new(stream::ids(plan, take, |ids| {
            StreamSnowflakeIdsResponse { ids }
        })))
    }

    async fn decode_snowflake(
        &self,
        req: Request<DecodeSnowflakeRequest>,
    ) -> Result<Response<DecodeSnowflakeResponse>, Status> {
        // As `GET /v1/snowflake/{id}/decode`: no token (it issues nothing, reveals no volume).
        let id = req.into_inner().id;
        let d = ops::decode(&self.state, id).map_err(status)?;
        Ok(Response::new(DecodeSnowflakeResponse {
            id,
            timestamp_ms: d.timestamp_ms,
            time: format_utc_ms(d.timestamp_ms),
            worker_id: d.worker_id,
            sequence: d.sequence,
        }))
    }
}

#[tonic::async_trait]
impl Admin for Rpc {
    async fn create_tag(&self, req: Request<CreateTagRequest>) -> Result<Response<Tag>, Status> {
        auth::admin(&self.state, &req)?;
        let r = req.into_inner();
        let row = ops::create_tag(
            &self.state,
            CreateTag {
                tag: r.tag,
                max_id: r.max_id,
                step: r.step,
                description: r.description,
                reset: r.reset,
                time_zone: r.time_zone,
                first: r.first,
                format: r.format,
            },
        )
        .await
        .map_err(status)?;
        Ok(Response::new(match row {
            Created::Plain(row) => tag_message(row, None),
            Created::Business(def) => business_message(&def, Vec::new()),
        }))
    }

    async fn update_tag(&self, req: Request<UpdateTagRequest>) -> Result<Response<Tag>, Status> {
        auth::admin(&self.state, &req)?;
        let r = req.into_inner();
        let update = TagUpdate {
            step: r.step,
            description: r.description,
        };
        let row = ops::update_tag(&self.state, &r.tag, update)
            .await
            .map_err(status)?;
        Ok(Response::new(tag_message(row, None)))
    }

    async fn list_tags(
        &self,
        req: Request<ListTagsRequest>,
    ) -> Result<Response<ListTagsResponse>, Status> {
        auth::admin(&self.state, &req)?;
        let tags = ops::list_grouped(&self.state)
            .await
            .map_err(status)?
            .into_iter()
            .map(|t| match &t.group.definition {
                None => tag_message(t.group.record, t.cache.as_ref()),
                Some(def) => {
                    let periods = (t.group.periods.into_iter())
                        .zip(t.period_caches)
                        .map(|(p, cache)| tag_message(p, cache.as_ref()))
                        .collect();
                    business_message(def, periods)
                }
            })
            .collect();
        Ok(Response::new(ListTagsResponse { tags }))
    }
}

/// A business tag as the gRPC API shows it.
fn business_message(def: &Definition, periods: Vec<Tag>) -> Tag {
    let p = def.props();
    Tag {
        tag: def.base().as_str().to_owned(),
        step: def.step(),
        business: Some(BusinessProperties {
            reset: p.reset().map(|r| r.as_str().to_owned()),
            time_zone: p.zone().name().to_owned(),
            first: p.first(),
            format: p.format().as_str().to_owned(),
        }),
        periods,
        ..Tag::default()
    }
}

fn tag_message(r: TagRecord, cache: Option<&TagSnapshot>) -> Tag {
    Tag {
        tag: r.tag.as_str().to_owned(),
        max_id: r.max_id,
        step: r.step,
        description: r.description,
        updated_at_ms: r.updated_at_ms,
        business: None,
        periods: Vec::new(),
        cache: cache.map(|s| TagCache {
            initialized: s.initialized,
            buffers: s
                .buffers
                .iter()
                .enumerate()
                .filter_map(|(i, b)| {
                    b.as_ref().map(|b| SegmentBuffer {
                        index: i as u32,
                        value: b.value,
                        max: b.max,
                        step: b.step,
                    })
                })
                .collect(),
            current: s.current as u32,
            next_ready: s.next_ready,
            loading: s.loading,
            step: s.step,
            remaining: s.remaining,
            ids_per_sec: s.ids_per_sec,
            buffered_secs: s.buffered_secs,
            loads_ok: s.loads_ok,
            loads_failed: s.loads_failed,
        }),
    }
}
