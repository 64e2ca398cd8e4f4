//! `cargo xtask testbed`: builds the container images of the real-server tests locally, from
//! Debian packages, for machines that cannot pull images from a registry.
//!
//! Each image is a minimal Debian root (`debootstrap --variant=minbase`) from the mirror in this
//! machine's own apt configuration (read at run time, never written into the repository), the
//! servers installed into it with `apt-get`, an entrypoint script written into it, and
//! `docker import` with the entrypoint set through `--change`. Another server is one more
//! [`ImageSpec`] (its packages, its entrypoint script, its port), named by its backend's row in
//! `crate::backends` (its image name and the variable that names it).

mod build;
pub(crate) mod images;
mod mirror;
mod rootfs;

use std::path::Path;

use anyhow::{Result, bail};

pub(crate) use build::{build, cannot_build, chroot_run, debian_root, image_exists, import};

use crate::backends::{BACKENDS, BackendRow, names};

/// `cargo xtask testbed [--force] [BACKEND...]`.
pub(crate) fn run(root: &Path, args: &[String]) -> Result<()> {
    let force = args.iter().any(|a| a == "--force");
    let wanted: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let with_image = |b: &BackendRow| b.server.is_some();
    for name in &wanted {
        if !BACKENDS.iter().any(|b| b.name == *name && with_image(b)) {
            bail!(
                "no testbed image for backend {name:?}; known: {}",
                names(with_image, ", ")
            );
        }
    }
    let selected = BACKENDS
        .iter()
        .filter(|b| wanted.is_empty() || wanted.contains(&b.name));
    for backend in selected {
        let Some(server) = &backend.server else {
            continue;
        };
        if !force && image_exists(server.image)? {
            println!(
                "xtask testbed: {} exists (--force rebuilds it); use {}={}",
                server.image, server.image_var, server.image
            );
            continue;
        }
        build(root, backend)?;
        println!(
            "xtask testbed: built {}; use {}={}",
            server.image, server.image_var, server.image
        );
    }
    Ok(())
}
