//! `leaf-loadgen`: the load generator of `cargo xtask bench-http --grpc` and `--tls`. No gRPC
//! load generator installs here, and comparing gRPC with `oha`'s HTTP would compare two clients
//! as much as two protocols; so one program drives both, with the same connections and the same
//! concurrency: each of `--connections` tasks opens one connection (HTTP/1.1 keep-alive, or
//! HTTP/2 for gRPC) and keeps one request in flight on it for `--seconds` (gRPC: `--in-flight`
//! calls at once, each on its own HTTP/2 stream).
//!
//! ```text
//! leaf-loadgen ADDR KIND [--connections N] [--in-flight N] [--seconds S] [--tag T]
//!                        [--count N] [--chunk N] [--path P] [--ca FILE]
//! ```
//!
//! KIND: `http` (`GET /api/segment/get/{tag}`, or `/v1/segment/{tag}?count=N` when `--count`
//! is above 1, or `--path P`, any route, each answer counted as `--count` IDs), `grpc` (`NextSegmentIds { tag, count }`) or `grpc-stream`
//! (`StreamSegmentIds { tag, count, chunk }`, one stream after another); `connect` (a new
//! connection for every request: TCP connect, the TLS handshake with `--ca`, one `GET
//! /api/segment/get/{tag}` with `Connection: close`, its latency the whole connection's); and
//! `probe` (one `GET /readyz`, exit status 0 on a 200). Prints one JSON object: requests, IDs,
//! errors, seconds, latency percentiles in milliseconds (for a stream: per stream), and the
//! CPU time the generator itself spent (`cpu_s`, user and system, from `/proc/self/stat`;
//! absent off Linux).
//!
//! `--ca FILE`: over TLS (rustls with ring, TLS 1.3), the server's certificate checked against
//! the authority of FILE (PEM) and the address's IP; ALPN `http/1.1`, or `h2` for gRPC. Session
//! resumption is off, so that every `connect` pays a full handshake.
//!
//! ```text
//! leaf-loadgen --certs DIR
//! ```
//!
//! writes `ca.pem`, `server.pem` and `server.key` into DIR: an authority and a server
//! certificate it signed (ECDSA P-256) for `127.0.0.1` and `localhost`, the server's side of
//! `--ca`.
//!
//! ```text
//! leaf-loadgen --bare ADDR
//! ```
//!
//! serves the baseline instead: a bare hyper server (the same auto HTTP/1.1 + HTTP/2 builder as
//! leaf-server) whose only work is an atomic increment, answering any HTTP/1.1 request with the
//! number as text and any gRPC request as a unary call answers (headers, one message `{ids:
//! [n]}`, trailers with `grpc-status: 0`). It prints its address and serves until killed. The
//! ratio of its two protocols is the transport's, with no ID service in it.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Http,
    Grpc,
    GrpcStream,
    Connect,
    Probe,
}

#[derive(Clone)]
struct Options {
    addr: SocketAddr,
    kind: Kind,
    connections: usize,
    /// `--in-flight`: calls in flight at once on each gRPC connection (HTTP/2 streams).
    in_flight: usize,
    seconds: u64,
    tag: String,
    count: u32,
    chunk: u32,
    /// `--path`: the `http` kind's route instead of the segment ones (`--count` then says how
    /// many IDs an answer holds).
    path: Option<String>,
    /// `--ca`: the TLS client.
    tls: Option<Arc<rustls::ClientConfig>>,
}

fn parse() -> Result<Options> {
    let mut args = std::env::args().skip(1);
    let addr = args
        .next()
        .context("usage: leaf-loadgen ADDR KIND [...]")?
        .parse()
        .context("ADDR is host:port")?;
    let kind = match args.next().as_deref() {
        Some("http") => Kind::Http,
        Some("grpc") => Kind::Grpc,
        Some("grpc-stream") => Kind::GrpcStream,
        Some("connect") => Kind::Connect,
        Some("probe") => Kind::Probe,
        other => bail!("KIND is http, grpc, grpc-stream, connect or probe, got {other:?}"),
    };
    let mut o = Options {
        addr,
        kind,
        connections: 32,
        in_flight: 1,
        seconds: 10,
        tag: "leaf-segment-test".into(),
        count: 1,
        chunk: 0,
        path: None,
        tls: None,
    };
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .with_context(|| format!("{flag} needs a value"))?;
        let number = || -> Result<u64> {
            value
                .parse()
                .with_context(|| format!("{flag} takes a number, got {value:?}"))
        };
        match flag.as_str() {
            "--connections" => o.connections = number()? as usize,
            "--in-flight" => o.in_flight = (number()? as usize).max(1),
            "--seconds" => o.seconds = number()?,
            "--count" => o.count = number()? as u32,
            "--chunk" => o.chunk = number()? as u32,
            "--tag" => o.tag = value,
            "--path" => o.path = Some(value),
            "--ca" => {
                let alpn: &[u8] = match o.kind {
                    Kind::Grpc | Kind::GrpcStream => b"h2",
                    _ => b"http/1.1",
                };
                o.tls = Some(client_config(Path::new(&value), alpn)?);
            }
            other => bail!("unknown option {other:?}"),
        }
    }
    if o.in_flight > 1 && !matches!(o.kind, Kind::Grpc | Kind::GrpcStream) {
        bail!(
            "--in-flight is for grpc and grpc-stream: HTTP/1.1 has one request in flight per connection"
        );
    }
    Ok(o)
}

/// What one connection did.
#[derive(Default)]
struct Tally {
    requests: u64,
    ids: u64,
    errors: u64,
    /// Microseconds per request (per stream for `grpc-stream`).
    latencies: Vec<u32>,
}

impl Tally {
    /// The sum of what `tasks` did.
    async fn joined(tasks: Vec<tokio::task::JoinHandle<Result<Tally>>>) -> Result<Tally> {
        let mut all = Tally::default();
        for t in tasks {
            let t = t.await??;
            all.requests += t.requests;
            all.ids += t.ids;
            all.errors += t.errors;
            all.latencies.extend(t.latencies);
        }
        Ok(all)
    }
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    match args.next().as_deref() {
        Some("--bare") => {
            let addr = args.next().context("--bare ADDR")?;
            return tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?
                .block_on(bare(&addr));
        }
        Some("--certs") => return certs(Path::new(&args.next().context("--certs DIR")?)),
        _ => {}
    }
    let o = parse()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    if o.kind == Kind::Probe {
        let ok = runtime.block_on(probe(&o))?;
        std::process::exit(if ok { 0 } else { 1 });
    }
    let (tally, elapsed) = runtime.block_on(run(&o))?;
    let mut lat = tally.latencies;
    lat.sort_unstable();
    let pct = |p: f64| -> f64 {
        if lat.is_empty() {
            return f64::NAN;
        }
        let i = ((lat.len() as f64 * p).ceil() as usize).clamp(1, lat.len()) - 1;
        f64::from(lat[i]) / 1000.0
    };
    let secs = elapsed.as_secs_f64();
    let out = serde_json::json!({
        "cpu_s": cpu_seconds(),
        "requests": tally.requests,
        "ids": tally.ids,
        "errors": tally.errors,
        "seconds": secs,
        "requests_per_s": tally.requests as f64 / secs,
        "ids_per_s": tally.ids as f64 / secs,
        "p50_ms": pct(0.5),
        "p99_ms": pct(0.99),
        "p999_ms": pct(0.999),
    });
    println!("{out}");
    Ok(())
}

/// The CPU time this process spent, user and system, in seconds: fields 14 and 15 of
/// `/proc/self/stat`, in clock ticks of 1/100 s (Linux's `USER_HZ`).
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name, in parentheses, may hold spaces; the fields after it do not.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i)?.parse::<u64>().ok();
    Some((ticks(11)? + ticks(12)?) as f64 / 100.0)
}

async fn run(o: &Options) -> Result<(Tally, Duration)> {
    let started = Instant::now();
    let deadline = started + Duration::from_secs(o.seconds);
    let mut tasks = Vec::new();
    for _ in 0..o.connections {
        let o = o.clone();
        tasks.push(tokio::spawn(async move {
            if o.kind == Kind::Connect {
                return connects(&o, deadline).await;
            }
            let tcp = connect(o.addr).await?;
            match &o.tls {
                None => keep_alive(&o, deadline, tcp).await,
                Some(config) => keep_alive(&o, deadline, handshake(&o, config, tcp).await?).await,
            }
        }));
    }
    Ok((Tally::joined(tasks).await?, started.elapsed()))
}

async fn connect(addr: SocketAddr) -> Result<TcpStream> {
    let s = TcpStream::connect(addr).await?;
    s.set_nodelay(true)?;
    Ok(s)
}

/// The TLS client of `--ca`: the authority of `ca_file`, `alpn`, no session resumption.
fn client_config(ca_file: &Path, alpn: &[u8]) -> Result<Arc<rustls::ClientConfig>> {
    let pem = std::fs::read(ca_file).with_context(|| format!("--ca {}", ca_file.display()))?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        roots.add(cert.context("--ca: not PEM certificates")?)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    config.resumption = rustls::client::Resumption::disabled();
    Ok(Arc::new(config))
}

/// The TLS handshake on `tcp`, the server named by the address's IP.
async fn handshake(
    o: &Options,
    config: &Arc<rustls::ClientConfig>,
    tcp: TcpStream,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let name = ServerName::IpAddress(o.addr.ip().into());
    let connector = tokio_rustls::TlsConnector::from(Arc::clone(config));
    Ok(connector.connect(name, tcp).await?)
}

/// One connection, kept for the whole run.
async fn keep_alive<S>(o: &Options, deadline: Instant, io: S) -> Result<Tally>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    match o.kind {
        Kind::Http => http(o, deadline, io).await,
        _ => grpc(o, deadline, io).await,
    }
}

/// A new connection for every request (`connect`): the socket closed with a reset at the end,
/// so that a run leaves no TIME_WAIT behind to exhaust the ports.
async fn connects(o: &Options, deadline: Instant) -> Result<Tally> {
    let mut t = Tally::default();
    while Instant::now() < deadline {
        let start = Instant::now();
        let tcp = connect(o.addr).await?;
        tcp.set_zero_linger()?;
        let ok = match &o.tls {
            None => one_get(o, tcp, "/api/segment/get/").await?,
            Some(config) => {
                one_get(o, handshake(o, config, tcp).await?, "/api/segment/get/").await?
            }
        };
        t.latencies.push(start.elapsed().as_micros() as u32);
        t.requests += 1;
        if ok {
            t.ids += 1;
        } else {
            t.errors += 1;
        }
    }
    Ok(t)
}

/// One `GET {prefix}{tag}` (or `GET /readyz` for a `prefix` of `/readyz`) with `Connection:
/// close` on `io`: whether it answered 200.
async fn one_get<S>(o: &Options, io: S, prefix: &str) -> Result<bool>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
    tokio::spawn(conn);
    let path = match prefix {
        "/readyz" => prefix.to_owned(),
        _ => format!("{prefix}{}", o.tag),
    };
    let req = Request::get(path.as_str())
        .header("host", o.addr.to_string())
        .header("connection", "close")
        .body(Empty::<Bytes>::new())?;
    let resp = sender.send_request(req).await?;
    let ok = resp.status() == 200;
    resp.into_body().collect().await?;
    Ok(ok)
}

/// `probe`: one `GET /readyz`.
async fn probe(o: &Options) -> Result<bool> {
    let tcp = connect(o.addr).await?;
    match &o.tls {
        None => one_get(o, tcp, "/readyz").await,
        Some(config) => one_get(o, handshake(o, config, tcp).await?, "/readyz").await,
    }
}

/// `--certs DIR`.
fn certs(dir: &Path) -> Result<()> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    std::fs::create_dir_all(dir)?;
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "leaf-loadgen CA");
    let ca_cert = ca.self_signed(&ca_key)?;
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])?;
    params
        .distinguished_name
        .push(DnType::CommonName, "leaf-server");
    let cert = params.signed_by(&key, &ca_cert, &ca_key)?;
    std::fs::write(dir.join("ca.pem"), ca_cert.pem())?;
    std::fs::write(dir.join("server.pem"), cert.pem())?;
    std::fs::write(dir.join("server.key"), key.serialize_pem())?;
    Ok(())
}

async fn http<S>(o: &Options, deadline: Instant, io: S) -> Result<Tally>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
    tokio::spawn(conn);
    let path = match &o.path {
        Some(path) => path.clone(),
        None if o.count > 1 => format!("/v1/segment/{}?count={}", o.tag, o.count),
        None => format!("/api/segment/get/{}", o.tag),
    };
    let host = o.addr.to_string();
    let mut t = Tally::default();
    while Instant::now() < deadline {
        let req = Request::get(path.as_str())
            .header("host", host.as_str())
            .body(Empty::<Bytes>::new())?;
        let start = Instant::now();
        let resp = sender.send_request(req).await?;
        let ok = resp.status() == 200;
        resp.into_body().collect().await?;
        t.latencies.push(start.elapsed().as_micros() as u32);
        t.requests += 1;
        if ok {
            t.ids += u64::from(o.count.max(1));
        } else {
            t.errors += 1;
        }
    }
    Ok(t)
}

/// A protobuf varint.
fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The gRPC frame of `{1: tag, 2: count, 3: chunk}` (both requests have these fields).
fn request_frame(o: &Options) -> Bytes {
    let mut msg = vec![0x0a];
    varint(o.tag.len() as u64, &mut msg);
    msg.extend_from_slice(o.tag.as_bytes());
    msg.push(0x10);
    varint(u64::from(o.count.max(1)), &mut msg);
    if o.kind == Kind::GrpcStream && o.chunk > 0 {
        msg.push(0x18);
        varint(u64::from(o.chunk), &mut msg);
    }
    let mut framed = vec![0u8];
    framed.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    framed.extend_from_slice(&msg);
    framed.into()
}

/// The IDs in one answer message: field 1, packed varints (a varint ends at a byte below 0x80).
fn ids_in(msg: &[u8]) -> u64 {
    if msg.first() != Some(&0x0a) {
        return 0;
    }
    let mut len = 0usize;
    let mut i = 1;
    let mut shift = 0;
    while let Some(&b) = msg.get(i) {
        len |= usize::from(b & 0x7f) << shift;
        shift += 7;
        i += 1;
        if b < 0x80 {
            break;
        }
    }
    msg.get(i..i + len)
        .map_or(0, |ids| ids.iter().filter(|b| **b < 0x80).count() as u64)
}

/// Reads one gRPC answer to its end: the IDs in its messages, and whether `grpc-status` was 0.
async fn read_answer(resp: Response<Incoming>) -> Result<(u64, bool)> {
    let mut status_ok = resp
        .headers()
        .get("grpc-status")
        .map(|s| s.as_bytes() == b"0");
    let mut body = resp.into_body();
    let mut buf: Vec<u8> = Vec::new();
    let mut ids = 0;
    while let Some(frame) = body.frame().await {
        let frame = frame?;
        if let Some(trailers) = frame.trailers_ref() {
            status_ok = Some(
                trailers
                    .get("grpc-status")
                    .is_some_and(|s| s.as_bytes() == b"0"),
            );
            continue;
        }
        if let Some(data) = frame.data_ref() {
            buf.extend_from_slice(data);
            let mut at = 0;
            while buf.len() - at >= 5 {
                let len = u32::from_be_bytes([buf[at + 1], buf[at + 2], buf[at + 3], buf[at + 4]])
                    as usize;
                if buf.len() - at - 5 < len {
                    break;
                }
                ids += ids_in(&buf[at + 5..at + 5 + len]);
                at += 5 + len;
            }
            buf.drain(..at);
        }
    }
    Ok((ids, status_ok == Some(true)))
}

async fn grpc<S>(o: &Options, deadline: Instant, io: S) -> Result<Tally>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(io)).await?;
    tokio::spawn(conn);
    let method = match o.kind {
        Kind::GrpcStream => "StreamSegmentIds",
        _ => "NextSegmentIds",
    };
    let scheme = if o.tls.is_some() { "https" } else { "http" };
    let uri: Arc<str> = format!("{scheme}://{}/leaf.v1.Segment/{method}", o.addr).into();
    let frame = request_frame(o);
    // `--in-flight` calls at once on this connection, each on its own stream.
    let mut calls = Vec::new();
    for _ in 0..o.in_flight {
        let (sender, uri, frame) = (sender.clone(), uri.clone(), frame.clone());
        calls.push(tokio::spawn(async move {
            grpc_calls(deadline, sender, &uri, frame).await
        }));
    }
    Tally::joined(calls).await
}

/// One call after another on `sender` until `deadline`.
async fn grpc_calls(
    deadline: Instant,
    mut sender: hyper::client::conn::http2::SendRequest<Full<Bytes>>,
    uri: &str,
    frame: Bytes,
) -> Result<Tally> {
    let mut t = Tally::default();
    while Instant::now() < deadline {
        let req = Request::post(uri)
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(Full::new(frame.clone()))?;
        let start = Instant::now();
        sender.ready().await?;
        let resp = sender.send_request(req).await?;
        let ok_http = resp.status() == 200;
        let (ids, ok) = read_answer(resp).await?;
        t.latencies.push(start.elapsed().as_micros() as u32);
        t.requests += 1;
        t.ids += ids;
        if !(ok_http && ok) {
            t.errors += 1;
        }
    }
    Ok(t)
}

/// The baseline server of `--bare`.
async fn bare(addr: &str) -> Result<()> {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    let listener = tokio::net::TcpListener::bind(addr).await?;
    println!("{}", listener.local_addr()?);
    let counter = Arc::new(AtomicU64::new(0));
    loop {
        let (stream, _) = listener.accept().await?;
        stream.set_nodelay(true)?;
        let counter = counter.clone();
        let service = hyper::service::service_fn(move |req: Request<Incoming>| {
            let n = counter.fetch_add(1, Ordering::Relaxed) + 1;
            async move {
                let grpc = req
                    .headers()
                    .get("content-type")
                    .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"));
                let _ = req.into_body().collect().await;
                let resp = if grpc {
                    let mut ids = Vec::new();
                    varint(n, &mut ids);
                    let mut msg = vec![0x0a, ids.len() as u8];
                    msg.extend_from_slice(&ids);
                    let mut framed = vec![0u8];
                    framed.extend_from_slice(&(msg.len() as u32).to_be_bytes());
                    framed.extend_from_slice(&msg);
                    let mut trailers = hyper::HeaderMap::new();
                    trailers.insert("grpc-status", hyper::header::HeaderValue::from_static("0"));
                    Response::builder()
                        .header("content-type", "application/grpc")
                        .body(Unary {
                            data: Some(framed.into()),
                            trailers: Some(trailers),
                        })?
                } else {
                    Response::builder()
                        .header("content-type", "text/plain")
                        .body(Unary {
                            data: Some(n.to_string().into()),
                            trailers: None,
                        })?
                };
                Ok::<_, anyhow::Error>(resp)
            }
        });
        tokio::spawn(async move {
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            let _ = builder
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// A response body of one data frame and, for gRPC, trailers.
struct Unary {
    data: Option<Bytes>,
    trailers: Option<hyper::HeaderMap>,
}

impl hyper::body::Body for Unary {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        if let Some(d) = self.data.take() {
            return std::task::Poll::Ready(Some(Ok(hyper::body::Frame::data(d))));
        }
        std::task::Poll::Ready(
            self.trailers
                .take()
                .map(|t| Ok(hyper::body::Frame::trailers(t))),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_counted_from_a_packed_field() {
        // {1: [1, 300, 2^40]}: 1 byte, 2 bytes, 6 bytes.
        let mut ids = Vec::new();
        for v in [1u64, 300, 1 << 40] {
            varint(v, &mut ids);
        }
        let mut msg = vec![0x0a, ids.len() as u8];
        msg.extend_from_slice(&ids);
        assert_eq!(ids_in(&msg), 3);
        assert_eq!(ids_in(&[]), 0);
        assert_eq!(ids_in(&[0x0a, 0x00]), 0);
    }
}
