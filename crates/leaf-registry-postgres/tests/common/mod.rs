//! This crate's backend under `leaf-testkit`'s SQL tests (`leaf_testkit::sql`): a database of
//! one's own per test on the provisioned PostgreSQL server, and stores and registries on it.

#![allow(dead_code, unreachable_pub)]

use leaf_core::NodeIdentity;
use leaf_testkit::provision::{self, ServerKind};

/// PostgreSQL's backend, as the tests see it.
pub struct Backend;

impl leaf_testkit::sql::SqlBackend for Backend {
    type Dialect = leaf_registry_postgres::PostgresDialect;
    const SERVER: &'static ServerKind = &provision::POSTGRES;

    /// The server process holding the advisory lock in this database.
    fn lock_holder(identity: &NodeIdentity) -> String {
        format!(
            "SELECT pid::bigint FROM pg_locks WHERE locktype = 'advisory' AND granted \
             AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
             AND objsubid = 1 \
             AND ((classid::bigint << 32) | objid::bigint) \
                 = hashtextextended('leaf_workerid:{identity}', 0)"
        )
    }

    fn end_session(id: i64) -> String {
        format!(
            "DO $$ BEGIN IF NOT pg_terminate_backend({id}) THEN RAISE 'not ended'; END IF; END $$"
        )
    }

    fn unlock(lock: &str) -> String {
        format!("SELECT pg_advisory_unlock(hashtextextended('{lock}', 0))")
    }
}

/// A test's database, and stores and registries on it.
pub type Fix = leaf_testkit::sql::SqlFix<Backend>;
