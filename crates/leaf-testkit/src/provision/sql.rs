//! What the SQL servers share: a database of one's own per test, created and dropped by one
//! statement each through the server's own driver, which also answers the readiness probe, and
//! sessions of a test's own on it ([`SqlSession`]).

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use sqlx::{AssertSqlSafe, ColumnIndex, Database, Decode, Executor, IntoArguments, Row, Type};

use super::{Endpoint, ProvisionError, runtime};

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Runs one statement on a fresh connection to a URL.
pub(super) type Execute = fn(String, String) -> BoxFuture<'static, Result<(), String>>;

/// Opens a session on a URL.
pub(super) type Connect = fn(String) -> BoxFuture<'static, Result<SqlSession, String>>;

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
    /// The driver's session.
    pub(super) connect: Connect,
}

/// Runs `sql` on a fresh connection `C` to `url`: [`Dialect::execute`] of a server.
pub(super) async fn execute<C>(url: String, sql: String) -> Result<(), String>
where
    C: sqlx::Connection + 'static,
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

/// A connection of a test's own to a SQL server, for the statements the test runs itself:
/// checks of what the backend wrote, and locks and faults it sets up.
pub struct SqlSession(Box<dyn Raw>);

impl fmt::Debug for SqlSession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SqlSession")
    }
}

impl SqlSession {
    /// Runs `sql` (one statement or several); panics, naming it, if it fails.
    pub async fn exec(&mut self, sql: &str) {
        let done = self.0.exec(sql.to_owned()).await;
        done.unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// The first column of the first row of `sql`, an integer or null (`None` without a row);
    /// panics, naming it, if it fails.
    pub async fn scalar(&mut self, sql: &str) -> Option<i64> {
        let row = self.0.scalar(sql.to_owned()).await;
        row.unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// Ends the session (an open transaction rolls back).
    pub async fn close(self) {
        self.0.close().await.expect("close the session");
    }
}

/// A driver's connection behind [`SqlSession`].
pub(super) trait Raw: Send {
    fn exec(&mut self, sql: String) -> BoxFuture<'_, Result<(), String>>;
    fn scalar(&mut self, sql: String) -> BoxFuture<'_, Result<Option<i64>, String>>;
    fn close(self: Box<Self>) -> BoxFuture<'static, Result<(), String>>;
}

impl<C> Raw for C
where
    C: sqlx::Connection + 'static,
    for<'c> &'c mut C: Executor<'c, Database = C::Database>,
    <C::Database as Database>::Arguments: IntoArguments<C::Database>,
    usize: ColumnIndex<<C::Database as Database>::Row>,
    for<'r> i64: Decode<'r, C::Database> + Type<C::Database>,
{
    fn exec(&mut self, sql: String) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            let done = sqlx::raw_sql(AssertSqlSafe(sql)).execute(self).await;
            done.map(drop).map_err(|e| e.to_string())
        })
    }

    fn scalar(&mut self, sql: String) -> BoxFuture<'_, Result<Option<i64>, String>> {
        Box::pin(async move {
            let row = sqlx::query::<C::Database>(AssertSqlSafe(sql))
                .fetch_optional(self)
                .await
                .map_err(|e| e.to_string())?;
            let value = row.map(|r| r.try_get::<Option<i64>, _>(0)).transpose();
            value.map(Option::flatten).map_err(|e| e.to_string())
        })
    }

    fn close(self: Box<Self>) -> BoxFuture<'static, Result<(), String>> {
        Box::pin(async move { (*self).close().await.map_err(|e| e.to_string()) })
    }
}

/// Opens a [`SqlSession`] of the driver `C` on `url`: [`Dialect::connect`] of a server.
pub(super) async fn connect<C: Raw + sqlx::Connection + 'static>(
    url: String,
) -> Result<SqlSession, String> {
    let conn = C::connect(&url).await.map_err(|e| e.to_string())?;
    Ok(SqlSession(Box::new(conn)))
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

impl SqlDatabase {
    /// A session of one's own on this database.
    pub async fn session(&self) -> SqlSession {
        (self.dialect.connect)(self.url.clone())
            .await
            .unwrap_or_else(|e| panic!("a session on {}: {e}", self.name))
    }

    /// Runs `sql` on a session of its own; panics, naming it, if it fails.
    pub async fn exec(&self, sql: &str) {
        let mut session = self.session().await;
        session.exec(sql).await;
        session.close().await;
    }

    /// [`SqlSession::scalar`] on a session of its own.
    pub async fn scalar(&self, sql: &str) -> Option<i64> {
        let mut session = self.session().await;
        let value = session.scalar(sql).await;
        session.close().await;
        value
    }
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
