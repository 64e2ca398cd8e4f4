//! The ZooKeeper provisioning on real servers: the shared server with a root per test, a
//! dedicated server stopped and started, and the ensemble with one member stopped. Needs
//! Docker and `LEAFTEST_ZK_IMAGE` where the official image cannot be pulled (`cargo xtask
//! conformance --backend zk` sets it), or `LEAFTEST_ZK_URL` for the shared server.

use std::time::Duration;

use leaf_testkit::provision::{self, ZkNamespace};
use zookeeper_client as zk;

fn fail(what: &str, e: impl std::fmt::Display) -> ! {
    panic!("{what}: {e}")
}

async fn connect(connect: &str) -> zk::Client {
    zk::Client::connector()
        .with_session_timeout(Duration::from_secs(10))
        .connect(connect)
        .await
        .unwrap_or_else(|e| fail(&format!("connect to {connect}"), e))
}

/// Creates `{root}` and `{root}/{name}` holding `data`, and reads the node back.
async fn create_and_read(client: &zk::Client, ns: &ZkNamespace, name: &str, data: &[u8]) {
    let opts = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    match client.create(&ns.root, b"", &opts).await {
        Ok(_) | Err(zk::Error::NodeExists) => {}
        Err(e) => fail(&format!("create {}", ns.root), e),
    }
    let path = format!("{}/{name}", ns.root);
    client
        .create(&path, data, &opts)
        .await
        .unwrap_or_else(|e| fail(&format!("create {path}"), e));
    let (read, _) = client
        .get_data(&path)
        .await
        .unwrap_or_else(|e| fail(&format!("get {path}"), e));
    assert_eq!(read, data, "{path}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_server_gives_each_test_its_own_root() {
    let a = provision::zk_namespace()
        .await
        .unwrap_or_else(|e| fail("zk", e));
    let b = provision::zk_namespace()
        .await
        .unwrap_or_else(|e| fail("zk", e));
    assert_eq!(a.connect, b.connect, "one server per test binary");
    assert_ne!(a.root, b.root);
    let client = connect(&a.connect).await;
    create_and_read(&client, &a, "node", b"a").await;
    create_and_read(&client, &b, "node", b"b").await;
    let children = client.list_children(&a.root).await.unwrap();
    assert_eq!(children, vec!["node".to_string()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dedicated_server_stops_and_comes_back_with_its_data() {
    let server = provision::dedicated(&provision::ZOOKEEPER)
        .await
        .unwrap_or_else(|e| fail("zk", e));
    let ns = provision::zk_namespace_on(&server.endpoint().url);
    let client = connect(&ns.connect).await;
    create_and_read(&client, &ns, "before", b"1").await;
    drop(client);

    server.stop(Duration::from_secs(5)).await.unwrap();
    let down = zk::Client::connector()
        .with_session_timeout(Duration::from_secs(4))
        .with_fail_eagerly()
        .connect(&ns.connect)
        .await;
    assert!(down.is_err(), "a stopped server still accepts sessions");

    server.start().await.unwrap();
    let client = connect(&ns.connect).await;
    let (read, _) = client
        .get_data(&format!("{}/before", ns.root))
        .await
        .unwrap();
    assert_eq!(read, b"1");
    drop(client);
    drop(ns);
    server.remove().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ensemble_serves_with_one_member_stopped() {
    let ensemble = provision::zk_ensemble()
        .await
        .unwrap_or_else(|e| fail("zk ensemble", e));
    assert_eq!(ensemble.members().len(), 3);
    assert_eq!(ensemble.connect().split(',').count(), 3);
    let ns = provision::zk_namespace_on(ensemble.connect());
    let client = connect(ensemble.connect()).await;
    create_and_read(&client, &ns, "all-up", b"3").await;

    // A write through one member is seen through every other.
    for m in ensemble.members() {
        let c = connect(&m.endpoint().url).await;
        c.sync(&ns.root).await.unwrap();
        let (read, _) = c.get_data(&format!("{}/all-up", ns.root)).await.unwrap();
        assert_eq!(read, b"3", "through {:?}", m.endpoint());
    }

    // Stop the first member; the two others keep a quorum, and a client of the whole
    // ensemble writes and reads on.
    ensemble.members()[0]
        .stop(Duration::from_secs(5))
        .await
        .unwrap();
    let client = connect(ensemble.connect()).await;
    create_and_read(&client, &ns, "one-down", b"2").await;
    drop(client);

    // Back, it catches up with what was written without it.
    ensemble.members()[0].start().await.unwrap();
    let c = connect(&ensemble.members()[0].endpoint().url).await;
    c.sync(&ns.root).await.unwrap();
    let (read, _) = c.get_data(&format!("{}/one-down", ns.root)).await.unwrap();
    assert_eq!(read, b"2");
    drop(c);
    drop(ns);
    ensemble.remove().await.unwrap();
}
