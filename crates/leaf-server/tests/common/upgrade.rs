//! What the previous release left behind, as `tests/upgrade/record.sh` recorded it from that
//! release's binary: its files, its MySQL rows, and the largest IDs it handed out.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::Server;

/// The release the recorded state is of.
pub(crate) const PREVIOUS: &str = "0.1.0";

/// A file or folder of the recording.
pub(crate) fn recorded(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/upgrade")
        .join(PREVIOUS)
        .join(path)
}

/// The largest IDs one node of the previous release handed out.
#[derive(Debug)]
pub(crate) struct Issued {
    pub(crate) segment: BTreeMap<String, i64>,
    pub(crate) snowflake: i64,
}

impl Issued {
    pub(crate) fn read(path: &str) -> Issued {
        let file = recorded(path);
        let text =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let segment = v["segment"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_i64().unwrap()))
            .collect();
        let snowflake = v["snowflake"].as_i64().unwrap();
        Issued { segment, snowflake }
    }

    /// The larger of each of two nodes' largest IDs.
    pub(crate) fn max(mut self, other: Issued) -> Issued {
        for (tag, id) in other.segment {
            let e = self.segment.entry(tag).or_insert(id);
            *e = (*e).max(id);
        }
        self.snowflake = self.snowflake.max(other.snowflake);
        self
    }
}

/// Copies the folder `from` of the recording into `to` (made).
pub(crate) fn copy_recorded(from: &str, to: &Path) {
    fn copy(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let target = to.join(entry.file_name());
            if entry.file_type().unwrap().is_dir() {
                copy(&entry.path(), &target);
            } else {
                std::fs::copy(entry.path(), &target).unwrap();
            }
        }
    }
    copy(&recorded(from), to);
}

/// Takes IDs of every tag the previous release handed out and of snowflake mode from `node`,
/// each answered 200, and checks each is above what that release handed out. Returns the
/// snowflake IDs taken.
pub(crate) fn assert_above(node: &Server, old: &Issued) -> Vec<i64> {
    for (tag, max) in &old.segment {
        // Within one segment of the smallest step (upgrade-plain's 100): a batch that needs
        // several loads at once may be a 503 -3 on a loaded machine, which is not what is
        // checked here.
        let mut ids = node.get(&format!("/v1/segment/{tag}?count=50")).ids();
        let leaf = node.get(&format!("/api/segment/get/{tag}"));
        assert_eq!(leaf.status, 200, "{tag}: {}", leaf.body);
        ids.push(leaf.body.parse().unwrap());
        let low = ids.iter().min().unwrap();
        assert!(
            low > max,
            "{tag}: {low} is not above {max}, handed out by {PREVIOUS}"
        );
    }
    let mut ids = node.get("/v1/snowflake?count=100").ids();
    let leaf = node.get("/api/snowflake/get/upgrade");
    assert_eq!(leaf.status, 200, "{}", leaf.body);
    ids.push(leaf.body.parse().unwrap());
    let low = ids.iter().min().unwrap();
    assert!(
        *low > old.snowflake,
        "snowflake {low} is not above {}, handed out by {PREVIOUS}",
        old.snowflake
    );
    ids
}
