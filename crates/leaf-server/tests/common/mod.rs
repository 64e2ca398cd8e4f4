//! Plumbing shared by the tests of the built binary: a clean command line, a running server that
//! is killed when dropped, and a minimal HTTP/1.1 client to speak to it on loopback.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

#[allow(dead_code, reason = "each test binary uses a part")]
pub(crate) mod certs;
#[allow(dead_code, reason = "each test binary uses a part")]
pub(crate) mod monitoring;
#[allow(dead_code, reason = "each test binary uses a part")]
pub(crate) mod monotonic;
pub(crate) mod nodes;
pub(crate) mod router;
#[cfg(any(feature = "mysql", feature = "postgres"))]
pub(crate) mod sql;
#[allow(dead_code, reason = "each test binary uses a part")]
pub(crate) mod upgrade;

const BIN: &str = env!("CARGO_BIN_EXE_leaf-server");

/// The wall clock, Unix milliseconds.
#[allow(dead_code, reason = "only the ZooKeeper tests read the clock")]
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The binary in `dir`, listening on `port`, with `env` over a clean environment: no `LEAF_`
/// variable of the caller leaks in. The log level is pinned to `info`, where the lines the tests
/// look for are, whatever the default; `env` may override it.
pub(crate) fn command<V: AsRef<OsStr>>(dir: &Path, port: u16, env: &[(&str, V)]) -> Command {
    let mut c = Command::new(BIN);
    c.current_dir(dir);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy()
            .to_ascii_uppercase()
            .starts_with("LEAF_")
        {
            c.env_remove(k);
        }
    }
    c.env("LEAF_LOG__LEVEL", "info")
        .env("LEAF_SERVER__LISTEN", format!("127.0.0.1:{port}"))
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    c
}

/// A running binary, its stderr in a log file; killed when dropped, so that a failing test
/// leaves no process behind.
pub(crate) struct Server {
    pub(crate) child: Child,
    pub(crate) port: u16,
    log: PathBuf,
}

impl Server {
    /// Starts the binary as [`command`] does, its stderr in `dir/server-{n}.log`, without
    /// waiting for it to serve (see [`Server::wait_for`]).
    pub(crate) fn spawn<V: AsRef<OsStr>>(
        dir: &Path,
        port: u16,
        n: u32,
        env: &[(&str, V)],
    ) -> Server {
        let log = dir.join(format!("server-{n}.log"));
        let child = command(dir, port, env)
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("the binary starts");
        Server { child, port, log }
    }

    pub(crate) fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until `GET path` answers 200; fails if the server exits first or `limit` passes.
    pub(crate) fn wait_for(&mut self, path: &str, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!(
                    "the server exited ({status}) before serving:\n{}",
                    self.log_text()
                );
            }
            if let Ok(r) = http(self.port, "GET", path)
                && r.status == 200
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{path} did not answer 200 within {} s:\n{}",
                limit.as_secs(),
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub(crate) fn get(&self, path: &str) -> Reply {
        http(self.port, "GET", path)
            .unwrap_or_else(|e| panic!("GET {path}: {e}\n{}", self.log_text()))
    }

    /// SIGTERM, then the exit status and the log.
    pub(crate) fn sigterm(mut self) -> (ExitStatus, String) {
        let ok = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -TERM");
        let status = wait_exit(&mut self.child, Duration::from_secs(20))
            .unwrap_or_else(|| panic!("no exit after SIGTERM:\n{}", self.log_text()));
        (status, self.log_text())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The exit status of `child`, or `None` if it still runs after `limit`.
pub(crate) fn wait_exit(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub(crate) struct Reply {
    pub(crate) status: u16,
    #[allow(
        dead_code,
        reason = "only blackbox.rs reads the headers; mysql.rs compiles this module too"
    )]
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: String,
}

impl Reply {
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }

    pub(crate) fn ids(&self) -> Vec<i64> {
        assert_eq!(self.status, 200, "{}", self.body);
        self.json()["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_i64().unwrap())
            .collect()
    }
}

/// A minimal HTTP/1.1 client: one request per connection.
pub(crate) fn http(port: u16, method: &str, path: &str) -> std::io::Result<Reply> {
    http_with(port, method, path, &[], "")
}

/// [`http`] with extra header lines (`"Name: value"`) and a body.
pub(crate) fn http_with(
    port: u16,
    method: &str,
    path: &str,
    headers: &[&str],
    body: &str,
) -> std::io::Result<Reply> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    let extra: String = headers.iter().map(|h| format!("{h}\r\n")).collect();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n{extra}\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    parse_reply(&raw)
}

/// The value of the sample `series` (a name, with its labels if it has any, as the scrape
/// writes them) in a `/metrics` scrape; fails naming the series when it is missing.
#[allow(dead_code, reason = "each test binary uses a part")]
pub(crate) fn gauge(scrape: &str, series: &str) -> f64 {
    let family = series.split('{').next().unwrap_or(series);
    assert!(
        scrape.contains(&format!("# TYPE {family} ")),
        "no {family}: {scrape}"
    );
    scrape
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{series} ")))
        .unwrap_or_else(|| panic!("no {series}: {scrape}"))
        .parse()
        .unwrap()
}

/// `POST path` with a JSON `body`.
#[allow(dead_code, reason = "each test binary uses a part")]
pub(crate) fn post_json(port: u16, path: &str, body: &str) -> Reply {
    http_with(
        port,
        "POST",
        path,
        &["Content-Type: application/json"],
        body,
    )
    .unwrap_or_else(|e| panic!("POST {path}: {e}"))
}

/// An HTTP/1.1 answer read to its end: status, headers, body.
pub(crate) fn parse_reply(raw: &[u8]) -> std::io::Result<Reply> {
    let text = String::from_utf8_lossy(raw).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| std::io::Error::other(format!("no header end in {text:?}")))?;
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line in {text:?}")))?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    Ok(Reply {
        status,
        headers,
        body: body.to_string(),
    })
}

/// The environment that sets a process's wall clock `by` behind the machine's: Debian's
/// libfaketime (package `faketime`), preloaded. Fails loudly where it is missing.
#[allow(dead_code, reason = "each test binary uses a part")]
pub(crate) fn clock_set_back(by: Duration) -> Vec<(&'static str, String)> {
    let dirs = ["/usr/lib/x86_64-linux-gnu/faketime", "/usr/lib/faketime"];
    let lib = dirs
        .iter()
        .flat_map(|d| ["libfaketimeMT.so.1", "libfaketime.so.1"].map(|l| Path::new(d).join(l)))
        .find(|p| p.exists())
        .unwrap_or_else(|| {
            panic!("no libfaketime: install Debian's faketime package (.ci/run does)")
        });
    vec![
        ("LD_PRELOAD", lib.display().to_string()),
        ("FAKETIME", format!("-{}s", by.as_secs())),
        // Counted from the process's start, not frozen there.
        ("FAKETIME_NO_CACHE", "1".into()),
    ]
}
