//! Configuration of the etcd backend (`[snowflake.etcd]`, and the etcd segment store): where the
//! cluster is, how long a call may take, the worker-id lease's TTL and the key prefix.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use leaf_core::{Error, Result};
use serde::{Deserialize, Deserializer, Serialize};

/// How to reach etcd and how the `etcd` workerId mode and the etcd segment store use it.
/// `Debug` never shows the password.
#[derive(Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct EtcdConfig {
    /// The cluster's client URLs (`http://host:2379`, or `https://` for a cluster that serves
    /// TLS, with `ca_file`); calls are balanced over them, so one member down does not stop the
    /// service. A list, or one string of comma-separated URLs (`"http://a:2379,http://b:2379"`,
    /// the form of the server's `segment.url`), all of one scheme. Default
    /// `["http://127.0.0.1:2379"]`.
    #[serde(deserialize_with = "list_or_commas")]
    pub endpoints: Vec<String>,
    /// How long one etcd call (or one allocation, conflicts retried included) may take, in
    /// milliseconds; a longer one fails with `Unavailable`, so a stalled cluster never hangs a
    /// caller. Default `3000`.
    pub timeout_ms: u64,
    /// The TTL of a worker id's etcd lease, in milliseconds: a whole number of seconds (etcd
    /// counts leases in seconds). A node that stops renewing loses its id after it. It must be
    /// above the generator's minimum (renew period + fencing margin + latency allowance).
    /// Default `10000`.
    pub lease_ttl_ms: u64,
    /// A prefix for every key: the keys of a leaf name live under `{prefix}/{name}/`. Empty, or
    /// an absolute path without a trailing slash (`/leaf-prod`). Default `""`.
    pub prefix: String,
    /// `https://` endpoints: a PEM file of the certificate authorities that signed the
    /// members' certificates (required with `https://`; the members' names or addresses in
    /// `endpoints` must be in their certificates). Read when the client is made. Default: none.
    pub ca_file: Option<PathBuf>,
    /// `https://` endpoints: a PEM file of this client's certificate, for a cluster started
    /// with `--client-cert-auth`; with `key_file`. Default: none.
    pub cert_file: Option<PathBuf>,
    /// The PEM file of `cert_file`'s private key. Default: none.
    pub key_file: Option<PathBuf>,
    /// etcd's authentication (`etcdctl auth enable`): the user, whose role must grant
    /// `readwrite` on the keys under `prefix` (README: Running on etcd). Default: none.
    pub username: Option<String>,
    /// `username`'s password. Never logged, never in `Debug` output. Default: none.
    pub password: Option<String>,
    /// A file holding `username`'s password (not with `password`): read when the client is
    /// made and again before each call; when its text changed the client authenticates anew
    /// (a text etcd refuses is logged and the token kept), so that a rotated secret takes
    /// effect without a restart. Default: none.
    pub password_file: Option<PathBuf>,
}

impl Default for EtcdConfig {
    fn default() -> Self {
        EtcdConfig {
            endpoints: vec!["http://127.0.0.1:2379".into()],
            timeout_ms: 3000,
            lease_ttl_ms: 10_000,
            prefix: String::new(),
            ca_file: None,
            cert_file: None,
            key_file: None,
            username: None,
            password: None,
            password_file: None,
        }
    }
}

impl fmt::Debug for EtcdConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdConfig")
            .field("endpoints", &self.endpoints)
            .field("timeout_ms", &self.timeout_ms)
            .field("lease_ttl_ms", &self.lease_ttl_ms)
            .field("prefix", &self.prefix)
            .field("ca_file", &self.ca_file)
            .field("cert_file", &self.cert_file)
            .field("key_file", &self.key_file)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("password_file", &self.password_file)
            .finish()
    }
}

/// `endpoints` as a list, or as one string of comma-separated URLs.
fn list_or_commas<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Endpoints {
        List(Vec<String>),
        Commas(String),
    }
    Ok(match Endpoints::deserialize(d)? {
        Endpoints::List(list) => list,
        Endpoints::Commas(text) => EtcdConfig::with_url(&text).endpoints,
    })
}

impl EtcdConfig {
    /// The defaults with `endpoints`.
    pub fn with_endpoints<S: Into<String>>(endpoints: impl IntoIterator<Item = S>) -> Self {
        EtcdConfig {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            ..EtcdConfig::default()
        }
    }

    /// The defaults with the endpoints of a URL list, `http://a:2379[,http://b:2379...]` (the
    /// form of `segment.url`).
    pub fn with_url(url: &str) -> Self {
        Self::with_endpoints(
            url.split(',')
                .map(str::trim)
                .filter(|e| !e.is_empty())
                .map(str::to_owned),
        )
    }

    /// `Config`, naming the field, if a value cannot work.
    pub fn validate(&self) -> Result<()> {
        if self.endpoints.is_empty() || self.endpoints.iter().any(|e| e.trim().is_empty()) {
            return Err(Error::Config(
                "endpoints must list at least one client url, none of them empty".into(),
            ));
        }
        let scheme = |e: &str| {
            e.trim()
                .split_once("://")
                .filter(|(_, rest)| !rest.is_empty())
                .map(|(scheme, _)| scheme.to_ascii_lowercase())
        };
        if let Some(bad) = self
            .endpoints
            .iter()
            .find(|e| !matches!(scheme(e).as_deref(), Some("http" | "https")))
        {
            return Err(Error::Config(format!(
                "endpoints: {bad:?} is not an http:// or https:// client url (http://host:2379)"
            )));
        }
        let tls = self.tls()?;
        if tls && self.ca_file.is_none() {
            return Err(Error::Config(
                "ca_file: https:// endpoints need ca_file, the authorities that signed the \
                 members' certificates"
                    .into(),
            ));
        }
        let files = [
            ("ca_file", &self.ca_file),
            ("cert_file", &self.cert_file),
            ("key_file", &self.key_file),
        ];
        if let Some((key, _)) = files.iter().find(|(_, f)| f.is_some() && !tls) {
            return Err(Error::Config(format!(
                "{key} needs https:// endpoints; the endpoints are http://"
            )));
        }
        leaf_core::check_tls_files(
            self.ca_file.as_deref(),
            self.cert_file.as_deref(),
            self.key_file.as_deref(),
        )?;
        let password = self.password_now()?;
        match (&self.username, password) {
            (Some(_), None) => {
                return Err(Error::Config(
                    "username is set without password or password_file".into(),
                ));
            }
            (None, Some(_)) => {
                return Err(Error::Config(
                    "password is set without username: etcd's authentication needs both".into(),
                ));
            }
            _ => {}
        }
        leaf_core::check_bounds(&[
            ("timeout_ms", self.timeout_ms, 1, 3_600_000),
            ("lease_ttl_ms", self.lease_ttl_ms, 1_000, 86_400_000),
        ])?;
        if self.lease_ttl_ms < 1000 || !self.lease_ttl_ms.is_multiple_of(1000) {
            return Err(Error::Config(format!(
                "lease_ttl_ms must be a whole number of seconds (etcd leases count seconds), \
                 got {}",
                self.lease_ttl_ms
            )));
        }
        let p = &self.prefix;
        let bad_prefix = !p.is_empty()
            && (!p.starts_with('/') || p.len() < 2 || p.ends_with('/') || p.contains("//"));
        if bad_prefix {
            return Err(Error::Config(format!(
                "prefix {p:?} must be empty or an absolute path such as \"/leaf\", without a \
                 trailing slash"
            )));
        }
        Ok(())
    }

    /// Whether the endpoints are `https://` (all of them; `Config` if they mix schemes).
    pub(crate) fn tls(&self) -> Result<bool> {
        let https = |e: &String| e.trim().to_ascii_lowercase().starts_with("https://");
        let count = self.endpoints.iter().filter(|e| https(e)).count();
        match count {
            0 => Ok(false),
            n if n == self.endpoints.len() => Ok(true),
            _ => Err(Error::Config(
                "endpoints mix http:// and https://: give one scheme".into(),
            )),
        }
    }

    /// The password: `password`, else the text of `password_file` read now.
    pub(crate) fn password_now(&self) -> Result<Option<String>> {
        leaf_core::secret(
            "password",
            self.password.as_deref(),
            self.password_file.as_deref().map(Path::new),
        )
    }

    pub(crate) fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms.max(1))
    }

    /// The lease TTL in etcd's unit.
    pub(crate) fn lease_ttl_s(&self) -> i64 {
        i64::try_from(self.lease_ttl_ms / 1000).unwrap_or(i64::MAX)
    }

    /// `{prefix}/{name}`, after checking `name`.
    pub(crate) fn base(&self, name: &str) -> Result<String> {
        if name.is_empty() || name == "." || name == ".." || name.contains('/') {
            return Err(Error::Config(format!(
                "the leaf name {name:?} must be one etcd key segment (not empty, no '/')"
            )));
        }
        Ok(format!("{}/{name}", self.prefix))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_number_is_bounded_and_named() {
        // A whole number of seconds (etcd's rule): the bounds are multiples of 1000.
        leaf_testkit::config::assert_bounds::<EtcdConfig>(
            EtcdConfig::validate,
            &[
                ("timeout_ms", 1, 3_600_000),
                ("lease_ttl_ms", 1_000, 86_400_000),
            ],
            &[],
        );
    }

    #[test]
    fn defaults_match_the_documented_ones() {
        let c = EtcdConfig::default();
        assert_eq!(c.endpoints, ["http://127.0.0.1:2379"]);
        assert_eq!(c.timeout_ms, 3000);
        assert_eq!(c.lease_ttl_ms, 10_000);
        assert_eq!(c.prefix, "");
        c.validate().unwrap();
        assert_eq!(c.lease_ttl_s(), 10);
        assert_eq!(c.base("leaf").unwrap(), "/leaf");
    }

    #[test]
    fn deserialises_partial_and_refuses_unknown_keys() {
        let c: EtcdConfig = serde_json::from_str(
            r#"{"endpoints": ["http://a:2379", "http://b:2379"], "prefix": "/p"}"#,
        )
        .unwrap();
        assert_eq!(c.endpoints.len(), 2);
        assert_eq!(c.timeout_ms, 3000);
        assert_eq!(c.base("leaf").unwrap(), "/p/leaf");
        assert!(serde_json::from_str::<EtcdConfig>(r#"{"endpoint": []}"#).is_err());
    }

    #[test]
    fn url_lists_split_at_commas() {
        let c = EtcdConfig::with_url("http://a:2379, http://b:2379,");
        assert_eq!(c.endpoints, ["http://a:2379", "http://b:2379"]);
    }

    #[test]
    fn endpoints_are_a_list_or_one_string_of_urls() {
        let c: EtcdConfig =
            serde_json::from_str(r#"{"endpoints": "http://a:2379, http://b:2379"}"#).unwrap();
        assert_eq!(c.endpoints, ["http://a:2379", "http://b:2379"]);
        let c: EtcdConfig = serde_json::from_str(r#"{"endpoints": ["http://a:2379"]}"#).unwrap();
        assert_eq!(c.endpoints, ["http://a:2379"]);
        let e = EtcdConfig::with_url("mysql://h:3306")
            .validate()
            .unwrap_err();
        assert!(
            matches!(&e, Error::Config(m) if m.starts_with("endpoints")),
            "{e}"
        );
    }

    #[test]
    fn validation_names_the_field() {
        let check = |c: EtcdConfig, field: &str| {
            let e = c.validate().unwrap_err();
            assert!(
                matches!(&e, Error::Config(m) if m.starts_with(field)),
                "{field}: {e}"
            );
        };
        let d = EtcdConfig::default;
        check(
            EtcdConfig {
                endpoints: vec![],
                ..d()
            },
            "endpoints",
        );
        check(
            EtcdConfig {
                endpoints: vec![" ".into()],
                ..d()
            },
            "endpoints",
        );
        check(
            EtcdConfig {
                endpoints: vec!["https://a:2379".into()],
                ..d()
            },
            "ca_file",
        );
        check(
            EtcdConfig {
                endpoints: vec!["https://a:2379".into(), "http://b:2379".into()],
                ..d()
            },
            "endpoints",
        );
        check(
            EtcdConfig {
                ca_file: Some("/nonexistent/ca.pem".into()),
                ..d()
            },
            "ca_file",
        );
        check(
            EtcdConfig {
                username: Some("leaf".into()),
                ..d()
            },
            "username",
        );
        check(
            EtcdConfig {
                password: Some("pw".into()),
                ..d()
            },
            "password",
        );
        check(
            EtcdConfig {
                timeout_ms: 0,
                ..d()
            },
            "timeout_ms",
        );
        for ttl in [0, 999, 1500, 10_001] {
            check(
                EtcdConfig {
                    lease_ttl_ms: ttl,
                    ..d()
                },
                "lease_ttl_ms",
            );
        }
        for prefix in ["leaf", "/", "/a/", "/a//b"] {
            check(
                EtcdConfig {
                    prefix: prefix.into(),
                    ..d()
                },
                "prefix",
            );
        }
    }

    #[test]
    fn debug_never_shows_the_password() {
        let c = EtcdConfig {
            username: Some("leaf".into()),
            password: Some("etcd-secret".into()),
            ..EtcdConfig::default()
        };
        let shown = format!("{c:?}");
        assert!(!shown.contains("etcd-secret"), "{shown}");
        assert!(shown.contains("password: Some(\"***\")"), "{shown}");
    }

    #[test]
    fn names_are_one_segment() {
        let c = EtcdConfig::default();
        for bad in ["", ".", "..", "a/b"] {
            assert!(matches!(c.base(bad), Err(Error::Config(_))), "{bad:?}");
        }
    }
}
