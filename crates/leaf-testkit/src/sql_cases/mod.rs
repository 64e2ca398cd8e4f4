//! The tests every SQL backend runs on its real server (feature `provision`), each a
//! `pub async fn` over the backend ([`SqlBackend`](crate::sql::SqlBackend)) that makes its own
//! fixture; [`sql_tests!`](crate::sql_tests) turns them into one `#[tokio::test]` each. What
//! differs between the servers (how an identity lock's session is found and ended, the name of
//! a setting) is the backend's or the caller's; what a case asserts is the same for each.

pub mod faults;
pub mod registry;
pub mod store;

use std::time::{SystemTime, UNIX_EPOCH};

use leaf_core::{AcquireRequest, NodeIdentity};

/// The wall clock, Unix milliseconds.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// An acquire request for `identity` at the current time.
pub fn request(identity: NodeIdentity, max_worker_id: u64) -> AcquireRequest {
    crate::registry_cases::request(identity, max_worker_id)
}
