//! `cargo xtask python`: the gRPC API from Python. A virtual environment of
//! `clients/python/requirements.txt` (pinned; made again when the file changes) under the
//! target directory, then `clients/python/test_leaf_grpc.py` against the debug `leaf-server`
//! binary. `cargo xtask ci` runs it after the Rust tests.
//!
//! The interpreter is `LEAFTEST_PYTHON` if set, else the first of `python3` on `PATH` and
//! Debian's `/usr/bin/python3` that can make a virtual environment with pip: the `python3` on
//! `PATH` may be another installation (pyenv's) or Debian's without `python3-venv` (`.ci/run`
//! installs that). pip reads its index from the machine's own configuration.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

const REQUIREMENTS: &str = "clients/python/requirements.txt";

pub(crate) fn run(root: &Path) -> Result<()> {
    crate::cargo(root, "build leaf-server", &["build", "-p", "leaf-server"])?;
    let binary = crate::bench::target_dir(root).join("debug/leaf-server");
    run_with(root, &binary)
}

/// The test against `binary` (`cargo xtask ci`'s, built with its tests).
pub(crate) fn run_with(root: &Path, binary: &Path) -> Result<()> {
    let venv = crate::bench::target_dir(root).join("leaf-grpc-venv");
    let python = ensure_venv(root, &venv)?;
    eprintln!("xtask: == python client: {} -m unittest", python.display());
    let started = Instant::now();
    let status = Command::new(&python)
        .args(["-m", "unittest", "-v", "test_leaf_grpc"])
        .current_dir(root.join("clients/python"))
        .env("LEAFTEST_SERVER_BIN", binary)
        .status()
        .with_context(|| format!("cannot run {}", python.display()))?;
    eprintln!(
        "xtask: == python client: {} in {:.1} s",
        if status.success() { "ok" } else { "FAILED" },
        started.elapsed().as_secs_f64()
    );
    if !status.success() {
        bail!("the Python client's test failed ({status})");
    }
    Ok(())
}

/// The environment's interpreter, the environment made (or made again) first when it does
/// not hold the requirements as they are now.
fn ensure_venv(root: &Path, venv: &Path) -> Result<PathBuf> {
    let requirements = std::fs::read_to_string(root.join(REQUIREMENTS))
        .with_context(|| format!("cannot read {REQUIREMENTS}"))?;
    let stamp = venv.join("leaf-requirements.txt");
    let python = venv.join("bin/python");
    if python.exists() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(&requirements) {
        return Ok(python);
    }
    if venv.exists() {
        std::fs::remove_dir_all(venv)
            .with_context(|| format!("cannot remove {}", venv.display()))?;
    }
    let mut tried = Vec::new();
    let candidates: Vec<String> = std::env::var("LEAFTEST_PYTHON")
        .map(|p| vec![p])
        .unwrap_or_else(|_| vec!["python3".into(), "/usr/bin/python3".into()]);
    let made = candidates.iter().find(|candidate| {
        let ok = Command::new(candidate)
            .args(["-m", "venv"])
            .arg(venv)
            .output()
            .is_ok_and(|o| o.status.success())
            && Command::new(&python)
                .args(["-m", "pip", "--version"])
                .output()
                .is_ok_and(|o| o.status.success());
        if !ok {
            tried.push(candidate.as_str());
            let _ = std::fs::remove_dir_all(venv);
        }
        ok
    });
    let Some(made_by) = made else {
        bail!(
            "no Python can make a virtual environment with pip (tried {}): install Debian's \
             python3 and python3-venv, or set LEAFTEST_PYTHON",
            tried.join(", ")
        );
    };
    eprintln!(
        "xtask: == python client: virtual environment by {made_by} at {}",
        venv.display()
    );
    let started = Instant::now();
    let status = Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "-r",
        ])
        .arg(root.join(REQUIREMENTS))
        .status()
        .context("cannot run pip")?;
    if !status.success() {
        bail!("pip install -r {REQUIREMENTS} failed ({status})");
    }
    eprintln!(
        "xtask: == python client: requirements installed in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    std::fs::write(&stamp, requirements)?;
    Ok(python)
}
