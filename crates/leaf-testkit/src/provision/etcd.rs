//! etcd: the server kind, a key prefix of one's own per test, and a three-member cluster whose
//! members a fault test may stop and start. No etcd client here: the probe and the clean-up
//! speak etcd's HTTP endpoints (`/health`, the v3 JSON gateway) over a plain TCP stream.

use std::fmt;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::OnceCell;

use super::{
    Dedicated, Endpoint, ProvisionError, ServerKind, launch_cluster, remove_members, runtime,
    shared,
};

/// etcd: the official image (or `LEAFTEST_ETCD_IMAGE`, e.g. the local
/// `leaf-testbed/etcd:local`), or the server of `LEAFTEST_ETCD_URL` (`http://host:port`). The
/// endpoint's URL is a client URL, `http://127.0.0.1:PORT`.
pub static ETCD: ServerKind = ServerKind {
    name: "etcd",
    url_var: crate::vars::ETCD_URL,
    image_var: crate::vars::ETCD_IMAGE,
    default_image: "gcr.io/etcd-development/etcd:v3.5.17",
    port: CLIENT_PORT,
    // etcd reads its configuration from these variables, in the official image and in the
    // testbed's alike: no command line needed.
    env: &[
        ("ETCD_LISTEN_CLIENT_URLS", "http://0.0.0.0:2379"),
        ("ETCD_ADVERTISE_CLIENT_URLS", "http://127.0.0.1:2379"),
        ("ETCD_LOGGER", "zap"),
    ],
    // Logged before a cluster member has a quorum (it serves only with one): the probe waits
    // for that.
    ready_log: "starting an etcd server",
    url: |port| format!("http://127.0.0.1:{port}"),
    probe: |endpoint| Box::pin(health_probe(endpoint)),
    shared: OnceCell::const_new(),
};

/// etcd serving TLS only on its client port, with client certificates required
/// (`--client-cert-auth`): the certificates [`etcd_secured`] copies into [`ETCD_CERTS`]. Its
/// endpoint's URL is `https://localhost:PORT` (the server's certificate names `localhost`);
/// its probe only opens a TCP connection.
pub static ETCD_SECURED: ServerKind = ServerKind {
    name: "etcd-secured",
    url_var: crate::vars::ETCD_URL,
    image_var: crate::vars::ETCD_IMAGE,
    default_image: "gcr.io/etcd-development/etcd:v3.5.17",
    port: CLIENT_PORT,
    env: &[
        ("ETCD_LISTEN_CLIENT_URLS", "https://0.0.0.0:2379"),
        ("ETCD_ADVERTISE_CLIENT_URLS", "https://localhost:2379"),
        ("ETCD_CERT_FILE", "/leaf-certs/server.pem"),
        ("ETCD_KEY_FILE", "/leaf-certs/server.key"),
        ("ETCD_TRUSTED_CA_FILE", "/leaf-certs/ca.pem"),
        ("ETCD_CLIENT_CERT_AUTH", "true"),
        ("ETCD_LOGGER", "zap"),
    ],
    ready_log: "starting an etcd server",
    url: |port| format!("https://localhost:{port}"),
    probe: |endpoint| Box::pin(super::tcp_probe(endpoint)),
    shared: OnceCell::const_new(),
};

/// Where [`etcd_secured`] puts the certificates in the container.
pub const ETCD_CERTS: &str = "/leaf-certs";

/// An etcd container of one's own that serves TLS only, requires client certificates signed
/// by `pki`'s CA, and presents `pki`'s server certificate. Authentication (users, roles,
/// `auth enable`) is the caller's to set up, through a client with `pki`'s client certificate.
pub async fn etcd_secured(pki: &crate::pki::Pki) -> Result<Dedicated, ProvisionError> {
    let mut files = Vec::new();
    for name in ["ca.pem", "server.pem", "server.key"] {
        let bytes = std::fs::read(pki.path(name))
            .map_err(|e| ProvisionError(format!("cannot read {name}: {e}")))?;
        files.push((format!("{ETCD_CERTS}/{name}"), 0o644, bytes));
    }
    super::dedicated_with_files(&ETCD_SECURED, &[], files, Vec::new()).await
}

const CLIENT_PORT: u16 = 2379;
const PEER_PORT: u16 = 2380;

/// How long one probe (or one clean-up request) waits for an answer.
const IO_TIMEOUT: Duration = Duration::from_secs(2);

/// `host:port` of an `http://host:port[/...]` URL.
fn authority(url: &str) -> &str {
    let rest = url.strip_prefix("http://").unwrap_or(url);
    rest.split('/').next().unwrap_or(rest)
}

/// One HTTP/1.0 request to the server of `url`; the whole answer, headers included.
async fn http(url: &str, method: &str, path: &str, body: &str) -> Result<String, String> {
    let host = authority(url).to_string();
    let request = format!(
        "{method} {path} HTTP/1.0\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    tokio::time::timeout(IO_TIMEOUT, async {
        let mut conn = tokio::net::TcpStream::connect(&host).await?;
        conn.write_all(request.as_bytes()).await?;
        let mut answer = String::new();
        conn.read_to_string(&mut answer).await?;
        Ok::<_, std::io::Error>(answer)
    })
    .await
    .map_err(|_| format!("no answer from {host} within {IO_TIMEOUT:?}"))?
    .map_err(|e| e.to_string())
}

/// Asks `/health` and succeeds once the member serves with a leader (`{"health":"true"}`).
async fn health_probe(endpoint: Endpoint) -> Result<(), String> {
    let answer = http(&endpoint.url, "GET", "/health", "").await?;
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
    if body.replace(' ', "").contains(r#""health":"true""#) {
        Ok(())
    } else if answer.is_empty() {
        Err("empty answer to /health".into())
    } else {
        Err(format!("/health: {}", body.trim()))
    }
}

/// A key prefix of one's own (`/leaftest-PID-RANDOM`) on an etcd server; what a test wrote
/// under it is deleted (in the background) with this value.
pub struct EtcdNamespace {
    /// The client URLs of the server (one, or a cluster's three).
    pub endpoints: Vec<String>,
    /// The prefix: an absolute path no key has yet, for the test's keys.
    pub prefix: String,
}

impl fmt::Debug for EtcdNamespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdNamespace")
            .field("endpoints", &self.endpoints)
            .field("prefix", &self.prefix)
            .finish()
    }
}

/// A new prefix on the shared etcd server.
pub async fn etcd_namespace() -> Result<EtcdNamespace, ProvisionError> {
    let server = shared(&ETCD).await?;
    Ok(etcd_namespace_on(&[server.url]))
}

/// A new prefix, with a random name, on the server (or cluster) of `endpoints`.
pub fn etcd_namespace_on(endpoints: &[String]) -> EtcdNamespace {
    EtcdNamespace {
        endpoints: endpoints.to_vec(),
        prefix: format!(
            "/leaftest-{}-{:012x}",
            std::process::id(),
            fastrand::u64(..) >> 16
        ),
    }
}

impl Drop for EtcdNamespace {
    fn drop(&mut self) {
        let (endpoints, prefix) = (self.endpoints.clone(), self.prefix.clone());
        runtime().spawn(async move {
            // etcd's JSON gateway takes keys in base64; `{prefix}0` ends the range `{prefix}/...`
            // ('0' follows '/').
            let body = format!(
                r#"{{"key":"{}","range_end":"{}"}}"#,
                base64(format!("{prefix}/").as_bytes()),
                base64(format!("{prefix}0").as_bytes())
            );
            for url in &endpoints {
                if http(url, "POST", "/v3/kv/deleterange", &body).await.is_ok() {
                    break;
                }
            }
        });
    }
}

/// Standard base64 with padding.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The cluster's size: one member can stop and the other two keep a quorum.
const CLUSTER_SIZE: usize = 3;

/// A three-member etcd cluster: three containers of the etcd image on a Docker network of their
/// own, each published on a fixed loopback port so that a stopped member comes back at the same
/// address. Removed with this value (in the background), or by
/// [`remove`](EtcdCluster::remove).
pub struct EtcdCluster {
    members: Vec<Dedicated>,
    endpoints: Vec<String>,
    network: String,
    internal: Vec<String>,
}

impl fmt::Debug for EtcdCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdCluster")
            .field("endpoints", &self.endpoints)
            .finish_non_exhaustive()
    }
}

/// Starts a three-member cluster and waits until every member serves with a leader. Always
/// containers, even with `LEAFTEST_ETCD_URL` set: a test that stops members must own them.
pub async fn etcd_cluster() -> Result<EtcdCluster, ProvisionError> {
    let cluster = launch_cluster(&ETCD, "etcd", CLUSTER_SIZE, |i, names, network| {
        let name = &names[i];
        vec![
            ("ETCD_NAME".into(), name.clone()),
            (
                "ETCD_INITIAL_ADVERTISE_PEER_URLS".into(),
                format!("http://{name}:{PEER_PORT}"),
            ),
            (
                "ETCD_LISTEN_PEER_URLS".into(),
                format!("http://0.0.0.0:{PEER_PORT}"),
            ),
            ("ETCD_INITIAL_CLUSTER".into(), initial_cluster(names)),
            ("ETCD_INITIAL_CLUSTER_STATE".into(), "new".into()),
            ("ETCD_INITIAL_CLUSTER_TOKEN".into(), network.to_string()),
        ]
    })
    .await?;
    let endpoints = cluster
        .members
        .iter()
        .map(|m| m.endpoint().url.clone())
        .collect();
    let internal = cluster
        .names
        .iter()
        .map(|n| format!("http://{n}:{CLIENT_PORT}"))
        .collect();
    Ok(EtcdCluster {
        members: cluster.members,
        endpoints,
        network: cluster.network,
        internal,
    })
}

/// `ETCD_INITIAL_CLUSTER` for members named `names` (each member's name is its host name).
fn initial_cluster(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("{n}=http://{n}:{PEER_PORT}"))
        .collect::<Vec<_>>()
        .join(",")
}

impl EtcdCluster {
    /// The client URLs of all members (`http://127.0.0.1:P1`, ...).
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// The Docker network the members are on.
    pub fn network(&self) -> &str {
        &self.network
    }

    /// The client URLs of all members for a container on [`network`](Self::network)
    /// (`http://{name}:2379`, ...).
    pub fn internal_endpoints(&self) -> &[String] {
        &self.internal
    }

    /// The members, in start order; each can be stopped and started like any [`Dedicated`]
    /// server.
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
    fn initial_cluster_names_every_member_at_its_peer_url() {
        let names: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
        assert_eq!(
            initial_cluster(&names),
            "a=http://a:2380,b=http://b:2380,c=http://c:2380"
        );
    }

    #[test]
    fn base64_table() {
        let check = |input: &str, expect: &str| assert_eq!(base64(input.as_bytes()), expect);
        check("", "");
        check("f", "Zg==");
        check("fo", "Zm8=");
        check("foo", "Zm9v");
        check("/leaftest-1/", "L2xlYWZ0ZXN0LTEv");
    }

    #[test]
    fn urls_give_their_authority() {
        assert_eq!(authority("http://127.0.0.1:2379"), "127.0.0.1:2379");
        assert_eq!(authority("http://h:1/x"), "h:1");
        assert_eq!(authority("h:1"), "h:1");
    }

    #[test]
    fn namespaces_are_distinct_absolute_prefixes() {
        // Port 1: nothing answers there, so the clean-up of the drop fails at once, quietly.
        let endpoints = ["http://127.0.0.1:1".to_string()];
        let a = etcd_namespace_on(&endpoints);
        let b = etcd_namespace_on(&endpoints);
        assert!(a.prefix.starts_with("/leaftest-"), "{}", a.prefix);
        assert!(!a.prefix[1..].contains('/'), "{}", a.prefix);
        assert_ne!(a.prefix, b.prefix);
    }
}
