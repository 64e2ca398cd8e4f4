//! Real leaf-servers for the client's tests: the server's own configuration, start-up and accept
//! loop (`leaf_server::config::load`, `leaf_server::server::{start, serve}`) on a loopback port,
//! segments on an SQLite file, spoken to over real HTTP. Each server runs on a thread and a
//! runtime of its own, so a test can kill it (the runtime dropped with every connection, as a
//! crash drops them), freeze it (its only thread blocked, as SIGSTOP does) and start it again on
//! the same port.

#![allow(dead_code, reason = "each test file uses a part of this module")]

pub(crate) mod scenarios;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::thread::JoinHandle;
use std::time::Duration;

use leaf_client::LeafClient;
use leaf_core::{NewTag, SegmentStore, Tag};
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

/// The admin token the test servers are started with.
pub(crate) const ADMIN_TOKEN: &str = "leaftest-admin";

enum Command {
    Freeze(Duration),
    Kill,
}

/// One server, killed when dropped.
pub(crate) struct Server {
    pub(crate) port: u16,
    env: Vec<(String, String)>,
    commands: Option<mpsc::UnboundedSender<Command>>,
    thread: Option<JoinHandle<()>>,
}

/// A listener on `port` (0: any) that can be bound again at once after a kill.
fn listener(port: u16) -> std::io::Result<tokio::net::TcpListener> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.set_reuseaddr(true)?;
    socket.bind(SocketAddr::from(([127, 0, 0, 1], port)))?;
    socket.listen(1024)
}

impl Server {
    /// A server configured by `env` (the server's `LEAF_` keys, read as the binary reads its
    /// environment), on `port` (0: a free one); returns once it serves.
    pub(crate) fn start(port: u16, env: Vec<(String, String)>) -> Server {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<u16, String>>();
        let (commands, mut rx) = mpsc::unbounded_channel();
        let config_env = env.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let started = async {
                    let listener = listener(port).map_err(|e| format!("bind {port}: {e}"))?;
                    let local = listener.local_addr().map_err(|e| e.to_string())?;
                    let mut env = config_env;
                    env.push(("LEAF_SERVER__LISTEN".into(), local.to_string()));
                    let config = leaf_server::config::load(None, env)
                        .map_err(|e| e.to_string())?
                        .config;
                    let running = leaf_server::server::start(&config, local)
                        .await
                        .map_err(|e| format!("{e:#}"))?;
                    Ok::<_, String>((listener, config, running))
                };
                let (listener, config, running) = match started.await {
                    Ok(s) => s,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(listener.local_addr().unwrap().port()));
                let app = leaf_server::app(running.state.clone());
                let serving = leaf_server::server::serve(
                    listener,
                    app,
                    &config.server,
                    std::future::pending(),
                );
                let commanded = async {
                    while let Some(c) = rx.recv().await {
                        match c {
                            // Blocks the server's only thread: nothing is accepted or answered.
                            Command::Freeze(d) => std::thread::sleep(d),
                            Command::Kill => return,
                        }
                    }
                };
                tokio::select! {
                    () = serving => {}
                    () = commanded => {}
                }
                drop(running);
            });
            // Every task, open connections included, ends here without a word to the peers.
            rt.shutdown_background();
        });
        let port = match ready_rx.recv_timeout(Duration::from_secs(60)) {
            Ok(Ok(port)) => port,
            Ok(Err(e)) => panic!("the server did not start: {e}"),
            Err(e) => panic!("the server did not start: {e}"),
        };
        Server {
            port,
            env,
            commands: Some(commands),
            thread: Some(thread),
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `https://127.0.0.1:PORT`, for a server started with `LEAF_SERVER__TLS__...` keys.
    pub(crate) fn https_url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// Stops the server as a crash would: connections cut, nothing finished.
    pub(crate) fn kill(&mut self) {
        if let Some(c) = self.commands.take() {
            let _ = c.send(Command::Kill);
        }
        if let Some(t) = self.thread.take() {
            t.join().expect("server thread");
        }
    }

    /// Starts a killed server again on its port, with its configuration.
    pub(crate) fn restart(&mut self) {
        assert!(self.thread.is_none(), "restart a killed server only");
        *self = Server::start(self.port, self.env.clone());
    }

    /// Blocks the server for `d`: connections are accepted by the kernel, never answered.
    pub(crate) fn freeze(&self, d: Duration) {
        let c = self.commands.as_ref().expect("a running server");
        c.send(Command::Freeze(d)).expect("server thread");
    }

    /// `GET path` on a connection of its own: the status and the body.
    pub(crate) async fn get(&self, path: &str) -> (u16, String) {
        get(self.port, path).await
    }

    /// `POST path` of a JSON `body` with the admin token.
    pub(crate) async fn post_admin(&self, path: &str, body: &str) -> (u16, String) {
        let auth = format!("Bearer {ADMIN_TOKEN}");
        let headers = [
            ("Content-Type", "application/json"),
            ("Authorization", auth.as_str()),
        ];
        request(self.port, "POST", path, &headers, body).await
    }

    /// The value of the Prometheus `sample` (its name and labels, as written); 0 if absent.
    pub(crate) async fn metric(&self, sample: &str) -> f64 {
        let (status, text) = self.get("/metrics").await;
        assert_eq!(status, 200, "{text}");
        text.lines()
            .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or(0.0)
    }

    /// How many requests of `route` (its pattern) answered `status`.
    pub(crate) async fn requests(&self, route: &str, status: u16) -> u64 {
        self.metric(&format!(
            "leaf_requests_total{{route=\"{route}\",status=\"{status}\"}}"
        ))
        .await as u64
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A minimal HTTP/1.1 `GET` on loopback, one request per connection.
pub(crate) async fn get(port: u16, path: &str) -> (u16, String) {
    request(port, "GET", path, &[], "").await
}

/// A minimal HTTP/1.1 request on loopback with `headers` and `body`, one per connection.
pub(crate) async fn request(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap_or_else(|e| panic!("connect {port}: {e}"));
    let headers: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{headers}Content-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut raw))
        .await
        .expect("an answer within 30 s")
        .unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("a header end");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("a status");
    (status, body.to_string())
}

/// Servers sharing one store, each with its own cache directory and worker id.
pub(crate) struct Cluster {
    pub(crate) dir: TempDir,
    /// The store's keys (`LEAF_SEGMENT__...`), the same for every server.
    store: Vec<(String, String)>,
    pub(crate) servers: Vec<Server>,
}

impl Cluster {
    /// `n` servers on one SQLite file, each with `extra` keys too.
    pub(crate) fn start(n: usize, extra: &[(&str, &str)]) -> Cluster {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("sqlite://{}", dir.path().join("leaf.db").display());
        Cluster::with_dir(dir, vec![("LEAF_SEGMENT__URL".into(), url)], n, extra)
    }

    /// `n` servers on the store the `store` keys name (`LEAF_SEGMENT__STORE`, `...__URL`).
    pub(crate) fn on_store(store: &[(&str, &str)], n: usize, extra: &[(&str, &str)]) -> Cluster {
        let store = store
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Cluster::with_dir(tempfile::tempdir().expect("temp dir"), store, n, extra)
    }

    fn with_dir(
        dir: TempDir,
        store: Vec<(String, String)>,
        n: usize,
        extra: &[(&str, &str)],
    ) -> Cluster {
        let mut cluster = Cluster {
            dir,
            store,
            servers: Vec::new(),
        };
        for _ in 0..n {
            cluster.add(extra);
        }
        cluster
    }

    /// Starts one more server, with `extra` keys too.
    pub(crate) fn add(&mut self, extra: &[(&str, &str)]) -> &Server {
        let i = self.servers.len();
        let cache = self.dir.path().join(format!("node-{i}"));
        let mut env: Vec<(String, String)> = [
            ("LEAF_SEGMENT__SEED_TAGS", "[]".into()),
            ("LEAF_SNOWFLAKE__CACHE_DIR", cache.display().to_string()),
            ("LEAF_SNOWFLAKE__IP", "127.0.0.1".into()),
            ("LEAF_SNOWFLAKE__LOCAL__WORKER_ID", (i + 1).to_string()),
            ("LEAF_SERVER__ADMIN_TOKEN", ADMIN_TOKEN.into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .chain(self.store.iter().cloned())
        .collect();
        env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        self.servers.push(Server::start(0, env));
        &self.servers[i]
    }

    /// The servers' URLs, in order.
    pub(crate) fn urls(&self) -> Vec<String> {
        self.servers.iter().map(Server::url).collect()
    }

    /// The SQLite file of a cluster made by [`start`](Self::start).
    pub(crate) fn db(&self) -> PathBuf {
        self.dir.path().join("leaf.db")
    }
}

/// A builder of a client of `urls` with the admin token.
pub(crate) fn client(urls: Vec<String>) -> leaf_client::LeafClientBuilder {
    LeafClient::builder()
        .endpoints(urls)
        .admin_token(ADMIN_TOKEN)
}

/// Creates `tag` with `step` through `client`'s store (the admin route).
pub(crate) async fn create_tag(client: &LeafClient, tag: &str, step: i64) {
    let new = NewTag {
        step,
        ..NewTag::new(Tag::new(tag).unwrap())
    };
    client.store().create(&new).await.expect("create the tag");
}

/// Asserts that `ids` holds no value twice.
pub(crate) fn assert_unique(ids: &mut [i64]) {
    ids.sort_unstable();
    if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
        panic!("id {} issued twice (of {} ids)", w[0], ids.len());
    }
}

/// An HTTP endpoint of the test's own that answers every request with what `answer` makes of
/// its method and path (status, content type, body): a server of the wrong kind (a maintenance
/// page, another service behind a proxy), or one whose store is not the others'.
pub(crate) struct Stub {
    pub(crate) url: String,
    requests: std::sync::Arc<std::sync::atomic::AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

/// What a [`Stub`] answers: status, content type and body.
pub(crate) type StubAnswer = (u16, &'static str, String);

impl Stub {
    pub(crate) async fn start(
        answer: impl Fn(&str, &str) -> StubAnswer + Send + Sync + 'static,
    ) -> Stub {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let answer = std::sync::Arc::new(answer);
        let requests = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counted = requests.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut conn, _)) = listener.accept().await else {
                    continue;
                };
                let (answer, counted) = (answer.clone(), counted.clone());
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    loop {
                        // One request: its head, then its body (Content-Length bytes).
                        let head_end = loop {
                            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                                break i + 4;
                            }
                            let mut chunk = [0u8; 4096];
                            match conn.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                        };
                        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
                        let length = head
                            .lines()
                            .find_map(|l| {
                                let (k, v) = l.split_once(':')?;
                                k.eq_ignore_ascii_case("content-length")
                                    .then(|| v.trim().parse::<usize>().ok())?
                            })
                            .unwrap_or(0);
                        while buf.len() < head_end + length {
                            let mut chunk = [0u8; 4096];
                            match conn.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                        }
                        buf.drain(..head_end + length);
                        let mut words = head.split_whitespace();
                        let (method, path) =
                            (words.next().unwrap_or(""), words.next().unwrap_or(""));
                        counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let (status, content_type, body) = answer(method, path);
                        let response = format!(
                            "HTTP/1.1 {status} X\r\ncontent-type: {content_type}\r\n\
                             content-length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if conn.write_all(response.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Stub {
            url,
            requests,
            task,
        }
    }

    /// How many requests it answered.
    pub(crate) fn requests(&self) -> u64 {
        self.requests.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Drop for Stub {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A URL on which nothing listens: every connection is refused.
pub(crate) fn refusing_url() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("http://127.0.0.1:{port}")
}
