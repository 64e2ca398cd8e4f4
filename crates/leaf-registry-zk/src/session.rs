//! The ZooKeeper session of a registry: opened on first use (never by `connect`, so a registry
//! can be made while ZooKeeper is down), replaced when it expires, and with it the ephemeral
//! nodes the registry keeps (its live lock, its `temporary` entry), re-created in the new session.
//!
//! A session this registry gave up may live on at the server for up to its timeout (a server
//! restarted from its log restores every session with a fresh timer), and with it the nodes it
//! holds: a node of one of this registry's own earlier sessions is this registry's, so it is
//! deleted and created again in the current session rather than taken for another process's.

use std::sync::Mutex as StdMutex;
use std::time::Duration;

use leaf_core::{Error, Result};
use tokio::sync::Mutex;
use zookeeper_client::{self as zk, Acls, CreateMode, SessionState};

use crate::error::{bounded, is_terminal, map_zk};

/// An ephemeral node the registry keeps while it runs.
#[derive(Clone, Debug)]
struct Ephemeral {
    path: String,
    data: Vec<u8>,
    /// Another session's node at this path means another live process has this identity: the
    /// registry's lease is lost (`zk_normal`'s live lock). Otherwise that node serves as well.
    exclusive: bool,
}

/// One registry's session; see the module docs.
#[derive(Debug)]
pub(crate) struct Session {
    address: String,
    timeout: Duration,
    client: Mutex<Option<zk::Client>>,
    ephemerals: StdMutex<Vec<Ephemeral>>,
    /// An exclusive ephemeral that another session held when this one tried to re-create it.
    lost: StdMutex<Option<String>>,
    /// The ids of the sessions this registry opened, the current one last (the last
    /// [`MAX_SESSIONS`]).
    opened: StdMutex<Vec<i64>>,
    /// Test hook: sessions given up without closing them, as a restarted server keeps them.
    #[cfg(feature = "_test-hooks")]
    abandoned: StdMutex<Vec<zk::Client>>,
}

/// How many of its sessions' ids a registry remembers: far more than can expire within one
/// session timeout.
const MAX_SESSIONS: usize = 16;

/// What an exclusive create found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Claim {
    /// This session holds the node.
    Held,
    /// Another session holds it.
    HeldByOther,
}

impl Session {
    pub(crate) fn new(address: &str, timeout: Duration) -> Self {
        Session {
            address: address.to_owned(),
            timeout,
            client: Mutex::new(None),
            ephemerals: StdMutex::default(),
            lost: StdMutex::default(),
            opened: StdMutex::default(),
            #[cfg(feature = "_test-hooks")]
            abandoned: StdMutex::default(),
        }
    }

    /// Whether `owner` is one of the sessions this registry opened.
    fn opened_by_me(&self, owner: i64) -> bool {
        self.opened.lock().expect("opened lock").contains(&owner)
    }

    /// The longest any one call may take.
    pub(crate) fn limit(&self) -> Duration {
        self.timeout
    }

    /// How long the server may keep this node's session after it last heard from it: the
    /// timeout it granted (never taken above the configured one), the configured one before
    /// any session.
    pub(crate) async fn granted_timeout(&self) -> Duration {
        match self.client.lock().await.as_ref() {
            Some(c) => c.session_timeout().min(self.timeout),
            None => self.timeout,
        }
    }

    /// A client of a live session, connecting (or reconnecting after an expiry) if needed.
    pub(crate) async fn client(&self) -> Result<zk::Client> {
        let mut slot = self.client.lock().await;
        if let Some(c) = slot.as_ref() {
            if !matches!(
                c.state(),
                SessionState::Expired | SessionState::Closed | SessionState::AuthFailed
            ) {
                return Ok(c.clone());
            }
            tracing::warn!(session = ?c.session_id(), "zookeeper session ended; opening a new one");
            *slot = None;
        }
        let connect = async {
            zk::Client::connector()
                .with_session_timeout(self.timeout)
                // Fail at once when no server answers, so that a start while ZooKeeper is down
                // falls back to the cache file quickly; an established session retries for ever.
                .with_fail_eagerly()
                .connect(&self.address)
                .await
                .map_err(|e| match e {
                    zk::Error::BadArguments(why) => Error::Config(format!(
                        "address {:?} is not a zookeeper connect string \
                         (host:port[,host:port...]): {why}",
                        self.address
                    )),
                    e => map_zk(e, &format!("connecting to {}", self.address)),
                })
        };
        let client = bounded(self.timeout, "connecting", connect).await?;
        {
            let mut opened = self.opened.lock().expect("opened lock");
            if opened.len() >= MAX_SESSIONS {
                opened.remove(0);
            }
            opened.push(client.session_id().0);
        }
        let kept = self.ephemerals.lock().expect("ephemerals lock").clone();
        for e in kept {
            match bounded(self.timeout, "re-creating an ephemeral node", async {
                self.create_ephemeral(&client, &e.path, &e.data).await
            })
            .await?
            {
                Claim::Held => {}
                Claim::HeldByOther if e.exclusive => {
                    tracing::error!(path = %e.path, "another process holds this node's live lock");
                    *self.lost.lock().expect("lost lock") = Some(e.path.clone());
                }
                Claim::HeldByOther => {}
            }
        }
        *slot = Some(client.clone());
        Ok(client)
    }

    /// Forgets the client after an error that ended its session, so the next call opens a new
    /// one; maps the error.
    pub(crate) async fn fail(&self, e: zk::Error, what: &str) -> Error {
        if is_terminal(&e) {
            let mut slot = self.client.lock().await;
            if slot
                .as_ref()
                .is_some_and(|c| !matches!(c.state(), SessionState::SyncConnected))
            {
                *slot = None;
            }
        }
        map_zk(e, what)
    }

    /// Creates the ephemeral node `path` in this session and keeps it across sessions.
    /// [`Claim::HeldByOther`] (and nothing kept) if another session holds it.
    pub(crate) async fn keep_ephemeral(
        &self,
        path: &str,
        data: &[u8],
        exclusive: bool,
    ) -> Result<Claim> {
        let client = self.client().await?;
        let claim = bounded(self.timeout, "creating an ephemeral node", async {
            self.create_ephemeral(&client, path, data).await
        })
        .await?;
        if claim == Claim::Held || !exclusive {
            let mut kept = self.ephemerals.lock().expect("ephemerals lock");
            kept.retain(|e| e.path != path);
            kept.push(Ephemeral {
                path: path.to_owned(),
                data: data.to_owned(),
                exclusive,
            });
        }
        if exclusive && claim == Claim::Held {
            let mut lost = self.lost.lock().expect("lost lock");
            if lost.as_deref() == Some(path) {
                *lost = None;
            }
        }
        Ok(claim)
    }

    /// Deletes the kept ephemeral `path` (if this session holds it) and stops keeping it.
    pub(crate) async fn drop_ephemeral(&self, path: &str) -> Result<()> {
        self.ephemerals
            .lock()
            .expect("ephemerals lock")
            .retain(|e| e.path != path);
        let client = self.client().await?;
        bounded(self.timeout, "deleting an ephemeral node", async {
            match client.check_stat(path).await {
                // The current session is among those opened.
                Ok(Some(stat)) if self.opened_by_me(stat.ephemeral_owner) => {
                    match client.delete(path, Some(stat.version)).await {
                        Ok(()) | Err(zk::Error::NoNode) => Ok(()),
                        Err(e) => Err(map_zk(e, path)),
                    }
                }
                Ok(_) => Ok(()),
                Err(e) => Err(map_zk(e, path)),
            }
        })
        .await
    }

    /// Creates the ephemeral `path` (and its missing parents, persistent) in `client`'s
    /// session. [`Claim::HeldByOther`] if a node of another process's session is there; a node
    /// of an earlier session of this registry's is deleted and created again.
    async fn create_ephemeral(
        &self,
        client: &zk::Client,
        path: &str,
        data: &[u8],
    ) -> Result<Claim> {
        let options = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
        for _ in 0..3 {
            match client.create(path, data, &options).await {
                Ok(_) => return Ok(Claim::Held),
                Err(zk::Error::NoNode) => ensure_parent(client, path).await?,
                Err(zk::Error::NodeExists) => match client.check_stat(path).await {
                    Ok(Some(stat)) if stat.ephemeral_owner == client.session_id().0 => {
                        return Ok(Claim::Held);
                    }
                    Ok(Some(stat)) if self.opened_by_me(stat.ephemeral_owner) => {
                        tracing::info!(
                            %path,
                            session = stat.ephemeral_owner,
                            "an earlier session of this process still holds its node; taking it over"
                        );
                        match client.delete(path, Some(stat.version)).await {
                            Ok(()) | Err(zk::Error::NoNode) => {}
                            Err(e) => return Err(map_zk(e, path)),
                        }
                    }
                    Ok(Some(_)) => return Ok(Claim::HeldByOther),
                    // Gone in between (its session just ended): try again.
                    Ok(None) => {}
                    Err(e) => return Err(map_zk(e, path)),
                },
                Err(e) => return Err(map_zk(e, path)),
            }
        }
        Err(Error::Unavailable(format!(
            "zookeeper node {path} kept changing while it was being created"
        )))
    }

    /// Test hook: gives the current session up without closing it, as a client does that lost
    /// touch with a server that then keeps the session (a restart from its log): its ephemeral
    /// nodes stay until it expires, and the next call opens a new session.
    #[cfg(feature = "_test-hooks")]
    pub(crate) async fn abandon(&self) {
        if let Some(client) = self.client.lock().await.take() {
            // Kept alive (its pings go on), so the server keeps the session.
            self.abandoned.lock().expect("abandoned lock").push(client);
        }
    }

    /// The exclusive ephemeral another process took while this one's session was gone, if any.
    pub(crate) fn lost(&self) -> Option<String> {
        self.lost.lock().expect("lost lock").clone()
    }

    /// Ends the current session as an expiry would, for the tests: the server deletes its
    /// ephemeral nodes and the next call must open a new session. (A real expiry cannot be
    /// forced reliably from a client: a second client joining the session to close it races the
    /// first one reconnecting.) Waits until the session is closed.
    #[cfg(feature = "_test-hooks")]
    pub(crate) async fn end(&self) -> Result<()> {
        let Some(client) = self.client.lock().await.take() else {
            return Ok(());
        };
        let mut watcher = client.state_watcher();
        // Dropping the last handle makes the client close its session.
        drop(client);
        bounded(self.timeout, "closing the session", async {
            while !matches!(
                watcher.changed().await,
                SessionState::Closed | SessionState::Expired
            ) {}
            Ok(())
        })
        .await
    }
}

/// Creates the parent directories of `path` (persistent nodes), as `mkdir -p`.
pub(crate) async fn ensure_parent(client: &zk::Client, path: &str) -> Result<()> {
    match path.rfind('/') {
        Some(i) if i > 0 => ensure_dir(client, &path[..i]).await,
        _ => Ok(()),
    }
}

/// Creates the persistent directory `dir` and its parents, as `mkdir -p`.
pub(crate) async fn ensure_dir(client: &zk::Client, dir: &str) -> Result<()> {
    client
        .mkdir(dir, &CreateMode::Persistent.with_acls(Acls::anyone_all()))
        .await
        .map_err(|e| map_zk(e, dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_bad_connect_string_is_config_naming_the_key() {
        let e = Session::new("zk1:notaport", Duration::from_secs(1))
            .client()
            .await
            .unwrap_err();
        assert!(
            matches!(&e, Error::Config(m) if m.starts_with("address")),
            "{e}"
        );
    }
}
