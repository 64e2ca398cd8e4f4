//! `cargo xtask conformance [--backend NAME]`: runs every compiled backend crate's tests (the
//! conformance suite and the backend's own real-server tests) against provisioned servers.
//!
//! A backend without a server (`sqlite`, `local`) just runs. A backend with one gets it from
//! `leaf-testkit`'s provisioning: the server named by its `LEAFTEST_*_URL` variable if set,
//! else a container of the image named by its `LEAFTEST_*_IMAGE` variable, which this command
//! sets to the locally built testbed image (building it first when it is missing).

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::backends::{self, Run};
use crate::testbed;

/// One run of the suite: a backend's name, the variable naming its running server (if it has
/// one), and one of its runs.
#[derive(Clone, Copy)]
pub(crate) struct Step {
    /// The name for `--backend`.
    name: &'static str,
    /// The variable naming an already running server, for backends with one.
    url_var: Option<&'static str>,
    run: Run,
}

/// Every run, from [`backends::BACKENDS`], then the cluster's; a run fails when its crate (or
/// feature) is missing from the workspace.
fn steps() -> Vec<Step> {
    let runs = backends::BACKENDS.iter().flat_map(|b| {
        b.runs.iter().map(|run| Step {
            name: b.name,
            url_var: b.server.as_ref().map(|s| s.url_var),
            run: *run,
        })
    });
    let cluster = Step {
        name: "cluster",
        url_var: None,
        run: backends::CLUSTER,
    };
    runs.chain(std::iter::once(cluster)).collect()
}

/// Whether `b`'s crate is in the workspace and declares the features its run needs.
fn available(root: &Path, b: &Step) -> bool {
    let manifest = root.join("crates").join(b.run.package).join("Cargo.toml");
    let Ok(text) = std::fs::read_to_string(manifest) else {
        return false;
    };
    b.run
        .features
        .is_none_or(|f| f.split(',').all(|f| declares_feature(&text, f.trim())))
}

/// Whether the manifest `text` declares `feature` in its `[features]` table.
fn declares_feature(text: &str, feature: &str) -> bool {
    let mut in_features = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_features = line == "[features]";
        } else if in_features
            && let Some((key, _)) = line.split_once('=')
            && key.trim().trim_matches('"') == feature
        {
            return true;
        }
    }
    false
}

/// `cargo xtask conformance [--backend NAME]...`.
pub(crate) fn run(root: &Path, args: &[String]) -> Result<()> {
    run_and_keep_env(root, args).map(drop)
}

/// [`run`], returning the environment that gave the backends their servers, for the other
/// tests of the workspace that use the same servers (`leaf-testkit`'s own, built with
/// `provision` wherever a crate's tests enable it).
pub(crate) fn run_and_keep_env(root: &Path, args: &[String]) -> Result<Vec<(String, String)>> {
    let mut wanted = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--backend" => wanted.push(it.next().context("--backend needs a name")?.clone()),
            other => match other.strip_prefix("--backend=") {
                Some(name) => wanted.push(name.to_string()),
                None => bail!("unknown argument {other:?} (usage: conformance [--backend NAME])"),
            },
        }
    }
    let steps = steps();
    for w in &wanted {
        if !steps.iter().any(|b| b.name == w) {
            let mut known: Vec<&str> = steps.iter().map(|b| b.name).collect();
            known.dedup();
            bail!("unknown backend {w:?}; known: {}", known.join(", "));
        }
    }
    let selected: Vec<&Step> = steps
        .iter()
        .filter(|b| wanted.is_empty() || wanted.iter().any(|w| w == b.name))
        .collect();
    // A backend of the list whose crate or feature is gone is a broken run, never a skip.
    if let Some(b) = selected.iter().find(|b| !available(root, b)) {
        bail!(
            "{} needs {}{}, which the workspace does not have",
            b.name,
            b.run.package,
            b.run
                .features
                .map(|f| format!(" with {f}"))
                .unwrap_or_default()
        );
    }

    let env = server_env(root, &selected)?;

    // One run per crate, feature set and target.
    let mut runs: Vec<(&str, Option<&str>, Option<&str>)> = selected
        .iter()
        .map(|b| (b.run.package, b.run.features, b.run.test))
        .collect();
    runs.dedup();
    let started = Instant::now();
    let mut failed = Vec::new();
    let mut packages = Vec::new();
    for (package, features, test) in runs {
        let names: Vec<&str> = selected
            .iter()
            .filter(|b| (b.run.package, b.run.features, b.run.test) == (package, features, test))
            .map(|b| b.name)
            .collect();
        let mut args = vec!["test", "-p", package];
        let mut shown = package.to_string();
        if let Some(f) = features {
            args.extend(["--features", f]);
            shown.push_str(&format!(" --features {f}"));
        }
        if let Some(t) = test {
            args.extend(["--test", t]);
            shown.push_str(&format!(" --test {t}"));
        }
        let step = format!("conformance {} ({shown})", names.join(", "));
        if let Err(e) = crate::cargo_with_env(root, &step, &args, &env) {
            eprintln!("xtask conformance: {e:#}");
            failed.push(shown.clone());
        }
        packages.push(shown);
    }
    crate::housekeeping::reap();
    if !failed.is_empty() {
        bail!("conformance failed for {}", failed.join(", "));
    }
    println!(
        "xtask conformance: {} passed in {:.0} s",
        packages.join(", "),
        started.elapsed().as_secs_f64()
    );
    Ok(env)
}

/// The environment that gives `selected` backends their servers: for each server backend
/// whose `LEAFTEST_*_URL` is unset, its `LEAFTEST_*_IMAGE` (the local testbed image, built when
/// missing, unless the caller set the variable). `cargo xtask ci` can run the workspace's tests
/// with it too.
pub(crate) fn server_env(root: &Path, selected: &[&Step]) -> Result<Vec<(String, String)>> {
    let mut env = Vec::new();
    let needs_server = |b: &Step| {
        b.url_var
            .is_some_and(|v| std::env::var_os(v).is_none_or(|u| u.is_empty()))
    };
    if selected.iter().any(|b| needs_server(b)) {
        check_docker()?;
    }
    let cluster = selected.iter().any(|b| b.name == "cluster");
    if cluster {
        check_docker()?;
    }
    let mut done: Vec<&str> = Vec::new();
    if cluster {
        for name in backends::CLUSTER_NEEDS {
            if let Some(b) = backends::find(name) {
                testbed_image(root, b, &mut env)?;
                done.push(name);
            }
        }
        server_image(root, &mut env, None)?;
    }
    for b in selected.iter().filter(|b| needs_server(b)) {
        // Several crates test on one kind of server (the backend crate and the server).
        if done.contains(&b.name) {
            continue;
        }
        done.push(b.name);
        if let Some(backend) = backends::find(b.name) {
            testbed_image(root, backend, &mut env)?;
        }
    }
    Ok(env)
}

/// [`server_env`] for the backends named `names` (those without a server need nothing).
pub(crate) fn server_env_for(root: &Path, names: &[&str]) -> Result<Vec<(String, String)>> {
    let steps = steps();
    let selected: Vec<&Step> = steps.iter().filter(|b| names.contains(&b.name)).collect();
    server_env(root, &selected)
}

/// [`server_env`] for every backend with a server, the cluster's own image left out: `cargo
/// xtask ci` builds that from its test build's server binary.
pub(crate) fn server_env_for_ci(root: &Path) -> Result<Vec<(String, String)>> {
    let steps = steps();
    let selected: Vec<&Step> = steps.iter().filter(|b| b.name != "cluster").collect();
    server_env(root, &selected)
}

/// Picks the image of a server backend: the one the caller named in its variable, else the
/// local testbed image, built when missing (or the reason it cannot be, with what to do).
fn testbed_image(
    root: &Path,
    backend: &backends::BackendRow,
    env: &mut Vec<(String, String)>,
) -> Result<()> {
    let Some(server) = &backend.server else {
        return Ok(());
    };
    if let Ok(image) = std::env::var(server.image_var)
        && !image.is_empty()
    {
        eprintln!(
            "xtask conformance: {} uses {image} ({})",
            backend.name, server.image_var
        );
        return Ok(());
    }
    if !testbed::image_exists(server.image)? {
        if let Some(why) = testbed::cannot_build() {
            bail!(
                "the testbed image {} is missing and cannot be built here: {why}.\n\
                 Build it with `cargo xtask testbed {}` (as root), or set {} to an image \
                 Docker can pull (default of the tests: the official one), or set the backend's \
                 URL variable to a running server",
                server.image,
                backend.name,
                server.image_var
            );
        }
        eprintln!(
            "xtask conformance: building the missing testbed image {}",
            server.image
        );
        testbed::build(root, backend)?;
    }
    env.push((server.image_var.to_string(), server.image.to_string()));
    Ok(())
}

/// The leaf-server image of the cluster test: `LEAFTEST_SERVER_IMAGE` if set, else
/// `leaf-server:local` built now, so that it carries this source: around `binary` if given
/// (`cargo xtask ci`'s test build), else by `cargo xtask image`.
pub(crate) fn server_image(
    root: &Path,
    env: &mut Vec<(String, String)>,
    binary: Option<&Path>,
) -> Result<()> {
    const VAR: &str = backends::SERVER_IMAGE_VAR;
    if let Ok(image) = std::env::var(VAR)
        && !image.is_empty()
    {
        eprintln!("xtask conformance: cluster uses {image} ({VAR})");
        return Ok(());
    }
    if let Some(why) = testbed::cannot_build() {
        bail!(
            "the cluster test needs the image {}, which cannot be built here: {why}.\n\
             Build it with `cargo xtask image` (as root) or `docker build -t {} .`, or set {VAR}",
            crate::image::IMAGE,
            crate::image::IMAGE
        );
    }
    match binary {
        Some(binary) => {
            let started = Instant::now();
            crate::image::from_binary(root, binary, crate::image::IMAGE)?;
            eprintln!(
                "xtask: == image {} around {}: ok in {:.1} s",
                crate::image::IMAGE,
                binary.display(),
                started.elapsed().as_secs_f64()
            );
        }
        None => {
            crate::image::run(root, &[])?;
            if crate::disk::pruning() {
                crate::disk::prune_release(root);
            }
        }
    }
    env.push((VAR.to_string(), crate::image::IMAGE.to_string()));
    Ok(())
}

/// Fails early, with what to do, when Docker cannot be used.
fn check_docker() -> Result<()> {
    let out = Command::new("docker")
        .args(["version", "--format", "{{.Server.APIVersion}}"])
        .output()
        .context(
            "cannot run docker: the server backends need Docker (or their LEAFTEST_*_URL set)",
        )?;
    if !out.status.success() {
        bail!(
            "docker cannot reach its engine: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn features_are_found_in_the_features_table_only() {
        let manifest = "[package]\nname = \"leaf-server\"\n\n[features]\ndefault = []\n\
                        mysql = [\"dep:leaf-registry-mysql\"]\n\"zk-normal\" = [\"dep:x\"]\n\n\
                        [dependencies]\nzk-recycle = \"1\"\n";
        let check = |feature: &str, expect: bool| {
            assert_eq!(declares_feature(manifest, feature), expect, "{feature}");
        };
        check("mysql", true);
        check("zk-normal", true);
        check("zk-recycle", false);
        check("name", false);
        check("my", false);
    }
}
