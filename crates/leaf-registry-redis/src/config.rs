//! Configuration of the Redis segment store and of the `redis` workerId mode: where the server
//! is, the key prefix, how long to wait, the durability guard and replica acknowledgement, the
//! lease TTL, TLS (`rediss://`, `ca_file`, `cert_file` / `key_file`) and the ACL user
//! (`username`, `password` or `password_file`). `Debug` never shows a password or a key.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use leaf_core::{Error, Result};
use serde::{Deserialize, Serialize};

/// How to reach Redis and how the store and the registry use it. The segment store
/// (`[segment.redis]` with `store = "redis"`) and the `redis` workerId mode
/// (`[snowflake.redis]`) take the same settings; `lease_ttl_ms` concerns the registry only.
#[derive(Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedisConfig {
    /// The server, `redis://[user:password@]host:6379[/db]`, or `rediss://...` for TLS (the
    /// server's certificate is verified against `ca_file`, else the system's roots, and must
    /// name the URL's host). Only a single server (with replicas, optionally) is supported, not
    /// Redis Cluster. Default `"redis://127.0.0.1:6379"`.
    pub url: String,
    /// With `rediss://`: the PEM file of the CA(s) the server's certificate must chain to,
    /// instead of the system's roots. Read at every (re)connection. Default: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    /// With `rediss://`: the client certificate (PEM) presented to a server that asks for one
    /// (`tls-auth-clients yes`); needs `key_file`. Read at every (re)connection. Default: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cert_file: Option<PathBuf>,
    /// The private key (PEM) of `cert_file`. Read at every (re)connection. Default: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_file: Option<PathBuf>,
    /// The ACL user to log in as (`AUTH username password`); replaces the URL's. Default: the
    /// URL's, else Redis's `default` user.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// The password; replaces the URL's. Never logged. Default: the URL's, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// A file holding the password (a mounted secret), read again every time a connection is
    /// opened, so a rotated secret takes effect at the next reconnection without a restart.
    /// Exclusive with `password`. Default: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password_file: Option<PathBuf>,
    /// The prefix of every key written: the store's keys are `{key_prefix}:tags` and
    /// `{key_prefix}:tag:{tag}`, the registry's `{key_prefix}:{name}:workers:{id}` and
    /// `{key_prefix}:{name}:marks:{id}`. Default `"leaf"`.
    pub key_prefix: String,
    /// How long opening a connection may take, in milliseconds, before failing with
    /// `Unavailable`. Default `3000`.
    pub connect_timeout_ms: u64,
    /// The longest any one call (an allocation, a renewal, a lookup) may take, in milliseconds,
    /// before it fails with `Unavailable`: a stalled server never hangs a caller. Default `5000`.
    pub timeout_ms: u64,
    /// Run on a server whose `appendonly`/`appendfsync` are weaker than `yes`/`always`, whose
    /// connected replicas outnumber `wait_replicas` (an acknowledged allocation or mark may then
    /// be lost in a crash or a failover, and its IDs handed out twice), or whose `maxmemory`
    /// limit comes with a `maxmemory-policy` other than `noeviction` (Redis may then evict an
    /// id's mark, a tag's row or a live lease). A warning is logged at every connection.
    /// Default `false`: such a server is refused.
    pub accept_weak_durability: bool,
    /// Where the server refuses `CONFIG GET` (renamed, or denied by an ACL): `true` states that
    /// it runs with `appendonly yes`, `appendfsync always` and `maxmemory-policy noeviction` (or
    /// no `maxmemory`), which the guard then takes on trust. Ignored when `CONFIG GET` answers.
    /// Default `false`.
    pub assume_durable: bool,
    /// How many replicas must acknowledge every write (`WAIT`) before it counts; a write not
    /// acknowledged in time fails with `Unavailable`. A primary with more connected replicas
    /// than this is refused at connect (a failover could promote one that missed a write),
    /// unless `accept_weak_durability`. Default `0` (no `WAIT`; no replicas allowed).
    pub wait_replicas: u32,
    /// How long `WAIT` waits for the replicas, in milliseconds; at least 1 (Redis would wait
    /// for ever on 0). Default `1000`.
    pub wait_timeout_ms: u64,
    /// The `redis` workerId mode: the TTL of a worker id's lease, in milliseconds. It must be
    /// above the generator's minimum (renew period + fencing margin + latency allowance).
    /// Default `10000`.
    pub lease_ttl_ms: u64,
}

/// The segment store's settings (`[segment.redis]`).
pub type RedisStoreConfig = RedisConfig;

/// The `redis` workerId mode's settings (`[snowflake.redis]`).
pub type RedisRegistryConfig = RedisConfig;

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            url: "redis://127.0.0.1:6379".into(),
            ca_file: None,
            cert_file: None,
            key_file: None,
            username: None,
            password: None,
            password_file: None,
            key_prefix: "leaf".into(),
            connect_timeout_ms: 3000,
            timeout_ms: 5000,
            accept_weak_durability: false,
            assume_durable: false,
            wait_replicas: 0,
            wait_timeout_ms: 1000,
            lease_ttl_ms: 10_000,
        }
    }
}

impl RedisConfig {
    /// The defaults with `url`.
    pub fn with_url(url: impl Into<String>) -> Self {
        RedisConfig {
            url: url.into(),
            ..RedisConfig::default()
        }
    }

    /// The URL with its password replaced by `***`, for logs and messages.
    pub fn redacted_url(&self) -> String {
        redact_url(&self.url)
    }

    /// `Config`, naming the field, if a value cannot work.
    pub fn validate(&self) -> Result<()> {
        let scheme = self
            .url
            .split_once("://")
            .map(|(s, _)| s.to_ascii_lowercase());
        let tls = match scheme.as_deref() {
            Some("redis") => false,
            Some("rediss") => true,
            _ => {
                return Err(Error::Config(format!(
                    "url {:?} is not a redis:// or rediss:// url",
                    self.redacted_url()
                )));
            }
        };
        for (key, file) in [
            ("ca_file", &self.ca_file),
            ("cert_file", &self.cert_file),
            ("key_file", &self.key_file),
        ] {
            if file.is_some() && !tls {
                return Err(Error::Config(format!(
                    "{key} needs rediss:// (TLS), but url is {:?}",
                    self.redacted_url()
                )));
            }
        }
        leaf_core::check_tls_files(
            self.ca_file.as_deref(),
            self.cert_file.as_deref(),
            self.key_file.as_deref(),
        )?;
        if self.password.is_some() && self.password_file.is_some() {
            return Err(Error::Config(
                "password and password_file are both set: give one".into(),
            ));
        }
        if self
            .username
            .as_deref()
            .is_some_and(|u| u.is_empty() || u.chars().any(|c| c.is_whitespace() || c.is_control()))
        {
            return Err(Error::Config(
                "username must be non-empty, without whitespace".into(),
            ));
        }
        if let Some(path) = &self.password_file {
            check_file("password_file", path)?;
        }
        if self.key_prefix.is_empty() || self.key_prefix.chars().any(char::is_whitespace) {
            return Err(Error::Config(format!(
                "key_prefix {:?} must be non-empty, without whitespace",
                self.key_prefix
            )));
        }
        const HOUR_MS: u64 = 3_600_000;
        leaf_core::check_bounds(&[
            ("connect_timeout_ms", self.connect_timeout_ms, 1, HOUR_MS),
            ("timeout_ms", self.timeout_ms, 1, HOUR_MS),
            ("wait_replicas", u64::from(self.wait_replicas), 0, 1_000),
            // Redis waits for ever on 0.
            ("wait_timeout_ms", self.wait_timeout_ms, 1, HOUR_MS),
            ("lease_ttl_ms", self.lease_ttl_ms, 1, 24 * HOUR_MS),
        ])?;
        Ok(())
    }

    /// Whether the URL is `rediss://`.
    pub(crate) fn tls(&self) -> bool {
        self.url
            .split_once("://")
            .is_some_and(|(s, _)| s.eq_ignore_ascii_case("rediss"))
    }

    /// The key that supplies the password, for messages: `password_file`, `password`, else
    /// `url` (its `user:password@`).
    pub(crate) fn password_key(&self) -> &'static str {
        if self.password_file.is_some() {
            "password_file"
        } else if self.password.is_some() {
            "password"
        } else {
            "url"
        }
    }

    pub(crate) fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms.max(1))
    }

    pub(crate) fn connect_timeout(&self) -> Duration {
        Duration::from_millis(self.connect_timeout_ms.max(1))
    }

    /// The bound of a call that may end with a `WAIT`.
    pub(crate) fn write_timeout(&self) -> Duration {
        let wait = if self.wait_replicas > 0 {
            Duration::from_millis(self.wait_timeout_ms)
        } else {
            Duration::ZERO
        };
        self.timeout() + wait
    }

    pub(crate) fn lease_ttl(&self) -> Duration {
        Duration::from_millis(self.lease_ttl_ms)
    }
}

impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The files are shown by path (never their content); the password never.
        f.debug_struct("RedisConfig")
            .field("url", &self.redacted_url())
            .field("ca_file", &self.ca_file)
            .field("cert_file", &self.cert_file)
            .field("key_file", &self.key_file)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("password_file", &self.password_file)
            .field("key_prefix", &self.key_prefix)
            .field("connect_timeout_ms", &self.connect_timeout_ms)
            .field("timeout_ms", &self.timeout_ms)
            .field("accept_weak_durability", &self.accept_weak_durability)
            .field("assume_durable", &self.assume_durable)
            .field("wait_replicas", &self.wait_replicas)
            .field("wait_timeout_ms", &self.wait_timeout_ms)
            .field("lease_ttl_ms", &self.lease_ttl_ms)
            .finish()
    }
}

/// `Config` naming `key` and the path when `path` is not a readable file.
fn check_file(key: &str, path: &Path) -> Result<()> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() => Ok(()),
        Ok(_) => Err(Error::Config(format!(
            "{key}: {} is not a file",
            path.display()
        ))),
        Err(e) => Err(Error::Config(format!(
            "{key}: cannot read {}: {e}",
            path.display()
        ))),
    }
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
        leaf_testkit::config::assert_bounds::<RedisConfig>(
            RedisConfig::validate,
            &[
                ("connect_timeout_ms", 1, 3_600_000),
                ("timeout_ms", 1, 3_600_000),
                ("wait_replicas", 0, 1_000),
                ("wait_timeout_ms", 1, 3_600_000),
                ("lease_ttl_ms", 1, 86_400_000),
            ],
            &[],
        );
    }

    #[test]
    fn defaults_match_the_documented_ones() {
        let c = RedisConfig::default();
        assert_eq!(c.url, "redis://127.0.0.1:6379");
        assert_eq!(c.key_prefix, "leaf");
        assert_eq!(c.connect_timeout_ms, 3000);
        assert_eq!(c.timeout_ms, 5000);
        assert!(!c.accept_weak_durability);
        assert!(!c.assume_durable);
        assert_eq!(c.wait_replicas, 0);
        assert_eq!(c.wait_timeout_ms, 1000);
        assert_eq!(c.lease_ttl_ms, 10_000);
        c.validate().unwrap();
    }

    #[test]
    fn deserialises_partial_and_refuses_unknown_keys() {
        let c: RedisConfig = serde_json::from_str(
            r#"{"url": "redis://h:6380", "accept_weak_durability": true, "wait_replicas": 1}"#,
        )
        .unwrap();
        assert_eq!(c.url, "redis://h:6380");
        assert!(c.accept_weak_durability);
        assert_eq!(c.wait_replicas, 1);
        assert_eq!(c.timeout_ms, 5000);
        assert!(serde_json::from_str::<RedisConfig>(r#"{"acept_weak_durability": true}"#).is_err());
        let c: RedisConfig = serde_json::from_str(
            r#"{"url": "rediss://h:6380", "ca_file": "/etc/ca.pem", "cert_file": "/c.pem",
                "key_file": "/c.key", "username": "leaf", "password_file": "/run/pw"}"#,
        )
        .unwrap();
        assert_eq!(c.ca_file.as_deref(), Some(Path::new("/etc/ca.pem")));
        assert_eq!(c.cert_file.as_deref(), Some(Path::new("/c.pem")));
        assert_eq!(c.key_file.as_deref(), Some(Path::new("/c.key")));
        assert_eq!(c.username.as_deref(), Some("leaf"));
        assert_eq!(c.password_file.as_deref(), Some(Path::new("/run/pw")));
        assert!(c.tls());
    }

    #[test]
    fn debug_never_shows_the_password() {
        let c = RedisConfig::with_url("redis://leaf:url-secret@db:6379/0?password=q-secret");
        let shown = format!("{c:?}");
        assert!(!shown.contains("secret"), "{shown}");
        assert!(
            shown.contains("redis://leaf:***@db:6379/0?password=***"),
            "{shown}"
        );
        // The new keys: the password hidden, the files shown by path and never read into it.
        let dir = tempfile::tempdir().unwrap();
        let file = |name: &str, text: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        let c = RedisConfig {
            username: Some("leaf".into()),
            password: Some("inline-secret".into()),
            ca_file: Some(file("ca.pem", "ca-content-secret")),
            cert_file: Some(file("client.pem", "cert-content-secret")),
            key_file: Some(file("client.key", "key-content-secret")),
            ..RedisConfig::with_url("rediss://db:6379")
        };
        c.validate().unwrap();
        let c2 = RedisConfig {
            password: None,
            password_file: Some(file("pw", "file-secret")),
            ..c.clone()
        };
        c2.validate().unwrap();
        for c in [c, c2] {
            let shown = format!("{c:?} {:#?}", c);
            assert!(!shown.contains("secret"), "{shown}");
            assert!(
                shown.contains("client.key") && shown.contains("\"leaf\""),
                "{shown}"
            );
        }
    }

    #[test]
    fn redaction_table() {
        let check = |url: &str, expect: &str| assert_eq!(redact_url(url), expect, "{url}");
        check("redis://u:p@h:6379/0", "redis://u:***@h:6379/0");
        check("redis://:p@h:6379", "redis://:***@h:6379");
        check("redis://h:6379", "redis://h:6379");
        check("not a url", "not a url");
    }

    #[test]
    fn validation_names_the_field() {
        let check = |c: RedisConfig, field: &str| {
            let e = c.validate().unwrap_err();
            assert!(
                matches!(&e, Error::Config(m) if m.starts_with(field)),
                "{field}: {e}"
            );
        };
        let d = RedisConfig::default;
        check(RedisConfig::with_url("mysql://h"), "url");
        RedisConfig::with_url("rediss://h").validate().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let pem = dir.path().join("x.pem");
        std::fs::write(&pem, "x").unwrap();
        let missing = dir.path().join("missing.pem");
        let tls = || RedisConfig::with_url("rediss://h:6379");
        // A file on a plain url, a certificate without its key and the reverse, missing files.
        for key in ["ca_file", "cert_file", "key_file"] {
            let mut c = RedisConfig {
                cert_file: Some(pem.clone()),
                key_file: Some(pem.clone()),
                ..d()
            };
            match key {
                "ca_file" => {
                    c = RedisConfig {
                        ca_file: Some(pem.clone()),
                        cert_file: None,
                        key_file: None,
                        ..d()
                    }
                }
                "cert_file" => c.key_file = None,
                _ => c.cert_file = None,
            }
            let e = c.validate().unwrap_err().to_string();
            assert!(
                e.contains(key) && e.contains("needs rediss://"),
                "{key}: {e}"
            );
        }
        check(
            RedisConfig {
                cert_file: Some(pem.clone()),
                ..tls()
            },
            "cert_file",
        );
        check(
            RedisConfig {
                key_file: Some(pem.clone()),
                ..tls()
            },
            "key_file",
        );
        check(
            RedisConfig {
                ca_file: Some(missing.clone()),
                ..tls()
            },
            "ca_file",
        );
        check(
            RedisConfig {
                cert_file: Some(missing.clone()),
                key_file: Some(pem.clone()),
                ..tls()
            },
            "cert_file",
        );
        check(
            RedisConfig {
                cert_file: Some(pem.clone()),
                key_file: Some(missing.clone()),
                ..tls()
            },
            "key_file",
        );
        check(
            RedisConfig {
                password_file: Some(missing.clone()),
                ..d()
            },
            "password_file",
        );
        check(
            RedisConfig {
                password: Some("p".into()),
                password_file: Some(pem.clone()),
                ..d()
            },
            "password",
        );
        check(
            RedisConfig {
                username: Some("a b".into()),
                ..d()
            },
            "username",
        );
        RedisConfig {
            ca_file: Some(pem.clone()),
            cert_file: Some(pem.clone()),
            key_file: Some(pem.clone()),
            username: Some("leaf".into()),
            password_file: Some(pem.clone()),
            ..tls()
        }
        .validate()
        .unwrap();
        check(
            RedisConfig {
                key_prefix: String::new(),
                ..d()
            },
            "key_prefix",
        );
        check(
            RedisConfig {
                key_prefix: "a b".into(),
                ..d()
            },
            "key_prefix",
        );
        check(
            RedisConfig {
                connect_timeout_ms: 0,
                ..d()
            },
            "connect_timeout_ms",
        );
        check(
            RedisConfig {
                timeout_ms: 0,
                ..d()
            },
            "timeout_ms",
        );
        check(
            RedisConfig {
                wait_timeout_ms: 0,
                ..d()
            },
            "wait_timeout_ms",
        );
        check(
            RedisConfig {
                lease_ttl_ms: 0,
                ..d()
            },
            "lease_ttl_ms",
        );
    }
}
