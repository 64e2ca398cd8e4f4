//! Start-up, serving and graceful shutdown of the binary.
//!
//! Start-up binds the listener first (its port is the node identity's default), then starts the
//! enabled modes: a mode whose backend fails with a retryable error keeps retrying in the
//! background while the other serves; a configuration error stops start-up. Shutdown (SIGINT,
//! SIGTERM) stops accepting, lets requests in flight finish, writes the snowflake's final mark,
//! releases the worker id and writes the warm-restart tag list.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use std::convert::Infallible;

use axum::Router;
use axum::response::Response;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use leaf_core::{Clock, Error, NewTag, SegmentStore, SystemClock};
use leaf_segment::SegmentAllocator;
use leaf_snowflake::{Snowflake, SnowflakeState};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tower::Service as _;

use crate::compose::backends;
use crate::compose::config::{Config, Loaded, ServerConfig};
use crate::grpc::{Grpc, is_grpc};
use crate::http::app;
use crate::http::peer_clock;
use crate::http::tls::ServerTls;
use crate::http::write_timeout::WriteTimeout;
use crate::node::identity;
use crate::node::metrics::Metrics;
use crate::node::monotonic::{ForwardTls, MonotonicService};
use crate::node::state::{AppState, LoadMetrics, PeerSkew, SegmentService, SnowflakeService};
use leaf_segment::warm;
use leaf_snowflake::monotonic::{Leader, LeaderConfig, MonotonicLayout};

/// How far back "recently used" reaches for the warm-restart list.
const WARM_WINDOW: Duration = Duration::from_secs(24 * 3600);

/// The longest pause between two start-up retries of a mode.
const MAX_RETRY: Duration = Duration::from_secs(30);

/// Runs the server until SIGINT or SIGTERM, then shuts down gracefully.
pub async fn run(loaded: Loaded) -> anyhow::Result<()> {
    let Loaded {
        config,
        warnings,
        file,
    } = loaded;
    for w in &warnings {
        tracing::warn!("{w}");
    }
    match &file {
        Some(f) => tracing::info!(file = %f.display(), "configuration read"),
        None => tracing::info!("no configuration file; built-in defaults and LEAF_ variables"),
    }
    tracing::debug!(?config, "configuration");

    let listener = TcpListener::bind(config.server.listen)
        .await
        .with_context(|| format!("server.listen: cannot listen on {}", config.server.listen))?;
    let local = listener.local_addr()?;
    let running = start(&config, local).await?;
    // The TLS files were checked when the configuration was read; start-up can take seconds,
    // and a node whose files went bad meanwhile stops here with an error, not serving nothing.
    if config.server.tls.enabled()
        && let Err((key, why)) = crate::http::tls::Material::read(&config.server.tls)
    {
        running.stop().await;
        anyhow::bail!("{key}: {why}");
    }
    tracing::info!(listen = %local, "leaf-server serving");
    if config.server.grpc {
        tracing::info!("gRPC served on the same port (server.grpc)");
    }
    serve(
        listener,
        Frontend::new(&running.state),
        &config.server,
        shutdown_signal(),
    )
    .await;
    running.stop().await;
    tracing::info!("leaf-server stopped");
    Ok(())
}

/// The started modes and their background tasks.
pub struct Running {
    /// The handlers' state.
    pub state: AppState,
    segment: Option<SegmentService>,
    snowflake: Option<SnowflakeService>,
    warm_file: PathBuf,
    tasks: Vec<JoinHandle<()>>,
}

/// Starts the enabled modes. `local` is the bound address (its port is the default identity port).
pub async fn start(config: &Config, local: SocketAddr) -> anyhow::Result<Running> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let metrics = Arc::new(Metrics::new());
    let layout = config.snowflake.layout()?;
    crate::compose::config::SnowflakeSection::check_layout_now(&layout, clock.now_ms())?;
    let warm_file = warm::path(&config.snowflake.cache_dir, &config.name);
    for warning in crate::node::one_node::warnings(config) {
        tracing::warn!("{warning}");
    }
    let mut tasks = Vec::new();

    let segment = if config.segment.enabled {
        Some(start_segment(config, &clock, &metrics, &warm_file, &mut tasks).await?)
    } else {
        tracing::info!("segment mode disabled");
        None
    };
    let snowflake = if config.snowflake.enabled {
        Some(start_snowflake(config, local.port(), &clock, &mut tasks).await?)
    } else {
        tracing::info!("snowflake mode disabled");
        None
    };
    let state = AppState::new(config, layout, segment.clone(), snowflake.clone(), metrics);
    if config.monotonic.enabled {
        let service = start_monotonic(config, local.port(), &clock, &state, &mut tasks).await?;
        state.set_monotonic(service);
    } else {
        tracing::info!("monotonic mode disabled");
    }
    if state.tokens().has_files() {
        tasks.push(tokio::spawn(crate::node::tokens::watch(
            state.shared_tokens(),
            state.shared_metrics(),
        )));
    }
    Ok(Running {
        state,
        segment,
        snowflake,
        warm_file,
        tasks,
    })
}

/// How often a graceful stop tries to release the worker id.
const RELEASE_ATTEMPTS: u64 = 3;

impl Running {
    /// The graceful end: the final mark and release, the warm-restart list, the tasks.
    pub async fn stop(self) {
        if let Some(g) = self
            .snowflake
            .as_ref()
            .and_then(SnowflakeService::generator)
        {
            // A failed release (the registry briefly unreachable) is tried again a few times:
            // the generator keeps the lease until a release succeeds.
            let mut attempt = 1;
            loop {
                match g.shutdown().await {
                    Ok(()) => {
                        tracing::info!(
                            worker_id = g.worker_id(),
                            "worker id released with its final mark"
                        );
                        break;
                    }
                    Err(e) if attempt < RELEASE_ATTEMPTS => {
                        tracing::warn!(attempt, error = %e, "snowflake release failed; retrying");
                        attempt += 1;
                        tokio::time::sleep(Duration::from_millis(200 * attempt)).await;
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "snowflake release failed; the next start waits for the clock to pass the last mark");
                        break;
                    }
                }
            }
        }
        if let Some(leader) = self
            .state
            .monotonic_service()
            .and_then(MonotonicService::leader)
            && let Err(e) = leader.shutdown().await
        {
            tracing::warn!(error = %e, "monotonic claim not released; the next leader is elected when its lease ends");
        }
        if let Some(s) = self.segment.as_ref().filter(|s| s.is_ready()) {
            let tags = s.allocator().recently_used(WARM_WINDOW);
            let (path, n) = (self.warm_file.clone(), tags.len());
            let written = tokio::task::spawn_blocking(move || warm::write(&path, &tags)).await;
            match written {
                Ok(Ok(())) => {
                    tracing::info!(tags = n, file = %self.warm_file.display(), "warm-restart tag list written")
                }
                Ok(Err(e)) => tracing::warn!(error = %e, "cannot write the warm-restart tag list"),
                Err(e) => tracing::warn!(error = %e, "cannot write the warm-restart tag list"),
            }
        }
        for t in self.tasks {
            t.abort();
        }
    }
}

/// How a follower reaches a leader whose port speaks TLS, where `[server.tls]` is on.
fn forward_tls(config: &Config) -> Option<ForwardTls> {
    let tls = &config.server.tls;
    if !tls.enabled() {
        return None;
    }
    let m = &config.monotonic;
    let ca = match (&m.forward_ca_file, &tls.client_ca_file) {
        (Some(f), _) => Some(("monotonic.forward_ca_file", f.clone())),
        (None, Some(f)) => Some(("server.tls.client_ca_file", f.clone())),
        (None, None) => {
            tracing::warn!(
                "server.tls is on and neither monotonic.forward_ca_file nor \
                 server.tls.client_ca_file is set: this node cannot verify a monotonic leader's \
                 certificate, and answers 503 while it follows"
            );
            None
        }
    };
    Some(ForwardTls {
        ca,
        server_name: m.forward_server_name.clone(),
        own: tls.clone(),
    })
}

/// Why a workerId mode whose leader claim has no lease does not serve monotonic IDs.
fn unfenced_monotonic_refusal(mode: &str) -> String {
    let table = match mode {
        "zk_normal" => "zk",
        other => other,
    };
    format!(
        "monotonic IDs are not served with snowflake.mode = \"{mode}\" without \
         [snowflake.{table}] fence_on_disconnect = true: a leader must stop issuing when it is \
         cut off from {table}, which that setting accepts and the default (keep issuing) does \
         not; set it, or use zk_recycle, etcd or redis for a cluster, or local for one node \
         (monotonic.enabled = false silences this)"
    )
}

/// The monotonic mode's start-up: the claim's registry (the workerId mode's backend under a
/// name of its own), one campaign at once (a single node serves from its first request), then
/// one every `snowflake.mark_renew_ms`. A mode that cannot elect a leader is answered with why.
async fn start_monotonic(
    config: &Config,
    listen_port: u16,
    clock: &Arc<dyn Clock>,
    state: &AppState,
    tasks: &mut Vec<JoinHandle<()>>,
) -> anyhow::Result<MonotonicService> {
    let tokens = state.shared_tokens();
    if let Some(why) = crate::node::one_node::local_monotonic_refusal(config) {
        tracing::warn!("{why}");
        return Ok(MonotonicService::refused(why, tokens));
    }
    // A claim that cannot be opened, or that its configuration can never grant (a lease too
    // short for the renewals, a name too long for its table), refuses the mode with why; the
    // rest of the node serves.
    let refuse = |e: leaf_core::Error| {
        let why = format!("monotonic IDs are not served: {e}");
        tracing::error!("{why}");
        MonotonicService::refused(why, Arc::clone(&tokens))
    };
    let registry = match backends::monotonic_registry(config).await {
        Ok(r) => r.worker,
        Err(e) => return Ok(refuse(e)),
    };
    let mode = registry.mode();
    if !(registry.capabilities().recycles || mode == "local") {
        let why = unfenced_monotonic_refusal(mode);
        tracing::warn!("{why}");
        return Ok(MonotonicService::refused(why, tokens));
    }
    let identity = identity::node_identity(&config.snowflake, listen_port)?;
    let ms = Duration::from_millis;
    let mut leader_config = LeaderConfig::new(MonotonicLayout {
        epoch_ms: config.snowflake.epoch_ms,
    });
    leader_config.window = ms(config.monotonic.window_ms);
    leader_config.renew = ms(config.snowflake.mark_renew_ms);
    leader_config.fencing_margin = ms(config.snowflake.fencing_margin_ms);
    leader_config.max_forward_step = ms(config.snowflake.max_forward_step_ms);
    leader_config.max_ahead = ms(config.snowflake.max_startup_wait_ms)
        .max(ms(config.monotonic.window_ms).saturating_mul(2));
    let leader = Leader::new(registry, identity.clone(), Arc::clone(clock), leader_config);
    match leader.step().await {
        Ok(()) => tracing::info!(%identity, mode, "monotonic mode: this node leads"),
        Err(e @ leaf_core::Error::Config(_)) => return Ok(refuse(backends::mode_error(config, e))),
        Err(e) => tracing::info!(
            %identity,
            mode,
            leader = leader.status().leader_hint.as_deref().unwrap_or("unknown"),
            reason = %e,
            "monotonic mode: following; requests are forwarded to the leader"
        ),
    }
    tasks.push(leader.spawn());
    Ok(MonotonicService::elected(
        leader,
        tokens,
        config.monotonic.coalesce,
        forward_tls(config),
    ))
}

/// Segment mode's start-up, in this order: the seed tags, the business tags' definitions, then
/// the plain cache, which so leaves out the rows of every business tag known by then (a request
/// never finds a business tag's base or rows among the plain tags, not even until the first
/// refresh). Each definition is also read at its first use.
async fn start_up(service: &SegmentService, seeds: &[NewTag]) -> leaf_core::Result<()> {
    let allocator = service.allocator();
    seed(allocator.store().as_ref(), seeds).await?;
    let n = service.business().refresh().await?;
    tracing::info!(business_tags = n, "business tags read");
    allocator.init().await
}

async fn start_segment(
    config: &Config,
    clock: &Arc<dyn Clock>,
    metrics: &Arc<Metrics>,
    warm_file: &std::path::Path,
    tasks: &mut Vec<JoinHandle<()>>,
) -> anyhow::Result<SegmentService> {
    let seeds = config.segment.seed_tags()?;
    let store = backends::segment_store(config).await?;
    tracing::info!(store = store.kind(), "segment store configured");
    let allocator =
        SegmentAllocator::new(store, Arc::clone(clock), config.segment.allocator_config())
            .with_observer(Arc::new(LoadMetrics(Arc::clone(metrics))));
    let warm_tags = warm::read(warm_file);
    // Not ready until started: its listing filter is in place before the first listing.
    let service = SegmentService::new(allocator.clone());
    match start_up(&service, &seeds).await {
        Ok(()) => {
            service.mark_ready();
            tasks.push(allocator.spawn_refresher());
            if !warm_tags.is_empty() {
                tracing::info!(
                    tags = warm_tags.len(),
                    "warming the tags used before the restart"
                );
                allocator.warm(warm_tags);
            }
            Ok(service)
        }
        Err(e) if e.is_retryable() => {
            tracing::warn!(error = %e, "segment mode cannot start yet; retrying in the background");
            service.set_not_ready_reason(&e);
            let s = service.clone();
            tasks.push(tokio::spawn(async move {
                let mut pause = Duration::from_millis(500);
                loop {
                    tokio::time::sleep(pause).await;
                    // The seed tags too: the store may not have been reachable for them.
                    match start_up(&s, &seeds).await {
                        Ok(()) => {
                            s.mark_ready();
                            tracing::info!("segment mode started");
                            // The refresher lives as long as this task; both end at shutdown.
                            let refresher = allocator.spawn_refresher();
                            allocator.warm(warm_tags);
                            let _ = refresher.await;
                            return;
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "segment mode still cannot start");
                            s.set_not_ready_reason(&e);
                            pause = (pause * 2).min(MAX_RETRY);
                        }
                    }
                }
            }));
            Ok(service)
        }
        Err(e) => Err(e.into()),
    }
}

/// Creates the seed tags that are missing (checked as `POST /v1/tags` checks a plain tag, by
/// `SegmentSection::seed_tags`). A retryable failure (the store is down) is returned, for
/// segment mode's start-up to retry; any other is logged and the tag left out.
async fn seed(store: &dyn SegmentStore, tags: &[NewTag]) -> leaf_core::Result<()> {
    for new in tags {
        let tag = &new.tag;
        match store.create(new).await {
            Ok(r) => tracing::info!(tag = %tag, step = r.step, "seed tag created"),
            Err(Error::AlreadyExists(_)) => {}
            Err(e) if e.is_retryable() => return Err(e),
            Err(e) => tracing::warn!(tag = %tag, error = %e, "cannot create the seed tag"),
        }
    }
    Ok(())
}

async fn start_snowflake(
    config: &Config,
    listen_port: u16,
    clock: &Arc<dyn Clock>,
    tasks: &mut Vec<JoinHandle<()>>,
) -> anyhow::Result<SnowflakeService> {
    // Before any worker id is claimed: a node restarted with another layout issues nothing.
    let layout = config.snowflake.layout()?;
    leaf_snowflake::layout_record::check_or_record(
        &config.snowflake.cache_dir,
        &config.name,
        &layout,
    )?;
    let identity = identity::node_identity(&config.snowflake, listen_port)?;
    let leaf_core::backend::Registry {
        worker: registry,
        peers,
    } = backends::registry(config).await?;
    let tls = config.server.tls.enabled();
    let mut watched = None;
    if let Some(directory) = peers {
        let checked = leaf_snowflake::peers::gate(
            directory.as_ref(),
            &identity,
            clock.as_ref(),
            directory.max_skew_ms(),
            |peer| peer_clock::http_time(peer, peer_clock::PEER_TIMEOUT, tls),
        )
        .await;
        match checked {
            Err(why) => {
                tracing::error!(reason = %why, "snowflake mode refused; segment mode serves");
                return Ok(SnowflakeService::refused(why));
            }
            Ok(found) => watched = Some((directory, PeerSkew::of(&found))),
        }
    }
    let me = identity.clone();
    let generator_config = config.snowflake.generator_config(layout);
    tracing::info!(mode = registry.mode(), %identity, "starting snowflake mode");
    let first = Snowflake::start(
        Arc::clone(&registry),
        identity.clone(),
        Arc::clone(clock),
        generator_config.clone(),
    )
    .await
    .map_err(|e| backends::mode_error(config, e));
    let service = match first {
        Ok(generator) => {
            tasks.push(generator.spawn_renewer());
            log_snowflake_state(&generator);
            SnowflakeService::ready(generator)
        }
        Err(e) if e.is_retryable() => {
            tracing::warn!(error = %e, "snowflake mode cannot start yet; retrying in the background");
            let service = SnowflakeService::pending(&e);
            let s = service.clone();
            let clock = Arc::clone(clock);
            tasks.push(tokio::spawn(async move {
                let mut pause = Duration::from_millis(500);
                loop {
                    tokio::time::sleep(pause).await;
                    let started = Snowflake::start(
                        Arc::clone(&registry),
                        identity.clone(),
                        Arc::clone(&clock),
                        generator_config.clone(),
                    )
                    .await;
                    match started {
                        Ok(generator) => {
                            let renewer = generator.spawn_renewer();
                            log_snowflake_state(&generator);
                            s.set(generator);
                            let _ = renewer.await;
                            return;
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "snowflake mode still cannot start");
                            s.set_pending_reason(&e);
                            pause = (pause * 2).min(MAX_RETRY);
                        }
                    }
                }
            }));
            service
        }
        Err(e) => return Err(e.into()),
    };
    // The clock compared with the peers' again every round, for the skew metric and its alert.
    if let Some((directory, first)) = watched {
        service.set_peer_clock(first);
        let (s, clock) = (service.clone(), Arc::clone(clock));
        tasks.push(tokio::spawn(async move {
            leaf_snowflake::peers::watch(
                directory.as_ref(),
                &me,
                clock.as_ref(),
                leaf_snowflake::peers::RECHECK,
                |peer| peer_clock::http_time(peer, peer_clock::PEER_TIMEOUT, tls),
                |found| s.set_peer_clock(PeerSkew::of(found)),
            )
            .await;
        }));
    }
    Ok(service)
}

fn log_snowflake_state(generator: &Snowflake) {
    let status = generator.status();
    match &status.state {
        SnowflakeState::Ready => {
            tracing::info!(worker_id = status.worker_id, "snowflake mode ready");
        }
        SnowflakeState::WaitingForClock { behind_ms } => tracing::warn!(
            worker_id = status.worker_id,
            behind_ms,
            "snowflake mode waits for the clock to pass the previous time mark"
        ),
        other => tracing::error!(
            worker_id = status.worker_id,
            state = ?other,
            "snowflake mode unavailable; segment mode serves"
        ),
    }
}

/// What the listener serves: the HTTP router, and the gRPC services unless `server.grpc` is
/// off. A request goes to gRPC by its `Content-Type` (`application/grpc`), before the HTTP
/// router and its layers.
#[derive(Clone)]
pub struct Frontend {
    http: Router,
    grpc: Option<Grpc>,
    metrics: Option<Arc<Metrics>>,
}

impl Frontend {
    /// The HTTP API of `state`, and its gRPC API when `server.grpc` is on.
    pub fn new(state: &AppState) -> Self {
        Frontend {
            http: app(state.clone()),
            grpc: state.grpc().map(|_| Grpc::new(state)),
            metrics: Some(state.shared_metrics()),
        }
    }

    pub(crate) async fn call(self, req: hyper::Request<Incoming>) -> Result<Response, Infallible> {
        if !is_grpc(req.headers()) {
            return self.http.clone().call(req).await;
        }
        match &self.grpc {
            Some(grpc) => grpc.call(req).await,
            // An HTTP 404 would reach a gRPC client as a garbled protocol error.
            None => Ok(tonic::Status::unimplemented(
                "gRPC is turned off on this server (server.grpc = false); its HTTP API serves \
                 on this port",
            )
            .into_http()),
        }
    }
}

impl Frontend {
    /// The server stops accepting: ends the gRPC streams that have no end of their own.
    fn close(&self) {
        if let Some(grpc) = &self.grpc {
            grpc.close();
        }
    }
}

/// A router alone: HTTP only.
impl From<Router> for Frontend {
    fn from(http: Router) -> Self {
        Frontend {
            http,
            grpc: None,
            metrics: None,
        }
    }
}

/// Accepts connections until `shutdown` completes, then stops accepting and gives the requests
/// in flight `server.shutdown_timeout_s` to finish. Each connection speaks HTTP/1.1 or
/// HTTP/2 (h2c, which gRPC uses), told apart by its first bytes, which must arrive within
/// `server.idle_timeout_s` (`crate::http::sniff`). At most `server.max_connections` are served
/// at once; one more is closed as soon as it is accepted.
pub async fn serve(
    listener: TcpListener,
    frontend: impl Into<Frontend>,
    config: &ServerConfig,
    shutdown: impl Future<Output = ()>,
) {
    let frontend = frontend.into();
    let idle = Duration::from_secs(config.idle_timeout_s);
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(idle)
        .max_buf_size(config.max_header_bytes)
        .keep_alive(true);
    let keepalive = Duration::from_secs(config.http2_keepalive_s);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(keepalive)
        .keep_alive_timeout(keepalive)
        .max_concurrent_streams(config.http2_max_concurrent_streams)
        .max_header_list_size(u32::try_from(config.max_header_bytes).unwrap_or(u32::MAX));
    let write_timeout = Duration::from_secs(config.write_timeout_s);
    let slots = Arc::new(tokio::sync::Semaphore::new(config.max_connections));
    let mut refusals = Refusals::default();
    let graceful = GracefulShutdown::new();
    let tls = match config.tls.enabled() {
        false => None,
        true => match ServerTls::new(&config.tls, frontend.metrics.clone()) {
            Ok(tls) => Some(Arc::new(tls)),
            Err(e) => {
                // Checked when the configuration was read: the files changed since.
                tracing::error!(error = %e, "server.tls: cannot load; not serving");
                return;
            }
        },
    };
    let watch = tls.as_ref().map(|t| tokio::spawn(Arc::clone(t).watch()));
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: wait a moment rather than spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            // Closed at once: the client sees a reset and tries another node, and this one
            // keeps serving the connections it has.
            drop(stream);
            refusals.note(config.max_connections, frontend.metrics.as_deref());
            continue;
        };
        let _ = stream.set_nodelay(true);
        let metrics = frontend.metrics.clone();
        if let Some(m) = &metrics {
            m.connection_opened();
        }
        let connection = crate::http::connection::Connection {
            frontend: frontend.clone(),
            builder: builder.clone(),
            watcher: graceful.watcher(),
            peer,
            idle,
            write_timeout,
        };
        let tls = tls.clone();
        tokio::spawn(async move {
            match tls {
                None => {
                    let io = WriteTimeout::new(stream, write_timeout);
                    connection.serve(io, None).await;
                }
                Some(tls) => {
                    let accepted = tls
                        .accept(stream, idle, |s| WriteTimeout::new(s, write_timeout))
                        .await;
                    if let Some(io) = accepted {
                        let cert = crate::http::tls::has_client_cert(&io);
                        connection.serve(io, Some((tls, cert))).await;
                    }
                }
            }
            if let Some(m) = metrics {
                m.connection_closed();
            }
            drop(slot);
        });
    }
    if let Some(w) = watch {
        w.abort();
    }
    drop(listener);
    frontend.close();
    tracing::info!("shutting down: no new connections; finishing requests in flight");
    let limit = Duration::from_secs(config.shutdown_timeout_s);
    if tokio::time::timeout(limit, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            "requests still in flight after server.shutdown_timeout_s = {}; closing them",
            config.shutdown_timeout_s
        );
    }
}

/// The connections refused because `server.max_connections` were open: counted, and logged
/// at most once a minute.
#[derive(Default)]
struct Refusals {
    since_log: u64,
    logged: Option<std::time::Instant>,
}

impl Refusals {
    fn note(&mut self, max: usize, metrics: Option<&Metrics>) {
        if let Some(m) = metrics {
            m.connection_refused();
        }
        self.since_log += 1;
        if self
            .logged
            .is_none_or(|at| at.elapsed() >= Duration::from_secs(60))
        {
            tracing::warn!(
                refused = self.since_log,
                "connections refused: server.max_connections ({max}) are open"
            );
            self.since_log = 0;
            self.logged = Some(std::time::Instant::now());
        }
    }
}

/// Completes on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => tracing::info!("SIGINT received"),
        () = term => tracing::info!("SIGTERM received"),
    }
}
