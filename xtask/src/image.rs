//! `cargo xtask image [--features F] [--tag T]`: the `leaf-server` container image, built where
//! no registry can be reached the way `cargo xtask testbed` builds the servers' images (a
//! `debootstrap --variant=minbase` root from this machine's apt sources, the release binary
//! built here, `docker import`), with what the root `Dockerfile` declares: the user, the
//! working directory and volume, the port, the health check, the entrypoint and the stop
//! signal. Tagged `leaf-server:local` unless `--tag` says otherwise.

use std::fs;
use std::os::unix::fs::{PermissionsExt, chown};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::testbed::{chroot_run, debian_root, import};

/// The image's default name, as the cluster test and the compose recipe expect it.
pub(crate) const IMAGE: &str = "leaf-server:local";
/// Every backend (leaf-server's feature `all-backends`), as the `Dockerfile`'s `FEATURES` default.
pub(crate) const FEATURES: &str = "all-backends";
/// The unprivileged user the server runs as, as in the `Dockerfile`.
const UID: u32 = 10001;

/// The Dockerfile instructions of the runtime stage that `docker import --change` applies.
const IMPORT_CHANGES: &[&str] = &[
    "USER leaf",
    "WORKDIR /var/lib/leaf",
    "VOLUME [\"/var/lib/leaf\"]",
    "EXPOSE 8080",
    "ENTRYPOINT [\"/usr/local/bin/leaf-server\"]",
    "LABEL org.opencontainers.image.title=leaf-server",
];

/// The runtime stage's instructions `docker import` refuses: applied by a `docker build` of
/// one layer on the imported image (local, so nothing is pulled).
const BUILD_CHANGES: &[&str] = &[
    "STOPSIGNAL SIGTERM",
    "HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
     CMD [\"/usr/local/bin/leaf-server\", \"probe\"]",
];

#[cfg(test)]
fn changes() -> Vec<String> {
    IMPORT_CHANGES
        .iter()
        .chain(BUILD_CHANGES)
        .map(|c| c.to_string())
        .collect()
}

/// `cargo xtask image`.
pub(crate) fn run(root: &Path, args: &[String]) -> Result<()> {
    let mut features = FEATURES.to_owned();
    let mut tag = IMAGE.to_owned();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--features" => features = args.next().context("--features needs a list")?.clone(),
            "--tag" => tag = args.next().context("--tag needs an image name")?.clone(),
            other => {
                bail!("unknown argument {other:?} (cargo xtask image [--features F] [--tag T])")
            }
        }
    }
    let started = Instant::now();
    crate::cargo(
        root,
        "release build",
        &[
            "build",
            "--release",
            "--locked",
            "-p",
            "leaf-server",
            "--features",
            &features,
        ],
    )?;
    let binary = root.join("target/release/leaf-server");
    from_binary(root, &binary, &tag)?;
    eprintln!(
        "xtask image: == {tag} (features {features}) built in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    println!("xtask image: built {tag}; run it with: docker run --rm -p 8080:8080 {tag}");
    Ok(())
}

/// The image `tag` around the leaf-server `binary` (`cargo xtask ci`'s cluster test takes the
/// debug binary of every feature its test build made, rather than a release build).
pub(crate) fn from_binary(root: &Path, binary: &Path, tag: &str) -> Result<()> {
    let rootfs = debian_root(root, "leaf-server", &[])?;
    chroot_run(
        &rootfs,
        &[
            "useradd",
            "--system",
            "--uid",
            &UID.to_string(),
            "--user-group",
            "--home-dir",
            "/var/lib/leaf",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
            "leaf",
        ],
        "useradd leaf",
    )?;
    for dir in ["var/lib/leaf", "etc/leaf"] {
        fs::create_dir_all(rootfs.join(dir)).with_context(|| format!("cannot create /{dir}"))?;
    }
    chown(rootfs.join("var/lib/leaf"), Some(UID), Some(UID)).context("chown /var/lib/leaf")?;
    // What a server needs nothing of: documentation, manuals, translations.
    for dir in [
        "usr/share/doc",
        "usr/share/man",
        "usr/share/locale",
        "usr/share/info",
    ] {
        let path = rootfs.join(dir);
        if path.exists() {
            fs::remove_dir_all(&path).with_context(|| format!("cannot remove /{dir}"))?;
        }
    }
    let target = rootfs.join("usr/local/bin/leaf-server");
    fs::copy(binary, &target).with_context(|| format!("cannot copy {}", binary.display()))?;
    fs::set_permissions(&target, fs::Permissions::from_mode(0o755))?;
    let imported: Vec<String> = IMPORT_CHANGES.iter().map(|c| c.to_string()).collect();
    import(&rootfs, tag, &imported)?;
    let dockerfile = format!("FROM {tag}\n{}\n", BUILD_CHANGES.join("\n"));
    let context = root.join("target/testbed/leaf-server-context");
    fs::create_dir_all(&context)?;
    fs::write(context.join("Dockerfile"), dockerfile)?;
    let status = Command::new("docker")
        .args(["build", "--quiet", "--tag", tag])
        .arg(&context)
        .stdout(Stdio::null())
        .status()
        .context("cannot run docker build")?;
    if !status.success() {
        bail!("docker build of the health check and stop signal on {tag} failed ({status})");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The imported image and the `Dockerfile` declare the same runtime.
    #[test]
    fn the_changes_are_the_dockerfiles_runtime_instructions() {
        let dockerfile =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../Dockerfile"))
                .expect("the Dockerfile at the workspace root");
        let runtime = dockerfile
            .rsplit_once("\nFROM ")
            .expect("a runtime stage")
            .1
            .replace("\\\n", " ");
        let runtime: Vec<String> = runtime
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect();
        for change in changes() {
            if change.starts_with("LABEL") {
                continue;
            }
            let want = change.split_whitespace().collect::<Vec<_>>().join(" ");
            assert!(
                runtime.contains(&want),
                "the Dockerfile's runtime stage lacks {want:?}"
            );
        }
        assert!(
            dockerfile.contains(&format!("ARG FEATURES={FEATURES}")),
            "the Dockerfile's FEATURES default is {FEATURES}"
        );
        assert!(dockerfile.contains(&format!("--uid {UID}")));
    }

    /// "Every backend compiled in" stays true when a backend is added: each backend feature
    /// of `leaf-server` beyond the default ones is in its feature `all-backends`.
    #[test]
    fn every_backend_feature_of_the_server_is_in_the_image() {
        let manifest = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates/leaf-server/Cargo.toml"),
        )
        .expect("leaf-server's manifest");
        let features = &manifest[manifest.find("[features]").expect("a [features] table")..];
        let features = &features[..features.find("\n[").unwrap_or(features.len())];
        let line = |name: &str| {
            let start = format!("{name} = ");
            let found = features.lines().find(|l| l.starts_with(&start));
            found.unwrap_or_else(|| panic!("leaf-server has no feature {name}"))
        };
        let (default, image) = (line("default"), line(FEATURES));
        let mut backends = 0;
        for line in features
            .lines()
            .filter(|l| l.contains("dep:leaf-registry-"))
        {
            let name = line.split(" = ").next().unwrap().trim().trim_matches('"');
            if default.contains(&format!("\"{name}\"")) {
                continue;
            }
            backends += 1;
            assert!(
                image.contains(&format!("\"{name}\"")),
                "the image lacks the backend feature {name}"
            );
        }
        assert!(backends >= 6, "{backends} backend features found");
    }
}
