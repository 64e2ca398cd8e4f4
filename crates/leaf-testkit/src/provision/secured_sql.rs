//! SQL servers secured as production runs them: TLS only, with certificates made at test time
//! ([`Pki`]), and a user of the project's that needs a client certificate and a password and
//! holds no more than the project's databases. One server of each kind per test process,
//! started on first use ([`secured_sql`]); tests take a database of their own on it as on the
//! plain server, and hand it to [`SecuredSql::grant`].
//!
//! - MariaDB/MySQL: `--require-secure-transport=ON` with the server's certificate and the CA;
//!   the user `CREATE USER 'leaf_tls'@'%' IDENTIFIED BY ... REQUIRE X509` granted
//!   `ALL ON \`leaftest%\`.*` (the test databases; production grants its one database).
//! - PostgreSQL: `ssl = on` with the same files, and `pg_hba.conf` allowing only TLS:
//!   `hostssl all leaf_tls all scram-sha-256 clientcert=verify-full` (the certificate's `CN`
//!   must be the user), `hostnossl all all all reject`; each test database is owned by the user.
//!
//! The server's certificate names `localhost` only, so that a client verifying the host name
//! refuses the server at `127.0.0.1`.

use std::sync::Arc;

use tokio::sync::OnceCell;

use super::{
    Dedicated, Endpoint, MYSQL, POSTGRES, ProvisionError, ServerKind, dedicated_with_files,
    sql_database_on,
};
use crate::pki::Pki;
use crate::provision::SqlDatabase;

/// The project's user on a secured server.
pub const SECURED_USER: &str = "leaf_tls";

/// Its password.
pub const SECURED_PASSWORD: &str = "leaf-tls-secret";

/// Where the certificates are in the container.
const CERTS: &str = "/leaf-certs";

/// PostgreSQL's copy of its key: its user's, mode 0600, as it requires (the official image's
/// and the testbed's home of the `postgres` user).
const PG_KEY: &str = "/var/lib/postgresql/leaf-server.key";

/// A secured SQL server of a test process, its certificates, and its administrator's endpoint
/// (the superuser, over TLS without verification, for creating databases and users).
pub struct SecuredSql {
    /// The server's kind ([`MYSQL`] or [`POSTGRES`]).
    pub kind: &'static ServerKind,
    /// The administrator's URL (`127.0.0.1`).
    pub admin: Endpoint,
    /// The CA, the server's certificate and the client's (`CN` [`SECURED_USER`]).
    pub pki: Arc<Pki>,
    /// The server's port on loopback.
    pub port: u16,
    _server: Dedicated,
}

impl std::fmt::Debug for SecuredSql {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecuredSql")
            .field("kind", &self.kind.name)
            .field("admin", &self.admin)
            .finish_non_exhaustive()
    }
}

static MYSQL_SECURED: OnceCell<Result<SecuredSql, String>> = OnceCell::const_new();
static POSTGRES_SECURED: OnceCell<Result<SecuredSql, String>> = OnceCell::const_new();

fn cell(
    kind: &ServerKind,
) -> Result<&'static OnceCell<Result<SecuredSql, String>>, ProvisionError> {
    match kind.name {
        "mysql" => Ok(&MYSQL_SECURED),
        "postgres" => Ok(&POSTGRES_SECURED),
        other => Err(ProvisionError(format!("no secured server of kind {other}"))),
    }
}

/// The secured server of `kind` if [`secured_sql`] started it.
pub fn secured_sql_started(kind: &ServerKind) -> Option<&'static SecuredSql> {
    cell(kind).ok()?.get()?.as_ref().ok()
}

/// The secured server of `kind` ([`MYSQL`] or [`POSTGRES`]) of this test process, started on
/// first use; fails loudly, as every provisioning here, when it cannot be started.
pub async fn secured_sql(kind: &'static ServerKind) -> Result<&'static SecuredSql, ProvisionError> {
    let cell = cell(kind)?;
    let started = cell
        .get_or_init(|| async { start(kind).await.map_err(|e| e.0) })
        .await;
    started
        .as_ref()
        .map_err(|e| ProvisionError(format!("secured {}: {e}", kind.name)))
}

/// A secured server of `kind` of the caller's own (removed with it), for a test that changes
/// what the others share, such as the user's password.
pub async fn secured_sql_own(kind: &'static ServerKind) -> Result<SecuredSql, ProvisionError> {
    start(kind).await
}

async fn start(kind: &'static ServerKind) -> Result<SecuredSql, ProvisionError> {
    let pki = Arc::new(Pki::localhost_only(SECURED_USER));
    let file = |name: &str, mode: u32| -> Result<(String, u32, Vec<u8>), ProvisionError> {
        let bytes = std::fs::read(pki.path(name))
            .map_err(|e| ProvisionError(format!("cannot read {name}: {e}")))?;
        Ok((format!("{CERTS}/{name}"), mode, bytes))
    };
    // The key is a test's, readable by the server's user whatever its id (PostgreSQL gets a
    // copy of its own, below).
    let files = vec![
        file("ca.pem", 0o644)?,
        file("server.pem", 0o644)?,
        file("server.key", 0o644)?,
    ];
    let (server, setup) = match kind.name {
        "mysql" => {
            let args = [
                format!("--ssl-ca={CERTS}/ca.pem"),
                format!("--ssl-cert={CERTS}/server.pem"),
                format!("--ssl-key={CERTS}/server.key"),
                "--require-secure-transport=ON".to_string(),
            ];
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let server = dedicated_with_files(&MYSQL, &args, files, Vec::new()).await?;
            (server, mysql_setup())
        }
        _ => {
            let server = dedicated_with_files(&POSTGRES, &[], files, Vec::new()).await?;
            (server, postgres_setup())
        }
    };
    if kind.name == "postgres" {
        // PostgreSQL takes a key only if it is its user's with mode 0600 (or root's, 0640).
        let key = format!("{CERTS}/server.key");
        let install = ["install", "-o", "postgres", "-g", "postgres", "-m", "600"];
        let args: Vec<&str> = install.into_iter().chain([key.as_str(), PG_KEY]).collect();
        server.exec(&args).await?;
    }
    let admin = server.endpoint().clone();
    for statement in setup {
        super::execute_on(kind, &admin, &statement)
            .await
            .map_err(|e| ProvisionError(format!("{statement:?}: {e}")))?;
    }
    let port = port_of(&admin.url)?;
    Ok(SecuredSql {
        kind,
        admin,
        pki,
        port,
        _server: server,
    })
}

fn mysql_setup() -> Vec<String> {
    vec![
        format!("CREATE USER '{SECURED_USER}'@'%' IDENTIFIED BY '{SECURED_PASSWORD}' REQUIRE X509"),
        format!("GRANT ALL ON `leaftest%`.* TO '{SECURED_USER}'@'%'"),
    ]
}

/// The statements that turn the plain PostgreSQL just started (its key already installed in the
/// data directory) into a TLS-only one: TLS on, `pg_hba.conf` replaced, the configuration
/// reloaded (TLS settings and `pg_hba.conf` take effect for new connections).
fn postgres_setup() -> Vec<String> {
    let hba = [
        "local all all trust",
        "hostssl all postgres all scram-sha-256",
        &format!("hostssl all {SECURED_USER} all scram-sha-256 clientcert=verify-full"),
        "hostnossl all all all reject",
    ]
    .join("\\n");
    // Each line of the file a row of its own: COPY's text format then writes it as it is.
    // `expr` is SQL giving the text; the file is the server user's, mode 0600 (its umask).
    let write = |expr: &str, file: &str| {
        format!(
            r"DO $$ BEGIN EXECUTE format('COPY (SELECT unnest(string_to_array(rtrim(%s, E''\n''), E''\n''))) TO %L', '{}', current_setting('data_directory') || '/{file}'); END $$",
            expr.replace('\'', "''")
        )
    };
    vec![
        format!("CREATE ROLE {SECURED_USER} LOGIN PASSWORD '{SECURED_PASSWORD}'"),
        write(&format!("E'{hba}'"), "pg_hba.conf"),
        format!("ALTER SYSTEM SET ssl_cert_file = '{CERTS}/server.pem'"),
        format!("ALTER SYSTEM SET ssl_key_file = '{PG_KEY}'"),
        format!("ALTER SYSTEM SET ssl_ca_file = '{CERTS}/ca.pem'"),
        "ALTER SYSTEM SET ssl = on".into(),
        "SELECT pg_reload_conf()".into(),
    ]
}

fn port_of(url: &str) -> Result<u16, ProvisionError> {
    url.rsplit(':')
        .next()
        .and_then(|p| p.split('/').next())
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| ProvisionError(format!("no port in {url}")))
}

impl SecuredSql {
    /// A new database on this server, which the project's user may use wholly.
    pub async fn database(&self) -> Result<SqlDatabase, ProvisionError> {
        let db = sql_database_on(self.kind, &self.admin).await?;
        if self.kind.name == "postgres" {
            // Owning the database gives its `public` schema too (PostgreSQL 15+).
            let owner = format!("ALTER DATABASE \"{}\" OWNER TO {SECURED_USER}", db.name);
            super::execute_on(self.kind, &self.admin, &owner)
                .await
                .map_err(|e| ProvisionError(format!("{owner}: {e}")))?;
        }
        Ok(db)
    }

    /// The URL of `db` as the project's user reaches it: host `localhost` (the name the
    /// server's certificate has), the user's name, no password (the configuration gives it).
    pub fn user_url(&self, db: &SqlDatabase) -> String {
        let scheme = match self.kind.name {
            "mysql" => "mysql",
            _ => "postgres",
        };
        format!(
            "{scheme}://{SECURED_USER}@localhost:{}/{}",
            self.port, db.name
        )
    }
}
