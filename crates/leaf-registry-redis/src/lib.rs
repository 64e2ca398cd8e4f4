#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod config;
mod connection;
mod error;
mod registry;
mod store;

pub use config::{RedisConfig, RedisRegistryConfig, RedisStoreConfig};
pub use registry::RedisRegistry;
pub use store::RedisStore;
