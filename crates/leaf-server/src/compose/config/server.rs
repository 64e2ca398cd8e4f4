//! `[server]` (the listener, its limits and timeouts, the tokens, the names it answers to) and
//! `[log]`.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use leaf_core::Result;
use serde::{Deserialize, Serialize};

use super::tokens::{self, Tokens};
use super::{bad, check_bounds};

/// `[server]`.
#[derive(Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// The address to listen on. Default `0.0.0.0:8080`.
    pub listen: SocketAddr,
    /// The bearer token of the admin routes (`/v1/tags`, `PATCH /v1/tags/{tag}`, `/cache`,
    /// `/db`): one, or a list (any of them passes: old and new during a rotation). Default
    /// empty: the admin routes serve loopback peers only. Behind a reverse proxy on the same
    /// host every client looks local, so such deployments must set a token.
    pub admin_token: Tokens,
    /// A file of more admin tokens, one per line, re-read within a second or two of a change
    /// (a rotation needs no restart). Default none.
    pub admin_token_file: Option<PathBuf>,
    /// The bearer token of the ID routes (`/api/segment/get`, `/api/snowflake/get`,
    /// `/v1/segment`, `/v1/snowflake`) and of the routes of clients that lease segments
    /// (`POST /v1/segment/{tag}/allocate`, `GET /v1/tags/{tag}`): one, or a list. Default
    /// empty: those routes are open to every client, as in Leaf. Leaf's own clients send no
    /// token: set it only when every client does.
    pub client_token: Tokens,
    /// A file of more client tokens, as `admin_token_file`.
    pub client_token_file: Option<PathBuf>,
    /// The bearer token of `/metrics`, which names every tag: one, or a list. Default empty:
    /// `/metrics` takes the client tokens when those are set, and is open to every client when
    /// neither is.
    pub metrics_token: Tokens,
    /// A file of more metrics tokens, as `admin_token_file`.
    pub metrics_token_file: Option<PathBuf>,
    /// The names a request may call this server by (its `Host`), each `name` (any port) or
    /// `name:port`, compared without regard to letter case; an IP address and `localhost`
    /// always pass (no DNS name: nothing to rebind). A list, or one string of comma-separated
    /// entries. Default empty: any `Host`. Set it where a node is reached by name: a page whose
    /// name an attacker points at the node (DNS rebinding) is refused on every route, and
    /// only a page of a listed name may send `POST /v1/segment/{tag}/allocate` from a browser.
    #[serde(deserialize_with = "list_or_commas")]
    pub allowed_hosts: Vec<String>,
    /// The largest `count` of one batch request. Default 10000.
    pub max_batch: usize,
    /// The largest request body, in bytes. Default 65536.
    pub max_body_bytes: usize,
    /// The largest request head (request line and headers), in bytes; at least 8192.
    /// Default 16384.
    pub max_header_bytes: usize,
    /// A connection that has not sent a complete request head within this many seconds is closed;
    /// this bounds idle keep-alive connections and slow clients alike. A request body gets as
    /// long (then 408), and so do a connection's first bytes, which tell HTTP/1.1 from HTTP/2.
    /// An HTTP/2 connection (gRPC, h2c) with no request in flight for as long is closed.
    /// Default 30.
    pub idle_timeout_s: u64,
    /// A connection whose response cannot be written for this many seconds (the client does not
    /// read it) is closed, so that a client pipelining requests it never reads holds no memory.
    /// The same holds for an HTTP/2 answer whose client keeps its flow-control window shut (a
    /// gRPC stream never read). Like nginx's `send_timeout`, it bounds a stall, not a slow but
    /// steady reader. Default 30.
    pub write_timeout_s: u64,
    /// The most connections served at once; one more is closed as soon as it is accepted
    /// (`leaf_connections_refused_total`). Each connection holds at most
    /// `http2_max_concurrent_streams` requests. Default 4096.
    pub max_connections: usize,
    /// At shutdown, requests in flight get this many seconds to finish. Default 10.
    pub shutdown_timeout_s: u64,
    /// Serve the gRPC API (`proto/leaf/v1/leaf.proto`) on the same port, to requests whose
    /// `Content-Type` is `application/grpc`. Default true; false answers them as HTTP (a JSON
    /// 404 from the router's fallback, which a gRPC client reports as an error).
    pub grpc: bool,
    /// The most IDs one gRPC stream (`StreamSegmentIds`, `StreamSnowflakeIds`) may ask for.
    /// Default 1000000.
    pub grpc_max_stream_ids: u64,
    /// The IDs per message of a stream that asks for chunk 0, lowered to `max_batch` when above
    /// it (`max_batch` also caps the chunk a stream may ask for). Default 1000.
    pub grpc_chunk: usize,
    /// The most `grpc.health.v1.Health/Watch` streams open at once on this server (they need
    /// no token); one more is `RESOURCE_EXHAUSTED`. Default 1024.
    pub grpc_max_watches: usize,
    /// The most concurrent HTTP/2 streams (gRPC calls in flight) on one connection. Default 256.
    pub http2_max_concurrent_streams: u32,
    /// An HTTP/2 connection is pinged after this many seconds without a frame, and closed when
    /// the ping is not answered within as many seconds again. Default 20.
    pub http2_keepalive_s: u64,
    /// `[server.tls]`: TLS on the port, for HTTP/1.1, HTTP/2 and gRPC alike. Default off.
    pub tls: TlsConfig,
}

/// `[server.tls]`: the port speaks TLS (rustls) when `cert_file` and `key_file` are set.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct TlsConfig {
    /// The server's certificate chain (PEM, the leaf first). Read again within a second or two
    /// of a change, and on SIGHUP; a pair that does not load keeps the one before.
    pub cert_file: Option<PathBuf>,
    /// The private key of `cert_file` (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key_file: Option<PathBuf>,
    /// The certificate authorities (PEM) whose client certificates are accepted. Set, a client
    /// that presents a certificate it did not issue, or an expired one, fails its handshake,
    /// and the routes of `client_auth` refuse a connection that presented none.
    pub client_ca_file: Option<PathBuf>,
    /// Which routes need a client certificate: `all` (every route but the probes', `/healthz`,
    /// `/readyz`, `/metrics`, `/v1/time` and gRPC health) or `admin` (the admin routes and the
    /// console, and the routes that hand out IDs or ranges). Default `all` once
    /// `client_ca_file` is set.
    pub client_auth: Option<ClientAuth>,
}

/// The routes that need a client certificate (`server.tls.client_auth`).
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ClientAuth {
    /// Every route but the probes'.
    All,
    /// The admin routes, the console, and the routes that hand out IDs or ranges.
    Admin,
}

impl TlsConfig {
    /// Whether the port speaks TLS.
    pub fn enabled(&self) -> bool {
        self.cert_file.is_some()
    }

    fn validate(&self) -> Result<()> {
        match (&self.cert_file, &self.key_file) {
            (Some(_), None) => {
                return bad(
                    "server.tls.key_file",
                    "is not set, and server.tls.cert_file is: the certificate needs its key".into(),
                );
            }
            (None, Some(_)) => {
                return bad(
                    "server.tls.cert_file",
                    "is not set, and server.tls.key_file is: the key needs its certificate".into(),
                );
            }
            (None, None) if self.client_ca_file.is_some() => {
                return bad(
                    "server.tls.client_ca_file",
                    "needs TLS on the port: set server.tls.cert_file and server.tls.key_file"
                        .into(),
                );
            }
            _ => {}
        }
        if self.client_auth.is_some() && self.client_ca_file.is_none() {
            return bad(
                "server.tls.client_auth",
                "needs server.tls.client_ca_file, the authorities whose client certificates \
                 are accepted"
                    .into(),
            );
        }
        if self.enabled() {
            crate::http::tls::Material::read(self)
                .map_err(|(key, why)| leaf_core::Error::Config(format!("{key}: {why}")))?;
        }
        Ok(())
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: SocketAddr::from(([0, 0, 0, 0], 8080)),
            admin_token: Tokens::default(),
            admin_token_file: None,
            client_token: Tokens::default(),
            client_token_file: None,
            metrics_token: Tokens::default(),
            metrics_token_file: None,
            allowed_hosts: Vec::new(),
            max_batch: 10_000,
            max_body_bytes: 64 * 1024,
            max_header_bytes: 16 * 1024,
            idle_timeout_s: 30,
            write_timeout_s: 30,
            max_connections: 4096,
            shutdown_timeout_s: 10,
            grpc: true,
            grpc_max_stream_ids: 1_000_000,
            grpc_chunk: 1000,
            grpc_max_watches: 1024,
            http2_max_concurrent_streams: 256,
            http2_keepalive_s: 20,
            tls: TlsConfig::default(),
        }
    }
}

impl fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerConfig")
            .field("listen", &self.listen)
            .field("admin_token", &self.admin_token)
            .field("admin_token_file", &self.admin_token_file)
            .field("client_token", &self.client_token)
            .field("client_token_file", &self.client_token_file)
            .field("metrics_token", &self.metrics_token)
            .field("metrics_token_file", &self.metrics_token_file)
            .field("allowed_hosts", &self.allowed_hosts)
            .field("max_batch", &self.max_batch)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("max_header_bytes", &self.max_header_bytes)
            .field("idle_timeout_s", &self.idle_timeout_s)
            .field("write_timeout_s", &self.write_timeout_s)
            .field("max_connections", &self.max_connections)
            .field("shutdown_timeout_s", &self.shutdown_timeout_s)
            .field("grpc", &self.grpc)
            .field("grpc_max_stream_ids", &self.grpc_max_stream_ids)
            .field("grpc_chunk", &self.grpc_chunk)
            .field("grpc_max_watches", &self.grpc_max_watches)
            .field(
                "http2_max_concurrent_streams",
                &self.http2_max_concurrent_streams,
            )
            .field("http2_keepalive_s", &self.http2_keepalive_s)
            .field("tls", &self.tls)
            .finish()
    }
}

/// A list as a list, or as one string of comma-separated entries (the form an environment
/// variable gives most easily: `LEAF_SERVER__ALLOWED_HOSTS=leaf.example,leaf.example:8080`).
fn list_or_commas<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum List {
        List(Vec<String>),
        Commas(String),
    }
    Ok(match List::deserialize(d)? {
        List::List(list) => list,
        List::Commas(text) => text
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(str::to_owned)
            .collect(),
    })
}

/// `[log]`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// `text` (human-readable lines) or `json` (one object per line). Default `text`.
    pub format: LogFormat,
    /// A `tracing` filter: a level (`info`) or directives (`info,leaf_segment=debug`).
    /// Default `info`.
    pub level: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            format: LogFormat::Text,
            level: "info".into(),
        }
    }
}

/// How log lines look.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

impl ServerConfig {
    pub(super) fn validate(&self) -> Result<()> {
        self.tls.validate()?;
        for (key, tokens, file_key, file) in self.token_settings() {
            tokens::check_all(key, tokens)?;
            if let Some(path) = file {
                tokens::check_file(file_key, path)?;
            }
        }
        if let Err(why) = crate::http::hosts::AllowedHosts::parse(&self.allowed_hosts) {
            return bad("server.allowed_hosts", why);
        }
        check_bounds(&[
            ("server.max_batch", self.max_batch as u64, 1, 1_000_000),
            (
                "server.max_body_bytes",
                self.max_body_bytes as u64,
                1,
                64 << 20,
            ),
            // hyper needs 8192 for its read buffer.
            (
                "server.max_header_bytes",
                self.max_header_bytes as u64,
                8192,
                1 << 20,
            ),
            // Far above any need, and far from overflowing an `Instant`.
            ("server.idle_timeout_s", self.idle_timeout_s, 1, 86_400),
            ("server.write_timeout_s", self.write_timeout_s, 1, 86_400),
            (
                "server.max_connections",
                self.max_connections as u64,
                1,
                1_000_000,
            ),
            (
                "server.shutdown_timeout_s",
                self.shutdown_timeout_s,
                0,
                3_600,
            ),
            // A stream's count is a uint32 in the .proto.
            (
                "server.grpc_max_stream_ids",
                self.grpc_max_stream_ids,
                1,
                u64::from(u32::MAX),
            ),
            ("server.grpc_chunk", self.grpc_chunk as u64, 1, 1_000_000),
            (
                "server.grpc_max_watches",
                self.grpc_max_watches as u64,
                1,
                1_000_000,
            ),
            (
                "server.http2_max_concurrent_streams",
                u64::from(self.http2_max_concurrent_streams),
                1,
                10_000,
            ),
            ("server.http2_keepalive_s", self.http2_keepalive_s, 1, 3_600),
        ])
    }
}

impl ServerConfig {
    /// Each token setting: its key, its tokens, its file's key and its file.
    pub(crate) fn token_settings(
        &self,
    ) -> [(&'static str, &Tokens, &'static str, Option<&Path>); 3] {
        [
            (
                "server.admin_token",
                &self.admin_token,
                "server.admin_token_file",
                self.admin_token_file.as_deref(),
            ),
            (
                "server.client_token",
                &self.client_token,
                "server.client_token_file",
                self.client_token_file.as_deref(),
            ),
            (
                "server.metrics_token",
                &self.metrics_token,
                "server.metrics_token_file",
                self.metrics_token_file.as_deref(),
            ),
        ]
    }
}
