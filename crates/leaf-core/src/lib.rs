#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

#[cfg(feature = "backend")]
pub mod backend;
#[cfg(feature = "runtime")]
mod cache_file;
#[cfg(feature = "runtime")]
mod cached;
#[cfg(feature = "runtime")]
mod clock;
mod error;
mod layout;
mod redact;
mod registry;
mod secret;
mod store;
mod tag;

#[cfg(feature = "runtime")]
pub use cache_file::{AsyncCacheFile, CacheFile, CacheRecord};
#[cfg(feature = "runtime")]
pub use cached::{CachedRegistry, ClaimError, WorkerIdClaims};
#[cfg(feature = "runtime")]
pub use clock::{BoxFuture, Clock, ManualClock, SystemClock, bounded};
pub use error::{Error, Result, check_bounds};
pub use layout::{DecodedId, SnowflakeLayout, TWITTER_EPOCH_MS, format_utc_ms, utc_parts};
pub use redact::redact_url;
pub use registry::{
    AcquireRequest, HeldClaim, LEASE_LATENCY_ALLOWANCE, Lease, LeaseToken, NodeIdentity,
    PeerDirectory, RegistryCapabilities, Renewal, WorkerIdRegistry, min_lease_ttl,
    no_free_worker_id,
};
pub use secret::{check_tls_files, read_secret_file, secret, tls_certificate_refused};
pub use store::{
    Allocation, DEFAULT_STEP, MAX_DESCRIPTION_CHARS, MAX_STEP, NewTag, SegmentStore,
    StoreCapabilities, TagRecord, TagUpdate, clamp_step, validate_step,
};
pub use tag::{MAX_TAG_CHARS, Tag};
