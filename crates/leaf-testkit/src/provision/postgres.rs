//! PostgreSQL: the server kind, and a database of one's own per test.

use tokio::sync::OnceCell;

use super::sql::{Dialect, SqlDatabase, connect, database_on, execute};
use super::{Endpoint, ProvisionError, ServerKind, shared};

/// PostgreSQL: the official `postgres` image (or `LEAFTEST_POSTGRES_IMAGE`, e.g. the local
/// `leaf-testbed/postgres:local`), or the server of `LEAFTEST_POSTGRES_URL`
/// (`postgres://user:password@host:5432`, a user allowed to create databases).
pub static POSTGRES: ServerKind = ServerKind {
    name: "postgres",
    url_var: crate::vars::POSTGRES_URL,
    image_var: crate::vars::POSTGRES_IMAGE,
    default_image: "postgres:16",
    port: 5432,
    env: &[("POSTGRES_PASSWORD", POSTGRES_PASSWORD)],
    // The official image logs it for its initialisation server (on no TCP port) first; the
    // probe then waits for the real one.
    ready_log: "database system is ready to accept connections",
    url: |port| format!("postgres://postgres:{POSTGRES_PASSWORD}@127.0.0.1:{port}/postgres"),
    probe: |endpoint| (DIALECT.execute)(endpoint.url, "SELECT 1".into()),
    shared: OnceCell::const_new(),
};

const POSTGRES_PASSWORD: &str = "leaftest";

static DIALECT: Dialect = Dialect {
    kind: "postgres",
    create: |name| format!("CREATE DATABASE \"{name}\" ENCODING 'UTF8'"),
    // FORCE (PostgreSQL 13+) ends the sessions a test left open.
    drop: |name| format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"),
    execute: |url, sql| Box::pin(execute::<sqlx::postgres::PgConnection>(url, sql)),
    connect: |url| Box::pin(connect::<sqlx::postgres::PgConnection>(url)),
};

/// A new database on the shared PostgreSQL server.
pub async fn postgres_database() -> Result<SqlDatabase, ProvisionError> {
    let server = shared(&POSTGRES).await?;
    postgres_database_on(&server).await
}

/// A new database, with a random name, on the server at `server`.
pub async fn postgres_database_on(server: &Endpoint) -> Result<SqlDatabase, ProvisionError> {
    database_on(server, &DIALECT).await
}

/// Runs `sql` on a fresh connection to `url`.
pub(super) async fn execute_sql(url: String, sql: String) -> Result<(), String> {
    (DIALECT.execute)(url, sql).await
}
