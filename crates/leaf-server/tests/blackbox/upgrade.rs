//! The upgrade from the previous release on the embedded default: a node of this version
//! starts on the SQLite file, cache file and data folder a 0.1.0 node left when it stopped, and
//! hands out no ID that node handed out (`tests/upgrade/record.sh` recorded them from 0.1.0's
//! binary; the MySQL half is `tests/mysql/upgrade.rs`).

use super::common::upgrade::{Issued, PREVIOUS, assert_above, copy_recorded};
use super::*;

#[test]
fn a_node_of_this_version_starts_on_what_the_previous_release_left_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    copy_recorded("sqlite/leaf-data", &dir.path().join("leaf-data"));
    let old = Issued::read("sqlite/issued.json");
    assert!(old.segment.contains_key("upgrade-plain"), "{old:?}");
    let port = free_port();
    let mut node = Server::spawn(dir.path(), port, 0, &[] as &[(&str, &str)]);
    node.wait_for("/readyz", Duration::from_secs(20));
    let ids = assert_above(&node, &old);
    let worker = leaf_core::SnowflakeLayout::default()
        .decode(ids[0])
        .unwrap()
        .worker_id;
    assert_eq!(worker, 0, "the embedded default's worker id");
    // This version records the layout it starts with, where 0.1.0 recorded none.
    assert!(
        dir.path().join("leaf-data/leaf.layout").exists(),
        "no layout record after the upgrade: {PREVIOUS}'s files are not taken over as they are"
    );
    let (status, log) = node.sigterm();
    assert!(status.success(), "{log}");
    assert!(!log.contains(" ERROR "), "{log}");
}
