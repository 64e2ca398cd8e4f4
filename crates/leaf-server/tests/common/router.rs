//! The router of a started server driven without a socket, as a loopback client (the admin
//! pages serve loopback peers): what the tests of the SQL backends ask of `server::start`.

#![allow(
    dead_code,
    reason = "only the test binaries that start a server on a real backend use it"
)]

use std::net::SocketAddr;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use tower::ServiceExt;

/// `method uri` with a JSON `body`, from `127.0.0.1`: the status and the body.
pub(crate) async fn call(
    app: &axum::Router,
    method: &str,
    uri: &str,
    body: &str,
) -> (StatusCode, String) {
    let mut req = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    req.extensions_mut().insert(ConnectInfo(
        "127.0.0.1:40000".parse::<SocketAddr>().unwrap(),
    ));
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(bytes.to_vec()).unwrap())
}

/// The body of `GET uri`, which must answer 200.
pub(crate) async fn ok(app: &axum::Router, uri: &str) -> String {
    let (status, body) = call(app, "GET", uri, "").await;
    assert_eq!(status, StatusCode::OK, "GET {uri}: {body}");
    body
}
