//! The ZooKeeper modes under faults, on a real server: ZooKeeper down at start-up, many
//! starters at once, a Java Leaf node to adopt, racing first starts, a second live process of
//! one identity (also one that takes the live lock the moment an earlier session of the first
//! ends), and an owner that stops renewing.

#[path = "../common/mod.rs"]
mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::{NAME, Proxy, ZkFix, now_ms, raw_client, request};
use leaf_core::{Error, NodeIdentity, Renewal, WorkerIdRegistry};
use leaf_registry_zk::{Pause, ZkClaims, ZkConfig, ZkMode, ZkRegistry};
use zookeeper_client::{Acls, CreateMode};

/// A registry of `mode` whose ZooKeeper address no server listens on.
fn unreachable(mode: ZkMode, dir: std::path::PathBuf) -> ZkRegistry {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = ZkConfig {
        session_timeout_ms: 4000,
        ..ZkConfig::with_address(format!("127.0.0.1:{port}"))
    };
    ZkClaims::connect(&config, mode, NAME)
        .map(|b| b.registry(dir))
        .expect("connect contacts nothing")
}

fn me() -> NodeIdentity {
    NodeIdentity::new("10.0.0.1", 8001)
}

/// The TTL of the recycling tests: short, and above the minimum of their requests' timing.
const SHORT_TTL: Duration = Duration::from_millis(2000);

/// A `zk_recycle` fixture whose leases live [`SHORT_TTL`].
async fn short_ttl_pool() -> ZkFix {
    ZkFix::with_config(ZkMode::Recycle, |c| {
        c.recycle_idle_timeout_ms = SHORT_TTL.as_millis() as u64;
    })
    .await
}

/// A request for a pool of one id (0), from a caller renewing every 200 ms.
fn one_id_request(ip: &str, port: u16) -> leaf_core::AcquireRequest {
    request(NodeIdentity::new(ip, port), 0)
        .with_timing(Duration::from_millis(200), Duration::from_millis(200))
}

/// Claims with `node` until the pool has a free id again (20 s at most).
async fn claim_when_free(node: &ZkRegistry, req: &leaf_core::AcquireRequest) -> leaf_core::Lease {
    let started = Instant::now();
    loop {
        match node.acquire(req).await {
            Ok(l) => return l,
            Err(Error::Unavailable(_)) if started.elapsed() < Duration::from_secs(20) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("the id never came back: {e}"),
        }
    }
}

/// The `forever` children of `identity`.
async fn forever_nodes(fix: &ZkFix, identity: &NodeIdentity) -> Vec<String> {
    let client = raw_client().await;
    let prefix = format!("{identity}-");
    client
        .list_children(&format!("{}/forever", fix.base()))
        .await
        .unwrap()
        .into_iter()
        .filter(|c| c.starts_with(&prefix))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_down_at_start_up_starts_from_the_cache_file_with_its_mark() {
    let fix = ZkFix::new(ZkMode::Normal).await;
    // Another node first, so that this one's worker id is not 0 (the layout check below).
    let other = fix.registry();
    let theirs = other
        .acquire(&request(NodeIdentity::new("10.0.0.9", 1), 1023))
        .await
        .unwrap();
    let dir = fix.new_dir();
    let node = fix.registry_in(dir.clone());
    let lease = node.acquire(&request(me(), 1023)).await.unwrap();
    assert_ne!(lease.worker_id, theirs.worker_id);
    let m = now_ms() + 3000;
    assert!(node.renew(&lease, m).await.unwrap().is_ok());
    drop(node); // a crash: no release

    let down = unreachable(ZkMode::Normal, dir);
    let started = Instant::now();
    let again = down.acquire(&request(me(), 1023)).await.unwrap();
    assert_eq!(again.worker_id, lease.worker_id);
    assert_eq!(
        again.prev_mark_ms,
        Some(m),
        "the fallback carries the mark, so the start-up time check still applies"
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "an unreachable ensemble is given up quickly: {:?}",
        started.elapsed()
    );
    // The fallback lease renews into the cache file: ZooKeeper being down stops nothing.
    assert!(down.renew(&again, m + 1000).await.unwrap().is_ok());
    down.release(&again, m).await.unwrap();
    // The layout still applies to a cached id.
    let e = down
        .acquire(&request(me(), lease.worker_id - 1))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Config(_)), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_down_without_a_cache_file_is_unavailable_in_both_modes() {
    for mode in [ZkMode::Normal, ZkMode::Recycle] {
        let dir = tempfile::tempdir().unwrap();
        let down = unreachable(mode, dir.path().to_path_buf());
        let e = down.acquire(&request(me(), 1023)).await.unwrap_err();
        assert!(matches!(e, Error::Unavailable(_)), "{mode:?}: {e}");
        assert!(e.is_retryable());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_concurrent_starters_on_zk_recycle_get_twenty_distinct_ids() {
    let fix = ZkFix::new(ZkMode::Recycle).await;
    let tasks: Vec<_> = (0..20u16)
        .map(|i| {
            let node = fix.registry();
            tokio::spawn(async move {
                let lease = node
                    .acquire(&request(NodeIdentity::new("10.0.0.2", 9000 + i), 1023))
                    .await
                    .unwrap_or_else(|e| panic!("starter {i}: {e}"));
                (node, lease)
            })
        })
        .collect();
    let mut ids = BTreeSet::new();
    let mut held = Vec::new();
    for t in tasks {
        let (node, lease) = t.await.unwrap();
        assert!(lease.worker_id <= 1023);
        assert!(
            ids.insert(lease.worker_id),
            "worker id {} twice",
            lease.worker_id
        );
        held.push((node, lease));
    }
    assert_eq!(ids.len(), 20);
    // Every claim is in inuse, and the pool still holds every id exactly once.
    let client = raw_client().await;
    let inuse: BTreeSet<u64> = client
        .list_children(&format!("{}/recycle/inuse", fix.base()))
        .await
        .unwrap()
        .iter()
        .map(|c| c.parse().unwrap())
        .collect();
    assert_eq!(inuse, ids);
    let notuse = client
        .list_children(&format!("{}/recycle/notuse", fix.base()))
        .await
        .unwrap();
    assert_eq!(notuse.len(), 1024 - 20);
    for (node, lease) in held {
        node.release(&lease, now_ms()).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_java_leaf_node_is_adopted_with_its_upload_period_added() {
    let fix = ZkFix::new(ZkMode::Normal).await;
    let client = raw_client().await;
    let dir = format!("{}/forever", fix.base());
    client
        .mkdir(&dir, &CreateMode::Persistent.with_acls(Acls::anyone_all()))
        .await
        .unwrap();
    // Another Java node first, so the sequence is not trivially 0.
    let options = CreateMode::PersistentSequential.with_acls(Acls::anyone_all());
    client
        .create(
            &format!("{dir}/10.0.0.9:8080-"),
            br#"{"ip":"10.0.0.9","port":"8080","timestamp":1}"#,
            &options,
        )
        .await
        .unwrap();
    // Exactly what Java Leaf's SnowflakeZookeeperHolder writes: "now", every 3 s.
    let t = now_ms() - 60_000;
    let java = format!(r#"{{"ip":"10.0.0.1","port":"8001","timestamp":{t}}}"#);
    let (_, seq) = client
        .create(&format!("{dir}/10.0.0.1:8001-"), java.as_bytes(), &options)
        .await
        .unwrap();
    let seq = seq.into_i64() as u64;
    assert_eq!(seq, 1);

    let node = fix.registry();
    let lease = node.acquire(&request(me(), 1023)).await.unwrap();
    assert_eq!(
        lease.worker_id, seq,
        "Java Leaf's sequence is the worker id"
    );
    assert_eq!(lease.prev_mark_ms, Some(t + 3000));
    assert_eq!(forever_nodes(&fix, &me()).await.len(), 1, "no second node");
    // From now on the node holds our mark.
    let f = now_ms();
    node.release(&lease, f).await.unwrap();
    let (data, _) = client
        .get_data(&format!("{dir}/10.0.0.1:8001-{seq:010}"))
        .await
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&data).unwrap();
    assert_eq!(v["timestamp"], f, "{v}");
    assert_eq!(v["port"], "8001", "{v}");
    let fresh = fix.registry();
    let again = fresh.acquire(&request(me(), 1023)).await.unwrap();
    assert_eq!((again.worker_id, again.prev_mark_ms), (seq, Some(f)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_simultaneous_first_starts_create_one_sequential_node() {
    let fix = ZkFix::new(ZkMode::Normal).await;
    // Sessions open first, so the starts race each other rather than their connects.
    let mut nodes = Vec::new();
    for _ in 0..6 {
        let node = fix.registry();
        node.backend().peers().await.unwrap();
        nodes.push(node);
    }
    let go = std::sync::Arc::new(tokio::sync::Barrier::new(nodes.len()));
    // Whoever wins releases at once, so the next gets the lock and must find the same node.
    let starters: Vec<_> = nodes
        .into_iter()
        .map(|node| {
            let go = go.clone();
            tokio::spawn(async move {
                go.wait().await;
                let lease = node.acquire(&request(me(), 1023)).await?;
                node.release(&lease, now_ms()).await?;
                Ok::<_, Error>(lease.worker_id)
            })
        })
        .collect();
    let mut ids = BTreeSet::new();
    for s in starters {
        ids.insert(s.await.unwrap().unwrap());
    }
    assert_eq!(ids.len(), 1, "one identity, one worker id: {ids:?}");
    assert_eq!(forever_nodes(&fix, &me()).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_that_stops_renewing_loses_its_id_to_the_next_claimer_past_its_mark() {
    let fix = short_ttl_pool().await;
    let req = |port| one_id_request("10.0.0.3", port);
    let old = fix.registry();
    let lease = old.acquire(&req(1)).await.unwrap();
    assert_eq!((lease.worker_id, lease.ttl), (0, Some(SHORT_TTL)));
    let m = now_ms() + 3000;
    assert_eq!(
        old.renew(&lease, m).await.unwrap(),
        Renewal::Ok {
            ttl: Some(SHORT_TTL)
        }
    );
    let last_renewal = Instant::now();
    // The old owner stops renewing (a pause, a partition); the pool has one id only.
    let new = fix.registry();
    let claimed = claim_when_free(&new, &req(2)).await;
    assert!(
        last_renewal.elapsed() >= SHORT_TTL,
        "recycled {:?} after the last renewal, before the ttl",
        last_renewal.elapsed()
    );
    assert_eq!(claimed.worker_id, 0);
    assert!(
        claimed.prev_mark_ms >= Some(m),
        "the new owner starts past the last renewed mark {m}: {:?}",
        claimed.prev_mark_ms
    );
    assert_ne!(claimed.token, lease.token);
    assert_eq!(
        old.renew(&lease, m + 1000).await.unwrap(),
        Renewal::LeaseLost,
        "the old owner's renewal after the recycling"
    );
    assert!(new.renew(&claimed, m + 1000).await.unwrap().is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_owner_never_writes_over_the_next_claim_of_its_id_at_the_same_version() {
    let fix = short_ttl_pool().await;
    let req = |port| one_id_request("10.0.0.5", port);
    // The old owner claims and pauses at once: its node stays at version 0.
    let old = fix.registry();
    let stale = old.acquire(&req(1)).await.unwrap();
    let new = fix.registry();
    let claimed = claim_when_free(&new, &req(2)).await;
    assert_eq!(claimed.worker_id, 0);
    // The new claim's node is at version 0 too: a version check alone would let these through.
    assert_eq!(
        old.renew(&stale, now_ms() + 3000).await.unwrap(),
        Renewal::LeaseLost,
        "the stale owner renewed the new owner's claim"
    );
    old.release(&stale, now_ms()).await.unwrap();
    let inuse = format!("{}/recycle/inuse/0", fix.base());
    assert!(
        raw_client()
            .await
            .check_stat(&inuse)
            .await
            .unwrap()
            .is_some(),
        "the stale owner's release returned the new owner's id"
    );
    assert!(new.renew(&claimed, now_ms() + 3000).await.unwrap().is_ok());
}

/// Issue 13, item 1: C reads the free `notuse/0` (no mark) and stalls; meanwhile D claims 0,
/// issues, and gives it back with a mark a minute ahead, which re-creates `notuse/0` at version
/// 0. C's multi-op must fail (else C starts below D's timestamps with D's worker id), and C's
/// retried claim carries D's mark.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_read_before_a_claim_and_give_back_cannot_commit_the_stale_mark() {
    let fix = ZkFix::new(ZkMode::Recycle).await;
    let c = fix.registry();
    let read = c
        .backend()
        .read_claim(0, 0)
        .await
        .unwrap()
        .expect("worker id 0 is free");
    assert_eq!(read.mark(), 0, "a fresh pool carries no mark");

    let d = fix.registry();
    let lease = d
        .acquire(&request(NodeIdentity::new("10.0.0.6", 2), 0))
        .await
        .unwrap();
    assert_eq!(lease.worker_id, 0);
    let m2 = now_ms() + 60_000;
    assert!(d.renew(&lease, m2).await.unwrap().is_ok());
    d.release(&lease, m2).await.unwrap();

    let committed = c
        .backend()
        .commit_read_claim(read, "10.0.0.6:1")
        .await
        .unwrap();
    assert_eq!(
        committed, None,
        "a claim read before another claim and give-back of the id committed with the stale \
         mark {committed:?} (the id now carries {m2})"
    );
    let retried = c
        .acquire(&request(NodeIdentity::new("10.0.0.6", 1), 0).with_max_ahead_ms(120_000))
        .await
        .unwrap();
    assert_eq!(retried.worker_id, 0);
    assert_eq!(
        retried.prev_mark_ms,
        Some(m2),
        "the retried claim carries D's mark"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_owners_id_comes_back_when_no_other_node_runs() {
    let fix = short_ttl_pool().await;
    let req = |port| one_id_request("10.0.0.4", port);
    let crashed = fix.registry();
    let lease = crashed.acquire(&req(1)).await.unwrap();
    let m = now_ms() + 3000;
    assert!(crashed.renew(&lease, m).await.unwrap().is_ok());
    // The only node holding a lease (and running a recycler) dies.
    drop(crashed);
    let new = fix.registry();
    let claimed = claim_when_free(&new, &req(2)).await;
    assert_eq!(claimed.worker_id, 0);
    assert!(
        claimed.prev_mark_ms >= Some(m),
        "{:?}",
        claimed.prev_mark_ms
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ttl_below_the_generators_minimum_is_a_config_error() {
    let fix = ZkFix::with_config(ZkMode::Recycle, |c| c.recycle_idle_timeout_ms = 1000).await;
    let e = fix
        .registry()
        .acquire(&request(me(), 1023))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::Config(m) if m.contains("recycle_idle_timeout_ms")),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peers_are_the_other_temporary_nodes() {
    let fix = ZkFix::new(ZkMode::Normal).await;
    let (a, b) = (fix.registry(), fix.registry());
    assert_eq!(a.backend().peers().await.unwrap(), Vec::<String>::new());
    a.backend()
        .register_temporary(&NodeIdentity::new("10.0.0.1", 8001))
        .await
        .unwrap();
    b.backend()
        .register_temporary(&NodeIdentity::new("10.0.0.2", 8002))
        .await
        .unwrap();
    assert_eq!(a.backend().peers().await.unwrap(), ["10.0.0.2:8002"]);
    assert_eq!(b.backend().peers().await.unwrap(), ["10.0.0.1:8001"]);
    drop(b); // its session closes, and its ephemeral node goes with it
    let mut gone = false;
    for _ in 0..50 {
        if a.backend().peers().await.unwrap().is_empty() {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(gone, "a stopped node leaves the peer list");
}

mod sessions;
