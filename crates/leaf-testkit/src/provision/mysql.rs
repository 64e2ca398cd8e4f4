//! MySQL (MariaDB): the server kind, and a database of one's own per test.

use std::fmt;

use tokio::sync::OnceCell;

use super::{Endpoint, ProvisionError, ServerKind, runtime, shared};

/// MySQL: the official `mariadb` image (or `LEAFTEST_MYSQL_IMAGE`, e.g. the local
/// `leaf-testbed/mariadb:local`), or the server of `LEAFTEST_MYSQL_URL`.
pub static MYSQL: ServerKind = ServerKind {
    name: "mysql",
    url_var: "LEAFTEST_MYSQL_URL",
    image_var: "LEAFTEST_MYSQL_IMAGE",
    default_image: "mariadb:11",
    port: 3306,
    env: &[("MARIADB_ROOT_PASSWORD", MYSQL_PASSWORD)],
    // The official image logs "port: 0" for its initialisation server first.
    ready_log: "port: 3306",
    url: |port| format!("mysql://root:{MYSQL_PASSWORD}@127.0.0.1:{port}"),
    probe: |endpoint| Box::pin(mysql_probe(endpoint)),
    shared: OnceCell::const_new(),
};

const MYSQL_PASSWORD: &str = "leaftest";

async fn mysql_probe(endpoint: Endpoint) -> Result<(), String> {
    use sqlx::Connection;
    let mut conn = sqlx::mysql::MySqlConnection::connect(&endpoint.url)
        .await
        .map_err(|e| e.to_string())?;
    sqlx::query("SELECT 1")
        .execute(&mut conn)
        .await
        .map_err(|e| e.to_string())?;
    conn.close().await.map_err(|e| e.to_string())
}

/// A database of one's own on a MySQL server, dropped (in the background) with this value.
pub struct MysqlDatabase {
    /// The database's name (`leaftest_...`).
    pub name: String,
    /// The URL of the database, credentials included.
    pub url: String,
    server: Endpoint,
}

impl fmt::Debug for MysqlDatabase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MysqlDatabase")
            .field("name", &self.name)
            .field("server", &self.server)
            .finish()
    }
}

/// A new database on the shared MySQL server.
pub async fn mysql_database() -> Result<MysqlDatabase, ProvisionError> {
    let server = shared(&MYSQL).await?;
    mysql_database_on(&server).await
}

/// A new database, with a random name, on the server at `server`.
pub async fn mysql_database_on(server: &Endpoint) -> Result<MysqlDatabase, ProvisionError> {
    use sqlx::Connection;
    let name = format!(
        "leaftest_{}_{:012x}",
        std::process::id(),
        fastrand::u64(..) >> 16
    );
    let mut conn = sqlx::mysql::MySqlConnection::connect(&server.url)
        .await
        .map_err(|e| ProvisionError(format!("mysql at {server:?}: {e}")))?;
    // The name is made above from digits and letters only.
    let ddl = format!("CREATE DATABASE `{name}` CHARACTER SET utf8mb4");
    sqlx::query(sqlx::AssertSqlSafe(ddl))
        .execute(&mut conn)
        .await
        .map_err(|e| ProvisionError(format!("mysql: cannot create database {name}: {e}")))?;
    conn.close().await.ok();
    Ok(MysqlDatabase {
        url: with_database(&server.url, &name),
        name,
        server: server.clone(),
    })
}

impl Drop for MysqlDatabase {
    fn drop(&mut self) {
        let (url, name) = (self.server.url.clone(), self.name.clone());
        runtime().spawn(async move {
            use sqlx::Connection;
            if let Ok(mut conn) = sqlx::mysql::MySqlConnection::connect(&url).await {
                let ddl = format!("DROP DATABASE IF EXISTS `{name}`");
                let _ = sqlx::query(sqlx::AssertSqlSafe(ddl))
                    .execute(&mut conn)
                    .await;
                let _ = conn.close().await;
            }
        });
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
