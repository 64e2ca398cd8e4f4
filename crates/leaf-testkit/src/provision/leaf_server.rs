//! `leaf-server` containers: the image of `cargo xtask image` (or of the `Dockerfile`), named by
//! `LEAFTEST_SERVER_IMAGE` (default `leaf-server:local`), and [`leaf_cluster`], server nodes
//! over a ZooKeeper ensemble or an etcd cluster on one Docker network, as an orchestrator runs
//! them: each node finds its own container address (no `snowflake.ip`), keeps its state on its
//! container's volume, and can be killed, restarted and paused.

use std::fmt;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::OnceCell;

use super::{
    Dedicated, Endpoint, EtcdCluster, Launch, ProvisionError, ServerKind, ZkEnsemble, etcd_cluster,
    remove_members, zk_ensemble,
};

/// The leaf-server image.
pub static LEAF_SERVER: ServerKind = ServerKind {
    name: "leaf-server",
    url_var: crate::vars::SERVER_URL,
    image_var: crate::vars::SERVER_IMAGE,
    // Built here by `cargo xtask image`; no registry publishes it.
    default_image: "leaf-server:local",
    port: 8080,
    env: &[("LEAF_LOG__LEVEL", "info")],
    ready_log: "leaf-server serving",
    url: |port| format!("127.0.0.1:{port}"),
    probe: |endpoint| Box::pin(async move { healthz(&endpoint.url).await }),
    shared: OnceCell::const_new(),
};

/// How long one HTTP exchange may take.
const IO_TIMEOUT: Duration = Duration::from_secs(2);

/// Succeeds once `GET /healthz` at `addr` (`127.0.0.1:PORT`) answers 200.
async fn healthz(addr: &str) -> Result<(), String> {
    let (status, body) = get(addr, "/healthz").await.map_err(|e| e.to_string())?;
    if status == 200 {
        Ok(())
    } else {
        Err(format!("/healthz answered {status}: {body}"))
    }
}

/// `GET path` at `addr` (`127.0.0.1:PORT`) over HTTP/1.1: the status and the body, within two
/// seconds.
pub async fn get(addr: &str, path: &str) -> std::io::Result<(u16, String)> {
    let exchange = async {
        let mut conn = tokio::net::TcpStream::connect(addr).await?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        conn.write_all(request.as_bytes()).await?;
        let mut answer = Vec::new();
        conn.read_to_end(&mut answer).await?;
        Ok::<_, std::io::Error>(answer)
    };
    let answer = tokio::time::timeout(IO_TIMEOUT, exchange)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer in 2 s"))??;
    let text = String::from_utf8_lossy(&answer);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP answer: {head:?}")))?;
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        unchunk(body)
    } else {
        body.to_owned()
    };
    Ok((status, body))
}

/// The body of a chunked answer.
fn unchunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || tail.len() < n {
            break;
        }
        out.push_str(&tail[..n]);
        rest = tail[n..].trim_start_matches("\r\n");
    }
    out
}

impl Endpoint {
    /// `GET path` at this endpoint (a server's `127.0.0.1:PORT`), as [`get`].
    pub async fn get(&self, path: &str) -> std::io::Result<(u16, String)> {
        get(&self.url, path).await
    }
}

/// What coordinates the nodes' worker ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coordination {
    /// A three-member ZooKeeper ensemble, `zk_recycle` mode.
    ZooKeeper,
    /// A three-member etcd cluster, `etcd` mode.
    Etcd,
}

enum Members {
    Zk(ZkEnsemble),
    Etcd(EtcdCluster),
}

/// Server nodes over a coordination cluster, all on its Docker network. Nodes are numbered
/// from 0 in the order they were added; each is published on a loopback port of its own.
pub struct LeafCluster {
    members: Members,
    nodes: Vec<Dedicated>,
    env: Vec<(String, String)>,
}

impl fmt::Debug for LeafCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeafCluster")
            .field("network", &self.network())
            .field("nodes", &self.nodes.len())
            .finish_non_exhaustive()
    }
}

/// Starts the coordination cluster, then `nodes` server nodes on its network with the mode's
/// variables (on etcd, also the endpoints of `[segment.etcd]`) and `env` (`LEAF_` variables, for every node), each waited for until it serves
/// `/healthz`. Always containers.
pub async fn leaf_cluster(
    coordination: Coordination,
    nodes: usize,
    env: &[(&str, &str)],
) -> Result<LeafCluster, ProvisionError> {
    let members = match coordination {
        Coordination::ZooKeeper => Members::Zk(zk_ensemble().await?),
        Coordination::Etcd => Members::Etcd(etcd_cluster().await?),
    };
    let mut mode_env: Vec<(String, String)> = match &members {
        Members::Zk(zk) => vec![
            ("LEAF_SNOWFLAKE__MODE".into(), "zk_recycle".into()),
            (
                "LEAF_SNOWFLAKE__ZK__ADDRESS".into(),
                zk.internal_connect().into(),
            ),
        ],
        Members::Etcd(etcd) => {
            let quoted: Vec<String> = etcd
                .internal_endpoints()
                .iter()
                .map(|e| format!("{e:?}"))
                .collect();
            let endpoints = format!("[{}]", quoted.join(","));
            vec![
                ("LEAF_SNOWFLAKE__MODE".into(), "etcd".into()),
                ("LEAF_SNOWFLAKE__ETCD__ENDPOINTS".into(), endpoints.clone()),
                // For `segment.store = "etcd"`, which `env` may choose.
                ("LEAF_SEGMENT__ETCD__ENDPOINTS".into(), endpoints),
            ]
        }
    };
    mode_env.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let mut cluster = LeafCluster {
        members,
        nodes: Vec::new(),
        env: mode_env,
    };
    for _ in 0..nodes {
        cluster.add_node().await?;
    }
    Ok(cluster)
}

impl LeafCluster {
    /// Starts one more node with the cluster's variables and waits until it serves `/healthz`
    /// (ready or not); its index.
    pub async fn add_node(&mut self) -> Result<usize, ProvisionError> {
        let index = self.nodes.len();
        let network = self.network().to_owned();
        let launch = Launch {
            host_port: None,
            name: Some(format!("{network}-leaf{index}")),
            network: Some(network),
            env: self.env.clone(),
            files: Vec::new(),
        };
        let node = Dedicated::launch(&LEAF_SERVER, launch).await?;
        node.wait_ready().await?;
        self.nodes.push(node);
        Ok(index)
    }

    /// The Docker network of the cluster.
    pub fn network(&self) -> &str {
        match &self.members {
            Members::Zk(zk) => zk.network(),
            Members::Etcd(etcd) => etcd.network(),
        }
    }

    /// The server nodes, in the order they were added (less those removed).
    pub fn nodes(&self) -> &[Dedicated] {
        &self.nodes
    }

    /// The published address of node `i` (`127.0.0.1:PORT`).
    pub fn address(&self, i: usize) -> &str {
        &self.nodes[i].endpoint().url
    }

    /// The coordination cluster's members (ZooKeeper or etcd), each stoppable.
    pub fn coordination(&self) -> &[Dedicated] {
        match &self.members {
            Members::Zk(zk) => zk.members(),
            Members::Etcd(etcd) => etcd.members(),
        }
    }

    /// Stops node `i` gracefully (SIGTERM, then SIGKILL after `grace`), as an orchestrator
    /// scales down, and removes its container; the nodes after it move down by one.
    pub async fn remove_node(&mut self, i: usize, grace: Duration) -> Result<(), ProvisionError> {
        let node = self.nodes.remove(i);
        node.stop(grace).await?;
        node.remove().await
    }

    /// Removes every container and waits until they are gone.
    pub async fn remove(self) -> Result<(), ProvisionError> {
        remove_members(self.nodes).await?;
        match self.members {
            Members::Zk(zk) => zk.remove().await,
            Members::Etcd(etcd) => etcd.remove().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_bodies_are_joined() {
        assert_eq!(
            unchunk("5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"),
            "hello world"
        );
        assert_eq!(unchunk("0\r\n\r\n"), "");
        assert_eq!(unchunk("zz\r\n"), "");
    }
}
