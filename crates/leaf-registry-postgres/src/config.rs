//! Configuration of the PostgreSQL segment store and of the `postgres` workerId mode: where the
//! server is, how many connections, how long to wait, TLS. `Debug` never shows the password.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use leaf_core::{Error, Result};
use serde::{Deserialize, Serialize};
use sqlx::postgres::{PgConnectOptions, PgSslMode};

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
    /// A PEM file of the certificate authorities to trust for `verify-ca`/`verify-full`.
    /// Default: the URL's `sslrootcert`, else the built-in web PKI roots.
    pub ssl_root_cert: Option<PathBuf>,
    /// The `postgres` workerId mode only (`[snowflake.postgres]`; refused in `[segment]`):
    /// every renewal writes the time mark on the identity lock's connection and counts only
    /// once it committed there, so a node cut off from PostgreSQL stops issuing within
    /// `mark_window_ms` and whoever takes its identity next starts above everything it issued;
    /// there is no start from the cache file. Off (Leaf's availability): renewals count once
    /// the cache file has the mark, the row follows in the background, and a node keeps issuing
    /// while PostgreSQL is down. Default `false`.
    pub fence_on_disconnect: bool,
}

/// The keys of [`PostgresConfig`] that only the workerId mode takes: a segment store's table
/// refuses them.
pub const REGISTRY_ONLY_KEYS: &[&str] = &["fence_on_disconnect"];

/// The segment store's settings (`[segment]` with `store = "postgres"`).
pub type PostgresStoreConfig = PostgresConfig;

/// The `postgres` workerId mode's settings (`[snowflake.postgres]`).
pub type PostgresRegistryConfig = PostgresConfig;

impl Default for PostgresConfig {
    fn default() -> Self {
        PostgresConfig {
            url: "postgres://postgres@127.0.0.1:5432/leaf".into(),
            username: None,
            password: None,
            max_connections: 8,
            connect_timeout_ms: 3000,
            timeout_ms: 5000,
            lock_timeout_ms: 3000,
            ssl_mode: None,
            ssl_root_cert: None,
            fence_on_disconnect: false,
        }
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
        redact_url(&self.url)
    }

    /// `Config`, naming the field, if a value cannot work: a URL that is not a `postgres://`
    /// one, an unknown `ssl_mode`, a number out of its range.
    pub fn validate(&self) -> Result<()> {
        const HOUR_MS: u64 = 3_600_000;
        leaf_core::check_bounds(&[
            ("max_connections", u64::from(self.max_connections), 1, 1_000),
            ("connect_timeout_ms", self.connect_timeout_ms, 1, HOUR_MS),
            // PostgreSQL reads 0 as "no timeout": never that.
            ("timeout_ms", self.timeout_ms, 1, HOUR_MS),
            ("lock_timeout_ms", self.lock_timeout_ms, 1, HOUR_MS),
        ])?;
        self.connect_options("url").map(drop)
    }

    /// [`validate`](Self::validate) for the segment store: also `Config` for a workerId mode's
    /// key set to a value other than its default.
    pub fn validate_store(&self) -> Result<()> {
        self.validate()?;
        if self.fence_on_disconnect {
            return Err(Error::Config(
                "fence_on_disconnect is a key of the postgres workerId mode \
                 ([snowflake.postgres]); the segment store does not take it"
                    .into(),
            ));
        }
        Ok(())
    }

    /// The connection options, with every session's timeouts, or `Config` naming what is wrong
    /// (`key` is the configuration key the URL came from, for the message).
    pub(crate) fn connect_options(&self, key: &str) -> Result<PgConnectOptions> {
        let scheme = self
            .url
            .split_once("://")
            .map(|(s, _)| s.to_ascii_lowercase());
        if !matches!(scheme.as_deref(), Some("postgres" | "postgresql")) {
            return Err(Error::Config(format!(
                "{key} {:?} is not a postgres:// url",
                self.redacted_url()
            )));
        }
        let mut opts = PgConnectOptions::from_str(&self.url).map_err(|e| {
            Error::Config(format!(
                "{key} {:?} is not a valid postgres url: {e}",
                self.redacted_url()
            ))
        })?;
        if let Some(user) = &self.username {
            opts = opts.username(user);
        }
        if let Some(password) = &self.password {
            opts = opts.password(password);
        }
        if let Some(mode) = &self.ssl_mode {
            opts = opts.ssl_mode(parse_ssl_mode(mode)?);
        }
        if let Some(ca) = &self.ssl_root_cert {
            opts = opts.ssl_root_cert(ca);
        }
        // Sent in the start-up packet, so that every connection (the pool's and the identity
        // lock's) has them without a round trip of its own.
        Ok(opts.application_name("leaf").options([
            ("statement_timeout", self.timeout().as_millis()),
            ("lock_timeout", self.lock_timeout().as_millis()),
        ]))
    }

    pub(crate) fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms.max(1))
    }

    pub(crate) fn lock_timeout(&self) -> Duration {
        Duration::from_millis(self.lock_timeout_ms.clamp(1, self.timeout_ms.max(1)))
    }

    pub(crate) fn connect_timeout(&self) -> Duration {
        Duration::from_millis(self.connect_timeout_ms.max(1))
    }
}

impl fmt::Debug for PostgresConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresConfig")
            .field("url", &self.redacted_url())
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("max_connections", &self.max_connections)
            .field("connect_timeout_ms", &self.connect_timeout_ms)
            .field("timeout_ms", &self.timeout_ms)
            .field("lock_timeout_ms", &self.lock_timeout_ms)
            .field("ssl_mode", &self.ssl_mode)
            .field("ssl_root_cert", &self.ssl_root_cert)
            .field("fence_on_disconnect", &self.fence_on_disconnect)
            .finish()
    }
}

fn parse_ssl_mode(mode: &str) -> Result<PgSslMode> {
    Ok(match mode.to_ascii_lowercase().replace('_', "-").as_str() {
        "disable" => PgSslMode::Disable,
        "allow" => PgSslMode::Allow,
        "prefer" => PgSslMode::Prefer,
        "require" => PgSslMode::Require,
        "verify-ca" => PgSslMode::VerifyCa,
        "verify-full" => PgSslMode::VerifyFull,
        other => {
            return Err(Error::Config(format!(
                "ssl_mode {other:?} is not one of disable, allow, prefer, require, verify-ca, \
                 verify-full"
            )));
        }
    })
}

/// The URL with its password shown as `***` (`leaf_core::redact_url`).
pub(crate) fn redact_url(url: &str) -> String {
    leaf_core::redact_url(url, "***")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_documented_ones() {
        let c = PostgresConfig::default();
        assert_eq!(c.url, "postgres://postgres@127.0.0.1:5432/leaf");
        assert_eq!(c.max_connections, 8);
        assert_eq!(c.connect_timeout_ms, 3000);
        assert_eq!(c.timeout_ms, 5000);
        assert!(!c.fence_on_disconnect);
        assert_eq!(c.lock_timeout_ms, 3000);
        assert_eq!(
            (c.username, c.password, c.ssl_mode, c.ssl_root_cert),
            (None, None, None, None)
        );
        PostgresConfig::default().validate().unwrap();
    }

    #[test]
    fn deserialises_partial_and_refuses_unknown_keys() {
        let c: PostgresConfig =
            serde_json::from_str(r#"{"url": "postgres://u@h/leaf", "max_connections": 2}"#)
                .unwrap();
        assert_eq!(c.max_connections, 2);
        assert_eq!(c.timeout_ms, 5000);
        assert!(serde_json::from_str::<PostgresConfig>(r#"{"pasword": "x"}"#).is_err());
        // The MySQL backend's name for the lock wait is not this one's.
        assert!(serde_json::from_str::<PostgresConfig>(r#"{"lock_wait_timeout_s": 3}"#).is_err());
    }

    #[test]
    fn debug_never_shows_the_password() {
        let c = PostgresConfig {
            password: Some("field-secret".into()),
            ..PostgresConfig::with_url("postgres://leaf:url-secret@db:5432/leaf?password=q-secret")
        };
        let shown = format!("{c:?}");
        assert!(!shown.contains("secret"), "{shown}");
        assert!(
            shown.contains("postgres://leaf:***@db:5432/leaf?password=***"),
            "{shown}"
        );
    }

    #[test]
    fn every_number_is_bounded_and_named() {
        leaf_testkit::config::assert_bounds::<PostgresConfig>(
            PostgresConfig::validate,
            &[
                ("max_connections", 1, 1_000),
                ("connect_timeout_ms", 1, 3_600_000),
                ("timeout_ms", 1, 3_600_000),
                ("lock_timeout_ms", 1, 3_600_000),
            ],
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
        let e = PostgresConfig::with_url("mysql://x")
            .connect_options("url")
            .unwrap_err();
        assert!(
            matches!(&e, Error::Config(m) if m.starts_with("url")),
            "{e}"
        );
        let e = PostgresConfig {
            ssl_mode: Some("sometimes".into()),
            ..PostgresConfig::default()
        }
        .connect_options("url")
        .unwrap_err();
        assert!(
            matches!(&e, Error::Config(m) if m.contains("ssl_mode")),
            "{e}"
        );
        for mode in [
            "disable",
            "ALLOW",
            "prefer",
            "require",
            "verify-ca",
            "verify_full",
        ] {
            let c = PostgresConfig {
                ssl_mode: Some(mode.into()),
                ..PostgresConfig::default()
            };
            assert!(c.connect_options("url").is_ok(), "{mode}");
        }
        for url in [
            "postgresql://u@h/db",
            "postgres://u:p@h:5433/db?sslmode=disable",
        ] {
            assert!(PostgresConfig::with_url(url).validate().is_ok(), "{url}");
        }
    }
}
