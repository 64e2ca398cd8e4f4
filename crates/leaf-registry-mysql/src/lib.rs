#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod config;
mod error;
mod registry;
mod store;

pub use config::{MysqlConfig, MysqlRegistryConfig, MysqlStoreConfig};
pub use registry::{LEAF_WORKERID_ALLOC_DDL, MysqlBackend, MysqlRegistry};
pub use store::{LEAF_ALLOC_DDL, MysqlStore};
