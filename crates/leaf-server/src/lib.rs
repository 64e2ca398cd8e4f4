#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod admin;
pub mod api;
pub mod backend;
pub mod cli;
pub mod config;
pub mod deferred;
pub mod error;
pub mod identity;
pub mod logging;
pub mod metrics;
pub mod pages;
pub mod peer_clock;
pub mod server;
pub mod state;
pub mod warm;
pub mod write_timeout;

pub use api::app;
pub use config::Config;
pub use error::ApiError;
pub use state::{AppState, SegmentService, SnowflakeService};
