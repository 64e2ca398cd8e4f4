#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod client;
mod config;
mod error;
mod registry;
mod store;

pub use config::EtcdConfig;
pub use registry::{EtcdBackend, EtcdRegistry};
pub use store::EtcdStore;
