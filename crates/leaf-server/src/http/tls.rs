//! TLS on the one port (`[server.tls]`, rustls with ring).
//!
//! A connection's first byte tells TLS (a handshake record, 0x16) from a client that speaks
//! plain HTTP to a TLS port; that one gets an answer it can read (an HTTP/1.1 400; to a
//! prior-knowledge HTTP/2 client such as a plaintext gRPC channel, its first request answered
//! with gRPC `UNAVAILABLE` or an HTTP 400) and is closed, never left hanging. The handshake must end within
//! `server.idle_timeout_s`; ALPN offers `h2` and `http/1.1`, and the connection then serves as a
//! plain one does (`crate::http::sniff` tells the protocol from the decrypted bytes).
//!
//! The certificate files are read again every second and on SIGHUP ([`ServerTls::watch`]); a
//! pair that changed and loads replaces the one before for new connections (connections open
//! keep theirs), one that does not load keeps the one before, logged and counted
//! (`leaf_tls_reloads_total{result}`).
//!
//! With `client_ca_file`, a client certificate is asked for but not required by the handshake:
//! one presented is verified (an unknown issuer or an expired certificate fails the
//! handshake), and the routes of `server.tls.client_auth` refuse a connection that presented
//! none ([`ServerTls::needs_client_cert`]), so that the probes' routes stay reachable.

mod expiry;

use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::{DigitallySignedStruct, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

use crate::compose::config::{ClientAuth, TlsConfig};
use crate::node::metrics::Metrics;

/// How often the certificate files are read again.
const REREAD_EVERY: Duration = Duration::from_secs(1);

/// The first byte of a TLS connection: a handshake record.
const HANDSHAKE_RECORD: u8 = 0x16;

/// What a client that speaks plain HTTP to a TLS port is told.
const PLAINTEXT_REFUSED: &str = "this port speaks TLS (server.tls): use https://, or a gRPC \
                                 channel with TLS credentials";

/// The ring provider, shared by every configuration made here.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A key of `[server.tls]` and what is wrong with it.
pub(crate) type KeyError = (&'static str, String);

/// The files of `[server.tls]` as read once: the rustls configuration made of them, the
/// certificate's expiry, and their bytes (to tell a change).
pub(crate) struct Material {
    config: Arc<rustls::ServerConfig>,
    /// The leaf certificate's `notAfter`, in seconds since the epoch.
    not_after: i64,
    bytes: Vec<Vec<u8>>,
}

/// The bytes of each file of `tls`, in the order cert, key, client CA; an error names the key.
fn read_files(tls: &TlsConfig) -> Result<Vec<Vec<u8>>, KeyError> {
    let files = [
        ("server.tls.cert_file", tls.cert_file.as_deref()),
        ("server.tls.key_file", tls.key_file.as_deref()),
        ("server.tls.client_ca_file", tls.client_ca_file.as_deref()),
    ];
    let mut bytes = Vec::new();
    for (key, path) in files {
        let Some(path) = path else {
            bytes.push(Vec::new());
            continue;
        };
        bytes.push(
            std::fs::read(path)
                .map_err(|e| (key, format!("cannot read {}: {e}", path.display())))?,
        );
    }
    Ok(bytes)
}

/// The certificates of a PEM file; an error names the key and file.
fn certificates(
    key: &'static str,
    path: Option<&Path>,
    pem: &[u8],
) -> Result<Vec<CertificateDer<'static>>, KeyError> {
    let shown = path.map(|p| p.display().to_string()).unwrap_or_default();
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| (key, format!("{shown}: not PEM certificates: {e}")))?;
    if certs.is_empty() {
        return Err((key, format!("{shown} holds no CERTIFICATE block")));
    }
    Ok(certs)
}

impl Material {
    /// Reads and checks the files of `tls` (which has `cert_file` and `key_file`), as of `now`
    /// (seconds since the epoch).
    pub(crate) fn read(tls: &TlsConfig) -> Result<Self, KeyError> {
        Self::from_bytes(tls, read_files(tls)?, expiry::now())
    }

    fn from_bytes(tls: &TlsConfig, bytes: Vec<Vec<u8>>, now: i64) -> Result<Self, KeyError> {
        let chain = certificates("server.tls.cert_file", tls.cert_file.as_deref(), &bytes[0])?;
        let shown = |p: &Option<std::path::PathBuf>| {
            p.as_deref()
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        };
        let key = PrivateKeyDer::from_pem_slice(&bytes[1]).map_err(|e| {
            (
                "server.tls.key_file",
                format!("{}: not a PEM private key: {e}", shown(&tls.key_file)),
            )
        })?;
        let not_after = expiry::not_after(&chain[0]).ok_or_else(|| {
            (
                "server.tls.cert_file",
                format!(
                    "{}: its first certificate cannot be read",
                    shown(&tls.cert_file)
                ),
            )
        })?;
        if not_after <= now {
            return Err((
                "server.tls.cert_file",
                format!(
                    "{}: the certificate expired at {} (notAfter)",
                    shown(&tls.cert_file),
                    expiry::show(not_after)
                ),
            ));
        }
        let provider = provider();
        let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| ("server.tls.cert_file", e.to_string()))?;
        let builder = match &tls.client_ca_file {
            None => builder.with_no_client_auth(),
            Some(path) => {
                let key = "server.tls.client_ca_file";
                let mut roots = rustls::RootCertStore::empty();
                for ca in certificates(key, Some(path), &bytes[2])? {
                    roots
                        .add(ca)
                        .map_err(|e| (key, format!("{}: {e}", path.display())))?;
                }
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                        .allow_unauthenticated()
                        .build()
                        .map_err(|e| (key, format!("{}: {e}", path.display())))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder.with_single_cert(chain, key).map_err(|e| {
            (
                "server.tls.key_file",
                format!(
                    "{} does not go with server.tls.cert_file {}: {e}",
                    shown(&tls.key_file),
                    shown(&tls.cert_file)
                ),
            )
        })?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        if tls.client_ca_file.is_some() {
            // A resumed session carries the client certificate of its first handshake without
            // verifying it again: a certificate that expired or a CA file that changed since
            // would still pass. With client certificates, every connection has a full handshake.
            config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
            config.send_tls13_tickets = 0;
        }
        Ok(Material {
            config: Arc::new(config),
            not_after,
            bytes,
        })
    }
}

/// The port's TLS: the configuration in use, replaced when the files change.
pub(crate) struct ServerTls {
    files: TlsConfig,
    current: RwLock<Arc<rustls::ServerConfig>>,
    /// The bytes last read (loaded or not), so that one change is tried, logged and counted
    /// once.
    seen: Mutex<Result<Vec<Vec<u8>>, String>>,
    /// A change read once, taken if the next reading finds the same bytes.
    pending: Mutex<Option<Result<Vec<Vec<u8>>, String>>>,
    metrics: Option<Arc<Metrics>>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

/// What a reading of the files found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Reload {
    /// The files are as last read.
    Unchanged,
    /// They changed and were loaded.
    Loaded,
    /// They changed and do not load: the configuration before stays.
    Kept(String),
}

impl ServerTls {
    /// The TLS of `files` (checked at configuration time; read again here).
    pub(crate) fn new(files: &TlsConfig, metrics: Option<Arc<Metrics>>) -> Result<Self, String> {
        let material = Material::read(files).map_err(|(key, why)| format!("{key}: {why}"))?;
        if let Some(m) = &metrics {
            m.tls_loaded(material.not_after);
        }
        Ok(ServerTls {
            files: files.clone(),
            current: RwLock::new(Arc::clone(&material.config)),
            seen: Mutex::new(Ok(material.bytes)),
            pending: Mutex::new(None),
            metrics,
        })
    }

    fn config(&self) -> Arc<rustls::ServerConfig> {
        Arc::clone(&self.current.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Reads the files again: loads them if they changed (or `forced`, on SIGHUP).
    pub(crate) fn reload(&self, forced: bool) -> Reload {
        let bytes = read_files(&self.files).map_err(|(key, why)| format!("{key}: {why}"));
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if !forced && *seen == bytes {
            return Reload::Unchanged;
        }
        // A change is taken once it has held for one reading: cert-manager, the kubelet or a
        // `cp` replace the files one after another, and a reading between two of them would
        // pair a new certificate with the old key (an error, though nothing is wrong).
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        if !forced && pending.as_ref() != Some(&bytes) {
            *pending = Some(bytes);
            return Reload::Unchanged;
        }
        *pending = None;
        *seen = bytes.clone();
        drop((seen, pending));
        let loaded = bytes.and_then(|b| {
            Material::from_bytes(&self.files, b, expiry::now())
                .map_err(|(key, why)| format!("{key}: {why}"))
        });
        match loaded {
            Ok(material) => {
                *self.current.write().unwrap_or_else(|p| p.into_inner()) = material.config;
                if let Some(m) = &self.metrics {
                    m.tls_reloaded(true);
                    m.tls_loaded(material.not_after);
                }
                tracing::info!(
                    not_after = %expiry::show(material.not_after),
                    "TLS certificate loaded again; new connections use it"
                );
                Reload::Loaded
            }
            Err(why) => {
                if let Some(m) = &self.metrics {
                    m.tls_reloaded(false);
                }
                tracing::warn!(
                    error = %why,
                    "the TLS files changed but do not load; the certificate before stays in use"
                );
                Reload::Kept(why)
            }
        }
    }

    /// Reads the files again every [`REREAD_EVERY`], and at once on SIGHUP, for as long as it
    /// runs (the server ends it when it stops).
    pub(crate) async fn watch(self: Arc<Self>) {
        let mut every = tokio::time::interval(REREAD_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        #[cfg(unix)]
        let mut hangup =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
        loop {
            #[cfg(unix)]
            let forced = tokio::select! {
                _ = every.tick() => false,
                Some(()) = async {
                    match hangup.as_mut() {
                        Some(h) => h.recv().await,
                        None => std::future::pending().await,
                    }
                } => true,
            };
            #[cfg(not(unix))]
            let forced = {
                every.tick().await;
                false
            };
            if forced {
                tracing::info!("SIGHUP: reading the TLS files again");
            }
            let this = Arc::clone(&self);
            // File reads are blocking I/O, however small.
            let _ = tokio::task::spawn_blocking(move || this.reload(forced)).await;
        }
    }

    /// Whether a request for `path` needs a client certificate on this port.
    pub(crate) fn needs_client_cert(&self, path: &str) -> bool {
        let Some(auth) = self.client_auth() else {
            return false;
        };
        if is_probe_route(path) {
            return false;
        }
        match auth {
            ClientAuth::All => true,
            ClientAuth::Admin => !is_open_with_admin(path),
        }
    }

    fn client_auth(&self) -> Option<ClientAuth> {
        self.files
            .client_ca_file
            .as_ref()
            .map(|_| self.files.client_auth.unwrap_or(ClientAuth::All))
    }

    /// Accepts a TLS connection on `stream` within `limit`: `None` (after answering a plain
    /// client) when it is not one or its handshake fails. `wrap` goes between the socket and
    /// TLS (the write timeout).
    pub(crate) async fn accept<W>(
        &self,
        stream: TcpStream,
        limit: Duration,
        wrap: impl FnOnce(TcpStream) -> W,
    ) -> Option<TlsStream<W>>
    where
        W: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        // One deadline for the first bytes and the handshake together.
        let deadline = tokio::time::Instant::now() + limit;
        let mut first = [0u8; 3];
        let mut peeked = tokio::time::timeout_at(deadline, stream.peek(&mut first)).await;
        // A prior-knowledge HTTP/2 client is told by "PRI": a first segment shorter than that
        // gets a moment more, so that it is not answered in HTTP/1.
        if let Ok(Ok(n @ 1..3)) = peeked
            && first[0] == b'P'
        {
            tokio::time::sleep(Duration::from_millis(100).min(limit)).await;
            peeked = tokio::time::timeout_at(deadline, stream.peek(&mut first))
                .await
                .map(|r| r.map(|m| m.max(n)));
        }
        match peeked {
            Ok(Ok(n)) if n > 0 && first[0] == HANDSHAKE_RECORD => {}
            Ok(Ok(n)) if n > 0 => {
                if let Some(m) = &self.metrics {
                    m.tls_handshake_failed();
                }
                refuse_plaintext(stream, &first[..n]).await;
                return None;
            }
            // Closed, failed, or silent for the whole limit: not counted (a load balancer's
            // TCP check looks the same).
            _ => return None,
        }
        let acceptor = tokio_rustls::TlsAcceptor::from(self.config());
        match tokio::time::timeout_at(deadline, acceptor.accept(wrap(stream))).await {
            Ok(Ok(tls)) => Some(tls),
            Ok(Err(e)) => {
                if let Some(m) = &self.metrics {
                    m.tls_handshake_failed();
                }
                tracing::debug!(error = %e, "TLS handshake failed");
                None
            }
            Err(_) => {
                if let Some(m) = &self.metrics {
                    m.tls_handshake_failed();
                }
                tracing::debug!("TLS handshake not done within server.idle_timeout_s");
                None
            }
        }
    }
}

/// The routes a probe or a peer asks without a certificate whatever `client_auth` says:
/// health, readiness, metrics (which keep their own token rule), and the clock other nodes
/// read at start-up.
fn is_probe_route(path: &str) -> bool {
    matches!(path, "/healthz" | "/readyz" | "/metrics" | "/v1/time")
        || path.starts_with("/grpc.health.v1.Health/")
}

/// The routes open without a certificate under `client_auth = "admin"`: decoding and the
/// gRPC schema. Every other route (the admin routes, the console, IDs, ranges, a route that
/// does not exist) needs one, so that a route added later is guarded unless listed here.
fn is_open_with_admin(path: &str) -> bool {
    path == "/decodeSnowflakeId"
        || path.starts_with("/v1/decode/")
        || (path.starts_with("/v1/snowflake/") && path.ends_with("/decode"))
        || path == "/leaf.v1.Snowflake/DecodeSnowflake"
        || (path.starts_with("/v1/monotonic/") && path.ends_with("/decode"))
        || path == "/leaf.v1.Monotonic/DecodeMonotonic"
        || path.starts_with("/grpc.reflection.")
}

/// Whether a connection presented a client certificate that verified.
pub(crate) fn has_client_cert<W>(tls: &TlsStream<W>) -> bool {
    tls.get_ref()
        .1
        .peer_certificates()
        .is_some_and(|c| !c.is_empty())
}

/// Answers a client that spoke plain text to the TLS port, in its own protocol, and closes.
async fn refuse_plaintext(mut stream: TcpStream, first: &[u8]) {
    if first.starts_with(b"PRI") {
        return refuse_plaintext_http2(stream).await;
    }
    let answer = format!(
        "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{PLAINTEXT_REFUSED}\n",
        PLAINTEXT_REFUSED.len() + 1
    );
    // What the client sent is read first: closing a socket with unread bytes resets it, and
    // the client could lose the answer.
    let mut buf = [0u8; 4096];
    let _ = tokio::time::timeout(Duration::from_millis(100), stream.read(&mut buf)).await;
    let _ = stream.write_all(answer.as_bytes()).await;
    let _ = stream.shutdown().await;
    let drain = async { while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {} };
    let _ = tokio::time::timeout(Duration::from_secs(1), drain).await;
}

/// A prior-knowledge HTTP/2 client (a plaintext gRPC channel): its first request is answered
/// (gRPC `UNAVAILABLE`, or an HTTP 400, saying why), then the connection is shut down. A bare
/// GOAWAY is not enough: a gRPC channel reads it as "reconnect", and retries until its
/// deadline without ever learning why.
async fn refuse_plaintext_http2(stream: TcpStream) {
    let answered = Arc::new(tokio::sync::Notify::new());
    let service = {
        let answered = Arc::clone(&answered);
        hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
            answered.notify_one();
            let grpc = crate::grpc::is_grpc(req.headers());
            async move {
                Ok::<_, std::convert::Infallible>(if grpc {
                    tonic::Status::unavailable(PLAINTEXT_REFUSED).into_http::<axum::body::Body>()
                } else {
                    let mut resp = axum::response::Response::new(axum::body::Body::from(format!(
                        "{PLAINTEXT_REFUSED}\n"
                    )));
                    *resp.status_mut() = hyper::StatusCode::BAD_REQUEST;
                    resp.headers_mut().insert(
                        hyper::header::CONTENT_TYPE,
                        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
                    );
                    resp
                })
            }
        })
    };
    let conn = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
        .timer(hyper_util::rt::TokioTimer::new())
        .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
    let mut conn = std::pin::pin!(conn);
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        tokio::select! {
            _ = conn.as_mut() => return,
            () = answered.notified() => {}
        }
        conn.as_mut().graceful_shutdown();
        let _ = conn.await;
    })
    .await;
}

/// A TLS client that verifies the server's certificate against the CAs of `ca_file` (PEM, the
/// key `ca_key` names it in errors) and presents the node's own certificate and key (`own`'s
/// `cert_file` and `key_file`) to a server that asks for one; ALPN `h2`. The files are read
/// now, so a client made for each new connection uses rotated ones. A follower's link to its
/// monotonic leader.
pub(crate) fn verified_client(
    ca_key: &'static str,
    ca_file: &Path,
    own: &TlsConfig,
) -> Result<Arc<rustls::ClientConfig>, KeyError> {
    let pem = std::fs::read(ca_file)
        .map_err(|e| (ca_key, format!("cannot read {}: {e}", ca_file.display())))?;
    let mut roots = rustls::RootCertStore::empty();
    for ca in certificates(ca_key, Some(ca_file), &pem)? {
        roots
            .add(ca)
            .map_err(|e| (ca_key, format!("{}: {e}", ca_file.display())))?;
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| (ca_key, e.to_string()))?
        .with_root_certificates(roots);
    let bytes = read_files(own)?;
    let mut config = match own.cert_file.is_some() && own.key_file.is_some() {
        false => builder.with_no_client_auth(),
        true => {
            let chain = certificates("server.tls.cert_file", own.cert_file.as_deref(), &bytes[0])?;
            let key = PrivateKeyDer::from_pem_slice(&bytes[1])
                .map_err(|e| ("server.tls.key_file", format!("not a PEM private key: {e}")))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| ("server.tls.cert_file", e.to_string()))?
        }
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// A TLS client that does not verify the server's certificate: for the node's own probe on
/// loopback (`leaf-server probe`) and the start-up read of peers' clocks, which learn only
/// whether a node is up and what time it says; nothing secret travels, and peers are found by
/// address, which certificates seldom name.
pub(crate) fn unverified_client() -> Arc<rustls::ClientConfig> {
    let provider = provider();
    let config = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyServer(provider)))
        .with_no_client_auth();
    Arc::new(config)
}

/// The verifier of [`unverified_client`]: any certificate, with its signatures still checked.
#[derive(Debug)]
struct AnyServer(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyServer {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The server name a TLS client sends for `host` (a DNS name or an IP address).
pub(crate) fn server_name(host: &str) -> io::Result<ServerName<'static>> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_owned())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{host}: {e}")))
}

#[cfg(test)]
mod tests;
