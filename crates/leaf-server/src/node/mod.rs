//! The node: what every handler shares (`state`), what the HTTP routes and the gRPC RPCs do
//! (`ops`, answering [`ApiError`](error::ApiError)), its start-up, serving and shutdown
//! (`server`), `leaf-server store raise` (`store_raise`), its identity, the warnings of a one-node default, and its metrics.

pub(crate) mod error;
pub(crate) mod identity;
pub mod metrics;
pub(crate) mod monotonic;
pub(crate) mod one_node;
pub(crate) mod ops;
pub mod server;
pub(crate) mod state;
pub mod store_raise;
pub(crate) mod tokens;
