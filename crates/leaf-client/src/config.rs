//! `ClientConfig`: where the servers are, the tokens, TLS, the timeouts and the failover rules;
//! and `LeafClientBuilder`, which sets them (or takes a whole `ClientConfig` read from a file).

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use leaf_core::{Clock, Error, Result, SystemClock, check_bounds};
use leaf_segment::SegmentConfig;
use serde::{Deserialize, Serialize};

use crate::LeafClient;

/// How a client reaches the servers. Every field has a default that suits a service calling a
/// cluster in its own data centre; only `endpoints` must be given (and `ca_file` with an
/// `https://` one).
#[derive(Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct ClientConfig {
    /// The servers' base URLs, `http://host:port` or `https://host:port` (a path prefix is
    /// kept: `http://proxy/leaf`; the two schemes may be mixed). The first is tried first until
    /// one answers; from then on the last one that answered. Default empty; at least one is
    /// required.
    pub endpoints: Vec<String>,
    /// The servers' `server.client_token`, sent as `Authorization: Bearer` on the ID and
    /// allocate routes. Default empty: no token is sent.
    pub client_token: String,
    /// The servers' `server.admin_token`, for [`HttpStore`](crate::HttpStore)'s `create`,
    /// `update` and `list` (the admin routes). Default empty: those calls fail with
    /// `Error::Config` and only `allocate` and `get` work.
    pub admin_token: String,
    /// The certificate authorities (PEM) that `https://` endpoints' certificates must chain
    /// to, the servers' names (or IP addresses) checked as well. Required by an `https://`
    /// endpoint: no root store is built in (for publicly issued certificates, name the
    /// system's bundle). Default none.
    pub ca_file: Option<PathBuf>,
    /// The client's certificate (PEM, its chain after it), presented to `https://` endpoints
    /// that ask for one (the servers' `server.tls.client_ca_file`). Needs `key_file`. Default
    /// none: no certificate is presented.
    pub cert_file: Option<PathBuf>,
    /// The private key (PEM: PKCS#8, PKCS#1 or SEC1) of `cert_file`. Default none.
    pub key_file: Option<PathBuf>,
    /// How long opening a connection to one endpoint may take. Default 500.
    pub connect_timeout_ms: u64,
    /// How long one request to one endpoint may take, connecting included, before the next
    /// endpoint is tried. Default 2000.
    pub request_timeout_ms: u64,
    /// How long one call may take, every endpoint and every wait included, before it fails
    /// with `Unavailable`. At least `request_timeout_ms`. Default 5000.
    pub call_timeout_ms: u64,
    /// An endpoint that failed (no connection, no answer in time, a 5xx) is skipped for this
    /// long; each further failure in a row doubles it. Default 100.
    pub backoff_min_ms: u64,
    /// The longest an endpoint is skipped after failures, `Retry-After` aside. Default 5000.
    pub backoff_max_ms: u64,
    /// A `Retry-After` is honoured (the endpoint is not asked again before it passes) up to
    /// this long. Default 30000.
    pub max_retry_after_ms: u64,
    /// Idle keep-alive connections are closed after this long; keep it below the servers'
    /// `server.idle_timeout_s` (30 s by default). 0: a connection per request. Default 20000.
    pub pool_idle_timeout_ms: u64,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            endpoints: Vec::new(),
            client_token: String::new(),
            admin_token: String::new(),
            ca_file: None,
            cert_file: None,
            key_file: None,
            connect_timeout_ms: 500,
            request_timeout_ms: 2000,
            call_timeout_ms: 5000,
            backoff_min_ms: 100,
            backoff_max_ms: 5000,
            max_retry_after_ms: 30_000,
            pool_idle_timeout_ms: 20_000,
        }
    }
}

impl fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hidden = |token: &str| if token.is_empty() { "" } else { "<redacted>" };
        f.debug_struct("ClientConfig")
            .field("endpoints", &self.endpoints)
            .field("client_token", &hidden(&self.client_token))
            .field("admin_token", &hidden(&self.admin_token))
            .field("ca_file", &self.ca_file)
            .field("cert_file", &self.cert_file)
            .field("key_file", &self.key_file)
            .field("connect_timeout_ms", &self.connect_timeout_ms)
            .field("request_timeout_ms", &self.request_timeout_ms)
            .field("call_timeout_ms", &self.call_timeout_ms)
            .field("backoff_min_ms", &self.backoff_min_ms)
            .field("backoff_max_ms", &self.backoff_max_ms)
            .field("max_retry_after_ms", &self.max_retry_after_ms)
            .field("pool_idle_timeout_ms", &self.pool_idle_timeout_ms)
            .finish()
    }
}

impl ClientConfig {
    /// Checks the values and reads the TLS files (`ca_file`, `cert_file`, `key_file`), as
    /// `build()` does; `Config` naming the field (and the file).
    pub fn validate(&self) -> Result<()> {
        self.check()?;
        crate::tls::client_config(self).map(drop)
    }

    /// [`validate`](Self::validate) without reading the files.
    pub(crate) fn check(&self) -> Result<()> {
        if self.endpoints.is_empty() {
            return Err(Error::Config(
                "endpoints must name at least one server (http://host:port)".into(),
            ));
        }
        for e in &self.endpoints {
            if base_url(e)?.1 && self.ca_file.is_none() {
                return Err(Error::Config(format!(
                    "endpoints: {e:?} is https and ca_file is not set: name the PEM file of the \
                     authorities that signed the servers' certificates"
                )));
            }
        }
        match (&self.cert_file, &self.key_file) {
            (Some(_), None) => {
                return Err(Error::Config(
                    "cert_file is set and key_file is not: the certificate needs its private key"
                        .into(),
                ));
            }
            (None, Some(_)) => {
                return Err(Error::Config(
                    "key_file is set and cert_file is not: the key needs its certificate".into(),
                ));
            }
            _ => {}
        }
        check_bounds(&[
            ("connect_timeout_ms", self.connect_timeout_ms, 1, 60_000),
            ("request_timeout_ms", self.request_timeout_ms, 1, 600_000),
            ("call_timeout_ms", self.call_timeout_ms, 1, 3_600_000),
            ("backoff_min_ms", self.backoff_min_ms, 1, 3_600_000),
            ("backoff_max_ms", self.backoff_max_ms, 1, 3_600_000),
            ("max_retry_after_ms", self.max_retry_after_ms, 0, 3_600_000),
            (
                "pool_idle_timeout_ms",
                self.pool_idle_timeout_ms,
                0,
                3_600_000,
            ),
        ])?;
        if self.request_timeout_ms > self.call_timeout_ms {
            return Err(Error::Config(format!(
                "request_timeout_ms ({}) must not exceed call_timeout_ms ({})",
                self.request_timeout_ms, self.call_timeout_ms
            )));
        }
        if self.backoff_min_ms > self.backoff_max_ms {
            return Err(Error::Config(format!(
                "backoff_min_ms ({}) must not exceed backoff_max_ms ({})",
                self.backoff_min_ms, self.backoff_max_ms
            )));
        }
        for (field, token) in [
            ("client_token", &self.client_token),
            ("admin_token", &self.admin_token),
        ] {
            // It goes into a header as a bearer token (RFC 6750: visible ASCII, no space).
            if !token.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(Error::Config(format!(
                    "{field} must be visible ASCII characters without spaces"
                )));
            }
        }
        Ok(())
    }
}

/// `endpoint` without its trailing `/`, checked to be `http[s]://authority[/prefix]`, and
/// whether it is `https`.
pub(crate) fn base_url(endpoint: &str) -> Result<(String, bool)> {
    let bad = |why: &str| Err(Error::Config(format!("endpoints: {endpoint:?} {why}")));
    let trimmed = endpoint.trim().trim_end_matches('/');
    let scheme = |scheme: &str| {
        trimmed
            .get(..scheme.len())
            .filter(|s| s.eq_ignore_ascii_case(scheme))
            .map(|_| &trimmed[scheme.len()..])
    };
    let (rest, https) = match (scheme("http://"), scheme("https://")) {
        (Some(rest), _) => (rest, false),
        (None, Some(rest)) => (rest, true),
        (None, None) => return bad("is not an http:// or https:// URL"),
    };
    let authority = rest.split('/').next().unwrap_or("");
    if authority.is_empty() || rest.contains(['?', '#']) || authority.contains('@') {
        return bad("must be http[s]://host:port, optionally with a path prefix");
    }
    match format!("{trimmed}/").parse::<hyper::Uri>() {
        Ok(_) => Ok((trimmed.to_owned(), https)),
        Err(e) => bad(&format!("is not a valid URL: {e}")),
    }
}

/// Builds a [`LeafClient`]: `LeafClient::builder().endpoints([...])...build()`.
#[derive(Clone, Debug)]
pub struct LeafClientBuilder {
    config: ClientConfig,
    segment: SegmentConfig,
    clock: Arc<dyn Clock>,
}

impl Default for LeafClientBuilder {
    fn default() -> Self {
        LeafClientBuilder {
            config: ClientConfig::default(),
            segment: LeafClientBuilder::default_segment_config(),
            clock: Arc::new(SystemClock::new()),
        }
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl LeafClientBuilder {
    /// The allocator settings a client starts from: `leaf-segment`'s defaults, except that a
    /// request whose tag has both segments spent waits up to 500 ms for the next one
    /// (`switch_wait`; the server's 10 ms suits a database next door, a client's load crosses
    /// the network and may have to fail over to another server).
    pub fn default_segment_config() -> SegmentConfig {
        SegmentConfig {
            switch_wait: Duration::from_millis(500),
            ..SegmentConfig::default()
        }
    }

    /// The servers' base URLs (`http://host:port`, `https://host:port`), replacing any given
    /// before.
    pub fn endpoints<I, S>(mut self, endpoints: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.config.endpoints = endpoints.into_iter().map(Into::into).collect();
        self
    }

    /// The servers' `server.client_token`.
    pub fn client_token(mut self, token: impl Into<String>) -> Self {
        self.config.client_token = token.into();
        self
    }

    /// The servers' `server.admin_token`, for `HttpStore::create`, `update` and `list`.
    pub fn admin_token(mut self, token: impl Into<String>) -> Self {
        self.config.admin_token = token.into();
        self
    }

    /// The PEM file of the authorities that `https://` endpoints' certificates must chain to
    /// (`ca_file`).
    pub fn ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.config.ca_file = Some(path.into());
        self
    }

    /// The client certificate presented to `https://` endpoints that ask for one, and its
    /// private key, both PEM (`cert_file`, `key_file`).
    pub fn client_cert(
        mut self,
        cert_file: impl Into<PathBuf>,
        key_file: impl Into<PathBuf>,
    ) -> Self {
        self.config.cert_file = Some(cert_file.into());
        self.config.key_file = Some(key_file.into());
        self
    }

    /// How long opening a connection may take (`connect_timeout_ms`).
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.config.connect_timeout_ms = ms(d);
        self
    }

    /// How long one request to one endpoint may take (`request_timeout_ms`).
    pub fn request_timeout(mut self, d: Duration) -> Self {
        self.config.request_timeout_ms = ms(d);
        self
    }

    /// How long one call may take across endpoints and waits (`call_timeout_ms`).
    pub fn call_timeout(mut self, d: Duration) -> Self {
        self.config.call_timeout_ms = ms(d);
        self
    }

    /// How long a failed endpoint is skipped: `min` after one failure, doubling up to `max`.
    pub fn backoff(mut self, min: Duration, max: Duration) -> Self {
        self.config.backoff_min_ms = ms(min);
        self.config.backoff_max_ms = ms(max);
        self
    }

    /// The longest `Retry-After` honoured (`max_retry_after_ms`).
    pub fn max_retry_after(mut self, d: Duration) -> Self {
        self.config.max_retry_after_ms = ms(d);
        self
    }

    /// Every setting at once, as read from a service's configuration file.
    pub fn config(mut self, config: ClientConfig) -> Self {
        self.config = config;
        self
    }

    /// The allocator's settings (preload threshold, switch wait, dynamic step); default
    /// [`default_segment_config`](Self::default_segment_config). A `max_step` above the
    /// servers' `segment.max_step` is cut to theirs.
    pub fn segment_config(mut self, segment: SegmentConfig) -> Self {
        self.segment = segment;
        self
    }

    /// The clock of the allocator's dynamic step and of the endpoints' back-off.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The client; `Config` naming the field if a setting is invalid or a TLS file cannot be
    /// read or parsed (the files are read here, once). No server is contacted until the first
    /// call, and no runtime is needed until then.
    pub fn build(self) -> Result<LeafClient> {
        self.config.check()?;
        let tls = crate::tls::client_config(&self.config)?;
        self.segment.validate()?;
        Ok(LeafClient::new(self.config, tls, self.segment, self.clock))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(f: impl FnOnce(&mut ClientConfig)) -> Result<()> {
        let mut c = ClientConfig {
            endpoints: vec!["http://127.0.0.1:8080".into()],
            ..ClientConfig::default()
        };
        f(&mut c);
        c.validate()
    }

    #[test]
    fn the_defaults_with_one_endpoint_are_valid() {
        assert!(with(|_| ()).is_ok());
        let e = ClientConfig::default().validate().unwrap_err();
        assert!(e.to_string().contains("endpoints"), "{e}");
    }

    #[test]
    fn validation_names_the_field() {
        let check = |f: fn(&mut ClientConfig), field: &str| {
            let e = with(f).unwrap_err();
            assert!(matches!(e, Error::Config(_)), "{e}");
            assert!(e.to_string().contains(field), "{field}: {e}");
        };
        check(|c| c.connect_timeout_ms = 0, "connect_timeout_ms");
        check(|c| c.request_timeout_ms = 0, "request_timeout_ms");
        check(|c| c.call_timeout_ms = 1000, "request_timeout_ms");
        check(|c| c.call_timeout_ms = u64::MAX, "call_timeout_ms");
        check(|c| c.backoff_min_ms = 0, "backoff_min_ms");
        check(|c| c.backoff_min_ms = 6000, "backoff_min_ms");
        check(|c| c.max_retry_after_ms = 3_600_001, "max_retry_after_ms");
        check(|c| c.client_token = "a\r\nb".into(), "client_token");
        check(|c| c.admin_token = "a\nb".into(), "admin_token");
        check(|c| c.admin_token = "a b".into(), "admin_token");
        check(|c| c.client_token = "caf\u{e9}".into(), "client_token");
        check(|c| c.endpoints.push("localhost:8080".into()), "endpoints");
        check(|c| c.endpoints.push("https://leaf2:8443".into()), "ca_file");
        check(|c| c.cert_file = Some("client.pem".into()), "key_file");
        check(|c| c.key_file = Some("client.key".into()), "cert_file");
    }

    #[test]
    fn endpoint_table() {
        let check = |e: &str, expect: Option<&str>| match (base_url(e), expect) {
            (Ok((got, https)), Some(want)) => {
                assert_eq!(got, want, "{e}");
                assert_eq!(https, want[..5].eq_ignore_ascii_case("https"), "{e}");
            }
            (Err(err), None) => {
                assert!(matches!(err, Error::Config(_)), "{e}: {err}");
                assert!(err.to_string().contains("endpoints"), "{err}");
            }
            (got, _) => panic!("{e}: {got:?}"),
        };
        check("http://leaf1:8080", Some("http://leaf1:8080"));
        check("http://leaf1:8080/", Some("http://leaf1:8080"));
        check("HTTP://10.0.0.1", Some("HTTP://10.0.0.1"));
        check("http://[::1]:8080", Some("http://[::1]:8080"));
        check("http://proxy/leaf/", Some("http://proxy/leaf"));
        check("https://leaf1:8443/", Some("https://leaf1:8443"));
        check("HTTPS://10.0.0.1/leaf", Some("HTTPS://10.0.0.1/leaf"));
        check("https://", None);
        check("https://u:p@leaf1:8443", None);
        check("ftp://leaf1:8080", None);
        check("leaf1:8080", None);
        check("http://", None);
        check("http:///x", None);
        check("http://u:p@leaf1:8080", None);
        check("http://leaf1:8080/?x=1", None);
        check("http://leaf 1:8080", None);
        check("", None);
    }

    #[test]
    fn debug_hides_tokens() {
        let c = ClientConfig {
            client_token: "c-s3cret".into(),
            admin_token: "a-s3cret".into(),
            ..ClientConfig::default()
        };
        let d = format!("{c:?}");
        assert!(!d.contains("s3cret"), "{d}");
        assert!(d.contains("<redacted>"), "{d}");
    }

    #[test]
    fn a_config_reads_from_toml_like_json_with_defaults() {
        let c: ClientConfig =
            serde_json::from_str(r#"{"endpoints": ["http://a:1"], "call_timeout_ms": 9000}"#)
                .unwrap();
        assert_eq!(c.call_timeout_ms, 9000);
        assert_eq!(c.request_timeout_ms, 2000);
        let e = serde_json::from_str::<ClientConfig>(r#"{"endpoint": []}"#).unwrap_err();
        assert!(e.to_string().contains("endpoint"), "{e}");
    }
}
