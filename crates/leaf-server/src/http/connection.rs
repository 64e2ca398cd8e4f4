//! One accepted connection, plaintext or TLS, served by hyper-util's auto builder: the peer's
//! address for the admin rule, the idle and unread-answer rules of `crate::http::sniff`, and the
//! client-certificate rule of `server.tls.client_auth` before any route runs.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::response::Response;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;

use crate::grpc::is_grpc;
use crate::http::sniff::{Activity, InFlight, SniffTimeout};
use crate::http::tls::ServerTls;
use crate::node::server::Frontend;

/// One accepted connection and what serving it needs.
pub(crate) struct Connection {
    pub(crate) frontend: Frontend,
    pub(crate) builder: auto::Builder<TokioExecutor>,
    pub(crate) watcher: hyper_util::server::graceful::Watcher,
    pub(crate) peer: SocketAddr,
    pub(crate) idle: Duration,
    pub(crate) write_timeout: Duration,
}

impl Connection {
    /// Serves `io` until it ends. `tls`: the port's TLS and whether the client presented a
    /// certificate that verified (the routes of `server.tls.client_auth` need one).
    pub(crate) async fn serve<I>(self, io: I, tls: Option<(Arc<ServerTls>, bool)>)
    where
        I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let Connection {
            frontend,
            builder,
            watcher,
            peer,
            idle,
            write_timeout,
        } = self;
        let activity = Activity::new(write_timeout);
        let requests = Arc::clone(&activity);
        let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
            // The peer comes from the socket, for the admin rule; never from a header.
            req.extensions_mut().insert(ConnectInfo(peer));
            // HTTP/2's idle time is counted from its last request's end (`crate::http::sniff`); an
            // HTTP/1 connection's is hyper's.
            let in_flight = (req.version() == hyper::Version::HTTP_2).then(|| requests.begin());
            let refused = tls.as_ref().and_then(|(tls, cert)| {
                (!cert && tls.needs_client_cert(req.uri().path()))
                    .then(|| no_client_cert(is_grpc(req.headers())))
            });
            let answer = frontend.clone();
            async move {
                let resp = match refused {
                    Some(refusal) => refusal,
                    None => answer.call(req).await?,
                };
                Ok::<_, Infallible>(match in_flight {
                    Some(guard) => resp.map(|body| {
                        axum::body::Body::new(Tracked {
                            body,
                            in_flight: guard,
                        })
                    }),
                    None => resp,
                })
            }
        });
        let io = TokioIo::new(SniffTimeout::new(io, idle, activity));
        if let Err(e) = watcher
            .watch(builder.serve_connection(io, service).into_owned())
            .await
        {
            tracing::debug!(%peer, error = %e, "connection ended with an error");
        }
    }
}

/// The answer to a request that needs a client certificate on a connection that presented
/// none: a gRPC `UNAUTHENTICATED`, or an HTTP 403 in the API's JSON.
fn no_client_cert(grpc: bool) -> Response {
    const WHY: &str = "this route needs a client certificate (server.tls.client_ca_file, \
                       server.tls.client_auth); the connection presented none";
    if grpc {
        tonic::Status::unauthenticated(WHY).into_http()
    } else {
        use axum::response::IntoResponse as _;
        let mut resp = crate::node::error::ApiError::new(axum::http::StatusCode::FORBIDDEN, WHY)
            .into_response();
        // As the router's answers (`crate::http::safety_headers`), which this one never reaches.
        let headers = resp.headers_mut();
        headers.insert(
            axum::http::header::X_CONTENT_TYPE_OPTIONS,
            axum::http::HeaderValue::from_static("nosniff"),
        );
        headers.insert(
            axum::http::header::CACHE_CONTROL,
            axum::http::HeaderValue::from_static("no-store"),
        );
        resp
    }
}

/// An HTTP/2 answer's body, which ends its request (for the idle rule) when hyper drops it,
/// and notes each frame it gives hyper until hyper comes back for the next (for the rule of
/// answers left unread, `crate::http::sniff`).
struct Tracked {
    body: axum::body::Body,
    in_flight: InFlight,
}

impl http_body::Body for Tracked {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        this.in_flight.taken();
        let polled = std::pin::Pin::new(&mut this.body).poll_frame(cx);
        if let std::task::Poll::Ready(Some(Ok(_))) = &polled {
            this.in_flight.produced();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
