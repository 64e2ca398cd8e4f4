//! The docs held to the code: every `leaf.toml` example of the workspace README and the server
//! README loads as the server loads a file (a backend's table is checked by its crate when this
//! build has the backend: each backend's conformance run builds the server with it), and the
//! `Cargo.toml` lines of "Using the crates as a library" name this workspace's crates, its
//! repository and its minimum Rust version. The SQL statements are held elsewhere: the DDL by
//! `leaf-registry-mysql`'s unit tests, the MySQL walk from an empty database by `tests/mysql/`.

use std::path::{Path, PathBuf};

use figment::Figment;
use figment::providers::{Format, Toml};
use figment::value::{Dict, Value};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The fenced blocks of `lang` in `markdown`, with the line each starts on.
fn blocks(markdown: &str, lang: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut open: Option<(usize, String)> = None;
    for (n, line) in markdown.lines().enumerate() {
        let fence = line.trim_start();
        match &mut open {
            None if fence == format!("```{lang}") => open = Some((n + 1, String::new())),
            Some(_) if fence == "```" => out.extend(open.take()),
            Some((_, text)) => {
                // Blocks inside a list item are indented; TOML does not mind, but be exact.
                text.push_str(line.trim_start());
                text.push('\n');
            }
            None => {}
        }
    }
    assert!(open.is_none(), "an unclosed ```{lang} block");
    out
}

fn is_manifest(text: &str) -> bool {
    text.lines()
        .any(|l| l.trim() == "[dependencies]" || l.trim() == "[package]")
}

/// The files an example names (`"/etc/leaf/..."`: certificates, `*.key` their keys;
/// `"/run/secrets/..."`: secrets, a ZooKeeper `zk-auth` as `user:password`) are made in `dir`,
/// and the example points at them, so that the keys load as they would on a node that has them.
fn with_example_files(toml: &str, dir: &Path) -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let mut out = toml.to_owned();
    for prefix in ["\"/etc/leaf/", "\"/run/secrets/"] {
        let mut at = 0;
        while let Some(i) = out[at..].find(prefix) {
            let start = at + i + 1;
            let end = start + out[start..].find('"').unwrap();
            let path = out[start..end].to_owned();
            let local = dir.join(path.trim_start_matches('/').replace('/', "_"));
            let text = if path.starts_with("/run/secrets/") {
                if path.ends_with("zk-auth") {
                    "leaf:example".to_owned()
                } else {
                    "example-secret".to_owned()
                }
            } else if path.ends_with(".key") {
                key.serialize_pem()
            } else {
                cert.pem()
            };
            std::fs::write(&local, text).unwrap();
            let local = local.display().to_string();
            out.replace_range(start..end, &local);
            at = start + local.len();
        }
    }
    out
}

/// The docs that show `leaf.toml` examples.
const DOCS: &[&str] = &["README.md", "crates/leaf-server/README.md"];

#[test]
fn every_leaf_toml_example_loads_as_the_server_loads_it() {
    let mut checked = 0;
    for doc in DOCS {
        let text = std::fs::read_to_string(workspace().join(doc)).unwrap();
        for (line, toml) in blocks(&text, "toml") {
            if is_manifest(&toml) {
                continue;
            }
            let dir = tempfile::tempdir().unwrap();
            let file = dir.path().join("leaf.toml");
            std::fs::write(&file, with_example_files(&toml, dir.path())).unwrap();
            let loaded = leaf_server::config::load(Some(&file), Vec::new())
                .unwrap_or_else(|e| panic!("{doc}:{line}: {e}\n{toml}"));
            // A table of a backend this build lacks is ignored with a warning; anything else
            // warned about is a mistake of the example.
            for w in &loaded.warnings {
                assert!(
                    w.contains("this build has no cargo feature"),
                    "{doc}:{line}: {w}"
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 8, "only {checked} examples found");
}

fn table<'a>(dict: &'a Dict, key: &str) -> &'a Dict {
    match dict.get(key) {
        Some(Value::Dict(_, d)) => d,
        other => panic!("{key}: {other:?}"),
    }
}

#[test]
fn the_library_lines_name_this_workspaces_crates_repository_and_rust_version() {
    let manifest = std::fs::read_to_string(workspace().join("Cargo.toml")).unwrap();
    let manifest: Dict = Figment::from(Toml::string(&manifest)).extract().unwrap();
    let package = table(table(&manifest, "workspace"), "package");
    let repository = package["repository"].as_str().unwrap();
    let rust_version = package["rust-version"].as_str().unwrap();

    let readme = std::fs::read_to_string(workspace().join("README.md")).unwrap();
    let section = &readme[readme
        .find("## Using the crates as a library")
        .expect("the section")..];
    let lines: Vec<String> = blocks(section, "toml")
        .into_iter()
        .map(|(_, t)| t)
        .filter(|t| is_manifest(t))
        .collect();
    assert_eq!(lines.len(), 1, "one block of Cargo.toml lines");
    let deps: Dict = Figment::from(Toml::string(&lines[0])).extract().unwrap();
    let deps = table(&deps, "dependencies");
    let mut leaf = 0;
    for (name, spec) in deps.iter().filter(|(n, _)| n.starts_with("leaf-")) {
        assert!(
            workspace()
                .join("crates")
                .join(name)
                .join("Cargo.toml")
                .is_file(),
            "{name} is no crate of this workspace"
        );
        let Value::Dict(_, spec) = spec else {
            panic!("{name}: {spec:?}")
        };
        assert_eq!(
            spec.get("git").and_then(Value::as_str),
            Some(repository),
            "{name}"
        );
        leaf += 1;
    }
    assert!(leaf >= 3, "{deps:?}");
    assert!(
        section.contains(&format!("Rust {rust_version} or later")),
        "the section states the workspace's rust-version {rust_version}"
    );
}
