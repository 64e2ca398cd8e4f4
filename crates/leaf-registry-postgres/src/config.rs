//! Configuration of the PostgreSQL segment store and of the `postgres` workerId mode: where the
//! server is, how many connections, how long to wait, TLS. `Debug` never shows the password.

use std::fmt;
use std::path::PathBuf;

use leaf_core::Result;
use leaf_sql::{Setters, Settings, SqlConfig, fmt_config, parse_url, ssl_mode};
use serde::{Deserialize, Serialize};
use sqlx::postgres::{PgConnectOptions, PgSslMode};

use crate::PostgresDialect;

/// How to reach a PostgreSQL server (12 or later). The segment store (`[segment]` with
/// `store = "postgres"`) and the `postgres` workerId mode (`[snowflake.postgres]`) take the
/// same settings.
#[derive(Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct PostgresConfig {
    /// The server and database, `postgres://user:password@host:5432/leaf` (`postgresql://`
    /// too; sqlx's URL parameters such as `sslmode` are accepted).
    /// Default `"postgres://postgres@127.0.0.1:5432/leaf"`.
    pub url: String,
    /// The user, replacing the URL's. Default: the URL's.
    pub username: Option<String>,
    /// The password, replacing the URL's. Never logged, never in `Debug` output. Default: the
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
    /// The longest any one call (an allocation, a lookup) may take, in milliseconds, before it
    /// fails with `Unavailable`: a stalled server never hangs a caller. It is also every
    /// session's `statement_timeout`, so that the server gives up a statement the caller gave
    /// up on. Default `5000`.
    pub timeout_ms: u64,
    /// Every session's `lock_timeout`, in milliseconds: how long an allocation waits for a row
    /// another transaction holds before failing with `Unavailable`. Never above `timeout_ms`
    /// (the lower of the two applies). Default `3000`.
    pub lock_timeout_ms: u64,
    /// TLS: `disable`, `allow`, `prefer` (TLS when the server offers it), `require`,
    /// `verify-ca` or `verify-full`. Default: the URL's `sslmode`, else `prefer`.
    pub ssl_mode: Option<String>,
    /// A PEM file of the certificate authorities to trust for `verify-ca`/`verify-full` (`ssl_root_cert`,
    /// its earlier name, is read too). Default: the URL's `sslrootcert`, else the built-in web PKI roots.
    #[serde(alias = "ssl_root_cert")]
    pub ca_file: Option<PathBuf>,
    /// A PEM file of a client certificate, for a server that requires one (`REQUIRE X509`,
    /// `clientcert=verify-full`); with `key_file`. `ssl_cert` is read too. Default: none.
    #[serde(alias = "ssl_cert")]
    pub cert_file: Option<PathBuf>,
    /// The PEM file of `cert_file`'s private key. `ssl_key` is read too. Default: none.
    #[serde(alias = "ssl_key")]
    pub key_file: Option<PathBuf>,
    /// The `postgres` workerId mode only (`[snowflake.postgres]`; refused in `[segment]`):
    /// every renewal writes the time mark on the identity lock's connection and counts only
    /// once it committed there, so a node cut off from PostgreSQL stops issuing within
    /// `mark_window_ms` and whoever takes its identity next starts above everything it issued;
    /// there is no start from the cache file. Off (Leaf's availability): renewals count once
    /// the cache file has the mark, the row follows in the background, and a node keeps issuing
    /// while PostgreSQL is down. Default `false`.
    pub fence_on_disconnect: bool,
    /// The `postgres` workerId mode only (refused in `[segment]`): the lease of the monotonic
    /// mode's leader, in milliseconds, held in `leaf_workerid_lease` with `fence_on_disconnect`
    /// on (worker ids themselves are held by the identity lock, without a lease). A leader
    /// stops issuing `snowflake.fencing_margin_ms` before its lease could end, and a new one is
    /// elected within about this long after a leader dies. Counted by PostgreSQL's clock. Above
    /// `snowflake.mark_renew_ms` + `fencing_margin_ms` + 1 s. Default `10000`.
    pub lease_ttl_ms: u64,
}

impl SqlConfig for PostgresConfig {
    type Options = PgConnectOptions;

    /// With every session's timeouts, sent in the start-up packet, so that every connection
    /// (the pool's and the identity lock's) has them without a round trip of its own: the
    /// statement timeout is `timeout_ms`, the lock timeout `lock_timeout_ms`, never above it.
    fn connect_options(&self, key: &str) -> Result<PgConnectOptions> {
        let statement_timeout = self.timeout_ms.max(1);
        let lock_timeout = self.lock_timeout_ms.clamp(1, statement_timeout);
        let mut opts: PgConnectOptions =
            parse_url(&self.settings(), &["postgres", "postgresql"], key)?;
        if let Some(user) = &self.username {
            opts = opts.username(user);
        }
        if let Some(mode) = &self.ssl_mode {
            opts = opts.ssl_mode(ssl_mode(mode, SSL_MODES)?);
        }
        opts = self.settings().apply(opts, &SETTERS)?;
        Ok(opts.application_name("leaf").options([
            ("statement_timeout", statement_timeout),
            ("lock_timeout", lock_timeout),
        ]))
    }

    fn validate(&self) -> Result<()> {
        PostgresConfig::validate(self)
    }

    fn settings(&self) -> Settings<'_> {
        leaf_sql::settings!(self)
    }

    fn with_url(url: &str) -> Self {
        PostgresConfig::with_url(url)
    }
}

impl PostgresConfig {
    /// The defaults with `url`.
    pub fn with_url(url: impl Into<String>) -> Self {
        PostgresConfig {
            url: url.into(),
            ..PostgresConfig::default()
        }
    }

    /// The URL with its password replaced by `***`, for logs and messages.
    pub fn redacted_url(&self) -> String {
        self.settings().redacted_url()
    }

    /// `Config`, naming the field, if a value cannot work: a URL that is not a `postgres://`
    /// one, an unknown `ssl_mode`, a number out of its range.
    pub fn validate(&self) -> Result<()> {
        // PostgreSQL reads 0 as "no timeout": never that.
        let lock_timeout = ("lock_timeout_ms", self.lock_timeout_ms, 1, 3_600_000);
        self.settings().check_bounds(1, &[lock_timeout])?;
        self.connect_options("url").map(drop)
    }

    /// [`validate`](Self::validate) for the segment store: also `Config` for a workerId mode's
    /// key set to a value other than its default.
    pub fn validate_store(&self) -> Result<()> {
        leaf_sql::validate_store::<PostgresDialect>(self)
    }
}

impl Default for PostgresConfig {
    fn default() -> Self {
        leaf_sql::with_defaults!(PostgresConfig {
            url: "postgres://postgres@127.0.0.1:5432/leaf".into(),
            lock_timeout_ms: 3000,
        })
    }
}

impl fmt::Debug for PostgresConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lock_timeout = ("lock_timeout_ms", &self.lock_timeout_ms as &dyn fmt::Debug);
        fmt_config(f, "PostgresConfig", &self.settings(), lock_timeout)
    }
}

/// How sqlx's options take the password and the TLS files.
const SETTERS: Setters<PgConnectOptions> = Setters {
    password: |o, p| o.password(p),
    ca_file: |o, p| o.ssl_root_cert(p),
    cert_file: |o, p| o.ssl_client_cert(p),
    key_file: |o, p| o.ssl_client_key(p),
};

const SSL_MODES: &[(&str, PgSslMode)] = &[
    ("disable", PgSslMode::Disable),
    ("allow", PgSslMode::Allow),
    ("prefer", PgSslMode::Prefer),
    ("require", PgSslMode::Require),
    ("verify-ca", PgSslMode::VerifyCa),
    ("verify-full", PgSslMode::VerifyFull),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_documented_ones() {
        let c = PostgresConfig::default();
        assert_eq!(c.url, "postgres://postgres@127.0.0.1:5432/leaf");
        assert_eq!((c.lock_timeout_ms, c.ca_file), (3000, None));
        leaf_testkit::config::assert_sql_defaults::<PostgresConfig>();
        PostgresConfig::default().validate().unwrap();
    }

    #[test]
    fn deserialises_partial_and_refuses_unknown_keys() {
        // The MySQL backend's name for the lock wait is not this one's.
        let foreign = ["lock_wait_timeout_s"];
        leaf_testkit::config::assert_partial_and_strict::<PostgresConfig>(
            "postgres://u@h/leaf",
            &foreign,
        );
    }

    #[test]
    fn debug_never_shows_the_password() {
        leaf_testkit::config::assert_debug_hides_passwords::<PostgresConfig>(
            "postgres://leaf:url-secret@db:5432/leaf?password=q-secret",
            "postgres://leaf:***@db:5432/leaf?password=***",
        );
    }

    #[test]
    fn every_number_is_bounded_and_named() {
        let mut bounds = leaf_testkit::config::sql_bounds(1);
        bounds.push(("lock_timeout_ms", 1, 3_600_000));
        leaf_testkit::config::assert_bounds::<PostgresConfig>(
            PostgresConfig::validate,
            &bounds,
            &[],
        );
    }
    #[test]
    fn the_sessions_timeouts_are_bounded_by_the_call_timeout() {
        let check = |timeout_ms: u64, lock_timeout_ms: u64, expect: &str| {
            let c = PostgresConfig {
                timeout_ms,
                lock_timeout_ms,
                ..PostgresConfig::default()
            };
            let opts = c.connect_options("url").unwrap();
            assert_eq!(
                opts.get_options(),
                Some(expect),
                "{timeout_ms} {lock_timeout_ms}"
            );
        };
        check(5000, 3000, "-c statement_timeout=5000 -c lock_timeout=3000");
        check(700, 3000, "-c statement_timeout=700 -c lock_timeout=700");
        check(1, 1, "-c statement_timeout=1 -c lock_timeout=1");
    }

    #[test]
    fn options_name_the_bad_key() {
        let options = |c: &PostgresConfig| c.connect_options("url").map(drop);
        let modes = [
            "disable",
            "ALLOW",
            "prefer",
            "require",
            "verify-ca",
            "verify_full",
        ];
        leaf_testkit::config::assert_options_name_the_bad_key(options, "mysql://x", &modes);
        for url in [
            "postgresql://u@h/db",
            "postgres://u:p@h:5433/db?sslmode=disable",
        ] {
            assert!(PostgresConfig::with_url(url).validate().is_ok(), "{url}");
        }
    }
}
