//! Configuration of the MySQL segment store and of the `mysql` workerId mode: where the server
//! is, how many connections, how long to wait, TLS. `Debug` never shows the password.

use std::fmt;
use std::path::PathBuf;

use leaf_core::{Error, Result};
use leaf_sql::{Setters, Settings, SqlConfig, fmt_config, parse_url, ssl_mode};
use serde::{Deserialize, Serialize};
use sqlx::mysql::{MySql, MySqlConnectOptions, MySqlSslMode};
use sqlx::pool::PoolOptions;
use sqlx::{AssertSqlSafe, Executor};

use crate::MysqlDialect;

/// How to reach a MySQL-compatible server (MySQL 8, MariaDB 10.11+). The segment store
/// (`[segment]` with `store = "mysql"`) and the `mysql` workerId mode (`[snowflake.mysql]`)
/// take the same settings.
#[derive(Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct MysqlConfig {
    /// The server and database, `mysql://user:password@host:3306/leaf` (Leaf's `leaf.jdbc.url`
    /// without the `jdbc:` prefix; sqlx's URL parameters such as `ssl-mode` are accepted).
    /// Default `"mysql://root@127.0.0.1:3306/leaf"`.
    pub url: String,
    /// The user, replacing the URL's (Leaf's `leaf.jdbc.username`). Default: the URL's.
    pub username: Option<String>,
    /// The password, replacing the URL's (Leaf's `leaf.jdbc.password`). Never logged, never in `Debug` output. Default: the
    /// URL's.
    pub password: Option<String>,
    /// A file holding the password (`password` and this are not both set), read again at each
    /// new connection, so that a rotated secret (a Kubernetes secret's volume) takes effect
    /// without a restart. Its text without one trailing line break. Default: none.
    pub password_file: Option<PathBuf>,
    /// The most connections the pool opens. Default `8`.
    pub max_connections: u32,
    /// How long to wait for a connection (opening one, or a free one from the pool), in
    /// milliseconds, before failing with `Unavailable`. Default `3000`.
    pub connect_timeout_ms: u64,
    /// The longest any one call (an allocation transaction, a lookup) may take, in milliseconds,
    /// before it fails with `Unavailable`: a stalled server never hangs a caller. Default `5000`.
    pub timeout_ms: u64,
    /// InnoDB's `innodb_lock_wait_timeout` for this pool's sessions, in seconds: how long an
    /// allocation waits for a row another transaction holds before failing with `Unavailable`.
    /// At least 1. Default `3`.
    pub lock_wait_timeout_s: u64,
    /// TLS: `disabled`, `preferred` (TLS when the server offers it), `required`, `verify_ca`
    /// or `verify_identity`. Default: the URL's `ssl-mode`, else `preferred`.
    pub ssl_mode: Option<String>,
    /// A PEM file of the certificate authorities to trust for `verify_ca`/`verify_identity` (`ssl_ca`,
    /// its earlier name, is read too). Default: the URL's `ssl-ca`, else the built-in web PKI roots.
    #[serde(alias = "ssl_ca")]
    pub ca_file: Option<PathBuf>,
    /// A PEM file of a client certificate, for a server that requires one (`REQUIRE X509`,
    /// `clientcert=verify-full`); with `key_file`. `ssl_cert` is read too. Default: none.
    #[serde(alias = "ssl_cert")]
    pub cert_file: Option<PathBuf>,
    /// The PEM file of `cert_file`'s private key. `ssl_key` is read too. Default: none.
    #[serde(alias = "ssl_key")]
    pub key_file: Option<PathBuf>,
    /// The `mysql` workerId mode only (`[snowflake.mysql]`; refused in `[segment]`): every
    /// renewal writes the time mark on the identity lock's connection and counts only once it
    /// committed there, so a node cut off from MySQL stops issuing within `mark_window_ms` and
    /// whoever takes its identity next starts above everything it issued; there is no start
    /// from the cache file. Off (Leaf's availability): renewals count once the cache file has
    /// the mark, the row follows in the background, and a node keeps issuing while MySQL is
    /// down. Default `false`.
    pub fence_on_disconnect: bool,
    /// The `mysql` workerId mode only (refused in `[segment]`): the lease of the monotonic
    /// mode's leader, in milliseconds, held in `leaf_workerid_lease` with `fence_on_disconnect`
    /// on (worker ids themselves are held by the identity lock, without a lease). A leader
    /// stops issuing `snowflake.fencing_margin_ms` before its lease could end, and a new one is
    /// elected within about this long after a leader dies. Counted by MySQL's clock. Above
    /// `snowflake.mark_renew_ms` + `fencing_margin_ms` + 1 s. Default `10000`.
    pub lease_ttl_ms: u64,
}

impl SqlConfig for MysqlConfig {
    type Options = MySqlConnectOptions;

    fn connect_options(&self, key: &str) -> Result<MySqlConnectOptions> {
        // Checked here too: the registry is made without `validate`.
        if self.max_connections == 0 {
            return Err(Error::Config("max_connections must be at least 1".into()));
        }
        if self.lock_wait_timeout_s == 0 {
            return Err(Error::Config(
                "lock_wait_timeout_s must be at least 1 (InnoDB counts whole seconds)".into(),
            ));
        }
        let mut opts: MySqlConnectOptions =
            parse_url(&self.settings(), &["mysql", "mariadb"], key)?;
        if let Some(user) = &self.username {
            opts = opts.username(user);
        }
        if let Some(mode) = &self.ssl_mode {
            opts = opts.ssl_mode(ssl_mode(mode, SSL_MODES)?);
        }
        opts = self.settings().apply(opts, &SETTERS)?;
        Ok(opts)
    }

    fn validate(&self) -> Result<()> {
        MysqlConfig::validate(self)
    }

    fn settings(&self) -> Settings<'_> {
        leaf_sql::settings!(self)
    }

    fn with_url(url: &str) -> Self {
        MysqlConfig::with_url(url)
    }
}

impl MysqlConfig {
    /// The defaults with `url`.
    pub fn with_url(url: impl Into<String>) -> Self {
        MysqlConfig {
            url: url.into(),
            ..MysqlConfig::default()
        }
    }

    /// The URL with its password replaced by `***`, for logs and messages.
    pub fn redacted_url(&self) -> String {
        self.settings().redacted_url()
    }

    /// `Config`, naming the field, if a value cannot work: a URL that is not a `mysql://` one,
    /// an unknown `ssl_mode`, a number out of its range.
    pub fn validate(&self) -> Result<()> {
        // InnoDB counts whole seconds.
        let lock_wait = ("lock_wait_timeout_s", self.lock_wait_timeout_s, 1, 3_600);
        self.settings().check_bounds(0, &[lock_wait])?;
        self.connect_options("url").map(drop)
    }

    /// `pool` setting every pooled session's InnoDB lock wait to `lock_wait_timeout_s`.
    pub(crate) fn pool_options(&self, pool: PoolOptions<MySql>) -> PoolOptions<MySql> {
        let lock_wait = self.lock_wait_timeout_s;
        pool.after_connect(move |conn, _meta| {
            Box::pin(async move {
                // A number formatted here, not input: safe to splice into the statement.
                let set = format!("SET SESSION innodb_lock_wait_timeout = {lock_wait}");
                conn.execute(AssertSqlSafe(set)).await?;
                Ok(())
            })
        })
    }

    /// [`validate`](Self::validate) for the segment store: also `Config` for a workerId mode's
    /// key set to a value other than its default.
    pub fn validate_store(&self) -> Result<()> {
        leaf_sql::validate_store::<MysqlDialect>(self)
    }
}

impl Default for MysqlConfig {
    fn default() -> Self {
        leaf_sql::with_defaults!(MysqlConfig {
            url: "mysql://root@127.0.0.1:3306/leaf".into(),
            lock_wait_timeout_s: 3,
        })
    }
}

impl fmt::Debug for MysqlConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lock_wait = (
            "lock_wait_timeout_s",
            &self.lock_wait_timeout_s as &dyn fmt::Debug,
        );
        fmt_config(f, "MysqlConfig", &self.settings(), lock_wait)
    }
}

/// How sqlx's options take the password and the TLS files.
const SETTERS: Setters<MySqlConnectOptions> = Setters {
    password: |o, p| o.password(p),
    ca_file: |o, p| o.ssl_ca(p),
    cert_file: |o, p| o.ssl_client_cert(p),
    key_file: |o, p| o.ssl_client_key(p),
};

const SSL_MODES: &[(&str, MySqlSslMode)] = &[
    ("disabled", MySqlSslMode::Disabled),
    ("preferred", MySqlSslMode::Preferred),
    ("required", MySqlSslMode::Required),
    ("verify_ca", MySqlSslMode::VerifyCa),
    ("verify_identity", MySqlSslMode::VerifyIdentity),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_number_is_bounded_and_named() {
        let mut bounds = leaf_testkit::config::sql_bounds(0);
        bounds.push(("lock_wait_timeout_s", 1, 3_600));
        leaf_testkit::config::assert_bounds::<MysqlConfig>(MysqlConfig::validate, &bounds, &[]);
    }

    #[test]
    fn defaults_match_the_documented_ones() {
        let c = MysqlConfig::default();
        assert_eq!(c.url, "mysql://root@127.0.0.1:3306/leaf");
        assert_eq!((c.lock_wait_timeout_s, c.ca_file), (3, None));
        leaf_testkit::config::assert_sql_defaults::<MysqlConfig>();
    }

    #[test]
    fn deserialises_partial_and_refuses_unknown_keys() {
        leaf_testkit::config::assert_partial_and_strict::<MysqlConfig>("mysql://u@h/leaf", &[]);
    }

    #[test]
    fn debug_never_shows_the_password() {
        leaf_testkit::config::assert_debug_hides_passwords::<MysqlConfig>(
            "mysql://leaf:url-secret@db:3306/leaf?password=q-secret",
            "mysql://leaf:***@db:3306/leaf?password=***",
        );
    }

    #[test]
    fn options_name_the_bad_key() {
        let options = |c: &MysqlConfig| c.connect_options("url").map(drop);
        let modes = [
            "disabled",
            "PREFERRED",
            "required",
            "verify-ca",
            "verify_identity",
        ];
        leaf_testkit::config::assert_options_name_the_bad_key(options, "postgres://x", &modes);
        let e = options(&MysqlConfig {
            lock_wait_timeout_s: 0,
            ..MysqlConfig::default()
        })
        .unwrap_err();
        assert!(matches!(e, Error::Config(_)));
    }
}
