//! The `leaf-server` process under test: its command, start and stop, one-off GETs, its RSS.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// The command that runs `binary` in a fresh temporary directory (named after `run`) on a free
/// loopback address, logging warnings only.
pub(super) fn server_command(binary: &Path, run: &str) -> Result<(Command, PathBuf, SocketAddr)> {
    let dir = std::env::temp_dir().join(format!("leaf-bench-http-{run}-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let addr = free_addr()?;
    let mut cmd = Command::new(binary);
    cmd.current_dir(&dir)
        .env("LEAF_SERVER__LISTEN", addr.to_string())
        .env("LEAF_LOG__LEVEL", "warn")
        .stdout(Stdio::null());
    Ok((cmd, dir, addr))
}

/// Kills the server if the run fails half-way.
pub(super) struct Server(pub(super) Child);

impl Server {
    /// Starts `cmd` and waits until every path of `ready` answers 200; also gives how long
    /// that took.
    pub(super) fn start(
        cmd: &mut Command,
        what: &str,
        addr: SocketAddr,
        ready: &[&str],
    ) -> Result<(Server, Duration)> {
        Server::start_until(cmd, what, || {
            ready
                .iter()
                .all(|path| get(addr, path).is_ok_and(|(status, _)| status == 200))
        })
    }

    /// Starts `cmd` and waits until `ready` says so (a server this module cannot ask itself,
    /// one that speaks TLS); also gives how long that took.
    pub(super) fn start_until(
        cmd: &mut Command,
        what: &str,
        mut ready: impl FnMut() -> bool,
    ) -> Result<(Server, Duration)> {
        let started = Instant::now();
        let mut server = Server(
            cmd.spawn()
                .with_context(|| format!("cannot start {what}"))?,
        );
        while !ready() {
            if let Some(status) = server.0.try_wait()? {
                bail!("{what} exited: {status}");
            }
            if started.elapsed() > Duration::from_secs(30) {
                bail!("{what} gave no ID within 30 s");
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok((server, started.elapsed()))
    }

    pub(super) fn stop(&mut self) {
        // SIGTERM lets it write its final mark; the temporary directory goes anyway.
        let _ = Command::new("kill").arg(self.0.id().to_string()).status();
        let _ = self.0.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub(super) fn free_addr() -> Result<SocketAddr> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// One HTTP/1.1 GET with `Connection: close`: (status, body).
pub(super) fn get(addr: SocketAddr, path: &str) -> Result<(u16, String)> {
    request(addr, "GET", path, None)
}

/// One HTTP/1.1 request with `Connection: close` and an optional JSON body: (status, body).
pub(super) fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    json: Option<&str>,
) -> Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(200))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let body = json.unwrap_or_default();
    let headers = match json {
        Some(b) => format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            b.len()
        ),
        None => String::new(),
    };
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{headers}Connection: close\r\n\r\n{body}"
    )?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .context("no status line")?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

pub(super) fn rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .context("no VmRSS")
}

/// The CPU time process `pid` has spent, user and system, in seconds: fields 14 and 15 of
/// `/proc/{pid}/stat`, in clock ticks of 1/100 s (Linux's `USER_HZ`).
pub(super) fn cpu_seconds(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name, in parentheses, may hold spaces; the fields after it do not.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .context("no command name in /proc/PID/stat")?
        .1
        .split_whitespace()
        .collect();
    let ticks = |i: usize| -> Result<u64> {
        fields
            .get(i)
            .and_then(|t| t.parse().ok())
            .context("no utime/stime in /proc/PID/stat")
    };
    Ok((ticks(11)? + ticks(12)?) as f64 / 100.0)
}
