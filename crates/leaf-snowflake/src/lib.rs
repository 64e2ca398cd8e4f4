#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod config;
mod generator;
pub mod layout_record;
pub mod monotonic;
pub mod peers;
mod status;

pub use config::SnowflakeConfig;
pub use generator::Snowflake;
pub use status::{SnowflakeState, SnowflakeStatus};

// Re-exported so that users of the generator need not name `leaf-core` for its inputs.
pub use leaf_core::{DecodedId, SnowflakeLayout};
