//! This crate's backend under `leaf-testkit`'s SQL tests (`leaf_testkit::sql`): a database of
//! one's own per test on the provisioned MySQL server, and stores and registries on it.

#![allow(dead_code, unreachable_pub)]

use leaf_core::NodeIdentity;
use leaf_testkit::provision::{self, ServerKind};

/// MySQL's backend, as the tests see it.
pub struct Backend;

impl leaf_testkit::sql::SqlBackend for Backend {
    type Dialect = leaf_registry_mysql::MysqlDialect;
    const SERVER: &'static ServerKind = &provision::MYSQL;

    fn lock_holder(identity: &NodeIdentity) -> String {
        format!("SELECT IS_USED_LOCK(CONCAT('leaf_workerid:', DATABASE(), '/', '{identity}'))")
    }

    fn end_session(id: i64) -> String {
        format!("KILL CONNECTION {id}")
    }

    fn unlock(lock: &str) -> String {
        format!("SELECT RELEASE_LOCK('{lock}')")
    }
}

/// A test's database, and stores and registries on it.
pub type Fix = leaf_testkit::sql::SqlFix<Backend>;
