#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

// Each folder is what it serves, or what it is: the HTTP routes and the connection they run on
// (`http`), the gRPC services (`grpc`), the console's pages (`console`), the node and what it
// does (`node`: its state, its operations, its start-up), and the composition of the backends
// the configuration chooses (`compose`).
pub mod cli;
mod compose;
mod console;
pub mod grpc;
mod http;
pub mod logging;
mod node;
pub mod probe;

pub use compose::config;
pub use config::Config;
pub use http::{app, peer_clock};
pub use node::error::ApiError;
pub use node::state::{AppState, PeerSkew, SegmentService, SnowflakeService};
pub use node::tokens::{TokenSet, TokenSets};
pub use node::{metrics, server, store_raise};
