#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod config;
mod error;
mod node;
mod recycle;
mod registry;
mod session;

pub use config::ZkConfig;
#[cfg(feature = "_test-hooks")]
#[doc(hidden)]
pub use registry::ReadClaim;
pub use registry::{ZkBackend, ZkMode, ZkRegistry};
