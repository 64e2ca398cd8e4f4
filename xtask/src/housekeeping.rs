//! What the test runs leave in Docker: `leaf-testkit` labels every container it starts with
//! the test process's id and host (`org.leaf-rs.testkit.pid`, `.host`) and names its networks
//! `leaftest-net-PID-...`; a process-wide shared server outlives its tests (nothing drops a
//! static), so the containers and networks of ended processes are removed here, and `ci` checks
//! at its end that it left none of its own: no container, network or volume that was not there
//! when it began.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use anyhow::{Result, bail};

const LABEL_PID: &str = "org.leaf-rs.testkit.pid";
const NETWORK_PREFIX: &str = "leaftest-net-";

/// The Docker objects that could be a run's: testkit's containers, its networks, and every
/// volume (a container's anonymous volumes outlive it unless removed with it).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Objects {
    containers: BTreeSet<String>,
    networks: BTreeSet<String>,
    volumes: BTreeSet<String>,
}

impl Objects {
    /// What there is now.
    pub(crate) fn now() -> Result<Objects> {
        let label = format!("label={LABEL_PID}");
        let name = format!("name={NETWORK_PREFIX}");
        Ok(Objects {
            containers: lines(&["ps", "-a", "-q", "--no-trunc", "--filter", &label])?,
            networks: lines(&["network", "ls", "-q", "--no-trunc", "--filter", &name])?,
            volumes: lines(&["volume", "ls", "-q"])?,
        })
    }

    /// What is here and was not in `before`, one line each; empty when nothing is.
    pub(crate) fn new_since(&self, before: &Objects) -> Vec<String> {
        let diff = |kind: &str, now: &BTreeSet<String>, then: &BTreeSet<String>| {
            now.difference(then)
                .map(|id| format!("{kind} {id}"))
                .collect::<Vec<_>>()
        };
        let mut left = diff("container", &self.containers, &before.containers);
        left.extend(diff("network", &self.networks, &before.networks));
        left.extend(diff("volume", &self.volumes, &before.volumes));
        left
    }
}

/// The output lines of `docker ARGS`.
fn lines(args: &[&str]) -> Result<BTreeSet<String>> {
    let out = Command::new("docker").args(args).output()?;
    if !out.status.success() {
        bail!(
            "docker {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect())
}

/// Removes the containers (with their anonymous volumes) and the networks `leaf-testkit` made
/// for test processes of this host that have ended.
pub(crate) fn reap() {
    let host = hostname();
    let format = format!(
        "{{{{.ID}}}} {{{{.Label \"{LABEL_PID}\"}}}} {{{{.Label \"org.leaf-rs.testkit.host\"}}}}"
    );
    let label = format!("label={LABEL_PID}");
    let Ok(out) = Command::new("docker")
        .args(["ps", "-a", "--filter", &label, "--format", &format])
        .output()
    else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let mut f = line.split_whitespace();
        let (Some(id), Some(pid), Some(h)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        if h == host && ended(pid) && docker_ok(&["rm", "-f", "-v", id]) {
            eprintln!("xtask: removed test container {id} of ended process {pid}");
        }
    }
    let name = format!("name={NETWORK_PREFIX}");
    let Ok(out) = Command::new("docker")
        .args(["network", "ls", "--filter", &name, "--format", "{{.Name}}"])
        .output()
    else {
        return;
    };
    for network in String::from_utf8_lossy(&out.stdout).lines() {
        let pid = network_pid(network);
        if pid.is_some_and(ended) && docker_ok(&["network", "rm", network]) {
            eprintln!("xtask: removed test network {network}");
        }
    }
}

/// Reaps, then fails naming each container, network or volume that is here and was not in
/// `before` (what the run left behind).
pub(crate) fn check_nothing_left(before: &Objects) -> Result<()> {
    reap();
    let left = Objects::now()?.new_since(before);
    if !left.is_empty() {
        bail!(
            "the run left Docker objects behind (remove them with docker rm -f / network rm / \
             volume rm):\n  {}",
            left.join("\n  ")
        );
    }
    eprintln!("xtask: the run left no container, network or volume behind");
    Ok(())
}

fn docker_ok(args: &[&str]) -> bool {
    Command::new("docker")
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Whether the process `pid` has ended.
fn ended(pid: &str) -> bool {
    !pid.is_empty() && !Path::new("/proc").join(pid).exists()
}

/// The process id in a testkit network's name (`leaftest-net-PID-RANDOM`).
fn network_pid(name: &str) -> Option<&str> {
    let pid = name.strip_prefix(NETWORK_PREFIX)?.split('-').next()?;
    pid.chars().all(|c| c.is_ascii_digit()).then_some(pid)
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_new_is_named_by_kind() {
        let set = |items: &[&str]| items.iter().map(|s| s.to_string()).collect();
        let before = Objects {
            containers: set(&["a"]),
            networks: set(&[]),
            volumes: set(&["v1"]),
        };
        let now = Objects {
            containers: set(&["a", "b"]),
            networks: set(&["n"]),
            volumes: set(&["v1"]),
        };
        assert_eq!(now.new_since(&before), ["container b", "network n"]);
        assert!(before.new_since(&before).is_empty());
    }

    #[test]
    fn network_names_give_their_process() {
        assert_eq!(network_pid("leaftest-net-123-abcd"), Some("123"));
        assert_eq!(network_pid("leaftest-net-x-1"), None);
        assert_eq!(network_pid("bridge"), None);
    }
}
