//! Building one image (a Debian root, its packages, its entrypoint, `docker import`), whether
//! Docker has it already, and whether this machine can build it.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};

use super::mirror::Mirror;
use super::rootfs::{
    ProcMount, check_unmounted, chroot, ensure_debootstrap, remove_dir_contents, remove_root,
    run_cmd, write_file,
};
use crate::backends::BackendRow;

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

/// Builds the image of `backend`'s server.
pub(crate) fn build(root: &Path, backend: &BackendRow) -> Result<()> {
    let Some(server) = &backend.server else {
        bail!("{} has no server, hence no testbed image", backend.name);
    };
    let (spec, image) = (server.spec, server.image);
    let started = Instant::now();
    let rootfs = debian_root(root, backend.name, spec.packages)?;
    let (path, script) = spec.entrypoint;
    write_file(&rootfs.join(path.trim_start_matches('/')), script, 0o755)?;
    let changes = [
        format!("ENTRYPOINT [\"{path}\"]"),
        format!("EXPOSE {}", spec.port),
        format!("LABEL org.leaf-rs.testbed={}", backend.name),
    ];
    import(&rootfs, image, &changes)?;
    eprintln!(
        "xtask testbed: == {} built in {:.0} s",
        image,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// A minimal Debian root under `target/testbed/{name}` with `packages` installed (none: just
/// `minbase`), from the mirror of this machine's apt sources; no service started, apt's lists
/// removed. The caller adds what is its own, then [`import`]s it.
pub(crate) fn debian_root(root: &Path, name: &str, packages: &[&str]) -> Result<PathBuf> {
    if let Some(why) = cannot_build() {
        bail!("cannot build the {name} image: {why}");
    }
    ensure_debootstrap()?;
    let mirror = Mirror::from_host()?;
    let work = root.join("target/testbed");
    let rootfs = work.join(name);
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

    if !packages.is_empty() {
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
        eprintln!("xtask testbed: == apt-get install {}", packages.join(" "));
        run_cmd(
            chroot(&rootfs).args(["apt-get", "update", "-qq"]),
            "apt-get update",
        )?;
        run_cmd(
            chroot(&rootfs)
                .args(["apt-get", "install", "-y", "-qq", "--no-install-recommends"])
                .args(packages),
            "apt-get install",
        )?;
        run_cmd(chroot(&rootfs).args(["apt-get", "clean"]), "apt-get clean")?;
        fs::remove_file(rootfs.join("usr/sbin/policy-rc.d")).ok();
    }
    remove_dir_contents(&rootfs.join("var/lib/apt/lists"))?;
    Ok(rootfs)
}

/// `docker import`s `rootfs` as `image` with `changes` (Dockerfile instructions), then
/// removes the root.
pub(crate) fn import(rootfs: &Path, image: &str, changes: &[String]) -> Result<()> {
    eprintln!("xtask testbed: == docker import {image}");
    check_unmounted(rootfs)?;
    let mut tar = Command::new("tar")
        .args(["--numeric-owner", "-C"])
        .arg(rootfs)
        .args(["-c", "."])
        .stdout(Stdio::piped())
        .spawn()
        .context("cannot run tar")?;
    let tar_out = tar.stdout.take().context("tar has no stdout")?;
    let mut docker = Command::new("docker");
    docker.arg("import");
    for change in changes {
        docker.args(["--change", change]);
    }
    let status = docker
        .args(["-", image])
        .stdin(tar_out)
        .stdout(Stdio::null())
        .status()
        .context("cannot run docker import")?;
    let tar_status = tar.wait().context("tar")?;
    if !tar_status.success() || !status.success() {
        bail!("docker import of {image} failed (tar {tar_status}, import {status})");
    }
    remove_root(rootfs)
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// Runs `args` inside `rootfs` (no network, no /proc), failing with `what` if it fails.
pub(crate) fn chroot_run(rootfs: &Path, args: &[&str], what: &str) -> Result<()> {
    run_cmd(chroot(rootfs).args(args), what)
}
