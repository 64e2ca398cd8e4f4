//! `grpc.health.v1.Health`: each mode's readiness as `/readyz` judges it, by service name:
//! `leaf.v1.Segment` (and `leaf.v1.Admin`, which works on the segment store) for segment mode,
//! `leaf.v1.Snowflake` for snowflake mode, `""` for the node (every enabled mode ready). A
//! disabled mode's service is `NOT_SERVING`; an unknown name is `NOT_FOUND` (`Check`) or
//! `SERVICE_UNKNOWN` (`Watch`), as the protocol says. `Watch` looks again every second and
//! sends each change, and ends when the server shuts down.

use std::time::Duration;

use futures::StreamExt as _;
use futures::stream::BoxStream;
use tokio::sync::watch;
use tonic::{Request, Response, Status};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_server::{Health, HealthServer};
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

use crate::node::state::AppState;

/// How often `Watch` looks at the readiness again.
const WATCH_EVERY: Duration = Duration::from_secs(1);

/// The health service on `state`.
pub(super) fn server(state: &AppState, closing: watch::Receiver<bool>) -> HealthServer<Checker> {
    HealthServer::new(Checker {
        state: state.clone(),
        closing,
    })
}

/// The health service.
#[derive(Clone)]
pub(super) struct Checker {
    state: AppState,
    /// True once the server shuts down.
    closing: watch::Receiver<bool>,
}

/// The readiness of `service`; `None` for a name this server does not serve.
fn serving(state: &AppState, service: &str) -> Option<ServingStatus> {
    let as_status = |ready: bool| {
        if ready {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        }
    };
    // The same calls as `/readyz`; a disabled mode serves nothing.
    let segment = || state.segment_service().map(|s| s.readiness().is_ok());
    let snowflake = || state.snowflake_service().map(|s| s.readiness().is_ok());
    Some(match service {
        "" => as_status(segment().unwrap_or(true) && snowflake().unwrap_or(true)),
        "leaf.v1.Segment" | "leaf.v1.Admin" => as_status(segment().unwrap_or(false)),
        "leaf.v1.Snowflake" => as_status(snowflake().unwrap_or(false)),
        _ => return None,
    })
}

fn answer(status: ServingStatus) -> HealthCheckResponse {
    HealthCheckResponse {
        status: status as i32,
    }
}

#[tonic::async_trait]
impl Health for Checker {
    async fn check(
        &self,
        req: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        let service = req.into_inner().service;
        match serving(&self.state, &service) {
            Some(s) => Ok(Response::new(answer(s))),
            None => Err(Status::not_found(format!(
                "unknown service {service:?}: this server has \"\", leaf.v1.Segment, \
                 leaf.v1.Snowflake and leaf.v1.Admin"
            ))),
        }
    }

    type WatchStream = BoxStream<'static, Result<HealthCheckResponse, Status>>;

    async fn watch(
        &self,
        req: Request<HealthCheckRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let service = req.into_inner().service;
        let state = self.state.clone();
        let closing = self.closing.clone();
        let stream = futures::stream::unfold(None, move |last: Option<ServingStatus>| {
            let (state, service, mut closing) = (state.clone(), service.clone(), closing.clone());
            async move {
                loop {
                    if *closing.borrow_and_update() {
                        return None;
                    }
                    let now = serving(&state, &service).unwrap_or(ServingStatus::ServiceUnknown);
                    if last != Some(now) {
                        return Some((Ok(answer(now)), Some(now)));
                    }
                    tokio::select! {
                        () = tokio::time::sleep(WATCH_EVERY) => {}
                        // A dropped sender (the services gone) ends the watch too.
                        changed = closing.changed() => if changed.is_err() {
                            return None;
                        },
                    }
                }
            }
        });
        Ok(Response::new(stream.boxed()))
    }
}
