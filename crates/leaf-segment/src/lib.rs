#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod allocator;
mod arena;
mod config;
mod deferred;
mod entry;
mod handle;
mod local;
mod next_id;
mod snapshot;
mod step;
mod tags;
mod usage;
pub mod warm;

pub use allocator::SegmentAllocator;
pub use config::SegmentConfig;
pub use deferred::{Connect, DeferredStore};
pub use handle::TagHandle;
pub use local::{LocalTagHandle, MAX_CHUNK};
pub use snapshot::{LoadObserver, SegmentView, TagSnapshot};
pub use step::StepRule;
