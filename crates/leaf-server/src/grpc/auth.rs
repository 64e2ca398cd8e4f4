//! The token rules of the HTTP API, on gRPC metadata: `authorization: Bearer <token>`, compared
//! in constant time by the same functions (`crate::http::admin`). The ID and leasing RPCs follow the
//! client rule (`server.client_token`); the Admin service the admin rule (`server.admin_token`,
//! or with none a loopback peer that calls the server by a loopback name, here its
//! `:authority`). A browser's request never gets this far: `super::limits` refuses gRPC over
//! HTTP/1.x and any request that carries `Origin` or `Sec-Fetch-*`.

use std::net::SocketAddr;

use axum::extract::ConnectInfo;
use tonic::{Request, Status};

use super::{CalledAs, status};
use crate::http::admin::{Schemes, check, check_client, loopback_name};
use crate::node::error::ApiError;
use crate::node::state::AppState;

fn authorization<T>(req: &Request<T>) -> Option<&[u8]> {
    req.metadata().get("authorization").map(|v| v.as_bytes())
}

fn peer<T>(req: &Request<T>) -> Option<SocketAddr> {
    req.extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(p)| *p)
}

/// The client rule.
pub(super) fn client<T>(state: &AppState, req: &Request<T>) -> Result<(), Status> {
    check_client(&state.tokens().client, authorization(req)).map_err(status)
}

/// The admin rule.
pub(super) fn admin<T>(state: &AppState, req: &Request<T>) -> Result<(), Status> {
    let tokens = &state.tokens().admin;
    check(tokens, authorization(req), peer(req), Schemes::Bearer).map_err(status)?;
    if !tokens.is_set() {
        let called_as = req
            .extensions()
            .get::<CalledAs>()
            .and_then(|c| c.0.as_deref());
        loopback_name(called_as, ":authority").map_err(status)?;
    }
    Ok(())
}

/// The host rule (`server.allowed_hosts`) on the name the request called the server by.
pub(super) fn allowed_host(state: &AppState, called_as: Option<&str>) -> Result<(), ApiError> {
    let allowed = state.allowed_hosts();
    match called_as {
        _ if allowed.is_any() => Ok(()),
        Some(name) if allowed.admits(name) => Ok(()),
        Some(name) => Err(ApiError::new(
            axum::http::StatusCode::FORBIDDEN,
            format!(":authority {name:?} is not a name in server.allowed_hosts"),
        )),
        None => Err(ApiError::new(
            axum::http::StatusCode::FORBIDDEN,
            "the request names no :authority, and server.allowed_hosts is set",
        )),
    }
}
