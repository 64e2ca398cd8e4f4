//! The settings every SQL backend's configuration has, and what is done with them the same way
//! for each: the URL read and redacted, the TLS mode looked up, the pool, `Debug`, the checks.

use std::fmt::{self, Debug};
use std::path::Path;
use std::str::FromStr;
use std::sync::Mutex;
use std::time::Duration;

use leaf_core::{Error, Result};
use serde::Serialize;
use serde::de::DeserializeOwned;
use sqlx::Pool;
use sqlx::pool::PoolOptions;

use crate::Dialect;

/// A SQL backend's configuration: one table of the server's configuration (serde) for its
/// store and its workerId mode, with the fields every SQL backend has ([`Settings`]) under the
/// same names, and the backend's own.
pub trait SqlConfig:
    DeserializeOwned + Serialize + Default + Clone + Send + Sync + 'static
{
    /// The driver's connect options.
    type Options;
    /// `Config`, naming the field, if a value cannot work.
    fn validate(&self) -> Result<()>;
    /// The settings every SQL backend has ([`settings!`](crate::settings)).
    fn settings(&self) -> Settings<'_>;
    /// The connection options, or `Config` naming `key` (the URL's key) and what is wrong.
    fn connect_options(&self, key: &str) -> Result<Self::Options>;
    /// The defaults with `url`.
    fn with_url(url: &str) -> Self;
}

/// The [`Settings`] of `$config`, a SQL backend's configuration: its fields of those names.
#[macro_export]
macro_rules! settings {
    ($config:expr) => {
        $crate::Settings {
            url: &$config.url,
            username: $config.username.as_deref(),
            password: $config.password.as_deref(),
            max_connections: $config.max_connections,
            connect_timeout_ms: $config.connect_timeout_ms,
            timeout_ms: $config.timeout_ms,
            ssl_mode: $config.ssl_mode.as_deref(),
            fence_on_disconnect: $config.fence_on_disconnect,
            lease_ttl_ms: $config.lease_ttl_ms,
            password_file: $config.password_file.as_deref(),
            ca_file: $config.ca_file.as_deref(),
            cert_file: $config.cert_file.as_deref(),
            key_file: $config.key_file.as_deref(),
        }
    };
}

/// The SQL backend configuration `$ty { url, and the backend's own fields }` with every SQL
/// backend's defaults for the rest: no `username`, `password` or `ssl_mode` (the URL's), no
/// `password_file`, `ca_file`, `cert_file` or `key_file`, `max_connections` 8,
/// `connect_timeout_ms` 3000, `timeout_ms` 5000, `fence_on_disconnect` off, `lease_ttl_ms`
/// 10000. The defaults every
/// SQL backend documents are these.
#[macro_export]
macro_rules! with_defaults {
    ($ty:ident { $($field:ident: $value:expr),* $(,)? }) => {
        $ty {
            username: None,
            password: None,
            max_connections: 8,
            connect_timeout_ms: 3000,
            timeout_ms: 5000,
            ssl_mode: None,
            fence_on_disconnect: false,
            lease_ttl_ms: 10_000,
            password_file: None,
            ca_file: None,
            cert_file: None,
            key_file: None,
            $($field: $value),*
        }
    };
}

/// The settings every SQL backend's configuration has, as [`SqlConfig::settings`] reads them; a
/// backend names the rest (its lock wait, its CA file) its own way.
#[derive(Clone, Copy, Debug)]
pub struct Settings<'a> {
    /// The server and database, `scheme://user:password@host:port/database`.
    pub url: &'a str,
    /// The user, replacing the URL's.
    pub username: Option<&'a str>,
    /// The password, replacing the URL's.
    pub password: Option<&'a str>,
    /// The most connections the pool opens.
    pub max_connections: u32,
    /// How long to wait for a connection, in milliseconds.
    pub connect_timeout_ms: u64,
    /// The longest any one call may take, in milliseconds.
    pub timeout_ms: u64,
    /// The TLS mode, as the backend spells it.
    pub ssl_mode: Option<&'a str>,
    /// The workerId mode's `fence_on_disconnect`.
    pub fence_on_disconnect: bool,
    /// The TTL of a leased claim (the monotonic leader's), in milliseconds.
    pub lease_ttl_ms: u64,
    /// A file holding the password, read at each new connection.
    pub password_file: Option<&'a Path>,
    /// A PEM file of the certificate authorities to trust.
    pub ca_file: Option<&'a Path>,
    /// A PEM file of the client certificate, for servers that require one.
    pub cert_file: Option<&'a Path>,
    /// A PEM file of the client certificate's key.
    pub key_file: Option<&'a Path>,
}

/// How a driver's connect options take the password and the TLS files, for
/// [`Settings::apply`].
pub struct Setters<O> {
    /// Sets the password.
    pub password: fn(O, &str) -> O,
    /// Sets the file of the certificate authorities to trust.
    pub ca_file: fn(O, &Path) -> O,
    /// Sets the client certificate's file.
    pub cert_file: fn(O, &Path) -> O,
    /// Sets the client certificate's key's file.
    pub key_file: fn(O, &Path) -> O,
}

impl Settings<'_> {
    /// The bound of one call.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms.max(1))
    }

    /// The bound of getting a connection.
    pub fn connect_timeout(&self) -> Duration {
        Duration::from_millis(self.connect_timeout_ms.max(1))
    }

    /// The URL with its password replaced by `***`, for logs and messages.
    pub fn redacted_url(&self) -> String {
        leaf_core::redact_url(self.url, "***")
    }

    /// The password: `password`, else the text of `password_file` read now; `Config` naming
    /// the key when both are set or the file cannot be read.
    pub fn password(&self) -> Result<Option<String>> {
        leaf_core::secret("password", self.password, self.password_file)
    }

    /// `opts` with the password ([`password`](Self::password), read now) and the TLS files
    /// set through the driver's `setters`; `Config` naming the key when a client certificate
    /// comes without its key or the reverse, or a file cannot be read (checked here, so that
    /// a missing file stops the start with its key rather than failing every connection).
    pub fn apply<O>(&self, mut opts: O, setters: &Setters<O>) -> Result<O> {
        leaf_core::check_tls_files(self.ca_file, self.cert_file, self.key_file)?;
        let files = [
            (self.ca_file, setters.ca_file),
            (self.cert_file, setters.cert_file),
            (self.key_file, setters.key_file),
        ];
        for (path, set) in files {
            if let Some(path) = path {
                opts = set(opts, path);
            }
        }
        if let Some(password) = self.password()? {
            opts = (setters.password)(opts, &password);
        }
        Ok(opts)
    }

    /// `Config` naming the field if a number every SQL backend has, or one of `more` (a field,
    /// its value, its least and its largest), is out of its range. A timeout is at least
    /// `least_timeout_ms`.
    pub fn check_bounds(
        &self,
        least_timeout_ms: u64,
        more: &[(&str, u64, u64, u64)],
    ) -> Result<()> {
        const HOUR_MS: u64 = 3_600_000;
        leaf_core::check_bounds(&[
            ("max_connections", u64::from(self.max_connections), 1, 1_000),
            (
                "connect_timeout_ms",
                self.connect_timeout_ms,
                least_timeout_ms,
                HOUR_MS,
            ),
            ("timeout_ms", self.timeout_ms, least_timeout_ms, HOUR_MS),
            ("lease_ttl_ms", self.lease_ttl_ms, 1, 24 * HOUR_MS),
        ])?;
        leaf_core::check_bounds(more)
    }
}

/// The connect options `O` of `settings`' URL, with its user and password, or `Config` naming
/// `key`: a URL whose scheme is not one of `schemes` (the first names the backend), or one
/// the driver refuses.
pub fn parse_url<O>(settings: &Settings<'_>, schemes: &[&str], key: &str) -> Result<O>
where
    O: FromStr<Err = sqlx::Error>,
{
    let scheme = settings
        .url
        .split_once("://")
        .map(|(s, _)| s.to_ascii_lowercase());
    let name = schemes[0];
    if !scheme.is_some_and(|s| schemes.contains(&s.as_str())) {
        return Err(Error::Config(format!(
            "{key} {:?} is not a {name}:// url",
            settings.redacted_url()
        )));
    }
    O::from_str(settings.url).map_err(|e| {
        Error::Config(format!(
            "{key} {:?} is not a valid {name} url: {e}",
            settings.redacted_url()
        ))
    })
}

/// The TLS mode `mode` names among `modes` (in any case, with `-` or `_` as the names have
/// it), or `Config` listing them.
pub fn ssl_mode<M: Copy>(mode: &str, modes: &[(&str, M)]) -> Result<M> {
    let dash = modes.iter().any(|(name, _)| name.contains('-'));
    let mode = mode
        .to_ascii_lowercase()
        .replace(if dash { '_' } else { '-' }, if dash { "-" } else { "_" });
    if let Some((_, m)) = modes.iter().find(|(name, _)| *name == mode) {
        return Ok(*m);
    }
    let names: Vec<&str> = modes.iter().map(|(name, _)| *name).collect();
    Err(Error::Config(format!(
        "ssl_mode {mode:?} is not one of {}",
        names.join(", ")
    )))
}

/// [`SqlConfig::validate`] for the segment store: also `Config` for a workerId mode's key set
/// to a value other than its default.
pub fn validate_store<D: Dialect>(config: &D::Config) -> Result<()> {
    config.validate()?;
    let settings = config.settings();
    let defaults = D::Config::default();
    let set = [
        (
            "fence_on_disconnect",
            settings.fence_on_disconnect != defaults.settings().fence_on_disconnect,
        ),
        (
            "lease_ttl_ms",
            settings.lease_ttl_ms != defaults.settings().lease_ttl_ms,
        ),
    ];
    if let Some((key, _)) = set.iter().find(|(_, differs)| *differs) {
        let name = D::NAME;
        return Err(Error::Config(format!(
            "{key} is a key of the {name} workerId mode ([snowflake.{name}]); the segment store \
             does not take it"
        )));
    }
    Ok(())
}

/// A pool whose connections open on first use (a store or registry can be made while the
/// server is down), with what the dialect sets on each.
pub(crate) fn pool<D: Dialect>(config: &D::Config, key: &str) -> Result<Pool<D::Db>> {
    let settings = config.settings();
    let options = PoolOptions::new()
        .max_connections(settings.max_connections)
        .min_connections(0)
        .acquire_timeout(settings.connect_timeout());
    Ok(D::pool_options(config, options).connect_lazy_with(config.connect_options(key)?))
}

/// `Debug` of a SQL backend's configuration `name`: the URL without its password, no password
/// (the path of `password_file`, not its text), and `lock`, the backend's name of its lock wait
/// and its value.
pub fn fmt_config(
    f: &mut fmt::Formatter<'_>,
    name: &str,
    settings: &Settings<'_>,
    lock: (&str, &dyn Debug),
) -> fmt::Result {
    f.debug_struct(name)
        .field("url", &settings.redacted_url())
        .field("username", &settings.username)
        .field("password", &settings.password.map(|_| "***"))
        .field("password_file", &settings.password_file)
        .field("max_connections", &settings.max_connections)
        .field("connect_timeout_ms", &settings.connect_timeout_ms)
        .field("timeout_ms", &settings.timeout_ms)
        .field(lock.0, lock.1)
        .field("ssl_mode", &settings.ssl_mode)
        .field("ca_file", &settings.ca_file)
        .field("cert_file", &settings.cert_file)
        .field("key_file", &settings.key_file)
        .field("fence_on_disconnect", &settings.fence_on_disconnect)
        .field("lease_ttl_ms", &settings.lease_ttl_ms)
        .finish()
}

/// The password of a pool's new connections kept current with `password_file`: read again
/// before each call, and when its text changed the pool opens its connections from then on with
/// the new one (those open keep theirs: a server checks a password when a connection opens), so
/// a rotated secret takes effect without a restart.
pub(crate) struct Rotation {
    last: Mutex<Option<String>>,
}

impl Rotation {
    pub(crate) fn new(settings: &Settings<'_>) -> Self {
        let last = settings.password().ok().flatten();
        Rotation {
            last: Mutex::new(last),
        }
    }

    /// Reads `password_file` (if the configuration has one) and gives `pool` the new password
    /// when it changed. A file that cannot be read is logged and the password read before kept.
    pub(crate) fn refresh<D: Dialect>(&self, config: &D::Config, pool: &Pool<D::Db>) {
        let settings = config.settings();
        let Some(path) = settings.password_file else {
            return;
        };
        let now = match leaf_core::read_secret_file("password_file", path) {
            Ok(text) => text,
            Err(e) => {
                tracing::warn!(error = %e, "{}: keeping the password read before", D::NAME);
                return;
            }
        };
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if last.as_deref() == Some(now.as_str()) {
            return;
        }
        match config.connect_options("url") {
            Ok(options) => {
                pool.set_connect_options(options);
                *last = Some(now);
                tracing::info!(
                    "{}: password_file changed; new connections use its password",
                    D::NAME
                );
            }
            Err(e) => tracing::warn!(error = %e, "{}: keeping the password read before", D::NAME),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fields every SQL backend's configuration has, and one of its own.
    #[derive(Debug, PartialEq)]
    struct Config {
        url: String,
        username: Option<String>,
        password: Option<String>,
        max_connections: u32,
        connect_timeout_ms: u64,
        timeout_ms: u64,
        ssl_mode: Option<String>,
        fence_on_disconnect: bool,
        lease_ttl_ms: u64,
        password_file: Option<std::path::PathBuf>,
        ca_file: Option<std::path::PathBuf>,
        cert_file: Option<std::path::PathBuf>,
        key_file: Option<std::path::PathBuf>,
        own: u8,
    }

    #[test]
    fn every_sql_backend_has_these_defaults_and_settings() {
        let c = with_defaults!(Config {
            url: "db://h/leaf".into(),
            own: 3,
        });
        assert_eq!(
            (c.max_connections, c.connect_timeout_ms, c.timeout_ms),
            (8, 3000, 5000)
        );
        assert_eq!(
            (&c.username, &c.password, &c.ssl_mode),
            (&None, &None, &None)
        );
        assert!(!c.fence_on_disconnect);
        assert_eq!(c.lease_ttl_ms, 10_000);
        let c = Config {
            password: Some("pw".into()),
            ssl_mode: Some("require".into()),
            fence_on_disconnect: true,
            ..c
        };
        let s = settings!(c);
        assert_eq!(
            (s.url, s.password, s.ssl_mode),
            ("db://h/leaf", Some("pw"), Some("require"))
        );
        assert_eq!(
            (s.max_connections, s.timeout(), s.fence_on_disconnect),
            (8, Duration::from_secs(5), true)
        );
    }

    #[test]
    fn redaction_table() {
        let check = |url: &str, expect: &str| {
            let settings = Settings {
                url,
                username: None,
                password: None,
                max_connections: 1,
                connect_timeout_ms: 1,
                timeout_ms: 1,
                ssl_mode: None,
                fence_on_disconnect: false,
                lease_ttl_ms: 1,
                password_file: None,
                ca_file: None,
                cert_file: None,
                key_file: None,
            };
            assert_eq!(settings.redacted_url(), expect, "{url}");
        };
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
    fn ssl_modes_by_either_spelling() {
        let check = |modes: &[(&str, u8)], mode: &str, expect: std::result::Result<u8, &str>| {
            let got = ssl_mode(mode, modes).map_err(|e| e.to_string());
            assert_eq!(
                got,
                expect.map_err(|m| format!("configuration error: {m}")),
                "{mode}"
            );
        };
        let underscores = [("disabled", 0), ("verify_ca", 1)];
        check(&underscores, "VERIFY-CA", Ok(1));
        check(&underscores, "verify_ca", Ok(1));
        check(
            &underscores,
            "Some-Times",
            Err("ssl_mode \"some_times\" is not one of disabled, verify_ca"),
        );
        let dashes = [("disable", 0), ("verify-full", 2)];
        check(&dashes, "Verify_Full", Ok(2));
        check(
            &dashes,
            "some_times",
            Err("ssl_mode \"some-times\" is not one of disable, verify-full"),
        );
    }
}
