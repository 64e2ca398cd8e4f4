#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod admin;
mod api;
mod backend;
mod backends;
pub mod cli;
pub mod config;
mod error;
pub mod grpc;
mod hosts;
mod identity;
pub mod logging;
pub mod metrics;
mod one_node;
mod ops;
mod pages;
pub mod peer_clock;
pub mod probe;
pub mod server;
mod sniff;
mod state;
mod write_timeout;

pub use api::app;
pub use config::Config;
pub use error::ApiError;
pub use state::{AppState, SegmentService, SnowflakeService};
