//! The tests every SQL backend runs on its real server (feature `provision`), each a
//! `pub async fn` over the backend ([`SqlBackend`](crate::sql::SqlBackend)) that makes its own
//! fixture; [`sql_tests!`](crate::sql_tests) turns them into one `#[tokio::test]` each. What
//! differs between the servers (how an identity lock's session is found and ended, the name of
//! a setting) is the backend's or the caller's; what a case asserts is the same for each.

pub mod faults;
pub mod hold;
pub mod leases;
pub mod registry;
pub mod secured;
pub mod store;

pub use crate::fixture::{now_ms, request};
