//! The disk a run takes. `cargo xtask ci` builds every test executable of the workspace at
//! once (`testbins.rs`); `cargo xtask conformance` builds the server with each backend's feature
//! set and a release binary for the cluster's image: gigabytes in one target directory, which
//! filled a CI machine once. Each step's log line says what is left, and with
//! `LEAFTEST_CI_PRUNE=1` (which `.ci/run` sets) what no later step reads is removed as soon as
//! it has run: a test executable, a `cargo test` step's linked executables, and, once the image
//! holds it, the release build.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::SystemTime;

/// The variable that turns pruning on.
pub(crate) const PRUNE_VAR: &str = "LEAFTEST_CI_PRUNE";

/// Whether this run removes what its later steps do not read.
pub(crate) fn pruning() -> bool {
    std::env::var(PRUNE_VAR).is_ok_and(|v| v == "1")
}

/// What is free on the file system of `path`, as `df -h` shows it ("12G"), if `df` answers.
pub(crate) fn free(path: &Path) -> Option<String> {
    let out = Command::new("df")
        .args(["-h", "--output=avail"])
        .arg(path)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines().nth(1).map(|l| l.trim().to_string())
}

/// Removes the executables linked into `target/debug/deps` since `since` (test binaries and
/// the server's binary of one feature set; proc-macro libraries and rlibs are kept, as they
/// are what the next step reuses). Returns the bytes removed.
pub(crate) fn prune_linked(root: &Path, since: SystemTime) -> u64 {
    let Ok(entries) = std::fs::read_dir(root.join("target/debug/deps")) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Ok(meta) = entry.metadata() else { continue };
        if is_linked_executable(&name.to_string_lossy(), &meta, since)
            && std::fs::remove_file(entry.path()).is_ok()
        {
            removed += meta.len();
        }
    }
    removed
}

/// Whether a file of `target/debug/deps` is an executable cargo linked since `since`: a
/// regular file with an execute bit and no extension (libraries end in `.rlib`, `.so`, `.d`).
fn is_linked_executable(name: &str, meta: &std::fs::Metadata, since: SystemTime) -> bool {
    meta.is_file()
        && !name.contains('.')
        && meta.permissions().mode() & 0o111 != 0
        && meta.modified().is_ok_and(|m| m >= since)
}

/// Removes the release build (`target/release`), once the image holds its binary.
pub(crate) fn prune_release(root: &Path) {
    let dir = root.join("target/release");
    match std::fs::remove_dir_all(&dir) {
        Ok(()) => eprintln!(
            "xtask: removed {} (the image holds the binary; {PRUNE_VAR}=1)",
            dir.display()
        ),
        Err(e) => eprintln!("xtask: could not remove {}: {e}", dir.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn only_executables_linked_by_the_step_are_pruned() {
        let dir = std::env::temp_dir().join(format!("xtask-disk-{}", std::process::id()));
        let deps = dir.join("target/debug/deps");
        std::fs::create_dir_all(&deps).unwrap();
        let old = deps.join("old_test-0123");
        std::fs::write(&old, b"old").unwrap();
        std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o755)).unwrap();
        let since = SystemTime::now() + Duration::from_millis(10);
        std::thread::sleep(Duration::from_millis(20));
        let files = [
            ("grpc-e02f0c8f5437d10c", 0o755),
            ("libasync_trait-417e.so", 0o755),
            ("libleaf_core-b69a.rlib", 0o644),
            ("grpc-e02f0c8f5437d10c.d", 0o644),
            ("data-file", 0o644),
        ];
        for (name, mode) in files {
            let path = deps.join(name);
            std::fs::write(&path, b"0123456789").unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        assert_eq!(prune_linked(&dir, since), 10);
        let mut left: Vec<String> = std::fs::read_dir(&deps)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "data-file",
                "grpc-e02f0c8f5437d10c.d",
                "libasync_trait-417e.so",
                "libleaf_core-b69a.rlib",
                "old_test-0123"
            ]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
