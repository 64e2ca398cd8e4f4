//! The ZooKeeper session of a registry: opened on first use (never by `connect`, so a registry
//! can be made while ZooKeeper is down), replaced when it expires, and with it the ephemeral
//! nodes the registry keeps (its live lock, its `temporary` entry), re-created in the new session.
//!
//! A session this registry gave up may live on at the server for up to its timeout (a server
//! restarted from its log restores every session with a fresh timer), and with it the nodes it
//! holds: a node of one of this registry's own earlier sessions is this registry's, not another
//! process's, and is taken over in the current session. Never by deleting it: a lock node's
//! data version is always 0, so a delete at the version read cannot tell this registry's node
//! from one another process created after the earlier session ended, and a multi-op cannot
//! check a node's ephemeral owner. The registry keeps the id and password of every session it
//! opened and ends the earlier one instead, by joining it and closing it (a session that has
//! already ended refuses the join, which is as good); the server then deletes that session's
//! nodes and no other, and the create is tried again: it holds the node, or finds another
//! process's.
//!
//! Every session authenticates as `auth` (or `auth_file`, read again for each new session), and
//! every node it creates gets the configured ACL ([`ZkConfig::acls`]): the directories too, as
//! ZooKeeper checks a node's deletion against its parent's ACL.

use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use leaf_core::{Error, Result};
use tokio::sync::Mutex;
use zookeeper_client::{self as zk, Acls, CreateMode, SessionState};

use crate::config::ZkConfig;
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
    /// Where `auth` comes from (`Debug` hides it), read at each new session.
    access: ZkConfig,
    /// The ACL of every node this registry creates.
    acls: Arc<[zk::Acl]>,
    client: Mutex<Option<zk::Client>>,
    ephemerals: StdMutex<Vec<Ephemeral>>,
    /// An exclusive ephemeral that another session held when this one tried to re-create it.
    lost: StdMutex<Option<String>>,
    /// The sessions this registry opened (id and password, to end one that outlived its
    /// client), the current one last (the last [`MAX_SESSIONS`]).
    opened: StdMutex<Vec<zk::SessionInfo>>,
    /// Test hook: sessions given up without closing them, as a restarted server keeps them.
    #[cfg(feature = "_test-hooks")]
    abandoned: StdMutex<Vec<zk::Client>>,
    /// Test hook: where the next calls stop ([`Session::pause_next`]).
    #[cfg(feature = "_test-hooks")]
    pauses: StdMutex<Vec<Paused>>,
}

/// Test hook: where a call of a registry's session can be stopped.
#[cfg(feature = "_test-hooks")]
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pause {
    /// A takeover, once it found a node of one of the registry's earlier sessions, before it
    /// acts on it.
    Takeover,
    /// The deletion of a kept ephemeral node (the live lock, at release), before it looks at
    /// the node.
    Drop,
}

/// Test hook: a call stopped at a [`Pause`].
#[cfg(feature = "_test-hooks")]
#[derive(Debug)]
struct Paused {
    at: Pause,
    /// Sent when the call stops.
    reached: tokio::sync::oneshot::Sender<()>,
    /// The call goes on once this is sent or dropped.
    go: tokio::sync::oneshot::Receiver<()>,
}

/// How many of its sessions a registry remembers: far more than can expire within one session
/// timeout.
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
    /// The session of `config`; `Config` if its `auth` or `acl` cannot be used.
    pub(crate) fn new(config: &ZkConfig) -> Result<Self> {
        let acls = config.acls()?.into();
        config.credentials()?;
        Ok(Session {
            address: config.address.clone(),
            timeout: config.session_timeout(),
            access: config.clone(),
            acls,
            client: Mutex::new(None),
            ephemerals: StdMutex::default(),
            lost: StdMutex::default(),
            opened: StdMutex::default(),
            #[cfg(feature = "_test-hooks")]
            abandoned: StdMutex::default(),
            #[cfg(feature = "_test-hooks")]
            pauses: StdMutex::default(),
        })
    }

    /// The ACL of every node this registry creates.
    pub(crate) fn acls(&self) -> Arc<[zk::Acl]> {
        self.acls.clone()
    }

    /// The session `owner`, if this registry opened it.
    fn opened_by_me(&self, owner: i64) -> Option<zk::SessionInfo> {
        self.opened
            .lock()
            .expect("opened lock")
            .iter()
            .find(|s| s.id().0 == owner)
            .cloned()
    }

    /// Ends `earlier`, a session this registry opened and gave up, which the server still
    /// keeps: joins it with its id and password and closes it, so that the server deletes its
    /// ephemeral nodes (and only its). A session that already ended refuses the join: done too.
    /// The caller bounds it.
    async fn end_earlier(&self, earlier: zk::SessionInfo) -> Result<()> {
        let id = earlier.id();
        loop {
            let joined = zk::Client::connector()
                .with_session(earlier.clone())
                .with_session_timeout(self.timeout)
                .with_fail_eagerly()
                .connect(&self.address)
                .await;
            match joined {
                Ok(client) => {
                    close(client, self.timeout).await?;
                    break;
                }
                Err(zk::Error::SessionExpired) => break,
                // A client still attached to the session (one given up but not yet stopped)
                // takes its connection back when it reconnects, which ends the join's first
                // try: try again (a closing client sends its close again at each reconnect).
                Err(zk::Error::ConnectionLoss | zk::Error::NoHosts) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => return Err(map_zk(e, &format!("ending the earlier session {id}"))),
            }
        }
        tracing::info!(session = %id, "an earlier session of this process ended");
        Ok(())
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
        // Read again for each new session: a rotated secret file takes effect here.
        let credentials = self.access.credentials()?;
        let connect = async {
            let mut connector = zk::Client::connector();
            if let Some(c) = &credentials {
                connector = connector.with_auth("digest", c.as_bytes());
            }
            connector
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
            opened.push(client.session().clone());
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

    /// Deletes the kept ephemeral `path` (if a session of this registry holds it) and stops
    /// keeping it.
    pub(crate) async fn drop_ephemeral(&self, path: &str) -> Result<()> {
        self.ephemerals
            .lock()
            .expect("ephemerals lock")
            .retain(|e| e.path != path);
        #[cfg(feature = "_test-hooks")]
        self.pause_at(Pause::Drop).await;
        let client = self.client().await?;
        bounded(self.timeout, "deleting an ephemeral node", async {
            match client.check_stat(path).await {
                // Deleted in the session that holds it: should the session end before the
                // delete arrives (and another process create the node), the server refuses the
                // delete, so it never removes another's node.
                Ok(Some(stat)) if stat.ephemeral_owner == client.session_id().0 => {
                    match client.delete(path, Some(stat.version)).await {
                        Ok(()) | Err(zk::Error::NoNode) => Ok(()),
                        Err(e) => Err(map_zk(e, path)),
                    }
                }
                // An earlier session's: see the module docs.
                Ok(Some(stat)) => match self.opened_by_me(stat.ephemeral_owner) {
                    Some(earlier) => {
                        #[cfg(feature = "_test-hooks")]
                        self.pause_at(Pause::Takeover).await;
                        self.end_earlier(earlier).await
                    }
                    None => Ok(()),
                },
                Ok(None) => Ok(()),
                Err(e) => Err(map_zk(e, path)),
            }
        })
        .await
    }

    /// Creates the ephemeral `path` (and its missing parents, persistent) in `client`'s
    /// session. [`Claim::HeldByOther`] if a node of another process's session is there; the
    /// earlier session of this registry's that holds the node is ended (see the module docs)
    /// and the create tried again.
    async fn create_ephemeral(
        &self,
        client: &zk::Client,
        path: &str,
        data: &[u8],
    ) -> Result<Claim> {
        let options = CreateMode::Ephemeral.with_acls(Acls::new(&self.acls));
        for _ in 0..3 {
            match client.create(path, data, &options).await {
                Ok(_) => return Ok(Claim::Held),
                Err(zk::Error::NoNode) => ensure_parent(client, path, &self.acls).await?,
                Err(zk::Error::NodeExists) => match client.check_stat(path).await {
                    Ok(Some(stat)) if stat.ephemeral_owner == client.session_id().0 => {
                        return Ok(Claim::Held);
                    }
                    Ok(Some(stat)) => {
                        let Some(earlier) = self.opened_by_me(stat.ephemeral_owner) else {
                            return Ok(Claim::HeldByOther);
                        };
                        tracing::info!(
                            %path,
                            session = stat.ephemeral_owner,
                            "an earlier session of this process still holds its node; ending it"
                        );
                        #[cfg(feature = "_test-hooks")]
                        self.pause_at(Pause::Takeover).await;
                        self.end_earlier(earlier).await?;
                    }
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

    /// Test hook: the next call that comes to `at` stops there: the first receiver resolves
    /// then, and the call goes on once the sender is used or dropped.
    #[cfg(feature = "_test-hooks")]
    pub(crate) fn pause_next(
        &self,
        at: Pause,
    ) -> (
        tokio::sync::oneshot::Receiver<()>,
        tokio::sync::oneshot::Sender<()>,
    ) {
        let (reached, reached_rx) = tokio::sync::oneshot::channel();
        let (go_tx, go) = tokio::sync::oneshot::channel();
        self.pauses
            .lock()
            .expect("pauses lock")
            .push(Paused { at, reached, go });
        (reached_rx, go_tx)
    }

    #[cfg(feature = "_test-hooks")]
    async fn pause_at(&self, at: Pause) {
        let paused = {
            let mut pauses = self.pauses.lock().expect("pauses lock");
            let i = pauses.iter().position(|p| p.at == at);
            i.map(|i| pauses.remove(i))
        };
        if let Some(Paused { reached, go, .. }) = paused {
            let _ = reached.send(());
            let _ = go.await;
        }
    }

    /// Test hook: ends the sessions [`abandon`](Self::abandon) gave up, as their expiry would
    /// (the server deletes their ephemeral nodes); waits until they are closed.
    #[cfg(feature = "_test-hooks")]
    pub(crate) async fn end_abandoned(&self) -> Result<()> {
        let abandoned = std::mem::take(&mut *self.abandoned.lock().expect("abandoned lock"));
        for client in abandoned {
            close(client, self.timeout).await?;
        }
        Ok(())
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
        close(client, self.timeout).await
    }
}

/// Closes the session of `client`, its last handle, and waits (up to `limit`) until it is
/// closed: the server has then deleted its ephemeral nodes.
async fn close(client: zk::Client, limit: Duration) -> Result<()> {
    let mut watcher = client.state_watcher();
    // Dropping the last handle makes the client close its session.
    drop(client);
    bounded(limit, "closing the session", async {
        let mut state = watcher.peek_state();
        while !matches!(
            state,
            SessionState::Closed | SessionState::Expired | SessionState::AuthFailed
        ) {
            state = watcher.changed().await;
        }
        Ok(())
    })
    .await
}

/// Creates the parent directories of `path` (persistent nodes with `acls`), as `mkdir -p`.
pub(crate) async fn ensure_parent(client: &zk::Client, path: &str, acls: &[zk::Acl]) -> Result<()> {
    match path.rfind('/') {
        Some(i) if i > 0 => ensure_dir(client, &path[..i], acls).await,
        _ => Ok(()),
    }
}

/// Creates the persistent directory `dir` and its parents with `acls`, as `mkdir -p`. One that
/// exists is left as it is (ZooKeeper would check a create against its parent's ACL first).
pub(crate) async fn ensure_dir(client: &zk::Client, dir: &str, acls: &[zk::Acl]) -> Result<()> {
    match client.check_stat(dir).await {
        Ok(Some(_)) => return Ok(()),
        Ok(None) => {}
        Err(e) => return Err(map_zk(e, dir)),
    }
    client
        .mkdir(dir, &CreateMode::Persistent.with_acls(Acls::new(acls)))
        .await
        .map_err(|e| map_zk(e, dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_bad_connect_string_is_config_naming_the_key() {
        let config = ZkConfig {
            session_timeout_ms: 1000,
            ..ZkConfig::with_address("zk1:notaport")
        };
        let e = Session::new(&config).unwrap().client().await.unwrap_err();
        assert!(
            matches!(&e, Error::Config(m) if m.starts_with("address")),
            "{e}"
        );
    }
}
