//! `cargo xtask testbed`: builds the container images of the real-server tests locally, from
//! Debian packages, for machines that cannot pull images from a registry.
//!
//! Each image is a minimal Debian root (`debootstrap --variant=minbase`) from the mirror in this
//! machine's own apt configuration (read at run time, never written into the repository), the
//! servers installed into it with `apt-get`, an entrypoint script written into it, and
//! `docker import` with the entrypoint set through `--change`. Another server is one more entry
//! of [`IMAGES`]: its packages, its entrypoint script, its port and the variable that names it.

mod build;
mod images;
mod mirror;
mod rootfs;

use std::path::Path;

use anyhow::{Result, bail};

pub(crate) use build::{build, cannot_build, chroot_run, debian_root, image_exists, import};
pub(crate) use images::{IMAGES, ImageSpec};

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
