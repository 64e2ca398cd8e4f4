//! The HTTP side: one pooled keep-alive client (hyper-util's, over hyper-rustls for `https://`
//! endpoints), one request to one endpoint within its timeout, and the failover loop that asks
//! the endpoints in turn until one answers, the answer is final, or the call's time is up.

use std::collections::BTreeMap;
use std::error::Error as StdError;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Uri};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use leaf_core::{Clock, Error, Result};

use crate::config::{ClientConfig, base_url};
use crate::endpoints::{Backoff, EndpointStatus, Endpoints};
use crate::error::{TokenKind, Verdict, judge, retry_after};

/// The largest answer read (a `GET /v1/tags` of a very large table fits).
const MAX_ANSWER_BYTES: usize = 64 << 20;

const USER_AGENT: &str = concat!("leaf-client/", env!("CARGO_PKG_VERSION"));

/// One request, as every endpoint gets it.
#[derive(Debug)]
pub(crate) struct Call {
    pub(crate) method: Method,
    /// The path and query, percent-encoded, starting with `/`.
    pub(crate) path: String,
    /// A JSON body, if any.
    pub(crate) body: Option<serde_json::Value>,
    /// Which token to send.
    pub(crate) token: TokenKind,
}

/// An answer of one endpoint.
struct Answer {
    status: u16,
    retry_after: Option<Duration>,
    body: Bytes,
}

/// The client's HTTP side, shared by the store and the pass-through calls.
#[derive(Debug)]
pub(crate) struct Transport {
    http: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    endpoints: Endpoints,
    clock: Arc<dyn Clock>,
    request_timeout: Duration,
    call_timeout: Duration,
    client_token: Option<HeaderValue>,
    admin_token: Option<HeaderValue>,
}

fn bearer(token: &str) -> Option<HeaderValue> {
    // `validate` has checked the characters; a token that still cannot be a header is not sent.
    (!token.is_empty())
        .then(|| HeaderValue::from_str(&format!("Bearer {token}")).ok())
        .flatten()
        .map(|mut v| {
            v.set_sensitive(true);
            v
        })
}

/// A final error of endpoint `url`'s answer `status`: a refused token names the endpoint and
/// the status (every endpoint would refuse it, but the operator looks at one); the others are
/// the same from every endpoint and stay as they are.
fn at_endpoint(e: Error, status: u16, url: &str) -> Error {
    match e {
        Error::Config(m) if matches!(status, 401 | 403) => Error::Config(format!("{url}: {m}")),
        other => other,
    }
}

/// An error and its causes on one line (`client error (Connect): tcp connect error: Connection
/// refused (os error 111)`).
fn chain(e: &dyn StdError) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

impl Transport {
    /// The transport of a validated `config`, with `tls` (its files, read) for its `https://`
    /// endpoints.
    pub(crate) fn new(
        config: &ClientConfig,
        tls: rustls::ClientConfig,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let ms = Duration::from_millis;
        let mut tcp = HttpConnector::new();
        tcp.set_connect_timeout(Some(ms(config.connect_timeout_ms)));
        tcp.set_nodelay(true);
        // The TLS layer takes `https://` URIs; the TCP one under it must let them through.
        tcp.enforce_http(false);
        // A handshake that fails (an unknown authority, a name that does not match) is a
        // connection error like a refused one: the next endpoint is asked.
        let connector = HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(tcp);
        let mut http = Client::builder(TokioExecutor::new());
        http.pool_idle_timeout(ms(config.pool_idle_timeout_ms))
            .pool_timer(TokioTimer::new());
        if config.pool_idle_timeout_ms == 0 {
            http.pool_max_idle_per_host(0);
        }
        let http = http.build(connector);
        let urls = config
            .endpoints
            .iter()
            .map(|e| base_url(e).map_or_else(|_| e.clone(), |(url, _)| url))
            .collect();
        let backoff = Backoff {
            min: ms(config.backoff_min_ms),
            max: ms(config.backoff_max_ms),
            max_retry_after: ms(config.max_retry_after_ms),
        };
        Transport {
            http,
            endpoints: Endpoints::new(urls, backoff),
            clock,
            request_timeout: ms(config.request_timeout_ms),
            call_timeout: ms(config.call_timeout_ms),
            client_token: bearer(&config.client_token),
            admin_token: bearer(&config.admin_token),
        }
    }

    /// Whether an admin token is configured.
    pub(crate) fn has_admin_token(&self) -> bool {
        self.admin_token.is_some()
    }

    /// Every endpoint's state now.
    pub(crate) fn status(&self) -> Vec<EndpointStatus> {
        self.endpoints.status(self.clock.monotonic())
    }

    /// What `accept` makes of the first 2xx answer to `call` that it accepts, asking the
    /// endpoints in turn (the last good one first, skipping those backed off). A 2xx answer
    /// `accept` refuses (a proxy's page, a range below one already had) is that endpoint's
    /// failure, as a 5xx is: it is skipped, and the next one asked. A final error answer (an
    /// unknown tag, a malformed request, a refused token) ends the call at once. The call goes
    /// on until `call_timeout`, waiting for skipped endpoints; then `Unavailable` naming what
    /// each said.
    pub(crate) async fn call<T>(
        &self,
        call: &Call,
        accept: impl Fn(&Bytes) -> std::result::Result<T, String>,
    ) -> Result<T> {
        let deadline = self.clock.monotonic().saturating_add(self.call_timeout);
        // Per endpoint asked: how many attempts failed, and the last reason.
        let mut failures: BTreeMap<usize, (u32, String)> = BTreeMap::new();
        loop {
            for i in self.endpoints.ready(self.clock.monotonic()) {
                let left = deadline.saturating_sub(self.clock.monotonic());
                if left.is_zero() {
                    break;
                }
                let limit = self.request_timeout.min(left);
                let (why, status, retry_after) =
                    match tokio::time::timeout(limit, self.exchange(i, call)).await {
                        Ok(Ok(a)) if (200..300).contains(&a.status) => match accept(&a.body) {
                            Ok(value) => {
                                self.endpoints.answered(i, a.status);
                                return Ok(value);
                            }
                            Err(why) => (format!("{} but {why}", a.status), Some(a.status), None),
                        },
                        Ok(Ok(a)) => match judge(a.status, &a.body, a.retry_after, call.token) {
                            Verdict::Final(e) => {
                                self.endpoints.answered(i, a.status);
                                return Err(at_endpoint(e, a.status, self.endpoints.url(i)));
                            }
                            Verdict::MoveOn { why, retry_after } => {
                                (why, Some(a.status), retry_after)
                            }
                        },
                        Ok(Err(why)) => (why, None, None),
                        Err(_) => (
                            format!("no answer within {} ms", limit.as_millis()),
                            None,
                            None,
                        ),
                    };
                let url = self.endpoints.url(i);
                let now = self.clock.monotonic();
                let skip = self
                    .endpoints
                    .failed(i, now, retry_after, status, why.clone());
                tracing::debug!(endpoint = url, error = %why, skipped_for = ?skip, "leaf-server endpoint failed");
                let entry = failures.entry(i).or_default();
                *entry = (entry.0 + 1, why);
            }
            let now = self.clock.monotonic();
            if now >= deadline {
                return Err(self.unavailable(call, failures));
            }
            match self.endpoints.next_ready_at(now) {
                // Nothing answered: wait for the first skipped endpoint (its back-off or its
                // Retry-After) if that comes within the call's time.
                Some(at) if at < deadline => self.clock.sleep(at - now).await,
                Some(_) => return Err(self.unavailable(call, failures)),
                // None is skipped any more (a back-off ran out, another call's answer cleared
                // one): ask again while the call has time.
                None => {}
            }
        }
    }

    fn unavailable(&self, call: &Call, failures: BTreeMap<usize, (u32, String)>) -> Error {
        let said = if failures.is_empty() {
            // Every endpoint was skipped for longer than the call may last.
            self.status()
                .into_iter()
                .map(|s| {
                    format!(
                        "{}: skipped for {} ms after {}",
                        s.url,
                        s.skipped_for.as_millis(),
                        s.last_error.as_deref().unwrap_or("a failure")
                    )
                })
                .collect::<Vec<_>>()
        } else {
            failures
                .into_iter()
                .map(|(i, (attempts, why))| match attempts {
                    1 => format!("{}: {why}", self.endpoints.url(i)),
                    n => format!("{}: {why} ({n} attempts)", self.endpoints.url(i)),
                })
                .collect()
        };
        let e = Error::Unavailable(format!(
            "no leaf-server could serve {} {} within {} ms: {}",
            call.method,
            call.path,
            self.call_timeout.as_millis(),
            said.join("; ")
        ));
        tracing::warn!(error = %e, "leaf-server call failed");
        e
    }

    /// One request to endpoint `i`: its answer, or why there is none.
    async fn exchange(&self, i: usize, call: &Call) -> std::result::Result<Answer, String> {
        let uri: Uri = format!("{}{}", self.endpoints.url(i), call.path)
            .parse()
            .map_err(|e| format!("bad request URI: {e}"))?;
        let mut request = Request::builder()
            .method(call.method.clone())
            .uri(uri)
            .header(header::USER_AGENT, USER_AGENT)
            .header(header::ACCEPT, "application/json");
        let token = match call.token {
            TokenKind::Client => &self.client_token,
            TokenKind::Admin => &self.admin_token,
        };
        if let Some(t) = token {
            request = request.header(header::AUTHORIZATION, t.clone());
        }
        let body = match &call.body {
            Some(json) => {
                request = request.header(header::CONTENT_TYPE, "application/json");
                Full::new(Bytes::from(json.to_string()))
            }
            None => Full::new(Bytes::new()),
        };
        let request = request.body(body).map_err(|e| chain(&e))?;
        let response = self.http.request(request).await.map_err(|e| chain(&e))?;
        let status = response.status().as_u16();
        let retry_after = retry_after(
            response
                .headers()
                .get(header::RETRY_AFTER)
                .map(HeaderValue::as_bytes),
        );
        let body = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
            .collect()
            .await
            .map_err(|e| format!("reading the answer: {}", chain(&*e)))?
            .to_bytes();
        Ok(Answer {
            status,
            retry_after,
            body,
        })
    }
}
