//! Test support for Leaf: the in-memory store, and (to come) the conformance suite.
#![warn(missing_docs)]

pub mod memory;

pub use memory::MemoryStore;
