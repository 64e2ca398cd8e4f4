//! The monotonic mode on this node: its part in the election
//! (`leaf_snowflake::monotonic::Leader`) and, on a follower, the forwarding of requests to the
//! leader over one HTTP/2 connection, **coalesced**: while one call to the leader is in
//! flight, the requests that arrive wait, and go together in the next call, one range that the
//! leader issued in one step and that is shared out in their order of arrival.
//!
//! Why a shared-out range keeps the promise: the leader issued it after every request of the
//! batch was invoked (they were queued before the call was sent) and before any of them
//! completed (they are answered from its reply), so it lies inside each one's interval, as an
//! answer of the leader's own would (ARCHITECTURE.md, "Monotonic IDs").

use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::http::{HeaderValue, Request, StatusCode, header};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use leaf_snowflake::monotonic::{Leader, LeaderStatus, MAX_ISSUE, Refusal};
use tokio::sync::oneshot;

use crate::compose::config::TlsConfig;
use crate::http::tls::{server_name, verified_client};
use crate::node::error::{ApiError, CODE_EXHAUSTED, CODE_NOT_LEADER};
use crate::node::tokens::TokenSets;

/// The route a follower calls on the leader: a range, never forwarded again.
pub(crate) const RANGE_ROUTE: &str = "/v1/monotonic/range";

/// How often a follower waiting on its leader checks whether another one was elected.
const LEADER_CHECK: Duration = Duration::from_millis(50);

/// How long a forwarded call may take, the connection included.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(5);

/// This node's monotonic mode: a part in the election, or the reason it has none.
#[derive(Clone, Debug)]
pub struct MonotonicService {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    serving: Serving,
    /// `monotonic.coalesce`: requests that wait together go in one call.
    coalesce: bool,
    forward: Forwarder,
    counters: Counters,
}

#[derive(Debug)]
enum Serving {
    Elected(Leader),
    /// The workerId mode cannot elect a leader: why, for every answer.
    Refused(String),
}

/// What the metrics read.
#[derive(Debug, Default)]
pub struct Counters {
    /// IDs this node issued as the leader.
    pub issued: AtomicU64,
    /// Calls this follower made to the leader.
    pub forwarded_calls: AtomicU64,
    /// Requests answered from those calls (more than the calls when they were coalesced).
    pub forwarded_requests: AtomicU64,
    /// IDs asked for in those calls.
    pub forwarded_ids: AtomicU64,
    /// Calls that failed (the leader unreachable, or not the leader any more).
    pub forward_failures: AtomicU64,
}

impl Counters {
    /// One call to the leader, for `requests` requests and `ids` IDs.
    fn forwarded(&self, requests: u64, ids: u64) {
        self.forwarded_calls.fetch_add(1, Ordering::Relaxed);
        self.forwarded_requests
            .fetch_add(requests, Ordering::Relaxed);
        self.forwarded_ids.fetch_add(ids, Ordering::Relaxed);
    }
}

impl MonotonicService {
    /// A node that takes part in the election through `leader`. `client_tokens` are the
    /// tokens this node presents to the leader when it forwards.
    /// `tls`: how it reaches a leader whose port speaks TLS (`[server.tls]` on).
    pub(crate) fn elected(
        leader: Leader,
        client_tokens: Arc<TokenSets>,
        coalesce: bool,
        tls: Option<ForwardTls>,
    ) -> Self {
        Self::with(Serving::Elected(leader), client_tokens, coalesce, tls)
    }

    /// A node whose workerId mode cannot elect a leader: every request is answered with `why`.
    pub(crate) fn refused(why: String, client_tokens: Arc<TokenSets>) -> Self {
        Self::with(Serving::Refused(why), client_tokens, true, None)
    }

    fn with(
        serving: Serving,
        tokens: Arc<TokenSets>,
        coalesce: bool,
        tls: Option<ForwardTls>,
    ) -> Self {
        MonotonicService {
            inner: Arc::new(Inner {
                serving,
                coalesce,
                forward: Forwarder {
                    tokens,
                    tls,
                    link: tokio::sync::Mutex::new(None),
                    queue: Mutex::new(Queue::default()),
                    failing: Default::default(),
                },
                counters: Counters::default(),
            }),
        }
    }

    /// The election's state, `None` where the mode is refused.
    pub fn status(&self) -> Option<LeaderStatus> {
        match &self.inner.serving {
            Serving::Elected(l) => Some(l.status()),
            Serving::Refused(_) => None,
        }
    }

    /// Why the mode is refused on this node, if it is.
    pub fn refused_reason(&self) -> Option<&str> {
        match &self.inner.serving {
            Serving::Elected(_) => None,
            Serving::Refused(why) => Some(why),
        }
    }

    /// The counters the metrics read.
    pub fn counters(&self) -> &Counters {
        &self.inner.counters
    }

    /// The leader's part, for shutdown.
    pub(crate) fn leader(&self) -> Option<&Leader> {
        match &self.inner.serving {
            Serving::Elected(l) => Some(l),
            Serving::Refused(_) => None,
        }
    }

    fn taking_part(&self) -> Result<&Leader, ApiError> {
        match &self.inner.serving {
            Serving::Elected(l) => Ok(l),
            Serving::Refused(why) => Err(ApiError::unavailable(503, why.clone(), 60)),
        }
    }

    /// `n` IDs (`1..=max_batch`, checked by the caller) from the leader: this node's own when it
    /// leads, else the leader's through a coalesced call.
    pub(crate) async fn ids(&self, n: u64) -> Result<RangeInclusive<u64>, ApiError> {
        let leader = self.taking_part()?;
        match leader.issue(n).await {
            Ok(ids) => {
                self.inner.counters.issued.fetch_add(n, Ordering::Relaxed);
                Ok(ids)
            }
            Err(Refusal::NotLeader { leader: Some(addr) }) if !self.inner.coalesce => {
                // One call per request (`monotonic.coalesce = false`), for comparison.
                let c = &self.inner.counters;
                c.forwarded(1, n);
                let answer = self.inner.forward.call(&addr, n).await;
                if answer.is_err() {
                    c.forward_failures.fetch_add(1, Ordering::Relaxed);
                }
                answer
            }
            Err(Refusal::NotLeader { leader: Some(_) }) => {
                Arc::clone(&self.inner).forwarded(n).await
            }
            Err(other) => Err(refusal(other)),
        }
    }

    /// `n` IDs issued here, never forwarded: the route a follower calls on its leader. A node
    /// that does not lead answers [`CODE_NOT_LEADER`].
    pub(crate) async fn range(&self, n: u64) -> Result<RangeInclusive<u64>, ApiError> {
        let leader = self.taking_part()?;
        let ids = leader.issue(n).await.map_err(refusal)?;
        self.inner.counters.issued.fetch_add(n, Ordering::Relaxed);
        Ok(ids)
    }
}

/// The answer for a refusal of the leader's part.
fn refusal(r: Refusal) -> ApiError {
    match r {
        Refusal::NotLeader { leader } => ApiError::unavailable(
            CODE_NOT_LEADER,
            match leader {
                Some(l) => format!("this node is not the monotonic leader; {l} is"),
                None => "no monotonic leader is known yet; one is elected within a lease".into(),
            },
            1,
        ),
        Refusal::Unavailable(why) => ApiError::unavailable(503, why, 1),
        Refusal::TooMany { max } => ApiError::bad_request(format!(
            "at most {max} monotonic ids may be asked for at once"
        )),
        Refusal::Exhausted => ApiError::unavailable(
            CODE_EXHAUSTED,
            "the monotonic layout's last id was issued",
            60,
        ),
    }
}

/// How a follower reaches its leader when the nodes' ports speak TLS (`[server.tls]`): the
/// leader's certificate verified against `ca` (`monotonic.forward_ca_file`, else
/// `server.tls.client_ca_file`) for `server_name` (`monotonic.forward_server_name`, else the
/// leader's address), and the node's own certificate presented when the leader asks for one.
/// The client token travels only once the leader's certificate is verified.
#[derive(Clone, Debug)]
pub(crate) struct ForwardTls {
    /// The key that names the CA file, and the file; `None`: neither is set, and forwarding
    /// fails saying so.
    pub(crate) ca: Option<(&'static str, PathBuf)>,
    /// The name the leader's certificate must carry.
    pub(crate) server_name: Option<String>,
    /// The node's own `[server.tls]`: its certificate and key, presented as a client's.
    pub(crate) own: TlsConfig,
}

impl ForwardTls {
    /// A TLS stream to the leader at `addr` (`host:port`) over `tcp`.
    async fn connect(
        &self,
        addr: &str,
        tcp: tokio::net::TcpStream,
    ) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, String> {
        let (key, ca) = self.ca.as_ref().ok_or(
            "server.tls is on and neither monotonic.forward_ca_file nor server.tls.client_ca_file \
             names the CAs to verify the leader's certificate with",
        )?;
        let config = verified_client(key, ca, &self.own).map_err(|(k, e)| format!("{k}: {e}"))?;
        let host = match &self.server_name {
            Some(name) => name.clone(),
            None => addr.rsplit_once(':').map_or(addr, |(h, _)| h).to_string(),
        };
        let name = server_name(&host).map_err(|e| e.to_string())?;
        let handshake = tokio_rustls::TlsConnector::from(config).connect(name, tcp);
        tokio::time::timeout(FORWARD_TIMEOUT, handshake)
            .await
            .map_err(|_| "the TLS handshake timed out".to_string())?
            .map_err(|e| format!("TLS with the leader ({host}): {e}"))
    }
}

/// The follower's side: one HTTP/2 connection to the leader, and the queue of requests waiting
/// for the next call.
struct Forwarder {
    tokens: Arc<TokenSets>,
    /// TLS to the leader, where the nodes' ports speak it.
    tls: Option<ForwardTls>,
    /// The leader's address and the connection to it.
    link: tokio::sync::Mutex<Option<(String, SendRequest<Empty<Bytes>>)>>,
    queue: Mutex<Queue>,
    /// Whether the last call failed (for the log).
    failing: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Forwarder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forwarder").finish_non_exhaustive()
    }
}

type Answer = oneshot::Sender<Result<RangeInclusive<u64>, ApiError>>;

#[derive(Default)]
struct Queue {
    waiting: Vec<(u64, Answer)>,
    /// Whether a task is making calls (it takes the queue until it is empty).
    driving: bool,
}

impl Inner {
    async fn forwarded(self: Arc<Self>, n: u64) -> Result<RangeInclusive<u64>, ApiError> {
        let (tx, rx) = oneshot::channel();
        let drive = {
            let mut q = self
                .forward
                .queue
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            q.waiting.push((n, tx));
            !std::mem::replace(&mut q.driving, true)
        };
        if drive {
            // A task of its own: a caller that goes away does not strand the others.
            tokio::spawn(Arc::clone(&self).drive());
        }
        rx.await.unwrap_or_else(|_| {
            Err(ApiError::unavailable(
                503,
                "the call to the monotonic leader was dropped",
                1,
            ))
        })
    }

    /// Calls the leader until no request waits: each call takes every request queued by then
    /// (up to [`MAX_ISSUE`] IDs) and shares the range out in their order. The leader is looked
    /// up for each call: a new one is called as soon as this node's campaign learns of it, and
    /// a node elected meanwhile answers the batch itself.
    async fn drive(self: Arc<Self>) {
        loop {
            let batch: Vec<(u64, Answer)> = {
                let mut q = self
                    .forward
                    .queue
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                if q.waiting.is_empty() {
                    q.driving = false;
                    return;
                }
                let mut total = 0;
                let take = q
                    .waiting
                    .iter()
                    .take_while(|(n, _)| {
                        total += n;
                        total <= MAX_ISSUE
                    })
                    .count()
                    .max(1);
                q.waiting.drain(..take).collect()
            };
            let total: u64 = batch.iter().map(|(n, _)| n).sum();
            let c = &self.counters;
            let result = match &self.serving {
                Serving::Elected(leader) => match leader.issue(total).await {
                    Err(Refusal::NotLeader { leader: Some(addr) }) => {
                        c.forwarded(batch.len() as u64, total);
                        // A call to a leader that stopped answering is given up as soon as the
                        // campaign learns of another one (or elects this node).
                        let moved = async {
                            loop {
                                tokio::time::sleep(LEADER_CHECK).await;
                                let s = leader.status();
                                if s.leader || s.leader_hint.as_deref() != Some(addr.as_str()) {
                                    return;
                                }
                            }
                        };
                        tokio::select! {
                            r = self.forward.call(&addr, total) => r,
                            () = moved => {
                                self.forward.forget(&authority(&addr)).await;
                                Err(ApiError::unavailable(
                                    CODE_NOT_LEADER,
                                    format!("{addr} stopped leading before it answered"),
                                    1,
                                ))
                            }
                        }
                    }
                    Ok(ids) => {
                        c.issued.fetch_add(total, Ordering::Relaxed);
                        Ok(ids)
                    }
                    Err(other) => Err(refusal(other)),
                },
                Serving::Refused(why) => Err(ApiError::unavailable(503, why.clone(), 60)),
            };
            match result {
                Ok(range) => {
                    let mut next = *range.start();
                    for (n, answer) in batch {
                        let _ = answer.send(Ok(next..=next + (n - 1)));
                        next += n;
                    }
                }
                Err(e) => {
                    c.forward_failures.fetch_add(1, Ordering::Relaxed);
                    for (_, answer) in batch {
                        let _ = answer.send(Err(e.clone()));
                    }
                }
            }
        }
    }
}

impl Forwarder {
    /// One call to the leader at `addr` for `n` IDs: the range it issued.
    async fn call(&self, addr: &str, n: u64) -> Result<RangeInclusive<u64>, ApiError> {
        let unreachable = |why: String| {
            // Once per outage at warn: during a failover every request would say it again.
            if self.failing.swap(true, Ordering::Relaxed) {
                tracing::debug!(leader = addr, "monotonic forwarding failed: {why}");
            } else {
                tracing::warn!(leader = addr, "monotonic forwarding failed: {why}");
            }
            ApiError::unavailable(
                503,
                format!("the monotonic leader {addr} could not be reached"),
                1,
            )
        };
        let authority = authority(addr);
        let mut sender = self.sender(&authority).await.map_err(unreachable)?;
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let mut req = Request::get(format!("{scheme}://{authority}{RANGE_ROUTE}?count={n}"))
            .body(Empty::<Bytes>::new())
            .map_err(|e| unreachable(e.to_string()))?;
        if let Some(token) = self.tokens.client.first()
            && let Ok(v) = HeaderValue::from_str(&format!("Bearer {token}"))
        {
            req.headers_mut().insert(header::AUTHORIZATION, v);
        }
        let answer = tokio::time::timeout(FORWARD_TIMEOUT, async {
            let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
            let status = resp.status();
            let body = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| e.to_string())?
                .to_bytes();
            Ok::<_, String>((status, body))
        })
        .await;
        let (status, body) = match answer {
            Ok(Ok(a)) => a,
            Ok(Err(why)) => {
                self.forget(&authority).await;
                return Err(unreachable(why));
            }
            Err(_) => {
                self.forget(&authority).await;
                return Err(unreachable("no answer in time".into()));
            }
        };
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        if status != StatusCode::OK {
            // Not the leader any more, or it cannot issue now: this node's callers retry.
            let message = json["message"].as_str().unwrap_or("no message").to_string();
            return Err(ApiError::unavailable(
                CODE_NOT_LEADER,
                format!("the monotonic leader {addr} answered {status}: {message}"),
                1,
            ));
        }
        let (first, last) = (json["first"].as_u64(), json["last"].as_u64());
        match (first, last) {
            (Some(first), Some(last))
                if last.checked_sub(first) == Some(n - 1) && i64::try_from(last).is_ok() =>
            {
                if self.failing.swap(false, Ordering::Relaxed) {
                    tracing::info!(leader = addr, "monotonic forwarding works again");
                }
                Ok(first..=last)
            }
            _ => Err(unreachable(format!("an answer that is not a range of {n}"))),
        }
    }

    /// The connection to `addr`, made (HTTP/2 with prior knowledge) when there is none or it
    /// went to another leader.
    async fn sender(&self, addr: &str) -> Result<SendRequest<Empty<Bytes>>, String> {
        let mut link = self.link.lock().await;
        if let Some((a, s)) = link.as_ref()
            && a == addr
            && !s.is_closed()
        {
            return Ok(s.clone());
        }
        let tcp = tokio::time::timeout(FORWARD_TIMEOUT, tokio::net::TcpStream::connect(addr))
            .await
            .map_err(|_| "connecting timed out".to_string())?
            .map_err(|e| e.to_string())?;
        let _ = tcp.set_nodelay(true);
        let sender = match &self.tls {
            None => h2_over(TokioIo::new(tcp)).await?,
            Some(tls) => h2_over(TokioIo::new(tls.connect(addr, tcp).await?)).await?,
        };
        *link = Some((addr.to_string(), sender.clone()));
        Ok(sender)
    }

    async fn forget(&self, addr: &str) {
        let mut link = self.link.lock().await;
        if link.as_ref().is_some_and(|(a, _)| a == addr) {
            *link = None;
        }
    }
}

/// An HTTP/2 connection (prior knowledge, or `h2` by ALPN) over `io`, driven by a task of its
/// own: its sender.
async fn h2_over<T>(io: TokioIo<T>) -> Result<SendRequest<Empty<Bytes>>, String>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "connection to the monotonic leader ended");
        }
    });
    Ok(sender)
}

/// An identity `ip:port` as the authority of a URI and a socket address: an IPv6 address in
/// brackets (`[2001:db8::5]:8080`).
fn authority(identity: &str) -> String {
    match identity.rsplit_once(':') {
        Some((ip, port)) if ip.contains(':') && !ip.starts_with('[') => format!("[{ip}]:{port}"),
        _ => identity.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::authority;

    #[test]
    fn identities_become_authorities() {
        assert_eq!(authority("10.0.0.1:8080"), "10.0.0.1:8080");
        assert_eq!(authority("2001:db8::5:8080"), "[2001:db8::5]:8080");
        assert_eq!(authority("[::1]:8080"), "[::1]:8080");
        assert_eq!(authority("::1:80"), "[::1]:80");
    }
}
