//! The ZooKeeper modes under faults, on a real server: ZooKeeper down at start-up, many
//! starters at once, a Java Leaf node to adopt, racing first starts, a second live process of
//! one identity (also one that takes the live lock the moment an earlier session of the first
//! ends), and an owner that stops renewing.

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

/// Polls `check` every 100 ms for up to 15 s.
async fn eventually<F: std::future::Future<Output = bool>>(mut check: impl FnMut() -> F) -> bool {
    for _ in 0..150 {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zk_normal_renews_across_a_lost_session_and_keeps_its_nodes() {
    let fix = ZkFix::with_config(ZkMode::Normal, |c| c.session_timeout_ms = 4000).await;
    let node = fix.registry();
    let lease = node.acquire(&request(me(), 1023)).await.unwrap();
    node.backend().register_temporary(&me()).await.unwrap();
    let client = raw_client().await;
    let lock = format!("{}/forever-lock/{}", fix.base(), me());
    let before = client
        .check_stat(&lock)
        .await
        .unwrap()
        .unwrap()
        .ephemeral_owner;

    node.backend().end_session().await.unwrap();
    let m = now_ms() + 3000;
    assert!(
        node.renew(&lease, m).await.unwrap().is_ok(),
        "the cache file takes it"
    );
    // The background write opens a new session, takes the live lock again and writes the mark.
    let path = format!("{}/forever/{}-{:010}", fix.base(), me(), lease.worker_id);
    let landed = eventually(|| async {
        let _ = node.renew(&lease, m).await;
        let (data, _) = client.get_data(&path).await.unwrap();
        let v: serde_json::Value = serde_json::from_slice(&data).unwrap();
        v["timestamp"] == m && node.confirmed_mark_ms() == Some(m)
    })
    .await;
    assert!(
        landed,
        "the mark reaches zookeeper in the new session, reported as confirmed"
    );
    let after = client
        .check_stat(&lock)
        .await
        .unwrap()
        .expect("the live lock again");
    assert_ne!(after.ephemeral_owner, before, "held by the new session");
    let temporary = format!("{}/temporary/{}", fix.base(), me());
    assert!(client.check_stat(&temporary).await.unwrap().is_some());
    node.release(&lease, m).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zk_normal_whose_identity_was_taken_while_its_session_was_gone_loses_its_lease() {
    let fix = ZkFix::with_config(ZkMode::Normal, |c| c.session_timeout_ms = 4000).await;
    let old = fix.registry();
    let lease = old.acquire(&request(me(), 1023)).await.unwrap();
    old.backend().end_session().await.unwrap();
    // The live lock went with the session: a second process of this identity starts.
    let new = fix.registry();
    let taken = new.acquire(&request(me(), 1023)).await.unwrap();
    assert_eq!(taken.worker_id, lease.worker_id);
    let lost = eventually(|| async {
        old.renew(&lease, now_ms() + 3000).await.ok() == Some(Renewal::LeaseLost)
    })
    .await;
    assert!(
        lost,
        "the old process stops issuing with the identity's worker id"
    );
    assert!(new.renew(&taken, now_ms() + 3000).await.unwrap().is_ok());
}

/// A server restarted from its log restores every session, so one this process already gave
/// up (and replaced) can hold its live lock for another session timeout: that lock is this
/// process's own, not another process's, and the lease goes on in the new session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zk_normal_takes_back_its_lock_from_an_earlier_session_the_server_still_keeps() {
    let fix = ZkFix::with_config(ZkMode::Normal, |c| c.fence_on_disconnect = true).await;
    let node = fix.registry();
    let lease = node.acquire(&request(me(), 1023)).await.unwrap();
    let client = raw_client().await;
    let lock = format!("{}/forever-lock/{}", fix.base(), me());
    let owner = |stat: Option<zookeeper_client::Stat>| stat.map(|s| s.ephemeral_owner);
    let first = owner(client.check_stat(&lock).await.unwrap()).expect("the live lock");
    node.backend().abandon_session().await;
    let r = node.renew(&lease, now_ms() + 3000).await.unwrap();
    assert!(
        r.is_ok(),
        "its own earlier session's lock was taken for another's: {r:?}"
    );
    let now = owner(client.check_stat(&lock).await.unwrap()).expect("the live lock");
    assert_ne!(now, first, "the lock is the new session's");
    assert!(node.renew(&lease, now_ms() + 3000).await.unwrap().is_ok());
    node.release(&lease, now_ms()).await.unwrap();
    assert_eq!(
        owner(client.check_stat(&lock).await.unwrap()),
        None,
        "released"
    );
}

/// An earlier session of this process holds the live lock (the server kept it), and ends, as
/// an expiry would, just after this process found the lock there and before it took the lock
/// over; another process of the identity takes the lock in between. A lock node's data version
/// is always 0, so the takeover must not go by it: the lock is the other process's now, it
/// keeps it, and this process's lease is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zk_normal_never_takes_over_a_lock_another_process_took_from_its_earlier_session() {
    let fix = ZkFix::with_config(ZkMode::Normal, |c| {
        c.fence_on_disconnect = true;
        // Room for the other process's start inside this one's bounded renewal.
        c.session_timeout_ms = 10_000;
    })
    .await;
    let a = fix.registry();
    let lease_a = a.acquire(&request(me(), 1023)).await.unwrap();
    let client = raw_client().await;
    let lock = format!("{}/forever-lock/{}", fix.base(), me());
    let owner = |stat: Option<zookeeper_client::Stat>| stat.map(|s| s.ephemeral_owner);
    let first = owner(client.check_stat(&lock).await.unwrap()).expect("A's live lock");
    a.backend().abandon_session().await;

    let (reached, go) = a.backend().pause_next(Pause::Takeover);
    let renewal = {
        let a = a.clone();
        let lease_a = lease_a.clone();
        tokio::spawn(async move { a.renew(&lease_a, now_ms() + 3000).await })
    };
    tokio::time::timeout(Duration::from_secs(10), reached)
        .await
        .expect("A never came to take over its earlier session's lock")
        .unwrap();
    a.backend().end_abandoned_sessions().await.unwrap();
    let b = fix.registry();
    let lease_b = b.acquire(&request(me(), 1023)).await.unwrap();
    assert_eq!(lease_b.worker_id, lease_a.worker_id);
    let b_owner = owner(client.check_stat(&lock).await.unwrap()).expect("B's live lock");
    assert_ne!(b_owner, first);
    go.send(()).unwrap();

    let answer = renewal.await.unwrap().expect("A's renewal");
    let now = owner(client.check_stat(&lock).await.unwrap());
    assert_eq!(
        now,
        Some(b_owner),
        "A's takeover deleted B's live lock (A's renewal answered {answer:?})"
    );
    assert_eq!(answer, Renewal::LeaseLost, "A goes on with B's identity");
    assert!(b.renew(&lease_b, now_ms() + 3000).await.unwrap().is_ok());
}

/// At release, the live lock is an earlier session's of this process (the session changed
/// after the final mark was written, and the server kept the old one), and that session ends
/// just after the release found the lock there, before it deleted it; another process of the
/// identity takes the lock in between. The release must leave that process's lock alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zk_normal_release_never_deletes_a_lock_another_process_took_from_its_earlier_session() {
    let fix = ZkFix::with_config(ZkMode::Normal, |c| c.session_timeout_ms = 10_000).await;
    let a = fix.registry();
    let lease_a = a.acquire(&request(me(), 1023)).await.unwrap();
    let client = raw_client().await;
    let lock = format!("{}/forever-lock/{}", fix.base(), me());
    let owner = |stat: Option<zookeeper_client::Stat>| stat.map(|s| s.ephemeral_owner);
    let first = owner(client.check_stat(&lock).await.unwrap()).expect("A's live lock");

    let (drop_reached, drop_go) = a.backend().pause_next(Pause::Drop);
    let (takeover_reached, takeover_go) = a.backend().pause_next(Pause::Takeover);
    let release = {
        let a = a.clone();
        let lease_a = lease_a.clone();
        tokio::spawn(async move { a.release(&lease_a, now_ms()).await })
    };
    let within = |r| tokio::time::timeout(Duration::from_secs(10), r);
    within(drop_reached)
        .await
        .expect("A's release never came to delete its lock")
        .unwrap();
    a.backend().abandon_session().await;
    drop_go.send(()).unwrap();
    within(takeover_reached)
        .await
        .expect("A's release never found its earlier session's lock")
        .unwrap();
    a.backend().end_abandoned_sessions().await.unwrap();
    let b = fix.registry();
    let lease_b = b.acquire(&request(me(), 1023)).await.unwrap();
    assert_eq!(lease_b.worker_id, lease_a.worker_id);
    let b_owner = owner(client.check_stat(&lock).await.unwrap()).expect("B's live lock");
    assert_ne!(b_owner, first);
    takeover_go.send(()).unwrap();

    release.await.unwrap().expect("A's release");
    assert_eq!(
        owner(client.check_stat(&lock).await.unwrap()),
        Some(b_owner),
        "A's release deleted B's live lock"
    );
    assert!(b.renew(&lease_b, now_ms() + 3000).await.unwrap().is_ok());
}

/// Another process of the identity held it while this one's session was gone, issued, and
/// stopped cleanly (its live lock deleted) before this one came back: its mark is below this
/// one's next renewal, yet the timestamps it issued are unknown to this process's generator
/// (the two clocks may differ by seconds). With `fence_on_disconnect` the returning process
/// must not take that mark for its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zk_normal_never_adopts_the_mark_of_a_process_that_held_its_identity_meanwhile() {
    let fix = ZkFix::with_config(ZkMode::Normal, |c| c.fence_on_disconnect = true).await;
    let a = fix.registry();
    let lease_a = a.acquire(&request(me(), 1023)).await.unwrap();
    assert!(a.renew(&lease_a, now_ms() + 3000).await.unwrap().is_ok());
    a.backend().end_session().await.unwrap();

    let b = fix.registry();
    let lease_b = b.acquire(&request(me(), 1023)).await.unwrap();
    assert_eq!(lease_b.worker_id, lease_a.worker_id);
    let b_mark = now_ms() + 1000;
    assert!(b.renew(&lease_b, b_mark).await.unwrap().is_ok());
    b.release(&lease_b, b_mark).await.unwrap();

    // A's session is back and the lock is free; A's next mark is above B's.
    let deadline = Instant::now() + Duration::from_secs(15);
    let answer = loop {
        if let Ok(r) = a.renew(&lease_a, now_ms() + 3000).await {
            break r;
        }
        assert!(Instant::now() < deadline, "A's renewal never got an answer");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        answer,
        Renewal::LeaseLost,
        "A took the mark B wrote for its own and went on issuing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zk_recycle_renews_across_a_lost_session() {
    // A TTL that outlasts the expiry (which may take a few tries): the id is not recycled
    // meanwhile, so the renewal after it must succeed.
    let fix = ZkFix::with_config(ZkMode::Recycle, |c| c.recycle_idle_timeout_ms = 60_000).await;
    let node = fix.registry();
    let lease = node.acquire(&request(me(), 1023)).await.unwrap();
    node.backend().end_session().await.unwrap();
    // The inuse node is persistent: a new session renews it as before.
    let r = node.renew(&lease, now_ms() + 3000).await;
    let r = match r {
        Ok(r) => r,
        // The call that finds the session gone may fail; the next one opens a new session.
        Err(e) if e.is_retryable() => node.renew(&lease, now_ms() + 3000).await.unwrap(),
        Err(e) => panic!("{e}"),
    };
    assert!(r.is_ok(), "{r:?}");
    node.release(&lease, now_ms()).await.unwrap();
}

/// A registry of `fix`'s configuration reaching ZooKeeper through `proxy`.
fn through(fix: &ZkFix, proxy: &Proxy, dir: std::path::PathBuf) -> ZkRegistry {
    let config = ZkConfig {
        address: proxy.address.clone(),
        ..fix.config.clone()
    };
    ZkClaims::connect(&config, fix.mode, NAME)
        .map(|b| b.registry(dir))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zk_normal_started_from_the_cache_file_takes_its_lock_once_zookeeper_is_back() {
    let fix = ZkFix::new(ZkMode::Normal).await;
    let dir = fix.new_dir();
    let first = fix.registry_in(dir.clone());
    let lease = first.acquire(&request(me(), 1023)).await.unwrap();
    drop(first); // a crash; its session (and live lock) goes with it

    let proxy = common::proxy().await;
    proxy.set_up(false);
    let node = through(&fix, &proxy, dir);
    let again = node.acquire(&request(me(), 1023)).await.unwrap();
    assert_eq!(again.worker_id, lease.worker_id, "from the cache file");
    let m = now_ms() + 3000;
    assert!(
        node.renew(&again, m).await.unwrap().is_ok(),
        "while zookeeper is down"
    );
    assert_eq!(node.confirmed_mark_ms(), None);

    proxy.set_up(true);
    let client = raw_client().await;
    let lock = format!("{}/forever-lock/{}", fix.base(), me());
    let attached = eventually(|| async {
        let _ = node.renew(&again, m).await;
        node.confirmed_mark_ms() == Some(m) && client.check_stat(&lock).await.unwrap().is_some()
    })
    .await;
    assert!(
        attached,
        "the mark reaches the forever node and the live lock is taken"
    );
    node.release(&again, m).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_stopped_while_serving() {
    // zk_normal keeps renewing into the cache file.
    let fix = ZkFix::new(ZkMode::Normal).await;
    let proxy = common::proxy().await;
    let node = through(&fix, &proxy, fix.new_dir());
    let lease = node.acquire(&request(me(), 1023)).await.unwrap();
    proxy.set_up(false);
    for i in 1..=3 {
        let r = node.renew(&lease, now_ms() + 3000 + i).await.unwrap();
        assert!(
            r.is_ok(),
            "zk_normal renewal {i} while zookeeper is down: {r:?}"
        );
    }
    proxy.set_up(true);
    node.release(&lease, now_ms()).await.unwrap();

    // zk_recycle cannot renew (the caller fences at its limit), then renews again.
    let fix = ZkFix::with_config(ZkMode::Recycle, |c| c.recycle_idle_timeout_ms = 60_000).await;
    let proxy = common::proxy().await;
    let node = through(&fix, &proxy, fix.new_dir());
    let lease = node.acquire(&request(me(), 1023)).await.unwrap();
    proxy.set_up(false);
    let e = node.renew(&lease, now_ms() + 3000).await.unwrap_err();
    assert!(e.is_retryable(), "{e}");
    proxy.set_up(true);
    let back = eventually(|| async {
        node.renew(&lease, now_ms() + 3000)
            .await
            .is_ok_and(|r| r.is_ok())
    })
    .await;
    assert!(back, "zk_recycle renews again once zookeeper is back");
    node.release(&lease, now_ms()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zk_normal_confirms_the_current_leases_marks_only() {
    let fix = ZkFix::new(ZkMode::Normal).await;
    let node = fix.registry();
    let lease = node.acquire(&request(me(), 1023)).await.unwrap();
    let m = now_ms() + 3000;
    let confirmed = eventually(|| async {
        let _ = node.renew(&lease, m).await;
        node.confirmed_mark_ms() == Some(m)
    })
    .await;
    assert!(confirmed, "the renewed mark is confirmed");
    let f = now_ms();
    node.release(&lease, f).await.unwrap();
    assert_eq!(
        node.confirmed_mark_ms(),
        Some(f),
        "the final mark replaces it"
    );
    let _again = node.acquire(&request(me(), 1023)).await.unwrap();
    assert_eq!(
        node.confirmed_mark_ms(),
        None,
        "nothing confirmed for the new lease yet"
    );
}

/// `zk_normal`: a second live process of one identity, its cache directory holding the
/// identity's worker id from an earlier run, whose wait for the live lock ends in a ZooKeeper
/// error (its link stalls once it has connected): never a start from the cache file while the
/// first holds the identity (issue 23, item 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_process_whose_lock_wait_fails_never_starts_from_its_cache_file() {
    let fix = &ZkFix::new(ZkMode::Normal).await;
    let make = |dir, address: &str| -> std::sync::Arc<dyn WorkerIdRegistry> {
        let config = ZkConfig {
            address: address.to_owned(),
            ..fix.config.clone()
        };
        std::sync::Arc::new(
            ZkClaims::connect(&config, ZkMode::Normal, NAME)
                .map(|b| b.registry(dir))
                .expect("registry"),
        )
    };
    let address = fix.config.address.split(',').next().unwrap().to_owned();
    leaf_testkit::identity_cases::a_second_process_never_starts_from_its_cache_file(
        &address,
        &make,
        &make,
        Duration::from_secs(5),
        Duration::from_millis(800),
    )
    .await;
}
