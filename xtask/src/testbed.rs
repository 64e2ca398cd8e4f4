//! `cargo xtask testbed`: builds the container images of the real-server tests locally, from
//! Debian packages, for machines that cannot pull images from a registry.
//!
//! Each image is a minimal Debian root (`debootstrap --variant=minbase`) from the mirror in this
//! machine's own apt configuration (read at run time, never written into the repository), the
//! servers installed into it with `apt-get`, an entrypoint script written into it, and
//! `docker import` with the entrypoint set through `--change`. Another server is one more entry
//! of [`IMAGES`]: its packages, its entrypoint script, its port and the variable that names it.

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};

/// One locally built image.
pub(crate) struct ImageSpec {
    /// The backend it serves, as named by `cargo xtask conformance --backend`.
    pub(crate) backend: &'static str,
    /// The local image name (`repository:tag`).
    pub(crate) image: &'static str,
    /// The variable the tests read the image from (`leaf-testkit`'s provisioning).
    pub(crate) image_var: &'static str,
    /// Debian packages installed into the root.
    pub(crate) packages: &'static [&'static str],
    /// The entrypoint script's path inside the image, and the script.
    pub(crate) entrypoint: (&'static str, &'static str),
    /// The server's port, declared with `EXPOSE`.
    pub(crate) port: u16,
}

/// MariaDB as the official `mariadb` image behaves for the tests: the data directory is
/// initialised on first start, `MARIADB_ROOT_PASSWORD` sets the password of `root@'%'`, and
/// the server logs "ready for connections ... port: 3306" once it accepts clients. A restarted
/// container keeps its data directory and skips the initialisation.
const MARIADB_ENTRYPOINT: &str = r#"#!/bin/sh
set -eu
datadir=/var/lib/mysql
mkdir -p /run/mysqld "$datadir"
chown mysql:mysql /run/mysqld "$datadir"
# Debian's post-install leaves a data directory without the root password: start afresh once.
if [ ! -f "$datadir/.leaf-testbed" ]; then
    echo "leaf-testbed: initialising $datadir" >&2
    find "$datadir" -mindepth 1 -delete
    mariadb-install-db --user=mysql --datadir="$datadir" --skip-test-db \
        --auth-root-authentication-method=socket >/dev/null
    password=$(printf '%s' "${MARIADB_ROOT_PASSWORD:-}" | sed "s/\\\\/\\\\\\\\/g; s/'/\\\\'/g")
    mariadbd --user=mysql --datadir="$datadir" --bootstrap --skip-networking <<SQL
FLUSH PRIVILEGES;
CREATE USER 'root'@'%' IDENTIFIED BY '$password';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'%' WITH GRANT OPTION;
FLUSH PRIVILEGES;
SQL
    touch "$datadir/.leaf-testbed"
fi
exec mariadbd --user=mysql --datadir="$datadir" --bind-address=0.0.0.0 --port=3306 \
    --skip-name-resolve "$@"
"#;

/// ZooKeeper as the official `zookeeper` image behaves for the tests: on first start the
/// entrypoint writes `/conf/zoo.cfg` from the same variables (`ZOO_SERVERS`, `ZOO_MY_ID`,
/// `ZOO_4LW_COMMANDS_WHITELIST`, `ZOO_STANDALONE_ENABLED`, `ZOO_CFG_EXTRA`, `ZOO_TICK_TIME`,
/// ...) and `/data/myid`; a restarted container keeps both, and its data. The server logs to
/// the console, so that the container's log shows it (Debian's script logs to a file). The JVM
/// is held small and on the quick-starting compiler (`SERVER_JVMFLAGS` replaces that): test
/// servers start often and serve little.
const ZOOKEEPER_ENTRYPOINT: &str = r#"#!/bin/sh
set -eu
conf=/conf/zoo.cfg
data=${ZOO_DATA_DIR:-/data}
datalog=${ZOO_DATA_LOG_DIR:-/datalog}
mkdir -p /conf "$data" "$datalog"
if [ ! -f "$conf" ]; then
    {
        echo "dataDir=$data"
        echo "dataLogDir=$datalog"
        echo "tickTime=${ZOO_TICK_TIME:-2000}"
        echo "initLimit=${ZOO_INIT_LIMIT:-5}"
        echo "syncLimit=${ZOO_SYNC_LIMIT:-2}"
        echo "maxClientCnxns=${ZOO_MAX_CLIENT_CNXNS:-60}"
        echo "standaloneEnabled=${ZOO_STANDALONE_ENABLED:-true}"
        echo "admin.enableServer=false"
        for server in ${ZOO_SERVERS:-server.1=localhost:2888:3888;2181}; do
            echo "$server"
        done
        if [ -n "${ZOO_4LW_COMMANDS_WHITELIST:-}" ]; then
            echo "4lw.commands.whitelist=$ZOO_4LW_COMMANDS_WHITELIST"
        fi
        for entry in ${ZOO_CFG_EXTRA:-}; do
            echo "$entry"
        done
    } >"$conf"
fi
if [ ! -f "$data/myid" ]; then
    echo "${ZOO_MY_ID:-1}" >"$data/myid"
fi
# What `zkServer.sh start-foreground` runs, with slf4j's log4j binding and log4j on the class
# path: Debian's leaves them out, and the server then logs nothing at all.
java=/usr/share/java
exec java ${SERVER_JVMFLAGS:--Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1} \
    -Dzookeeper.root.logger=INFO,CONSOLE -Dzookeeper.log.dir=/var/log/zookeeper \
    -cp "/etc/zookeeper/conf:$java/zookeeper.jar:$java/slf4j-log4j12.jar:$java/log4j-1.2.jar" \
    org.apache.zookeeper.server.quorum.QuorumPeerMain "$conf"
"#;

/// Redis as the tests want it: every write fsynced before its answer (`appendonly yes`,
/// `appendfsync always`), data in `/data`, reachable from the host. `REDIS_APPENDONLY` and
/// `REDIS_APPENDFSYNC` override the two settings, and arguments are passed on to `redis-server`
/// after these (a later option wins), so a test can start a Redis with weaker durability. The
/// official `redis` image takes the same arguments.
const REDIS_ENTRYPOINT: &str = r#"#!/bin/sh
set -eu
mkdir -p /data
# A leading "redis-server" (the official image's command form) is dropped; the other
# arguments follow the defaults, so they win.
if [ "${1:-}" = "redis-server" ]; then
    shift
fi
exec redis-server --bind 0.0.0.0 --protected-mode no --port 6379 --dir /data \
    --appendonly "${REDIS_APPENDONLY:-yes}" --appendfsync "${REDIS_APPENDFSYNC:-always}" "$@"
"#;

/// etcd (Debian's `etcd-server`, 3.4, v3 API) configured as the official image is, through
/// etcd's own `ETCD_*` variables: data in `/data`, clients on `0.0.0.0:2379` advertised as
/// `http://127.0.0.1:2379`, the structured (`zap`) logger; peers on etcd's default, a
/// one-member cluster on `localhost:2380`. A variable set on the container wins (a cluster
/// member sets its name, its peer URLs and the initial cluster); arguments are passed on to
/// `etcd`.
const ETCD_ENTRYPOINT: &str = r#"#!/bin/sh
set -eu
export ETCD_DATA_DIR="${ETCD_DATA_DIR:-/data}"
export ETCD_LISTEN_CLIENT_URLS="${ETCD_LISTEN_CLIENT_URLS:-http://0.0.0.0:2379}"
export ETCD_ADVERTISE_CLIENT_URLS="${ETCD_ADVERTISE_CLIENT_URLS:-http://127.0.0.1:2379}"
export ETCD_LOGGER="${ETCD_LOGGER:-zap}"
mkdir -p "$ETCD_DATA_DIR"
chmod 700 "$ETCD_DATA_DIR"
if [ "${1:-}" = "etcd" ]; then
    shift
fi
exec etcd "$@"
"#;

/// The images `cargo xtask testbed` builds. ZooKeeper is Java (`proc` is mounted for its
/// post-install).
pub(crate) const IMAGES: &[ImageSpec] = &[
    ImageSpec {
        backend: "mysql",
        image: "leaf-testbed/mariadb:local",
        image_var: "LEAFTEST_MYSQL_IMAGE",
        packages: &["mariadb-server"],
        entrypoint: ("/usr/local/bin/leaf-testbed-mariadb", MARIADB_ENTRYPOINT),
        port: 3306,
    },
    ImageSpec {
        backend: "zk",
        image: "leaf-testbed/zookeeper:local",
        image_var: "LEAFTEST_ZK_IMAGE",
        packages: &["zookeeper"],
        entrypoint: (
            "/usr/local/bin/leaf-testbed-zookeeper",
            ZOOKEEPER_ENTRYPOINT,
        ),
        port: 2181,
    },
    ImageSpec {
        backend: "redis",
        image: "leaf-testbed/redis:local",
        image_var: "LEAFTEST_REDIS_IMAGE",
        packages: &["redis-server"],
        entrypoint: ("/usr/local/bin/leaf-testbed-redis", REDIS_ENTRYPOINT),
        port: 6379,
    },
    ImageSpec {
        backend: "etcd",
        image: "leaf-testbed/etcd:local",
        image_var: "LEAFTEST_ETCD_IMAGE",
        packages: &["etcd-server"],
        entrypoint: ("/usr/local/bin/leaf-testbed-etcd", ETCD_ENTRYPOINT),
        port: 2379,
    },
];

/// `cargo xtask testbed [--force] [BACKEND...]`.
pub(crate) fn run(root: &Path, args: &[String]) -> Result<()> {
    let force = args.iter().any(|a| a == "--force");
    let wanted: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| !a.starts_with("--"))
        .collect();
    for name in &wanted {
        if !IMAGES.iter().any(|i| i.backend == *name) {
            bail!(
                "no testbed image for backend {name:?}; known: {}",
                IMAGES
                    .iter()
                    .map(|i| i.backend)
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
    for spec in IMAGES
        .iter()
        .filter(|i| wanted.is_empty() || wanted.contains(&i.backend))
    {
        if !force && image_exists(spec.image)? {
            println!(
                "xtask testbed: {} exists (--force rebuilds it); use {}={}",
                spec.image, spec.image_var, spec.image
            );
            continue;
        }
        build(root, spec)?;
        println!(
            "xtask testbed: built {}; use {}={}",
            spec.image, spec.image_var, spec.image
        );
    }
    Ok(())
}

/// Whether the local Docker has `image`.
pub(crate) fn image_exists(image: &str) -> Result<bool> {
    let status = Command::new("docker")
        .args(["image", "inspect", image])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .context("cannot run docker: is Docker installed?")?;
    Ok(status.success())
}

/// Why this machine cannot build images, if it cannot.
pub(crate) fn cannot_build() -> Option<String> {
    if !is_root() {
        return Some(
            "building a Debian root needs root (debootstrap, chroot, mount): \
             run `sudo cargo xtask testbed`"
                .into(),
        );
    }
    if let Err(e) = Mirror::from_host() {
        return Some(format!("{e:#}"));
    }
    None
}

/// Builds one image.
pub(crate) fn build(root: &Path, spec: &ImageSpec) -> Result<()> {
    if let Some(why) = cannot_build() {
        bail!("cannot build {}: {why}", spec.image);
    }
    ensure_debootstrap()?;
    let mirror = Mirror::from_host()?;
    let started = Instant::now();
    let work = root.join("target/testbed");
    let rootfs = work.join(spec.backend);
    fs::create_dir_all(&work).with_context(|| format!("cannot create {}", work.display()))?;
    remove_root(&rootfs)?;
    eprintln!(
        "xtask testbed: == debootstrap {} into {} (from the host's apt sources)",
        mirror.suite,
        rootfs.display()
    );
    let mut debootstrap = Command::new("debootstrap");
    debootstrap.args(["--variant=minbase"]);
    if let Some(keyring) = &mirror.keyring {
        debootstrap.arg(format!("--keyring={keyring}"));
    }
    debootstrap.arg(&mirror.suite).arg(&rootfs).arg(&mirror.uri);
    run_cmd(&mut debootstrap, "debootstrap")?;

    {
        // Java's post-install (ZooKeeper) reads /proc; the guard unmounts it whatever happens.
        let _proc = ProcMount::mount(&rootfs)?;
        // No service may start inside the build root.
        write_file(
            &rootfs.join("usr/sbin/policy-rc.d"),
            "#!/bin/sh\nexit 101\n",
            0o755,
        )?;
        if Path::new("/etc/resolv.conf").exists() {
            fs::copy("/etc/resolv.conf", rootfs.join("etc/resolv.conf"))
                .context("cannot copy /etc/resolv.conf into the root")?;
        }
        eprintln!(
            "xtask testbed: == apt-get install {}",
            spec.packages.join(" ")
        );
        run_cmd(
            chroot(&rootfs).args(["apt-get", "update", "-qq"]),
            "apt-get update",
        )?;
        run_cmd(
            chroot(&rootfs)
                .args(["apt-get", "install", "-y", "-qq", "--no-install-recommends"])
                .args(spec.packages),
            "apt-get install",
        )?;
        run_cmd(chroot(&rootfs).args(["apt-get", "clean"]), "apt-get clean")?;
    }
    let (path, script) = spec.entrypoint;
    write_file(&rootfs.join(path.trim_start_matches('/')), script, 0o755)?;
    fs::remove_file(rootfs.join("usr/sbin/policy-rc.d")).ok();
    remove_dir_contents(&rootfs.join("var/lib/apt/lists"))?;

    eprintln!("xtask testbed: == docker import {}", spec.image);
    let mut tar = Command::new("tar")
        .args(["--numeric-owner", "-C"])
        .arg(&rootfs)
        .args(["-c", "."])
        .stdout(Stdio::piped())
        .spawn()
        .context("cannot run tar")?;
    let tar_out = tar.stdout.take().context("tar has no stdout")?;
    let status = Command::new("docker")
        .args(["import"])
        .args(["--change", &format!("ENTRYPOINT [\"{path}\"]")])
        .args(["--change", &format!("EXPOSE {}", spec.port)])
        .args([
            "--change",
            &format!("LABEL org.leaf-rs.testbed={}", spec.backend),
        ])
        .args(["-", spec.image])
        .stdin(tar_out)
        .stdout(Stdio::null())
        .status()
        .context("cannot run docker import")?;
    let tar_status = tar.wait().context("tar")?;
    if !tar_status.success() || !status.success() {
        bail!(
            "docker import of {} failed (tar {tar_status}, import {status})",
            spec.image
        );
    }
    remove_root(&rootfs)?;
    eprintln!(
        "xtask testbed: == {} built in {:.0} s",
        spec.image,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The Debian mirror of the host's apt configuration.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Mirror {
    pub(crate) uri: String,
    pub(crate) suite: String,
    pub(crate) keyring: Option<String>,
}

impl Mirror {
    /// Reads `/etc/apt/sources.list.d/*.sources` (deb822) and `/etc/apt/sources.list`, and
    /// picks the entry of the host's release (`VERSION_CODENAME`).
    fn from_host() -> Result<Self> {
        let os = fs::read_to_string("/etc/os-release").unwrap_or_default();
        let codename = os
            .lines()
            .find_map(|l| l.strip_prefix("VERSION_CODENAME="))
            .map(|v| v.trim_matches('"').to_string())
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| "bookworm".into());
        let mut texts = Vec::new();
        if let Ok(dir) = fs::read_dir("/etc/apt/sources.list.d") {
            let mut paths: Vec<PathBuf> = dir.filter_map(|e| e.ok().map(|e| e.path())).collect();
            paths.sort();
            for p in paths {
                if p.extension().is_some_and(|e| e == "sources") {
                    texts.push((true, fs::read_to_string(&p).unwrap_or_default()));
                } else if p.extension().is_some_and(|e| e == "list") {
                    texts.push((false, fs::read_to_string(&p).unwrap_or_default()));
                }
            }
        }
        if let Ok(t) = fs::read_to_string("/etc/apt/sources.list") {
            texts.push((false, t));
        }
        texts
            .iter()
            .find_map(|(deb822, t)| {
                if *deb822 {
                    parse_deb822(t, &codename)
                } else {
                    parse_one_line(t, &codename)
                }
            })
            .with_context(|| {
                format!(
                    "no `deb` source for {codename} in /etc/apt/sources.list.d/*.sources or \
                     /etc/apt/sources.list; add the Debian mirror there"
                )
            })
    }
}

/// The first deb822 stanza of type `deb` that lists `suite`.
fn parse_deb822(text: &str, suite: &str) -> Option<Mirror> {
    for stanza in text.split("\n\n") {
        let field = |name: &str| {
            stanza.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim().eq_ignore_ascii_case(name)).then(|| v.trim().to_string())
            })
        };
        let enabled = field("Enabled").is_none_or(|v| v != "no");
        let is_deb = field("Types").is_some_and(|t| t.split_whitespace().any(|t| t == "deb"));
        let has_suite = field("Suites").is_some_and(|s| s.split_whitespace().any(|s| s == suite));
        if enabled && is_deb && has_suite {
            let uri = field("URIs")?.split_whitespace().next()?.to_string();
            return Some(Mirror {
                uri,
                suite: suite.to_string(),
                keyring: field("Signed-By").filter(|k| k.starts_with('/')),
            });
        }
    }
    None
}

/// The first one-line `deb URI SUITE ...` entry for `suite`.
fn parse_one_line(text: &str, suite: &str) -> Option<Mirror> {
    text.lines().find_map(|l| {
        let mut words = l.split_whitespace();
        if words.next()? != "deb" {
            return None;
        }
        let mut uri = words.next()?;
        let mut keyring = None;
        if uri.starts_with('[') {
            // Options: `[signed-by=/path arch=amd64]`.
            let mut opts = vec![uri];
            while !opts.last()?.ends_with(']') {
                opts.push(words.next()?);
            }
            keyring = opts
                .iter()
                .find_map(|o| o.trim_matches(['[', ']']).strip_prefix("signed-by="))
                .map(str::to_string);
            uri = words.next()?;
        }
        (words.next()? == suite).then(|| Mirror {
            uri: uri.to_string(),
            suite: suite.to_string(),
            keyring,
        })
    })
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn ensure_debootstrap() -> Result<()> {
    let present = Command::new("sh")
        .args(["-c", "command -v debootstrap"])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !present {
        eprintln!("xtask testbed: == apt-get update, apt-get install debootstrap");
        // A fresh machine's package lists may be missing or stale.
        run_cmd(
            Command::new("apt-get").args(["update", "-qq"]),
            "apt-get update",
        )?;
        run_cmd(
            Command::new("apt-get")
                .env("DEBIAN_FRONTEND", "noninteractive")
                .args(["install", "-y", "-qq", "debootstrap"]),
            "apt-get install debootstrap",
        )?;
    }
    Ok(())
}

fn chroot(rootfs: &Path) -> Command {
    let mut c = Command::new("chroot");
    c.arg(rootfs)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .env("LC_ALL", "C");
    c
}

fn run_cmd(cmd: &mut Command, what: &str) -> Result<()> {
    let status = cmd.status().with_context(|| format!("cannot run {what}"))?;
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    Ok(())
}

fn write_file(path: &Path, text: &str, mode: u32) -> Result<()> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let mut f =
        fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    f.write_all(text.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .with_context(|| format!("cannot chmod {}", path.display()))
}

fn remove_dir_contents(dir: &Path) -> Result<()> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Ok(());
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            fs::remove_dir_all(&p).ok();
        } else {
            fs::remove_file(&p).ok();
        }
    }
    Ok(())
}

/// Removes a build root, refusing while something is still mounted in it.
fn remove_root(rootfs: &Path) -> Result<()> {
    if !rootfs.exists() {
        return Ok(());
    }
    let mounts = fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let prefix = rootfs.to_string_lossy();
    if mounts
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .any(|m| m.starts_with(&*prefix))
    {
        bail!("{} still has mounts; unmount them first", rootfs.display());
    }
    fs::remove_dir_all(rootfs).with_context(|| format!("cannot remove {}", rootfs.display()))
}

/// `proc` mounted in a build root while the guard lives.
struct ProcMount(PathBuf);

impl ProcMount {
    fn mount(rootfs: &Path) -> Result<Self> {
        let target = rootfs.join("proc");
        fs::create_dir_all(&target)?;
        run_cmd(
            Command::new("mount")
                .args(["-t", "proc", "proc"])
                .arg(&target),
            "mount proc",
        )?;
        Ok(ProcMount(target))
    }
}

impl Drop for ProcMount {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.0)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("xtask testbed: cannot unmount {}", self.0.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deb822_picks_the_release_stanza() {
        let text = "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n\
                    Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n\
                    Types: deb\nURIs: http://mirror.example/debian-security\n\
                    Suites: bookworm-security\nComponents: main\n";
        assert_eq!(
            parse_deb822(text, "bookworm"),
            Some(Mirror {
                uri: "http://mirror.example/debian".into(),
                suite: "bookworm".into(),
                keyring: Some("/usr/share/keyrings/debian-archive-keyring.gpg".into()),
            })
        );
        assert_eq!(parse_deb822(text, "trixie"), None);
        let disabled = "Enabled: no\nTypes: deb\nURIs: http://m/debian\nSuites: bookworm\n";
        assert_eq!(parse_deb822(disabled, "bookworm"), None);
    }

    #[test]
    fn one_line_sources_with_and_without_options() {
        let check = |text: &str, expect: Option<(&str, Option<&str>)>| {
            let got = parse_one_line(text, "bookworm");
            assert_eq!(
                got.as_ref().map(|m| (m.uri.as_str(), m.keyring.as_deref())),
                expect,
                "{text}"
            );
        };
        check(
            "deb http://m/debian bookworm main",
            Some(("http://m/debian", None)),
        );
        check(
            "# c\ndeb-src http://s/debian bookworm main\ndeb [arch=amd64 signed-by=/k.gpg] http://m/debian bookworm main",
            Some(("http://m/debian", Some("/k.gpg"))),
        );
        check("deb http://m/debian bookworm-updates main", None);
    }
}
