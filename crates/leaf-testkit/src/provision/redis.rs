//! Redis: the server kind (always started with `appendonly yes` and `appendfsync always`), a key
//! prefix of one's own per test, and dedicated servers a fault test may stop, kill and start.
//!
//! No Redis client here: the probe and the clean-up speak RESP over a plain `TcpStream`, so the
//! testkit stays light.

use std::fmt;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::OnceCell;

use super::{
    Dedicated, Endpoint, Launch, PROBE_TIMEOUT, ProvisionError, ServerKind, URL_PROBE_TIMEOUT,
    free_port, image_of, launch_container_cmd, network_name, on_runtime, probe_until_ready,
    runtime,
};

/// Redis: the official `redis` image (or `LEAFTEST_REDIS_IMAGE`, e.g. the local
/// `leaf-testbed/redis:local`), or the server of `LEAFTEST_REDIS_URL` (`redis://host:port`).
/// Containers run `redis-server` with [`DURABLE_ARGS`]; use [`redis_shared`] (not the generic
/// `shared`) to get the shared server with them.
pub static REDIS: ServerKind = ServerKind {
    name: "redis",
    url_var: crate::vars::REDIS_URL,
    image_var: crate::vars::REDIS_IMAGE,
    default_image: "redis:7",
    port: PORT,
    // Read by the testbed image's entrypoint; the official image takes the arguments only.
    env: &[("REDIS_APPENDONLY", "yes"), ("REDIS_APPENDFSYNC", "always")],
    ready_log: "Ready to accept connections",
    url: |port| format!("redis://127.0.0.1:{port}"),
    probe: |endpoint| Box::pin(ping_probe(endpoint)),
    shared: OnceCell::const_new(),
};

const PORT: u16 = 6379;

/// The arguments every Redis container gets (both the official and the testbed image pass them
/// to `redis-server`): every write fsynced before its answer.
pub const DURABLE_ARGS: &[&str] = &["--appendonly", "yes", "--appendfsync", "always"];

/// How long one probe or clean-up waits for an answer.
const IO_TIMEOUT: Duration = Duration::from_secs(2);

/// `host:port` of a `redis://host:port[/db]` URL (credentials are not supported here).
fn address(url: &str) -> Result<&str, String> {
    let rest = url
        .strip_prefix("redis://")
        .ok_or_else(|| format!("{url:?} is not a redis:// url"))?;
    let authority = rest.split(['/', '?']).next().unwrap_or(rest);
    if authority.contains('@') {
        return Err(
            "the testkit's redis probe does not authenticate; use a server without a password"
                .into(),
        );
    }
    Ok(authority)
}

/// One command in RESP: an array of bulk strings.
fn encode(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Sends `request` (raw bytes) to the server of `url` and returns the start of its answer.
async fn exchange(url: &str, request: &[u8]) -> Result<String, String> {
    let addr = address(url)?;
    tokio::time::timeout(IO_TIMEOUT, async {
        let mut conn = tokio::net::TcpStream::connect(addr).await?;
        conn.write_all(request).await?;
        let mut buf = vec![0u8; 512];
        let n = conn.read(&mut buf).await?;
        Ok::<_, std::io::Error>(String::from_utf8_lossy(&buf[..n]).into_owned())
    })
    .await
    .map_err(|_| format!("no answer within {IO_TIMEOUT:?}"))?
    .map_err(|e| e.to_string())
}

/// `PING` (inline) and `+PONG` back: the server is up and has loaded its data (it answers
/// `-LOADING` before that).
async fn ping_probe(endpoint: Endpoint) -> Result<(), String> {
    let answer = exchange(&endpoint.url, b"PING\r\n").await?;
    if answer.starts_with("+PONG") {
        Ok(())
    } else if answer.is_empty() {
        Err("empty answer to PING".into())
    } else {
        Err(format!("PING: {}", answer.trim()))
    }
}

/// The Redis server every test of this process shares: the one `LEAFTEST_REDIS_URL` names, else
/// one container (of `LEAFTEST_REDIS_IMAGE`, default `redis:7`) started with [`DURABLE_ARGS`]
/// on first use.
pub async fn redis_shared() -> Result<Endpoint, ProvisionError> {
    static SHARED: OnceCell<Result<Endpoint, String>> = OnceCell::const_new();
    let r = SHARED
        .get_or_init(|| async {
            if let Some(url) = std::env::var(REDIS.url_var)
                .ok()
                .filter(|u| !u.trim().is_empty())
            {
                let endpoint = Endpoint { url };
                probe_until_ready(&REDIS, &endpoint, URL_PROBE_TIMEOUT)
                    .await
                    .map_err(|e| {
                        format!(
                            "redis: the server named by {} does not answer: {e}",
                            REDIS.url_var
                        )
                    })?;
                return Ok(endpoint);
            }
            // Kept for the whole process, as the generic shared server is.
            let d = redis_dedicated().await.map_err(|e| e.0)?;
            let endpoint = d.endpoint().clone();
            std::mem::forget(d);
            Ok(endpoint)
        })
        .await;
    r.clone().map_err(|e| super::unprovisioned(&REDIS, &e))
}

/// A Redis container of one's own, started with [`DURABLE_ARGS`], on a fixed loopback port so
/// that it keeps its address across `stop`, [`kill_server`] and `start`.
pub async fn redis_dedicated() -> Result<Dedicated, ProvisionError> {
    redis_dedicated_with(&[]).await
}

/// As [`redis_dedicated`], with `args` after [`DURABLE_ARGS`] (a later option wins:
/// `["--appendfsync", "everysec"]` starts a Redis with weaker durability).
pub async fn redis_dedicated_with(args: &[&str]) -> Result<Dedicated, ProvisionError> {
    let args: Vec<&str> = DURABLE_ARGS.iter().chain(args).copied().collect();
    super::dedicated_with(&REDIS, &args).await
}

/// A primary and its replica (`--replicaof`), both started with [`DURABLE_ARGS`], on a Docker
/// network of their own, each published on a loopback port: for `WAIT` acknowledged by a real
/// replica. The replica may still be syncing when this returns (`WAIT 1` tells when it is not).
pub async fn redis_with_replica() -> Result<(Dedicated, Dedicated), ProvisionError> {
    let network = network_name();
    let primary_name = format!("{network}-redis1");
    let mut members = Vec::with_capacity(2);
    for (name, extra) in [
        (primary_name.clone(), vec![]),
        (
            format!("{network}-redis2"),
            vec![
                "--replicaof".to_string(),
                primary_name.clone(),
                PORT.to_string(),
            ],
        ),
    ] {
        let cmd: Vec<String> = DURABLE_ARGS
            .iter()
            .map(|a| a.to_string())
            .chain(extra)
            .collect();
        let launch = Launch {
            host_port: Some(free_port()?),
            network: Some(network.clone()),
            name: Some(name),
            env: Vec::new(),
            files: Vec::new(),
        };
        let (container, endpoint) = on_runtime(launch_container_cmd(&REDIS, launch, cmd)).await?;
        let d = Dedicated {
            kind: &REDIS,
            endpoint,
            container: Some(container),
        };
        probe_until_ready(&REDIS, &d.endpoint, PROBE_TIMEOUT)
            .await
            .map_err(|e| {
                ProvisionError(format!(
                    "redis in {} does not answer: {e}",
                    image_of(&REDIS)
                ))
            })?;
        members.push(d);
    }
    let replica = members.pop().expect("two members");
    let primary = members.pop().expect("two members");
    Ok((primary, replica))
}

/// A secured Redis ([`redis_secured`]): TLS only, its certificate from a [`crate::pki::Pki`].
/// The probe cannot speak RESP in the clear to it: it only opens a TCP connection (the server
/// listens once it has loaded its data, after its readiness line).
pub static REDIS_SECURED: ServerKind = ServerKind {
    name: "redis-secured",
    url_var: crate::vars::REDIS_URL,
    image_var: crate::vars::REDIS_IMAGE,
    default_image: "redis:7",
    port: PORT,
    env: &[("REDIS_APPENDONLY", "yes"), ("REDIS_APPENDFSYNC", "always")],
    ready_log: "Ready to accept connections",
    url: |port| format!("rediss://127.0.0.1:{port}"),
    probe: |endpoint| Box::pin(super::tcp_probe(endpoint)),
    shared: OnceCell::const_new(),
};

/// The administrator of every [`redis_secured`] server (`+@all` on every key): what a test
/// uses to change users (`ACL SETUSER`) or drop connections (`CLIENT KILL`).
pub const REDIS_ADMIN_USER: &str = "leaftest-admin";
/// The password of [`REDIS_ADMIN_USER`].
pub const REDIS_ADMIN_PASSWORD: &str = "leaftest-admin-password";

/// Where the certificates and the ACL file go in a secured container.
const TLS_DIR: &str = "/leaftest-tls";

/// A Redis container of one's own that serves TLS only (`--port 0 --tls-port 6379`), with the
/// server certificate and CA of `pki`, [`DURABLE_ARGS`], and the ACL file: `user default off`,
/// [`REDIS_ADMIN_USER`], and `users` (whole ACL lines, `user NAME on >PASSWORD ~KEYS +CMDS`).
/// `require_client_cert`: `--tls-auth-clients yes` (a client must present a certificate of the
/// CA), else `optional`. Its endpoint is `rediss://127.0.0.1:PORT`.
pub async fn redis_secured(
    pki: &crate::pki::Pki,
    require_client_cert: bool,
    users: &[String],
) -> Result<Dedicated, ProvisionError> {
    let mut acl = format!(
        "user default off\nuser {REDIS_ADMIN_USER} on >{REDIS_ADMIN_PASSWORD} ~* &* +@all\n"
    );
    for u in users {
        acl.push_str(u.trim());
        acl.push('\n');
    }
    let file =
        |name: &str, text: &str| (format!("{TLS_DIR}/{name}"), 0o644, text.as_bytes().to_vec());
    let files = vec![
        file("ca.pem", &pki.ca),
        file("server.pem", &pki.server.cert),
        file("server.key", &pki.server.key),
        file("users.acl", &acl),
    ];
    let auth_clients = if require_client_cert {
        "yes"
    } else {
        "optional"
    };
    let tls_args = [
        "--port".to_string(),
        "0".into(),
        "--tls-port".into(),
        PORT.to_string(),
        "--tls-cert-file".into(),
        format!("{TLS_DIR}/server.pem"),
        "--tls-key-file".into(),
        format!("{TLS_DIR}/server.key"),
        "--tls-ca-cert-file".into(),
        format!("{TLS_DIR}/ca.pem"),
        "--tls-auth-clients".into(),
        auth_clients.into(),
        "--aclfile".into(),
        format!("{TLS_DIR}/users.acl"),
    ];
    let args: Vec<&str> = DURABLE_ARGS
        .iter()
        .copied()
        .chain(tls_args.iter().map(String::as_str))
        .collect();
    super::dedicated_with_files(&REDIS_SECURED, &args, files, Vec::new()).await
}

/// Kills the server of `d` with SIGKILL (no shutdown, no final fsync); `start` brings it back.
pub async fn kill_server(d: &Dedicated) -> Result<(), ProvisionError> {
    d.kill().await
}

/// A key prefix of one's own (`leaftest-PID-RANDOM`) on a Redis server; the keys under it are
/// deleted (in the background) with this value.
pub struct RedisNamespace {
    /// The server's URL (`redis://127.0.0.1:PORT`).
    pub url: String,
    /// The prefix: no key starts with it yet.
    pub prefix: String,
}

impl fmt::Debug for RedisNamespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisNamespace")
            .field("url", &self.url)
            .field("prefix", &self.prefix)
            .finish()
    }
}

/// A new key prefix on the shared Redis server.
pub async fn redis_namespace() -> Result<RedisNamespace, ProvisionError> {
    let server = redis_shared().await?;
    Ok(redis_namespace_on(&server.url))
}

/// A new key prefix, with a random name, on the server at `url`.
pub fn redis_namespace_on(url: &str) -> RedisNamespace {
    RedisNamespace {
        url: url.to_string(),
        prefix: format!(
            "leaftest-{}-{:012x}",
            std::process::id(),
            fastrand::u64(..) >> 16
        ),
    }
}

/// Deletes every key under `prefix` (a test server's, so `KEYS` is fine).
const DELETE_PREFIX: &str = "local n = 0 for _, k in ipairs(redis.call('KEYS', ARGV[1] .. '*')) do redis.call('DEL', k) n = n + 1 end return n";

impl Drop for RedisNamespace {
    fn drop(&mut self) {
        let (url, prefix) = (self.url.clone(), format!("{}:", self.prefix));
        runtime().spawn(async move {
            let _ = exchange(&url, &encode(&["EVAL", DELETE_PREFIX, "0", &prefix])).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resp_encoding() {
        assert_eq!(encode(&["PING"]), b"*1\r\n$4\r\nPING\r\n");
        assert_eq!(encode(&["GET", "k:1"]), b"*2\r\n$3\r\nGET\r\n$3\r\nk:1\r\n");
    }

    #[test]
    fn addresses_of_urls() {
        assert_eq!(address("redis://127.0.0.1:6379"), Ok("127.0.0.1:6379"));
        assert_eq!(address("redis://127.0.0.1:6379/0"), Ok("127.0.0.1:6379"));
        assert!(address("http://x").is_err());
        assert!(address("redis://:pw@h:1").is_err());
    }

    #[test]
    fn namespaces_are_distinct() {
        let a = redis_namespace_on("redis://127.0.0.1:1");
        let b = redis_namespace_on("redis://127.0.0.1:1");
        assert_ne!(a.prefix, b.prefix);
        assert!(a.prefix.starts_with("leaftest-"), "{}", a.prefix);
        std::mem::forget(a);
        std::mem::forget(b);
    }
}
