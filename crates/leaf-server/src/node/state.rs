//! `AppState`: what every handler shares — the two modes (each possibly disabled or still
//! starting), the snowflake layout for decoding, the admin, client and metrics tokens (as they are now) and the metrics.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use leaf_business::BusinessTags;
use leaf_core::{Error, SnowflakeLayout, Tag};
use leaf_segment::{LoadObserver, SegmentAllocator};
use leaf_snowflake::{Snowflake, SnowflakeState};

use crate::compose::config::Config;
use crate::http::hosts::AllowedHosts;
use crate::node::error::{ApiError, CODE_SEGMENTS_NOT_READY, Origin, public_reason};
use crate::node::metrics::Metrics;
use crate::node::monotonic::MonotonicService;
use crate::node::tokens::TokenSets;

/// The shared state of the HTTP handlers. Cheap to clone.
#[derive(Clone, Debug)]
pub struct AppState {
    inner: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    node: Node,
    one_node_warnings: Vec<String>,
    tokens: Arc<TokenSets>,
    allowed_hosts: AllowedHosts,
    max_batch: usize,
    grpc: Option<GrpcLimits>,
    max_body_bytes: usize,
    body_timeout: Duration,
    layout: SnowflakeLayout,
    segment: Option<SegmentService>,
    snowflake: Option<SnowflakeService>,
    /// Set once at start-up, after the state exists (the forwarding presents its tokens).
    monotonic: OnceLock<MonotonicService>,
    metrics: Arc<Metrics>,
}

impl AppState {
    /// State for `config`'s server settings and layout, with the given modes (`None`: disabled).
    /// `metrics` should be the one the allocator reports its loads to.
    pub fn new(
        config: &Config,
        layout: SnowflakeLayout,
        segment: Option<SegmentService>,
        snowflake: Option<SnowflakeService>,
        metrics: Arc<Metrics>,
    ) -> Self {
        if let Some(s) = &segment {
            // Here the metrics meet the service: business tags' loads count under their base.
            s.business()
                .observe_loads(Arc::new(BusinessLoadMetrics(Arc::clone(&metrics))));
        }
        let started_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        AppState {
            inner: Arc::new(Shared {
                node: Node {
                    name: config.name.clone(),
                    listen: listen_shown(&config.server),
                    started_ms,
                    segment_store: config.segment.store.clone(),
                    snowflake_mode: config.snowflake.mode.clone(),
                },
                one_node_warnings: crate::node::one_node::warnings(config),
                tokens: Arc::new(TokenSets::new(&config.server)),
                allowed_hosts: AllowedHosts::from_config(&config.server.allowed_hosts),
                max_batch: config.server.max_batch,
                grpc: config.server.grpc.then_some(GrpcLimits {
                    max_stream_ids: config.server.grpc_max_stream_ids,
                    chunk: config.server.grpc_chunk,
                    max_watches: config.server.grpc_max_watches,
                }),
                max_body_bytes: config.server.max_body_bytes,
                body_timeout: Duration::from_secs(config.server.idle_timeout_s),
                layout,
                segment,
                snowflake,
                monotonic: OnceLock::new(),
                metrics,
            }),
        }
    }

    /// Sets the monotonic mode (once, at start-up).
    pub fn set_monotonic(&self, service: MonotonicService) {
        let _ = self.inner.monotonic.set(service);
    }

    /// The monotonic mode, when it is on (`monotonic.enabled`).
    pub fn monotonic_service(&self) -> Option<&MonotonicService> {
        self.inner.monotonic.get()
    }

    /// The monotonic mode, or the answer for a node where it is off.
    pub fn monotonic(&self) -> Result<&MonotonicService, ApiError> {
        self.monotonic_service()
            .ok_or_else(|| ApiError::disabled("monotonic"))
    }

    /// What the console says of this node.
    pub fn node(&self) -> &Node {
        &self.inner.node
    }

    /// What leaves this node on the one-node default (see `one_node`), for the console.
    pub(crate) fn one_node_warnings(&self) -> &[String] {
        &self.inner.one_node_warnings
    }

    /// The tokens the admin, client and metrics rules accept now.
    pub fn tokens(&self) -> &TokenSets {
        &self.inner.tokens
    }

    /// The token sets, shared (for the task that re-reads their files).
    pub(crate) fn shared_tokens(&self) -> Arc<TokenSets> {
        Arc::clone(&self.inner.tokens)
    }

    /// The names requests may call this node by (`server.allowed_hosts`).
    pub(crate) fn allowed_hosts(&self) -> &AllowedHosts {
        &self.inner.allowed_hosts
    }

    /// The largest batch.
    pub fn max_batch(&self) -> usize {
        self.inner.max_batch
    }

    /// The gRPC API's stream limits; `None` when `server.grpc` is off.
    pub(crate) fn grpc(&self) -> Option<GrpcLimits> {
        self.inner.grpc
    }

    /// The largest request body.
    pub fn max_body_bytes(&self) -> usize {
        self.inner.max_body_bytes
    }

    /// How long a request body may take to arrive (`server.idle_timeout_s`).
    pub fn body_timeout(&self) -> Duration {
        self.inner.body_timeout
    }

    /// The snowflake layout, for decoding.
    pub fn layout(&self) -> &SnowflakeLayout {
        &self.inner.layout
    }

    /// The metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// The server's metrics, shared (for the accept loop).
    pub(crate) fn shared_metrics(&self) -> Arc<Metrics> {
        Arc::clone(&self.inner.metrics)
    }

    /// Segment mode if enabled, whether ready or not.
    pub fn segment_service(&self) -> Option<&SegmentService> {
        self.inner.segment.as_ref()
    }

    /// Snowflake mode if enabled, whether ready or not.
    pub fn snowflake_service(&self) -> Option<&SnowflakeService> {
        self.inner.snowflake.as_ref()
    }

    /// The business tags, or the answer for a disabled or still starting segment mode.
    pub fn business(&self) -> Result<&BusinessTags, ApiError> {
        Ok(&self.ready_segment()?.business)
    }

    /// The allocator, or the answer for a disabled or still starting segment mode.
    pub fn segment(&self) -> Result<&SegmentAllocator, ApiError> {
        Ok(&self.ready_segment()?.allocator)
    }

    fn ready_segment(&self) -> Result<&SegmentService, ApiError> {
        let s = self
            .inner
            .segment
            .as_ref()
            .ok_or_else(|| ApiError::disabled("segment"))?;
        if s.is_ready() {
            Ok(s)
        } else {
            Err(ApiError::unavailable(
                CODE_SEGMENTS_NOT_READY,
                format!("segment mode is starting: {}", s.not_ready_reason()),
                1,
            ))
        }
    }

    /// The generator, or the answer for a disabled or not started snowflake mode.
    pub fn snowflake(&self) -> Result<&Snowflake, ApiError> {
        let s = self
            .inner
            .snowflake
            .as_ref()
            .ok_or_else(|| ApiError::disabled("snowflake"))?;
        s.generator().ok_or_else(|| {
            ApiError::unavailable(
                503,
                format!("snowflake mode is not available: {}", s.pending_reason()),
                1,
            )
        })
    }
}

/// The limits of the gRPC API's streams (`server.grpc_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GrpcLimits {
    /// The most IDs one stream may ask for.
    pub(crate) max_stream_ids: u64,
    /// The chunk of a stream that asks for 0.
    pub(crate) chunk: usize,
    /// The most health `Watch` streams open at once.
    pub(crate) max_watches: usize,
}

/// `server.listen`, and TLS as `[server.tls]` sets it.
fn listen_shown(server: &crate::compose::config::ServerConfig) -> String {
    let tls = &server.tls;
    match (tls.enabled(), &tls.client_ca_file) {
        (false, _) => format!("{}, plaintext", server.listen),
        (true, None) => format!("{}, TLS", server.listen),
        (true, Some(_)) => format!(
            "{}, TLS, client certificates on {} routes",
            server.listen,
            match tls.client_auth {
                Some(crate::compose::config::ClientAuth::Admin) => "the admin and ID",
                _ => "all but the probes'",
            }
        ),
    }
}

/// The node as the console shows it: its configuration's name, address and modes, and when
/// it started.
#[derive(Debug, Clone)]
pub struct Node {
    /// Leaf's `name`.
    pub name: String,
    /// `server.listen` as configured, and whether the port speaks TLS (and asks for client
    /// certificates).
    pub listen: String,
    /// When the state was made (the process's start, near enough), Unix ms.
    pub started_ms: u64,
    /// `segment.store`.
    pub segment_store: String,
    /// `snowflake.mode`.
    pub snowflake_mode: String,
}

/// Segment mode: the allocator and whether its start-up (`init`) has succeeded.
#[derive(Clone)]
pub struct SegmentService {
    allocator: SegmentAllocator,
    /// Business tags (periods, formats) on the allocator's store.
    business: Arc<BusinessTags>,
    ready: Arc<AtomicBool>,
    reason: Arc<Mutex<String>>,
}

impl SegmentService {
    /// A service whose allocator is initialised.
    pub fn ready(allocator: SegmentAllocator) -> Self {
        let s = Self::new(allocator);
        s.mark_ready();
        s
    }

    /// A service whose allocator is about to be initialised: not ready until
    /// [`mark_ready`](Self::mark_ready), and already keeping business tags' rows out of the
    /// allocator's listing.
    pub fn new(allocator: SegmentAllocator) -> Self {
        Self::with_reason(allocator, "initialising".into())
    }

    /// A service whose allocator is not initialised yet, because of `err`; clients learn only
    /// its `public_reason`.
    pub fn starting(allocator: SegmentAllocator, err: &Error) -> Self {
        Self::with_reason(allocator, public_reason(Origin::Segment, err))
    }

    fn with_reason(allocator: SegmentAllocator, reason: String) -> Self {
        // Business tags' rows (and their bases' claims) are counted by their own allocator:
        // the plain cache leaves out those of the tags known here.
        let (business, allocator) = BusinessTags::beside(allocator);
        SegmentService {
            business,
            allocator,
            ready: Arc::new(AtomicBool::new(false)),
            reason: Arc::new(Mutex::new(reason)),
        }
    }

    /// The allocator.
    pub fn allocator(&self) -> &SegmentAllocator {
        &self.allocator
    }

    /// The business tags.
    pub fn business(&self) -> &BusinessTags {
        &self.business
    }

    /// Records that `init` succeeded.
    pub fn mark_ready(&self) {
        self.ready.store(true, Ordering::Release);
    }

    /// Records why the allocator is not ready yet (as its `public_reason`).
    pub fn set_not_ready_reason(&self, err: &Error) {
        *self.reason.lock().unwrap_or_else(|p| p.into_inner()) =
            public_reason(Origin::Segment, err);
    }

    /// Whether `init` succeeded.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    fn not_ready_reason(&self) -> String {
        self.reason
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Readiness for `/readyz`: `Ok` or why not.
    pub fn readiness(&self) -> Result<(), String> {
        if self.is_ready() {
            Ok(())
        } else {
            Err(self.not_ready_reason())
        }
    }
}

impl fmt::Debug for SegmentService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SegmentService")
            .field("ready", &self.is_ready())
            .finish_non_exhaustive()
    }
}

/// Snowflake mode: the generator once started, or why it is not started yet.
#[derive(Clone, Default)]
pub struct SnowflakeService {
    generator: Arc<OnceLock<Snowflake>>,
    pending: Arc<Mutex<String>>,
    /// The last comparison of this clock with the running peers' (modes that list peers).
    peer_clock: Arc<Mutex<Option<PeerSkew>>>,
}

/// This node's clock against its running peers' at the last comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerSkew {
    /// This clock minus the average of the peers' (0 with no peer).
    pub skew_ms: i64,
    /// How many peers answered.
    pub peers: usize,
}

impl PeerSkew {
    /// What a comparison found.
    pub fn of(found: &leaf_snowflake::peers::PeerClock) -> PeerSkew {
        use leaf_snowflake::peers::PeerClock;
        match *found {
            PeerClock::NoPeers { .. } => PeerSkew {
                skew_ms: 0,
                peers: 0,
            },
            PeerClock::Agrees { skew_ms, peers } | PeerClock::Off { skew_ms, peers, .. } => {
                PeerSkew { skew_ms, peers }
            }
        }
    }
}

impl SnowflakeService {
    /// A service with a started generator.
    pub fn ready(generator: Snowflake) -> Self {
        let s = Self::default();
        s.set(generator);
        s
    }

    /// A service whose generator could not be started yet, because of `err`; clients learn
    /// only its `public_reason`.
    pub fn pending(err: &Error) -> Self {
        let s = Self::default();
        s.set_pending_reason(err);
        s
    }

    /// A service that will not start in this run, for `reason`: a text of the server's own
    /// (the peer clock check's), shown to clients as it is.
    pub fn refused(reason: String) -> Self {
        let s = Self::default();
        *s.pending.lock().unwrap_or_else(|p| p.into_inner()) = reason;
        s
    }

    /// Installs the started generator (once; later calls are ignored).
    pub fn set(&self, generator: Snowflake) {
        let _ = self.generator.set(generator);
    }

    /// Records why the generator is not started (as its `public_reason`).
    pub fn set_pending_reason(&self, err: &Error) {
        *self.pending.lock().unwrap_or_else(|p| p.into_inner()) =
            public_reason(Origin::Snowflake, err);
    }

    /// Records the last comparison of this clock with the peers'.
    pub fn set_peer_clock(&self, skew: PeerSkew) {
        *self.peer_clock.lock().unwrap_or_else(|p| p.into_inner()) = Some(skew);
    }

    /// The last comparison of this clock with the peers', in a mode that lists peers.
    pub fn peer_clock(&self) -> Option<PeerSkew> {
        *self.peer_clock.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The generator, once started.
    pub fn generator(&self) -> Option<&Snowflake> {
        self.generator.get()
    }

    fn pending_reason(&self) -> String {
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Readiness for `/readyz`: `Ok`, or why not and a `Retry-After` in seconds.
    pub fn readiness(&self) -> Result<(), (String, u64)> {
        let Some(g) = self.generator() else {
            return Err((format!("not started: {}", self.pending_reason()), 1));
        };
        let status = g.status();
        // After a clock-backwards error the node stays out of rotation until the clock
        // catches up (a lead of milliseconds borrowed ahead of the clock is not a step back).
        let behind_ms = status.clock_behind_ms;
        match status.state {
            SnowflakeState::Ready
                if status.lease_valid
                    && u128::from(behind_ms) > g.config().max_backwards.as_millis() =>
            {
                Err((
                    format!(
                        "the clock is {behind_ms} ms behind where it read at the last issued ID"
                    ),
                    behind_ms.div_ceil(1000),
                ))
            }
            SnowflakeState::Ready if status.lease_valid => Ok(()),
            SnowflakeState::Ready => Err(("the worker id lease is not valid".into(), 1)),
            other => Err(state_reason(&other)),
        }
    }
}

impl fmt::Debug for SnowflakeService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SnowflakeService")
            .field("generator", &self.generator.get())
            .finish_non_exhaustive()
    }
}

/// Why a generator in `state` is not ready, for `/readyz`, and a `Retry-After`. The generator's
/// own reason for `Unavailable` can carry a backend's text (a cache file's path and OS error): it
/// is logged when the state is entered, and clients get a fixed phrase.
fn state_reason(state: &SnowflakeState) -> (String, u64) {
    match state {
        SnowflakeState::Ready => ("ready".into(), 1),
        SnowflakeState::WaitingForClock { behind_ms } => (
            format!("waiting for the clock to pass the previous time mark ({behind_ms} ms behind)"),
            behind_ms.div_ceil(1000),
        ),
        SnowflakeState::Unavailable { .. } => (
            "cannot issue IDs for now (the server log says why)".into(),
            1,
        ),
        SnowflakeState::ClockJumped { ahead_ms } => (
            format!(
                "the wall clock jumped {ahead_ms} ms ahead of the monotonic clock; waiting for \
                 it to come back"
            ),
            1,
        ),
        SnowflakeState::Exhausted { reason } => (format!("exhausted: {reason}"), 60),
        SnowflakeState::LeaseLost => ("the worker id lease was lost".into(), 1),
        SnowflakeState::Closed => ("shutting down".into(), 1),
    }
}

/// Feeds the allocator's load reports into the metrics.
#[derive(Debug)]
pub(crate) struct LoadMetrics(pub Arc<Metrics>);

impl LoadObserver for LoadMetrics {
    fn on_load(&self, _tag: &Tag, _ok: bool, took: Duration) {
        // Per-tag counts come from the allocator's snapshot at scrape time.
        self.0.segment_load(took);
    }
}

/// Feeds the business tags' load reports (by base tag) into the metrics.
#[derive(Debug)]
struct BusinessLoadMetrics(Arc<Metrics>);

impl LoadObserver for BusinessLoadMetrics {
    fn on_load(&self, tag: &Tag, ok: bool, took: Duration) {
        self.0.business_load(tag, ok, took);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unavailable_generators_reason_stays_in_the_log() {
        let state = SnowflakeState::Unavailable {
            reason: "renewing the mark failed: cache-file backend: cannot write \
                     /srv/secret/leaf-data/worker-leaf.properties: Permission denied (os error 13)"
                .into(),
        };
        let (why, _) = state_reason(&state);
        assert!(
            !why.contains("/srv/secret") && !why.contains("os error"),
            "{why}"
        );
        let (why, after) = state_reason(&SnowflakeState::WaitingForClock { behind_ms: 2500 });
        assert!(why.contains("2500"), "{why}");
        assert_eq!(after, 3);
    }
}
