//! The black-box scenarios of `tests/blackbox.rs` on a real MariaDB, as the issue asks: clients
//! and servers sharing one `leaf_alloc` table. The server is `leaf-testkit`'s (the one of
//! `LEAFTEST_MYSQL_URL`, else a container of `LEAFTEST_MYSQL_IMAGE`), a database of its own per
//! test; a server that cannot be provisioned fails these tests, nothing is skipped. Built with
//! the internal feature `_mysql-tests`: `cargo xtask conformance --backend mysql`.

#![cfg(feature = "_mysql-tests")]

mod common;

use common::Cluster;
use common::scenarios::{self, PATIENT_SERVERS};
use leaf_testkit::provision::{self, MysqlDatabase};

/// `n` servers on a new database of the provisioned MariaDB (kept until the test ends).
async fn on_mariadb(n: usize, extra: &[(&str, &str)]) -> (MysqlDatabase, Cluster) {
    let db = provision::mysql_database()
        .await
        .unwrap_or_else(|e| panic!("no MySQL server for the leaf-client tests: {e}"));
    let store = [
        ("LEAF_SEGMENT__STORE", "mysql"),
        ("LEAF_SEGMENT__URL", db.url.as_str()),
    ];
    let cluster = tokio::task::block_in_place(|| Cluster::on_store(&store, n, extra));
    (db, cluster)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_mid_run_is_failed_over_without_an_error_and_no_id_repeats() {
    let (_db, cluster) = on_mariadb(2, PATIENT_SERVERS).await;
    scenarios::killed_mid_run(cluster).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_clients_of_many_servers_never_collide() {
    let (_db, cluster) = on_mariadb(3, PATIENT_SERVERS).await;
    scenarios::many_clients(cluster).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_every_server_down_the_buffers_last_then_unavailable_then_recovery() {
    let (_db, cluster) = on_mariadb(2, &[]).await;
    scenarios::every_server_down(cluster).await;
}
