//! The etcd client shared by a registry or a store: made on first use (so nothing needs etcd
//! before the first call), every call bounded in time and its errors mapped. Over `https://`
//! it verifies the members against `ca_file` and presents `cert_file`; with `username` it
//! authenticates, and a `password_file` is read again before each call, the client
//! authenticating anew when its text changed (a rotated secret, no restart).

use std::fmt;
use std::future::Future;
use std::time::Duration;

use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};
use leaf_core::{Error, Result};
use tokio::sync::{Mutex, OnceCell};

use crate::config::EtcdConfig;
use crate::error::{BACKEND, map_etcd};

/// A lazily connected client of the cluster of one [`EtcdConfig`].
pub(crate) struct Conn {
    config: EtcdConfig,
    timeout: Duration,
    client: OnceCell<Client>,
    /// The password the client authenticated with last, and when a new one was refused.
    password: Mutex<Rotation>,
}

/// What [`Conn::rotate`] remembers.
#[derive(Default)]
struct Rotation {
    password: Option<String>,
    failed_at: Option<std::time::Instant>,
}

/// How long a password_file text etcd refused is left before it is tried again.
const ROTATION_RETRY: Duration = Duration::from_secs(5);

impl fmt::Debug for Conn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Conn")
            .field("endpoints", &self.config.endpoints)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Conn {
    pub(crate) fn new(config: &EtcdConfig) -> Self {
        Conn {
            config: config.clone(),
            timeout: config.timeout(),
            client: OnceCell::new(),
            password: Mutex::new(Rotation::default()),
        }
    }

    /// The bound of every call.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The client (a cheap clone of the shared one), made on first use; with a
    /// `password_file`, authenticated with the file's text as it is now.
    pub(crate) async fn client(&self) -> Result<Client> {
        let client = self
            .client
            .get_or_try_init(|| async {
                let options = self.options().await?;
                leaf_core::bounded(BACKEND, self.timeout, "connecting", async {
                    Client::connect(&self.config.endpoints, Some(options))
                        .await
                        .map_err(|e| self.without_certificate(map_etcd(e, "connecting")))
                })
                .await
            })
            .await?;
        let mut client = client.clone();
        self.rotate(&mut client).await;
        Ok(client)
    }

    /// `e`, with a word on the client certificate when it says etcd cannot be reached over
    /// `https://` without `cert_file`: a cluster started with `--client-cert-auth` ends such a
    /// connection after the handshake, which the client may see as a closed connection only.
    fn without_certificate(&self, e: Error) -> Error {
        match e {
            Error::Unavailable(m)
                if self.config.cert_file.is_none() && matches!(self.config.tls(), Ok(true)) =>
            {
                Error::Unavailable(format!(
                    "{m} (https:// without cert_file: if the cluster runs with \
                     --client-cert-auth, it needs cert_file and key_file)"
                ))
            }
            other => other,
        }
    }

    /// The connect options: timeouts, keep-alive, TLS and the user.
    async fn options(&self) -> Result<ConnectOptions> {
        let mut options = ConnectOptions::new()
            .with_connect_timeout(self.timeout)
            .with_timeout(self.timeout)
            // A connection whose member stopped answering is dropped (and made afresh)
            // without waiting for TCP to notice. Pings go only while a call is in flight: etcd
            // answers pings on idle connections with `too_many_pings`.
            .with_keep_alive(self.timeout / 2, self.timeout / 2);
        if self.config.tls()? {
            options = options.with_tls(self.tls_options()?);
        }
        if let Some(user) = &self.config.username {
            let password = self.config.password_now()?.unwrap_or_default();
            self.password.lock().await.password = Some(password.clone());
            // An expired token (etcd's `--auth-token-ttl`) is taken again with the password.
            options = options
                .with_user(user.clone(), password)
                .with_auto_token_refresh(true);
        }
        Ok(options)
    }

    /// The CA, and the client's certificate if it has one, read now.
    fn tls_options(&self) -> Result<TlsOptions> {
        let read = |key: &str, path: &std::path::Path| {
            std::fs::read(path)
                .map_err(|e| Error::Config(format!("{key}: cannot read {}: {e}", path.display())))
        };
        let mut tls = TlsOptions::new();
        if let Some(ca) = &self.config.ca_file {
            tls = tls.ca_certificate(Certificate::from_pem(read("ca_file", ca)?));
        }
        if let (Some(cert), Some(key)) = (&self.config.cert_file, &self.config.key_file) {
            tls = tls.identity(Identity::from_pem(
                read("cert_file", cert)?,
                read("key_file", key)?,
            ));
        }
        Ok(tls)
    }

    /// With a `password_file` whose text is not the one the client authenticated with: the
    /// client authenticates with the new text (shared by every clone of it). Never fails the
    /// call it runs before: a file that cannot be read, or a new text etcd refuses (the secret
    /// changed before the user's password did), is logged and the client goes on with its
    /// token; it tries again at most every [`ROTATION_RETRY`].
    async fn rotate(&self, client: &mut Client) {
        let (Some(user), Some(_)) = (&self.config.username, &self.config.password_file) else {
            return;
        };
        let Ok(mut state) = self.password.try_lock() else {
            return; // another call is authenticating now
        };
        let now = match self.config.password_now() {
            Ok(now) => now,
            Err(e) => {
                tracing::warn!(error = %e, "etcd: password_file unreadable; keeping the token");
                return;
            }
        };
        if state.password == now
            || state
                .failed_at
                .is_some_and(|t| t.elapsed() < ROTATION_RETRY)
        {
            return;
        }
        let creds = (user.clone(), now.clone().unwrap_or_default());
        let done = leaf_core::bounded(BACKEND, self.timeout, "authenticating", async {
            client
                .update_user(Some(creds))
                .await
                .map_err(|e| map_etcd(e, "authenticating"))
        })
        .await;
        match done {
            Ok(()) => {
                tracing::info!("etcd: password_file changed; authenticated with its new text");
                state.password = now;
                state.failed_at = None;
            }
            Err(e) => {
                tracing::warn!(error = %e, "etcd: the new password_file text was refused; keeping the token");
                state.failed_at = Some(std::time::Instant::now());
            }
        }
    }

    /// Runs one etcd call, bounded by the timeout, its error mapped (`what` names it).
    pub(crate) async fn call<T>(
        &self,
        what: &str,
        fut: impl Future<Output = std::result::Result<T, etcd_client::Error>>,
    ) -> Result<T> {
        leaf_core::bounded(BACKEND, self.timeout, what, async {
            fut.await.map_err(|e| map_etcd(e, what))
        })
        .await
    }
}
