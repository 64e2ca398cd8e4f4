#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod config;
mod error;
mod registry;
mod store;

pub use config::{LocalRegistryConfig, SqliteStoreConfig};
pub use registry::LocalRegistry;
pub use store::{LEAF_ALLOC_DDL, SqliteStore};
