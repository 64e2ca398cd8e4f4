#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

#[cfg(feature = "bench")]
pub mod bench;
pub mod config;
#[cfg(feature = "provision")]
pub mod faults;
pub mod fixture;
mod macros;
pub mod memory;
pub mod memory_registry;
#[cfg(feature = "provision")]
pub mod provision;
pub mod registry_cases;
pub mod store_cases;

pub use fixture::{RegistryFixture, StoreFixture};
pub use memory::MemoryStore;
pub use memory_registry::{MemoryRegistry, MemoryRegistryPool};
