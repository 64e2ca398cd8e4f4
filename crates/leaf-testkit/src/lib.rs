#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

#[cfg(feature = "bench")]
pub mod bench;
pub mod config;
#[cfg(feature = "provision")]
pub mod faults;
pub mod fixture;
pub mod history;
#[cfg(feature = "provision")]
pub mod identity_cases;
mod macros;
pub mod memory;
pub mod memory_registry;
pub mod monotonic_cases;
#[cfg(feature = "business")]
pub mod period_cases;
#[cfg(feature = "pki")]
pub mod pki;
#[cfg(feature = "provision")]
pub mod provision;
#[cfg(feature = "provision")]
pub mod proxy;
pub mod registry_cases;
#[cfg(feature = "provision")]
pub mod sql;
#[cfg(feature = "provision")]
pub mod sql_cases;
pub mod store_cases;
pub mod vars;

pub use fixture::{RegistryFixture, StoreFixture};
pub use memory::{MemoryFixture, MemoryStore};
pub use memory_registry::{MemoryRegistry, MemoryRegistryPool};
