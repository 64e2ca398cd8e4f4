//! `grpc.health.v1.Health`: each mode's readiness as `/readyz` judges it, by service name:
//! `leaf.v1.Segment` (and `leaf.v1.Admin`, which works on the segment store) for segment mode,
//! `leaf.v1.Snowflake` for snowflake mode, `""` for the node (every enabled mode ready). A
//! disabled mode's service is `NOT_SERVING`; an unknown name is `NOT_FOUND` (`Check`) or
//! `SERVICE_UNKNOWN` (`Watch`), as the protocol says.
//!
//! `Watch` needs no token, so it is bounded: one task (started by the first watch) looks at
//! the readiness every second and publishes it, each watch wakes only when what it watches
//! changes, at most `server.grpc_max_watches` are open at once (one more is
//! `RESOURCE_EXHAUSTED`), and all end when the server shuts down.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::StreamExt as _;
use futures::stream::BoxStream;
use tokio::sync::{Semaphore, watch};
use tonic::{Request, Response, Status};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_server::{Health, HealthServer};
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

use super::status;
use crate::node::error::ApiError;
use crate::node::state::AppState;

/// How often the readiness is looked at for the watches.
const WATCH_EVERY: Duration = Duration::from_secs(1);

/// The health service on `state`.
pub(super) fn server(state: &AppState, closing: watch::Receiver<bool>) -> HealthServer<Checker> {
    let max_watches = state.grpc().map_or(1, |g| g.max_watches);
    HealthServer::new(Checker {
        state: state.clone(),
        closing,
        board: Arc::new(OnceLock::new()),
        watches: Arc::new(Semaphore::new(max_watches)),
        max_watches,
    })
}

/// The health service.
#[derive(Clone)]
pub(super) struct Checker {
    state: AppState,
    /// True once the server shuts down.
    closing: watch::Receiver<bool>,
    /// The readiness as last looked at, published by one task started by the first watch.
    board: Arc<OnceLock<watch::Receiver<Readiness>>>,
    /// One permit per open watch.
    watches: Arc<Semaphore>,
    max_watches: usize,
}

/// Each mode's readiness; `None` for a disabled mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Readiness {
    segment: Option<bool>,
    snowflake: Option<bool>,
}

impl Readiness {
    /// The same calls as `/readyz`.
    fn of(state: &AppState) -> Self {
        Readiness {
            segment: state.segment_service().map(|s| s.readiness().is_ok()),
            snowflake: state.snowflake_service().map(|s| s.readiness().is_ok()),
        }
    }

    /// The status of `service`; `None` for a name this server does not serve.
    fn serving(self, service: &str) -> Option<ServingStatus> {
        let as_status = |ready: bool| {
            if ready {
                ServingStatus::Serving
            } else {
                ServingStatus::NotServing
            }
        };
        // A disabled mode serves nothing.
        Some(match service {
            "" => as_status(self.segment.unwrap_or(true) && self.snowflake.unwrap_or(true)),
            "leaf.v1.Segment" | "leaf.v1.Admin" => as_status(self.segment.unwrap_or(false)),
            "leaf.v1.Snowflake" => as_status(self.snowflake.unwrap_or(false)),
            _ => return None,
        })
    }
}

fn answer(status: ServingStatus) -> HealthCheckResponse {
    HealthCheckResponse {
        status: status as i32,
    }
}

impl Checker {
    /// The published readiness, starting its task on the first call. The task ends when the
    /// server shuts down (or the services are dropped).
    fn board(&self) -> watch::Receiver<Readiness> {
        self.board
            .get_or_init(|| {
                let (tx, rx) = watch::channel(Readiness::of(&self.state));
                let (state, mut closing) = (self.state.clone(), self.closing.clone());
                tokio::spawn(async move {
                    loop {
                        tokio::select! {
                            () = tokio::time::sleep(WATCH_EVERY) => {}
                            changed = closing.changed() => if changed.is_err() || *closing.borrow() {
                                return;
                            },
                        }
                        let now = Readiness::of(&state);
                        tx.send_if_modified(|last| std::mem::replace(last, now) != now);
                    }
                });
                rx
            })
            .clone()
    }
}

#[tonic::async_trait]
impl Health for Checker {
    async fn check(
        &self,
        req: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        let service = req.into_inner().service;
        match Readiness::of(&self.state).serving(&service) {
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
        let Ok(permit) = Arc::clone(&self.watches).try_acquire_owned() else {
            return Err(status(ApiError::new(
                axum::http::StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "{} health watches are open, the most this server keeps \
                     (server.grpc_max_watches); use Check, or close a watch",
                    self.max_watches
                ),
            )));
        };
        let service = req.into_inner().service;
        let start = (None, self.board(), self.closing.clone(), permit);
        let stream =
            futures::stream::unfold(start, move |(last, mut board, mut closing, permit)| {
                let service = service.clone();
                async move {
                    loop {
                        if *closing.borrow_and_update() {
                            return None;
                        }
                        let now = board
                            .borrow_and_update()
                            .serving(&service)
                            .unwrap_or(ServingStatus::ServiceUnknown);
                        if last != Some(now) {
                            return Some((Ok(answer(now)), (Some(now), board, closing, permit)));
                        }
                        tokio::select! {
                            changed = board.changed() => if changed.is_err() {
                                return None;
                            },
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
