//! The backend on a secured server, as production runs it (`leaf_testkit::provision::secured_sql`):
//! TLS only, the server's certificate and host name verified against a CA made at test time,
//! a client certificate required, and a user that holds only the project's databases, its
//! password read from a file. The conformance suite runs whole on it, then the secured cases
//! (`leaf_testkit::sql_cases::secured`): each misconfiguration a start-up error naming its key,
//! and a password rotated while running.

mod common;

leaf_testkit::sql_secured_tests!(common::Backend, common::Fix);
