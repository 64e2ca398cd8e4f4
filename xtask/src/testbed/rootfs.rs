//! The build root: `debootstrap`, commands in the `chroot`, files written into it, `proc`
//! mounted while packages install, and its removal.

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

pub(super) fn ensure_debootstrap() -> Result<()> {
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

pub(super) fn chroot(rootfs: &Path) -> Command {
    let mut c = Command::new("chroot");
    c.arg(rootfs)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .env("LC_ALL", "C");
    c
}

pub(super) fn run_cmd(cmd: &mut Command, what: &str) -> Result<()> {
    let status = cmd.status().with_context(|| format!("cannot run {what}"))?;
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    Ok(())
}

pub(super) fn write_file(path: &Path, text: &str, mode: u32) -> Result<()> {
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

pub(super) fn remove_dir_contents(dir: &Path) -> Result<()> {
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

/// The mount points under `rootfs`, from the kernel's table.
fn mounts_under(rootfs: &Path) -> Vec<String> {
    let mounts = fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let prefix = rootfs.to_string_lossy();
    mounts
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .filter(|m| m.starts_with(&*prefix))
        .map(str::to_owned)
        .collect()
}

/// Refuses while something is mounted in `rootfs`: an archive or a removal would walk into
/// the host's `/proc`.
pub(super) fn check_unmounted(rootfs: &Path) -> Result<()> {
    let mounts = mounts_under(rootfs);
    if !mounts.is_empty() {
        bail!(
            "{} still has mounts ({}); unmount them first",
            rootfs.display(),
            mounts.join(", ")
        );
    }
    Ok(())
}

/// Removes a build root, refusing while something is still mounted in it.
pub(super) fn remove_root(rootfs: &Path) -> Result<()> {
    if !rootfs.exists() {
        return Ok(());
    }
    check_unmounted(rootfs)?;
    fs::remove_dir_all(rootfs).with_context(|| format!("cannot remove {}", rootfs.display()))
}

/// `proc` mounted in a build root while the guard lives.
pub(super) struct ProcMount(PathBuf);

impl ProcMount {
    pub(super) fn mount(rootfs: &Path) -> Result<Self> {
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
        let umount = |lazy: bool| {
            let mut c = Command::new("umount");
            if lazy {
                c.arg("-l");
            }
            c.arg(&self.0)
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        // A process a package's post-install started may still be ending ("target is busy"):
        // give it a few seconds, then detach the mount (it goes once the last user exits).
        for _ in 0..20 {
            if umount(false) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(250));
        }
        if umount(true) {
            eprintln!("xtask testbed: {} was busy; detached it", self.0.display());
        } else {
            eprintln!("xtask testbed: cannot unmount {}", self.0.display());
        }
    }
}
