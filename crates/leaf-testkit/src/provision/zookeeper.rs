//! ZooKeeper: the server kind, a root path of one's own per test, and a three-member ensemble
//! whose members a fault test may stop and start.

use std::fmt;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::OnceCell;
use zookeeper_client as zk;

use super::{
    Dedicated, Endpoint, ProvisionError, ServerKind, launch_cluster, remove_members, runtime,
    shared,
};

/// ZooKeeper: the official `zookeeper` image (or `LEAFTEST_ZK_IMAGE`, e.g. the local
/// `leaf-testbed/zookeeper:local`), or the server of `LEAFTEST_ZK_URL` (`host:port`). The
/// endpoint's URL is a connect string, `127.0.0.1:PORT`.
pub static ZOOKEEPER: ServerKind = ServerKind {
    name: "zk",
    url_var: crate::vars::ZK_URL,
    image_var: crate::vars::ZK_IMAGE,
    default_image: "zookeeper:3.8",
    port: CLIENT_PORT,
    env: &[
        // `srvr` is the probe; ZooKeeper allows it by default, the variable says it anyway.
        ("ZOO_4LW_COMMANDS_WHITELIST", "srvr,ruok"),
        // The official image's admin server would take port 8080 for nothing.
        ("ZOO_ADMINSERVER_ENABLED", "false"),
    ],
    // Logged before an ensemble member has a quorum: the probe waits for that.
    ready_log: "binding to port",
    url: |port| format!("127.0.0.1:{port}"),
    probe: |endpoint| Box::pin(srvr_probe(endpoint)),
    shared: OnceCell::const_new(),
};

const CLIENT_PORT: u16 = 2181;

/// How long one probe waits for an answer.
const PROBE_IO_TIMEOUT: Duration = Duration::from_secs(2);

/// Asks the server for `srvr` and succeeds once it serves: standalone, or in a quorum (a
/// member without one answers that it is not serving requests).
async fn srvr_probe(endpoint: Endpoint) -> Result<(), String> {
    let answer = tokio::time::timeout(PROBE_IO_TIMEOUT, async {
        let mut conn = tokio::net::TcpStream::connect(&endpoint.url).await?;
        conn.write_all(b"srvr").await?;
        let mut answer = String::new();
        conn.read_to_string(&mut answer).await?;
        Ok::<_, std::io::Error>(answer)
    })
    .await
    .map_err(|_| format!("no answer to srvr within {PROBE_IO_TIMEOUT:?}"))?
    .map_err(|e| e.to_string())?;
    if answer.contains("Mode: ") {
        Ok(())
    } else if answer.is_empty() {
        Err("empty answer to srvr".into())
    } else {
        Err(format!("srvr: {}", answer.trim()))
    }
}

/// A root path of one's own (`/leaftest-PID-RANDOM`) on a ZooKeeper server; what a test created
/// under it is deleted (in the background) with this value.
pub struct ZkNamespace {
    /// The connect string of the server (`127.0.0.1:PORT`, or an ensemble's `a,b,c`).
    pub connect: String,
    /// The root: a path that does not exist yet, for the test to create or chroot into.
    pub root: String,
}

impl fmt::Debug for ZkNamespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkNamespace")
            .field("connect", &self.connect)
            .field("root", &self.root)
            .finish()
    }
}

/// A new root on the shared ZooKeeper server.
pub async fn zk_namespace() -> Result<ZkNamespace, ProvisionError> {
    let server = shared(&ZOOKEEPER).await?;
    Ok(zk_namespace_on(&server.url))
}

/// A new root, with a random name, on the server (or ensemble) of connect string `connect`.
pub fn zk_namespace_on(connect: &str) -> ZkNamespace {
    ZkNamespace {
        connect: connect.to_string(),
        root: format!(
            "/leaftest-{}-{:012x}",
            std::process::id(),
            fastrand::u64(..) >> 16
        ),
    }
}

impl Drop for ZkNamespace {
    fn drop(&mut self) {
        let (connect, root) = (self.connect.clone(), self.root.clone());
        runtime().spawn(async move {
            let connector = zk::Client::connector().with_session_timeout(Duration::from_secs(5));
            if let Ok(client) = connector.connect(&connect).await {
                let _ = delete_tree(&client, &root).await;
            }
        });
    }
}

/// Deletes `path` and everything under it (what a live session recreates meanwhile stays).
async fn delete_tree(client: &zk::Client, path: &str) -> Result<(), zk::Error> {
    let mut stack = vec![(path.to_string(), false)];
    while let Some((node, listed)) = stack.pop() {
        if listed {
            match client.delete(&node, None).await {
                Ok(()) | Err(zk::Error::NoNode) => {}
                Err(e) => return Err(e),
            }
            continue;
        }
        match client.list_children(&node).await {
            Ok(children) => {
                stack.push((node.clone(), true));
                stack.extend(children.into_iter().map(|c| (format!("{node}/{c}"), false)));
            }
            Err(zk::Error::NoNode) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The ensemble's size: one member can stop and the other two keep a quorum.
const ENSEMBLE_SIZE: usize = 3;

/// A three-member ZooKeeper ensemble: three containers of the ZooKeeper image on a Docker
/// network of their own, each published on a fixed loopback port so that a stopped member
/// comes back at the same address. Removed with this value (in the background), or by
/// [`remove`](ZkEnsemble::remove).
pub struct ZkEnsemble {
    members: Vec<Dedicated>,
    connect: String,
    network: String,
    internal: String,
}

impl fmt::Debug for ZkEnsemble {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkEnsemble")
            .field("connect", &self.connect)
            .finish_non_exhaustive()
    }
}

/// Starts a three-member ensemble and waits until every member serves in its quorum.
/// Always containers, even with `LEAFTEST_ZK_URL` set: a test that stops members must own them.
pub async fn zk_ensemble() -> Result<ZkEnsemble, ProvisionError> {
    let cluster = launch_cluster(&ZOOKEEPER, "zk", ENSEMBLE_SIZE, |i, names, _| {
        vec![
            ("ZOO_MY_ID".into(), (i + 1).to_string()),
            ("ZOO_SERVERS".into(), ensemble_servers(names)),
            // A member binds its quorum ports on every address, not only on the one its own
            // name resolves to.
            ("ZOO_CFG_EXTRA".into(), "quorumListenOnAllIPs=true".into()),
        ]
    })
    .await?;
    let connect = cluster
        .members
        .iter()
        .map(|m| m.endpoint().url.as_str())
        .collect::<Vec<_>>()
        .join(",");
    let internal = cluster
        .names
        .iter()
        .map(|n| format!("{n}:{CLIENT_PORT}"))
        .collect::<Vec<_>>()
        .join(",");
    Ok(ZkEnsemble {
        members: cluster.members,
        connect,
        network: cluster.network,
        internal,
    })
}

/// `ZOO_SERVERS` for members named `names`, numbered from 1.
fn ensemble_servers(names: &[String]) -> String {
    names
        .iter()
        .enumerate()
        .map(|(i, n)| format!("server.{}={n}:2888:3888;{CLIENT_PORT}", i + 1))
        .collect::<Vec<_>>()
        .join(" ")
}

impl ZkEnsemble {
    /// The connect string of all members (`127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3`).
    pub fn connect(&self) -> &str {
        &self.connect
    }

    /// The Docker network the members are on.
    pub fn network(&self) -> &str {
        &self.network
    }

    /// The connect string of all members for a container on [`network`](Self::network)
    /// (`{name}:2181,...`).
    pub fn internal_connect(&self) -> &str {
        &self.internal
    }

    /// The members, in `myid` order (member `i` has id `i + 1`); each can be stopped and
    /// started like any [`Dedicated`] server.
    pub fn members(&self) -> &[Dedicated] {
        &self.members
    }

    /// Removes every member's container and waits until they are gone.
    pub async fn remove(self) -> Result<(), ProvisionError> {
        remove_members(self.members).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ensemble_servers_name_every_member_with_its_id() {
        let names: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
        assert_eq!(
            ensemble_servers(&names),
            "server.1=a:2888:3888;2181 server.2=b:2888:3888;2181 server.3=c:2888:3888;2181"
        );
    }

    #[test]
    fn namespaces_are_distinct_absolute_paths() {
        // Port 1: nothing answers there, so the cleanup of the drop fails at once, quietly.
        let a = zk_namespace_on("127.0.0.1:1");
        let b = zk_namespace_on("127.0.0.1:1");
        assert!(a.root.starts_with("/leaftest-"), "{}", a.root);
        assert!(!a.root[1..].contains('/'), "{}", a.root);
        assert_ne!(a.root, b.root);
    }
}
