//! `fence_on_disconnect` on a real server (issue 23, item 2): one identity in two processes
//! across a database outage that A, behind a proxy, stays cut off from for longer, so that B
//! takes the identity. With the fence no ID is issued by both; without it, what happens is
//! recorded (Leaf's availability, and the documented risk of the default).

mod common;

use std::sync::Arc;

use leaf_core::WorkerIdRegistry;
use leaf_registry_mysql::{MysqlBackend, MysqlConfig};
use leaf_testkit::identity_cases::{
    Outage, an_outage_with_a_partitioned_holder, assert_fenced, report_unfenced,
};

use common::provision;

async fn outage(fence_on_disconnect: bool) -> Outage {
    // A server of our own: the test stops it.
    let server = provision::dedicated(&provision::MYSQL)
        .await
        .unwrap_or_else(|e| panic!("no container for the outage test: {e}"));
    let db = provision::mysql_database_on(server.endpoint())
        .await
        .expect("a database");
    let make = |dir, url: &str| -> Arc<dyn WorkerIdRegistry> {
        let config = MysqlConfig {
            fence_on_disconnect,
            connect_timeout_ms: 1000,
            timeout_ms: 2000,
            ..MysqlConfig::with_url(url)
        };
        Arc::new(
            MysqlBackend::connect(&config, "leaf")
                .expect("registry")
                .registry(dir),
        )
    };
    let seen = an_outage_with_a_partitioned_holder(&server, &db.url, &make).await;
    drop(db);
    server.remove().await.expect("remove the container");
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_fence_on_disconnect_no_id_is_issued_by_both() {
    assert_fenced(&outage(true).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_fence_on_disconnect_the_cut_off_holder_issues_beside_the_next() {
    report_unfenced(&outage(false).await);
}
