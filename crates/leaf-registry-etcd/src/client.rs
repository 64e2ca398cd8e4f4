//! The etcd client shared by a registry or a store: made on first use (so nothing needs etcd
//! before the first call), every call bounded in time and its errors mapped.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use etcd_client::{Client, ConnectOptions};
use leaf_core::Result;
use tokio::sync::OnceCell;

use crate::config::EtcdConfig;
use crate::error::{BACKEND, map_etcd};

/// A lazily connected client of the cluster of one [`EtcdConfig`].
pub(crate) struct Conn {
    endpoints: Vec<String>,
    timeout: Duration,
    client: OnceCell<Client>,
}

impl fmt::Debug for Conn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Conn")
            .field("endpoints", &self.endpoints)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Conn {
    pub(crate) fn new(config: &EtcdConfig) -> Self {
        Conn {
            endpoints: config.endpoints.clone(),
            timeout: config.timeout(),
            client: OnceCell::new(),
        }
    }

    /// The bound of every call.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The client (a cheap clone of the shared one), made on first use.
    pub(crate) async fn client(&self) -> Result<Client> {
        let client = self
            .client
            .get_or_try_init(|| async {
                let options = ConnectOptions::new()
                    .with_connect_timeout(self.timeout)
                    .with_timeout(self.timeout)
                    // A connection whose member stopped answering is dropped (and made
                    // afresh) without waiting for TCP to notice. Pings go only while a call is
                    // in flight: etcd answers pings on idle connections with `too_many_pings`.
                    .with_keep_alive(self.timeout / 2, self.timeout / 2);
                leaf_core::bounded(BACKEND, self.timeout, "connecting", async {
                    Client::connect(&self.endpoints, Some(options))
                        .await
                        .map_err(|e| map_etcd(e, "connecting"))
                })
                .await
            })
            .await?;
        Ok(client.clone())
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
