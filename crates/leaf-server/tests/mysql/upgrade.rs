//! The upgrade from the previous release on MySQL: the two tables as a 0.1.0 fleet of two nodes
//! left them (one stopped with SIGTERM, one killed), loaded from their dump, and two nodes of
//! this version on the same identities and cache files: each takes back its worker id and hands
//! out no ID either old node handed out (`tests/upgrade/record.sh` recorded them from 0.1.0's
//! binary).

use super::common::upgrade::{Issued, PREVIOUS, assert_above, copy_recorded, recorded};
use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_of_this_version_take_over_the_previous_releases_rows_and_cache_files() {
    let (db, root) = database().await;
    // The dump as mariadb-dump wrote it: the tables as 0.1.0 created them, then their rows.
    let dump = std::fs::read_to_string(recorded("mysql/rows.sql")).unwrap();
    let mut statement = String::new();
    for line in dump.lines() {
        if line.starts_with("--") || line.trim().is_empty() {
            continue;
        }
        statement.push_str(line);
        statement.push('\n');
        if line.trim_end().ends_with(';') {
            let s = std::mem::take(&mut statement);
            // The dump's session settings and table locks hold on one connection; a pool's
            // statements may each take another, and need neither.
            if !(s.starts_with("/*!") || s.starts_with("LOCK TABLES") || s.starts_with("UNLOCK")) {
                exec(&root, s).await;
            }
        }
    }
    let olds = [
        Issued::read("mysql/issued-node1.json"),
        Issued::read("mysql/issued-node2.json"),
    ];
    let layout = SnowflakeLayout::default();
    let old_workers = olds
        .each_ref()
        .map(|o| layout.decode(o.snowflake).unwrap().worker_id);
    assert_ne!(old_workers[0], old_workers[1], "{olds:?}");
    let [one, two] = olds;
    let old = one.max(two);

    let url = db.url.clone();
    tokio::task::spawn_blocking(move || {
        let base = tempfile::tempdir().unwrap();
        let mut nodes = Vec::new();
        for n in 1..=2u32 {
            let dir = base.path().join(format!("node{n}"));
            copy_recorded(&format!("mysql/node{n}"), &dir.join("leaf-data"));
            let env = [
                ("LEAF_SEGMENT__STORE", "mysql".to_string()),
                ("LEAF_SEGMENT__MYSQL__URL", url.clone()),
                ("LEAF_SNOWFLAKE__MODE", "mysql".to_string()),
                ("LEAF_SNOWFLAKE__MYSQL__URL", url.clone()),
                ("LEAF_SNOWFLAKE__IP", "10.0.0.1".to_string()),
                ("LEAF_SNOWFLAKE__PORT", format!("800{n}")),
            ];
            nodes.push(Server::start(&dir, free_port(), n, &env));
        }
        for (node, worker) in nodes.iter().zip(old_workers) {
            let ids = assert_above(node, &old);
            let now = layout.decode(ids[0]).unwrap().worker_id;
            assert_eq!(now, worker, "the identity's worker id under {PREVIOUS}");
        }
        for node in nodes {
            let (status, log) = node.sigterm();
            assert!(status.success(), "{log}");
        }
    })
    .await
    .unwrap();
}
