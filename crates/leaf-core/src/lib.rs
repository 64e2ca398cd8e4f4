#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod cache_file;
pub mod cached;
pub mod clock;
mod error;
pub mod layout;
mod redact;
pub mod registry;
pub mod store;
mod tag;

pub use cache_file::{AsyncCacheFile, CacheFile, CacheRecord, HeldCache, HeldCacheGuard};
pub use cached::{CachedRegistry, WorkerIdBackend};
pub use clock::{BoxFuture, Clock, ManualClock, SystemClock, bounded};
pub use error::{Error, Result, check_bounds};
pub use layout::{DecodedId, SnowflakeLayout, TWITTER_EPOCH_MS};
pub use redact::redact_url;
pub use registry::{
    AcquireRequest, LEASE_LATENCY_ALLOWANCE, Lease, LeaseToken, NodeIdentity, RegistryCapabilities,
    Renewal, WorkerIdRegistry, min_lease_ttl,
};
pub use store::{
    Allocation, DEFAULT_STEP, NewTag, SegmentStore, StoreCapabilities, TagRecord, TagUpdate,
};
pub use tag::{MAX_TAG_CHARS, Tag};
