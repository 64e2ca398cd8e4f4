#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod config;
mod error;
mod node;
mod recycle;
mod registry;
mod session;

pub use config::ZkConfig;
pub use registry::{ZkMode, ZkRegistry};
