//! Fault tests against real Redis containers of their own: a stopped server, a SIGKILLed one,
//! a server with weak durability or an evicting `maxmemory-policy`, concurrent claimers, and a
//! lease that expired while another node claimed its id.

#[path = "../common/mod.rs"]
mod common;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{RegFix, StoreFix, config_of, namespace_on, now_ms, request};
use leaf_core::{Error, NewTag, Renewal, SegmentStore, Tag, WorkerIdRegistry};
use leaf_registry_redis::{RedisClaims, RedisConfig, RedisStore};
use leaf_testkit::provision::{
    Dedicated, kill_server, redis_dedicated, redis_dedicated_with, redis_with_replica,
};

async fn dedicated() -> Dedicated {
    match redis_dedicated().await {
        Ok(d) => d,
        Err(e) => panic!("no Redis container for the fault tests: {e}"),
    }
}

fn tag(name: &str) -> Tag {
    Tag::new(name).unwrap()
}

async fn new_tag(store: &RedisStore, name: &str, step: i64) -> Tag {
    let t = tag(name);
    store
        .create(&NewTag {
            step,
            ..NewTag::new(t.clone())
        })
        .await
        .expect("create");
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_server_is_unavailable_and_serving_resumes_after_restart() {
    let server = dedicated().await;
    let ns = namespace_on(&server.endpoint().url);
    let config = RedisConfig {
        // Long enough that the lease outlives the restart.
        lease_ttl_ms: 60_000,
        ..config_of(&ns)
    };
    let store = RedisStore::connect(&config).await.expect("connect");
    let t = new_tag(&store, "stop", 100).await;
    let before = store.allocate(&t, None).await.expect("allocate").range();
    let dir = tempfile::tempdir().unwrap();
    let registry = RedisClaims::new(&config, "leaf")
        .map(|b| b.registry(dir.path().to_path_buf()))
        .unwrap();
    let lease = registry
        .acquire(&request(leaf_core::NodeIdentity::new("10.0.0.1", 1), 1023))
        .await
        .expect("acquire");

    server.stop(Duration::from_secs(5)).await.expect("stop");
    let started = Instant::now();
    let e = store
        .allocate(&t, None)
        .await
        .expect_err("allocate while stopped");
    assert!(matches!(e, Error::Unavailable(_)), "{e}");
    assert!(e.is_retryable());
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "failed only after {:?}",
        started.elapsed()
    );
    let e = store.get(&t).await.expect_err("get while stopped");
    assert!(matches!(e, Error::Unavailable(_)), "{e}");
    let e = registry
        .renew(&lease, now_ms() + 3000)
        .await
        .expect_err("renew while stopped");
    assert!(matches!(e, Error::Unavailable(_)), "{e}");

    server.start().await.expect("start");
    let after = store
        .allocate(&t, None)
        .await
        .expect("allocate after the restart")
        .range();
    assert!(
        after.start >= before.end,
        "{after:?} after {before:?}: a segment handed out again"
    );
    let r = registry
        .renew(&lease, now_ms() + 3000)
        .await
        .expect("renew after the restart");
    assert_eq!(
        r,
        Renewal::Ok {
            ttl: Some(Duration::from_secs(60))
        }
    );
    registry.release(&lease, now_ms()).await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_sigkill_no_acknowledged_segment_is_handed_out_again() {
    let server = dedicated().await;
    let ns = namespace_on(&server.endpoint().url);
    let config = config_of(&ns);
    let store = Arc::new(RedisStore::connect(&config).await.expect("connect"));
    let t = new_tag(&store, "kill", 10).await;
    let handed_out = Arc::new(Mutex::new(Vec::new()));
    // Allocations keep going while the server is killed: every acknowledged one counts.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut workers = Vec::new();
    for _ in 0..2 {
        let (store, t, out, stop) = (store.clone(), t.clone(), handed_out.clone(), stop.clone());
        workers.push(tokio::spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(a) = store.allocate(&t, None).await {
                    out.lock().unwrap().push(a.range());
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    kill_server(&server).await.expect("kill");
    let e = store.get(&t).await.expect_err("the killed server answered");
    assert!(matches!(e, Error::Unavailable(_)), "{e}");
    let before_restart = handed_out.lock().unwrap().len();
    assert!(before_restart > 0, "nothing was allocated before the kill");
    server.start().await.expect("start");
    // A fresh handle, as a restarted server would have, and the old one (which reconnects).
    let fresh = RedisStore::connect(&config)
        .await
        .expect("connect after the restart");
    for _ in 0..20 {
        let a = fresh
            .allocate(&t, None)
            .await
            .expect("allocate after the restart");
        handed_out.lock().unwrap().push(a.range());
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while handed_out.lock().unwrap().len() < before_restart + 40 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in workers {
        w.await.unwrap();
    }
    let mut ranges = handed_out.lock().unwrap().clone();
    assert!(
        ranges.len() >= before_restart + 40,
        "the old handle did not resume: {} allocations, {before_restart} before the restart",
        ranges.len()
    );
    ranges.sort_by_key(|r| r.start);
    for pair in ranges.windows(2) {
        assert!(
            pair[0].end <= pair[1].start,
            "{:?} and {:?} overlap: a segment was handed out twice",
            pair[0],
            pair[1]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weak_durability_is_refused_unless_accepted() {
    let server = match redis_dedicated_with(&["--appendfsync", "everysec"]).await {
        Ok(d) => d,
        Err(e) => panic!("no Redis container for the fault tests: {e}"),
    };
    let ns = namespace_on(&server.endpoint().url);
    let config = config_of(&ns);
    let e = RedisStore::connect(&config)
        .await
        .expect_err("a store on appendfsync everysec");
    let msg = e.to_string();
    assert!(matches!(e, Error::Config(_)), "{e}");
    assert!(
        msg.contains("appendonly yes") && msg.contains("appendfsync everysec"),
        "the message names both settings: {msg}"
    );
    assert!(msg.contains("accept_weak_durability"), "{msg}");

    let dir = tempfile::tempdir().unwrap();
    let registry = RedisClaims::new(&config, "leaf")
        .map(|b| b.registry(dir.path().to_path_buf()))
        .unwrap();
    let e = registry
        .acquire(&request(leaf_core::NodeIdentity::new("10.0.0.1", 1), 1023))
        .await
        .expect_err("a registry on appendfsync everysec");
    assert!(matches!(e, Error::Config(_)), "{e}");

    let accepted = RedisConfig {
        accept_weak_durability: true,
        ..config
    };
    let store = RedisStore::connect(&accepted)
        .await
        .expect("accepted weak durability");
    let t = new_tag(&store, "weak", 5).await;
    assert_eq!(
        store.allocate(&t, None).await.expect("allocate").range(),
        1..6
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_concurrent_claimers_get_twenty_distinct_ids() {
    let fix = RegFix::new().await;
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..20u16 {
        let node = fix.registry();
        tasks.spawn(async move {
            let lease = node
                .acquire(&request(
                    leaf_core::NodeIdentity::new("10.0.0.2", 9000 + i),
                    1023,
                ))
                .await
                .expect("acquire");
            (node, lease)
        });
    }
    let mut ids = BTreeSet::new();
    let mut held = Vec::new();
    while let Some(r) = tasks.join_next().await {
        let (node, lease) = r.expect("claimer");
        assert!(ids.insert(lease.worker_id), "id {} twice", lease.worker_id);
        held.push((node, lease));
    }
    assert_eq!(ids.len(), 20);
    assert_eq!(ids, (0..20).collect(), "the lowest free ids");
    for (node, lease) in held {
        node.release(&lease, now_ms()).await.expect("release");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_after_expiry_and_reclaim_is_lease_lost() {
    let fix = RegFix::new().await;
    let a = fix.registry();
    let lease = a
        .acquire(&request(leaf_core::NodeIdentity::new("10.0.0.3", 1), 0))
        .await
        .expect("acquire");
    let mut last = 0;
    for i in 1..=3 {
        last = now_ms() + 3000 + i;
        let r = a.renew(&lease, last).await.expect("renew");
        assert!(r.is_ok(), "{r:?}");
    }
    // A lower mark never lowers the stored one: sent straight to the backend (the registry's
    // cache-file half would raise it first), so that the renew script's guard decides.
    let lower = leaf_core::WorkerIdClaims::renew(a.backend(), &lease, last - 2000).await;
    assert!(lower.expect("renew").is_ok());
    tokio::time::sleep(lease.ttl.unwrap() + Duration::from_millis(500)).await;
    let b = fix.registry();
    let next = b
        .acquire(&request(leaf_core::NodeIdentity::new("10.0.0.3", 2), 0))
        .await
        .expect("acquire the expired id");
    assert_eq!(next.worker_id, 0);
    assert_ne!(next.token, lease.token);
    assert!(
        next.prev_mark_ms >= Some(last),
        "the new owner starts past the old owner's last renewed mark {last}: {:?}",
        next.prev_mark_ms
    );
    let r = a.renew(&lease, last + 1000).await.expect("renew");
    assert_eq!(r, Renewal::LeaseLost);
    // The old owner's late renewal wrote nothing: the new owner's claim and the mark stand.
    assert!(
        b.renew(&next, now_ms() + 3000)
            .await
            .expect("renew")
            .is_ok()
    );
    b.release(&next, now_ms()).await.expect("release");
}

/// Sends one command to the server at `url` on a connection of its own.
async fn admin(url: &str, args: &[&str]) -> redis::RedisResult<redis::Value> {
    let client = redis::Client::open(url)?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query_async(&mut conn).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weak_durability_found_at_a_reconnect_is_unavailable() {
    let server = dedicated().await;
    let url = server.endpoint().url.clone();
    let ns = namespace_on(&url);
    let store = RedisStore::connect(&config_of(&ns)).await.expect("connect");
    let t = new_tag(&store, "reconnect", 10).await;
    store.allocate(&t, None).await.expect("allocate");

    admin(&url, &["CONFIG", "SET", "appendfsync", "everysec"])
        .await
        .expect("config set");
    // Drops every client connection, the store's too: its next call opens a new one.
    admin(&url, &["CLIENT", "KILL", "TYPE", "normal"])
        .await
        .ok();
    let mut refusal = None;
    for _ in 0..5 {
        match store.allocate(&t, None).await {
            Err(Error::Unavailable(m)) if m.contains("durability") => {
                refusal = Some(m);
                break;
            }
            Err(Error::Unavailable(_)) => continue,
            other => panic!("a reconnect to a weakened server: {other:?}"),
        }
    }
    let msg = refusal.expect("the reconnected server was refused");
    assert!(
        msg.contains("appendonly yes") && msg.contains("appendfsync always"),
        "{msg}"
    );

    admin(&url, &["CONFIG", "SET", "appendfsync", "always"])
        .await
        .expect("config set");
    store
        .allocate(&t, None)
        .await
        .expect("allocate once the server is durable again");
}

mod eviction;
