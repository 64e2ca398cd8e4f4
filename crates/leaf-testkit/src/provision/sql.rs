//! What the SQL servers share: a database of one's own per test, created and dropped by one
//! statement each through the server's own driver, which also answers the readiness probe.

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use super::{Endpoint, ProvisionError, runtime};

/// Runs one statement on a fresh connection to a URL.
pub(super) type Execute =
    fn(String, String) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;

/// How one SQL server makes and drops the database of a test.
pub(super) struct Dialect {
    /// The kind, for messages (`mysql`).
    pub(super) kind: &'static str,
    /// The statement creating the database named by the argument.
    pub(super) create: fn(&str) -> String,
    /// The statement dropping it, whatever sessions a test left open.
    pub(super) drop: fn(&str) -> String,
    /// The driver.
    pub(super) execute: Execute,
}

/// Runs `sql` on a fresh connection `C` to `url`: [`Dialect::execute`] of a server.
pub(super) async fn execute<C>(url: String, sql: String) -> Result<(), String>
where
    C: sqlx::Connection,
    for<'c> &'c mut C: sqlx::Executor<'c, Database = C::Database>,
    <C::Database as sqlx::Database>::Arguments: sqlx::IntoArguments<C::Database>,
{
    let mut conn = C::connect(&url).await.map_err(|e| e.to_string())?;
    let done = sqlx::query::<C::Database>(sqlx::AssertSqlSafe(sql))
        .execute(&mut conn)
        .await;
    conn.close().await.ok();
    done.map(drop).map_err(|e| e.to_string())
}

/// A database of one's own on a SQL server (MySQL or PostgreSQL), dropped (in the background)
/// with this value.
pub struct SqlDatabase {
    /// The database's name (`leaftest_...`).
    pub name: String,
    /// The URL of the database, credentials included.
    pub url: String,
    server: Endpoint,
    dialect: &'static Dialect,
}

/// A database of one's own on a MySQL server.
pub type MysqlDatabase = SqlDatabase;
/// A database of one's own on a PostgreSQL server.
pub type PostgresDatabase = SqlDatabase;

impl fmt::Debug for SqlDatabase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlDatabase")
            .field("kind", &self.dialect.kind)
            .field("name", &self.name)
            .field("server", &self.server)
            .finish()
    }
}

/// A new database, with a random name, on the server at `server`.
pub(super) async fn database_on(
    server: &Endpoint,
    dialect: &'static Dialect,
) -> Result<SqlDatabase, ProvisionError> {
    let name = format!(
        "leaftest_{}_{:012x}",
        std::process::id(),
        fastrand::u64(..) >> 16
    );
    // The name is made above from digits and letters only.
    (dialect.execute)(server.url.clone(), (dialect.create)(&name))
        .await
        .map_err(|e| {
            ProvisionError(format!(
                "{}: cannot create database {name} at {server:?}: {e}",
                dialect.kind
            ))
        })?;
    Ok(SqlDatabase {
        url: with_database(&server.url, &name),
        name,
        server: server.clone(),
        dialect,
    })
}

impl Drop for SqlDatabase {
    fn drop(&mut self) {
        let sql = (self.dialect.drop)(&self.name);
        runtime().spawn((self.dialect.execute)(self.server.url.clone(), sql));
    }
}

/// `url` with its path replaced by `/{database}` (the query string kept).
pub fn with_database(url: &str, database: &str) -> String {
    let (base, query) = match url.find('?') {
        Some(q) => (&url[..q], &url[q..]),
        None => (url, ""),
    };
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let base = match base[authority_start..].find('/') {
        Some(slash) => &base[..authority_start + slash],
        None => base,
    };
    format!("{base}/{database}{query}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_urls() {
        let check = |url: &str, expect: &str| assert_eq!(with_database(url, "db1"), expect);
        check(
            "mysql://root:pw@127.0.0.1:3306",
            "mysql://root:pw@127.0.0.1:3306/db1",
        );
        check(
            "mysql://root:pw@127.0.0.1:3306/",
            "mysql://root:pw@127.0.0.1:3306/db1",
        );
        check(
            "mysql://u@h/leaf?ssl-mode=disabled",
            "mysql://u@h/db1?ssl-mode=disabled",
        );
    }
}
