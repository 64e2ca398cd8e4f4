//! Configuration of the MySQL segment store and of the `mysql` workerId mode: where the server
//! is, how many connections, how long to wait, TLS. `Debug` never shows the password.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use leaf_core::{Error, Result};
use serde::{Deserialize, Serialize};
use sqlx::mysql::{MySqlConnectOptions, MySqlSslMode};

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
    /// The password, replacing the URL's (Leaf's `leaf.jdbc.password`). Never logged, never in
    /// `Debug` output. Default: the URL's.
    pub password: Option<String>,
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
    /// A PEM file of the certificate authorities to trust for `verify_ca`/`verify_identity`.
    /// Default: the URL's `ssl-ca`, else the built-in web PKI roots.
    pub ssl_ca: Option<PathBuf>,
    /// The `mysql` workerId mode only (`[snowflake.mysql]`; refused in `[segment]`): every
    /// renewal writes the time mark on the identity lock's connection and counts only once it
    /// committed there, so a node cut off from MySQL stops issuing within `mark_window_ms` and
    /// whoever takes its identity next starts above everything it issued; there is no start
    /// from the cache file. Off (Leaf's availability): renewals count once the cache file has
    /// the mark, the row follows in the background, and a node keeps issuing while MySQL is
    /// down. Default `false`.
    pub fence_on_disconnect: bool,
}

/// The keys of [`MysqlConfig`] that only the workerId mode takes: a segment store's table
/// refuses them.
pub const REGISTRY_ONLY_KEYS: &[&str] = &["fence_on_disconnect"];

/// The segment store's settings (`[segment]` with `store = "mysql"`).
pub type MysqlStoreConfig = MysqlConfig;

/// The `mysql` workerId mode's settings (`[snowflake.mysql]`).
pub type MysqlRegistryConfig = MysqlConfig;

impl Default for MysqlConfig {
    fn default() -> Self {
        MysqlConfig {
            url: "mysql://root@127.0.0.1:3306/leaf".into(),
            username: None,
            password: None,
            max_connections: 8,
            connect_timeout_ms: 3000,
            timeout_ms: 5000,
            lock_wait_timeout_s: 3,
            ssl_mode: None,
            ssl_ca: None,
            fence_on_disconnect: false,
        }
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
        redact_url(&self.url)
    }

    /// `Config`, naming the field, if a value cannot work: a URL that is not a `mysql://` one,
    /// an unknown `ssl_mode`, a number out of its range.
    pub fn validate(&self) -> Result<()> {
        const HOUR_MS: u64 = 3_600_000;
        leaf_core::check_bounds(&[
            ("max_connections", u64::from(self.max_connections), 1, 1_000),
            ("connect_timeout_ms", self.connect_timeout_ms, 0, HOUR_MS),
            ("timeout_ms", self.timeout_ms, 0, HOUR_MS),
            // InnoDB counts whole seconds.
            ("lock_wait_timeout_s", self.lock_wait_timeout_s, 1, 3_600),
        ])?;
        self.connect_options("url").map(drop)
    }

    /// [`validate`](Self::validate) for the segment store: also `Config` for a workerId mode's
    /// key set to a value other than its default.
    pub fn validate_store(&self) -> Result<()> {
        self.validate()?;
        if self.fence_on_disconnect {
            return Err(Error::Config(
                "fence_on_disconnect is a key of the mysql workerId mode ([snowflake.mysql]); \
                 the segment store does not take it"
                    .into(),
            ));
        }
        Ok(())
    }

    /// The connection options, or `Config` naming what is wrong (`key` is the configuration
    /// key the URL came from, for the message).
    pub(crate) fn connect_options(&self, key: &str) -> Result<MySqlConnectOptions> {
        let scheme = self
            .url
            .split_once("://")
            .map(|(s, _)| s.to_ascii_lowercase());
        if !matches!(scheme.as_deref(), Some("mysql" | "mariadb")) {
            return Err(Error::Config(format!(
                "{key} {:?} is not a mysql:// url",
                self.redacted_url()
            )));
        }
        let mut opts = MySqlConnectOptions::from_str(&self.url).map_err(|e| {
            Error::Config(format!(
                "{key} {:?} is not a valid mysql url: {e}",
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
        if let Some(ca) = &self.ssl_ca {
            opts = opts.ssl_ca(ca);
        }
        if self.max_connections == 0 {
            return Err(Error::Config("max_connections must be at least 1".into()));
        }
        if self.lock_wait_timeout_s == 0 {
            return Err(Error::Config(
                "lock_wait_timeout_s must be at least 1 (InnoDB counts whole seconds)".into(),
            ));
        }
        Ok(opts)
    }

    pub(crate) fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms.max(1))
    }

    pub(crate) fn connect_timeout(&self) -> Duration {
        Duration::from_millis(self.connect_timeout_ms.max(1))
    }
}

impl fmt::Debug for MysqlConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MysqlConfig")
            .field("url", &self.redacted_url())
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("max_connections", &self.max_connections)
            .field("connect_timeout_ms", &self.connect_timeout_ms)
            .field("timeout_ms", &self.timeout_ms)
            .field("lock_wait_timeout_s", &self.lock_wait_timeout_s)
            .field("ssl_mode", &self.ssl_mode)
            .field("ssl_ca", &self.ssl_ca)
            .field("fence_on_disconnect", &self.fence_on_disconnect)
            .finish()
    }
}

fn parse_ssl_mode(mode: &str) -> Result<MySqlSslMode> {
    Ok(match mode.to_ascii_lowercase().replace('-', "_").as_str() {
        "disabled" => MySqlSslMode::Disabled,
        "preferred" => MySqlSslMode::Preferred,
        "required" => MySqlSslMode::Required,
        "verify_ca" => MySqlSslMode::VerifyCa,
        "verify_identity" => MySqlSslMode::VerifyIdentity,
        other => {
            return Err(Error::Config(format!(
                "ssl_mode {other:?} is not one of disabled, preferred, required, verify_ca, \
                 verify_identity"
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
    fn every_number_is_bounded_and_named() {
        leaf_testkit::config::assert_bounds::<MysqlConfig>(
            MysqlConfig::validate,
            &[
                ("max_connections", 1, 1_000),
                ("connect_timeout_ms", 0, 3_600_000),
                ("timeout_ms", 0, 3_600_000),
                ("lock_wait_timeout_s", 1, 3_600),
            ],
            &[],
        );
    }

    #[test]
    fn defaults_match_the_documented_ones() {
        let c = MysqlConfig::default();
        assert_eq!(c.url, "mysql://root@127.0.0.1:3306/leaf");
        assert_eq!(c.max_connections, 8);
        assert_eq!(c.connect_timeout_ms, 3000);
        assert_eq!(c.timeout_ms, 5000);
        assert_eq!(c.lock_wait_timeout_s, 3);
        assert!(!c.fence_on_disconnect);
        assert_eq!(
            (c.username, c.password, c.ssl_mode, c.ssl_ca),
            (None, None, None, None)
        );
    }

    #[test]
    fn deserialises_partial_and_refuses_unknown_keys() {
        let c: MysqlConfig =
            serde_json::from_str(r#"{"url": "mysql://u@h/leaf", "max_connections": 2}"#).unwrap();
        assert_eq!(c.max_connections, 2);
        assert_eq!(c.timeout_ms, 5000);
        assert!(serde_json::from_str::<MysqlConfig>(r#"{"pasword": "x"}"#).is_err());
    }

    #[test]
    fn debug_never_shows_the_password() {
        let c = MysqlConfig {
            password: Some("field-secret".into()),
            ..MysqlConfig::with_url("mysql://leaf:url-secret@db:3306/leaf?password=q-secret")
        };
        let shown = format!("{c:?}");
        assert!(!shown.contains("secret"), "{shown}");
        assert!(
            shown.contains("mysql://leaf:***@db:3306/leaf?password=***"),
            "{shown}"
        );
    }

    #[test]
    fn redaction_table() {
        let check = |url: &str, expect: &str| assert_eq!(redact_url(url), expect, "{url}");
        check("mysql://u:p@h:3306/db", "mysql://u:***@h:3306/db");
        check("mysql://u@h/db", "mysql://u@h/db");
        check("mysql://u:p:q@h", "mysql://u:***@h");
        check(
            "mysql://h/db?ssl-mode=disabled",
            "mysql://h/db?ssl-mode=disabled",
        );
        check(
            "mysql://u:p@h/db?a=1&password=x",
            "mysql://u:***@h/db?a=1&password=***",
        );
        check("not a url", "not a url");
    }

    #[test]
    fn options_name_the_bad_key() {
        let e = MysqlConfig::with_url("postgres://x")
            .connect_options("url")
            .unwrap_err();
        assert!(
            matches!(&e, Error::Config(m) if m.starts_with("url")),
            "{e}"
        );
        let e = MysqlConfig {
            ssl_mode: Some("sometimes".into()),
            ..MysqlConfig::default()
        }
        .connect_options("url")
        .unwrap_err();
        assert!(
            matches!(&e, Error::Config(m) if m.contains("ssl_mode")),
            "{e}"
        );
        let e = MysqlConfig {
            lock_wait_timeout_s: 0,
            ..MysqlConfig::default()
        }
        .connect_options("url")
        .unwrap_err();
        assert!(matches!(e, Error::Config(_)));
        for mode in [
            "disabled",
            "PREFERRED",
            "required",
            "verify-ca",
            "verify_identity",
        ] {
            let c = MysqlConfig {
                ssl_mode: Some(mode.into()),
                ..MysqlConfig::default()
            };
            assert!(c.connect_options("url").is_ok(), "{mode}");
        }
    }
}
