#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod blocking;
mod client;
mod config;
mod endpoints;
mod error;
mod store;
mod tls;
mod transport;

pub use client::LeafClient;
pub use config::{ClientConfig, LeafClientBuilder};
pub use endpoints::EndpointStatus;
pub use store::HttpStore;
