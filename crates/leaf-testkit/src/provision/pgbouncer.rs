//! PgBouncer in front of a PostgreSQL server, as deployments put it: the tests of what the
//! `postgres` workerId mode does through a pooler run against the real one, Debian's
//! `pgbouncer` (or the binary `LEAFTEST_PGBOUNCER` names), started here as a process on a
//! loopback port.

use std::fmt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{Endpoint, ProvisionError, free_port};

/// The variable naming the `pgbouncer` binary.
pub const PGBOUNCER_VAR: &str = "LEAFTEST_PGBOUNCER";

/// A running PgBouncer; stopped when dropped.
pub struct PgBouncer {
    /// `127.0.0.1:{port}`, where clients connect.
    pub address: String,
    child: Child,
    dir: tempfile::TempDir,
}

impl fmt::Debug for PgBouncer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgBouncer")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

impl PgBouncer {
    /// What PgBouncer logged so far, for a failing test's message.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("pgbouncer.log")).unwrap_or_default()
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The binary: `LEAFTEST_PGBOUNCER`, else `pgbouncer` on the `PATH` or in `/usr/sbin`
/// (Debian's).
fn binary() -> Result<PathBuf, ProvisionError> {
    if let Some(path) = std::env::var_os(PGBOUNCER_VAR).filter(|p| !p.is_empty()) {
        return Ok(path.into());
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin")])
        .map(|dir| dir.join("pgbouncer"))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            ProvisionError(format!(
                "no pgbouncer binary: install Debian's pgbouncer, or name one with {PGBOUNCER_VAR}"
            ))
        })
}

/// The user, password and `host:port` of a `postgres://user:password@host:port/db` URL.
fn parts(url: &str) -> Option<(&str, &str, &str)> {
    let rest = url.split_once("://")?.1;
    let (credentials, rest) = rest.rsplit_once('@')?;
    let (user, password) = credentials.split_once(':')?;
    let authority = rest.split(['/', '?']).next()?;
    Some((user, password, authority))
}

/// A PgBouncer on a free loopback port in front of the PostgreSQL server at `server` (every
/// database of it, for the server URL's user), pooling as `pool_mode` says (`transaction`),
/// with `settings` as more lines of its `[pgbouncer]` section (`server_reset_query_always =
/// 1`). Fails loudly when there is no `pgbouncer` binary or it does not start.
pub async fn pgbouncer(
    server: &Endpoint,
    pool_mode: &str,
    settings: &[&str],
) -> Result<PgBouncer, ProvisionError> {
    let binary = binary()?;
    let (user, password, authority) = parts(&server.url).ok_or_else(|| {
        ProvisionError(format!("not a postgres URL with credentials: {server:?}"))
    })?;
    let (host, port) = authority
        .rsplit_once(':')
        .ok_or_else(|| ProvisionError(format!("no port in {server:?}")))?;
    let dir = tempfile::tempdir().map_err(|e| ProvisionError(format!("a directory: {e}")))?;
    let listen = free_port()?;
    let log = dir.path().join("pgbouncer.log");
    let users = dir.path().join("users.txt");
    // sqlx sends `extra_float_digits`, and the postgres backends `options` (their
    // `statement_timeout` and `lock_timeout`), at start-up, which PgBouncer refuses unless told
    // to ignore them (as its deployments in front of such clients do).
    let config = format!(
        "[databases]\n* = host={host} port={port}\n\n[pgbouncer]\nlisten_addr = 127.0.0.1\n\
         listen_port = {listen}\nunix_socket_dir =\nauth_type = plain\nauth_file = {users}\n\
         pool_mode = {pool_mode}\ndefault_pool_size = 4\nmax_client_conn = 200\n\
         ignore_startup_parameters = extra_float_digits, options\nlogfile = {log}\n{}\n",
        settings.join("\n"),
        users = users.display(),
        log = log.display(),
    );
    let ini = dir.path().join("pgbouncer.ini");
    let written = std::fs::write(&users, format!("\"{user}\" \"{password}\"\n"))
        .and_then(|()| std::fs::write(&ini, config))
        .and_then(|()| std::fs::File::create(&log).map(drop));
    written.map_err(|e| ProvisionError(format!("pgbouncer's files: {e}")))?;
    let mut command = Command::new(&binary);
    // PgBouncer refuses to run as root; from root it runs as `nobody`, which must read its
    // files.
    if is_root() {
        use std::os::unix::fs::PermissionsExt;
        for (path, mode) in [
            (dir.path(), 0o755),
            (&*users, 0o644),
            (&*ini, 0o644),
            (&*log, 0o666),
        ] {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
                .map_err(|e| ProvisionError(format!("pgbouncer's files: {e}")))?;
        }
        command.args(["-u", "nobody"]);
    }
    let child = command
        .arg(&ini)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| ProvisionError(format!("cannot start {}: {e}", binary.display())))?;
    let mut bouncer = PgBouncer {
        address: format!("127.0.0.1:{listen}"),
        child,
        dir,
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if tokio::net::TcpStream::connect(&bouncer.address)
            .await
            .is_ok()
        {
            return Ok(bouncer);
        }
        if let Ok(Some(status)) = bouncer.child.try_wait() {
            return Err(ProvisionError(format!(
                "pgbouncer exited ({status}): {}",
                bouncer.log()
            )));
        }
        if Instant::now() > deadline {
            return Err(ProvisionError(format!(
                "pgbouncer does not listen on {} after 10 s: {}",
                bouncer.address,
                bouncer.log()
            )));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Whether this process runs as root (`/proc/self/status`'s real uid is 0).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_gives_its_credentials_and_authority() {
        assert_eq!(
            parts("postgres://postgres:leaftest@127.0.0.1:5432/db?x=1"),
            Some(("postgres", "leaftest", "127.0.0.1:5432"))
        );
        assert_eq!(parts("postgres://127.0.0.1:5432"), None);
    }
}
