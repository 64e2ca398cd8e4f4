//! MySQL (MariaDB): the server kind, and a database of one's own per test.

use tokio::sync::OnceCell;

use super::sql::{Dialect, SqlDatabase, connect, database_on, execute};
use super::{Endpoint, ProvisionError, ServerKind, shared};

/// MySQL: the official `mariadb` image (or `LEAFTEST_MYSQL_IMAGE`, e.g. the local
/// `leaf-testbed/mariadb:local`), or the server of `LEAFTEST_MYSQL_URL`.
pub static MYSQL: ServerKind = ServerKind {
    name: "mysql",
    url_var: crate::vars::MYSQL_URL,
    image_var: crate::vars::MYSQL_IMAGE,
    default_image: "mariadb:11",
    port: 3306,
    env: &[("MARIADB_ROOT_PASSWORD", MYSQL_PASSWORD)],
    // The official image logs "port: 0" for its initialisation server first.
    ready_log: "port: 3306",
    url: |port| format!("mysql://root:{MYSQL_PASSWORD}@127.0.0.1:{port}"),
    probe: |endpoint| (DIALECT.execute)(endpoint.url, "SELECT 1".into()),
    shared: OnceCell::const_new(),
};

const MYSQL_PASSWORD: &str = "leaftest";

static DIALECT: Dialect = Dialect {
    kind: "mysql",
    create: |name| format!("CREATE DATABASE `{name}` CHARACTER SET utf8mb4"),
    drop: |name| format!("DROP DATABASE IF EXISTS `{name}`"),
    execute: |url, sql| Box::pin(execute::<sqlx::mysql::MySqlConnection>(url, sql)),
    connect: |url| Box::pin(connect::<sqlx::mysql::MySqlConnection>(url)),
};

/// A new database on the shared MySQL server.
pub async fn mysql_database() -> Result<SqlDatabase, ProvisionError> {
    let server = shared(&MYSQL).await?;
    mysql_database_on(&server).await
}

/// A new database, with a random name, on the server at `server`.
pub async fn mysql_database_on(server: &Endpoint) -> Result<SqlDatabase, ProvisionError> {
    database_on(server, &DIALECT).await
}

/// Runs `sql` on a fresh connection to `url`.
pub(super) async fn execute_sql(url: String, sql: String) -> Result<(), String> {
    (DIALECT.execute)(url, sql).await
}
