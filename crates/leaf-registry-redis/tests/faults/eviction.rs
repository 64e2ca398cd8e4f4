//! The guard against what loses writes: eviction policies under a memory limit and replicas that a
//! write was not acknowledged by, refused at start-up or found at run time.

use super::*;

/// Writes 16 KiB values under `{prefix}:flood:` to the server at `url`, on one connection, until
/// none of `keys` exists any more: Redis evicted them to stay under its `maxmemory`. Stops
/// writing early when Redis refuses a write for memory (`OOM`: a `volatile-*` policy found no
/// key with a TTL left to evict). Panics if the keys outlive 2000 writes (32 MiB).
async fn flood_until_evicted(url: &str, prefix: &str, keys: &[String]) {
    let client = redis::Client::open(url).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let value = vec![b'x'; 16 * 1024];
    let mut out_of_memory = false;
    for i in 0..2000 {
        let mut present = 0;
        for k in keys {
            let n: i64 = redis::cmd("EXISTS")
                .arg(k)
                .query_async(&mut conn)
                .await
                .unwrap();
            present += n;
        }
        if present == 0 {
            return;
        }
        if out_of_memory {
            break;
        }
        let set: redis::RedisResult<()> = redis::cmd("SET")
            .arg(format!("{prefix}:flood:{i}"))
            .arg(&value)
            .query_async(&mut conn)
            .await;
        match set {
            Ok(()) => {}
            Err(e) if e.code() == Some("OOM") => out_of_memory = true,
            Err(e) => panic!("flooding the server: {e}"),
        }
    }
    panic!("the server kept {keys:?} under the flood");
}

/// An `allkeys-*` policy under a `maxmemory` limit evicts any key once the limit is reached:
/// flooded, the server drops an id's mark, so the next claimer of the id starts from mark 0,
/// below every timestamp the last holder issued, and a tag's row, so the tag is gone. Such a
/// server is refused at start-up, naming the setting and `noeviction`, unless
/// `accept_weak_durability` (which runs, and takes that risk).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicting_maxmemory_policy_is_refused_unless_accepted() {
    let server =
        match redis_dedicated_with(&["--maxmemory", "4mb", "--maxmemory-policy", "allkeys-lru"])
            .await
        {
            Ok(d) => d,
            Err(e) => panic!("no Redis container for the fault tests: {e}"),
        };
    let url = server.endpoint().url.clone();
    let ns = namespace_on(&url);
    let config = config_of(&ns);

    // What the guard keeps out: with the risk accepted, the flood evicts Leaf's keys.
    let accepted = RedisConfig {
        accept_weak_durability: true,
        ..config.clone()
    };
    let store = RedisStore::connect(&accepted)
        .await
        .expect("accepted with accept_weak_durability");
    let t = new_tag(&store, "evicted", 10).await;
    store.allocate(&t, None).await.expect("allocate");
    let backend = |dir: &tempfile::TempDir| {
        RedisClaims::new(&accepted, "leaf")
            .map(|b| b.registry(dir.path().to_path_buf()))
            .unwrap()
    };
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = backend(&dir_a);
    let lease = a
        .acquire(&request(leaf_core::NodeIdentity::new("10.0.0.6", 1), 0))
        .await
        .expect("acquire");
    let last_issued = now_ms();
    a.release(&lease, last_issued).await.expect("release");
    let mark_key = a.backend().mark_key(0);
    let tag_key = format!("{}:tag:{t}", ns.prefix);
    flood_until_evicted(&url, &ns.prefix, &[mark_key, tag_key]).await;
    let e = store
        .allocate(&t, None)
        .await
        .expect_err("an allocation of an evicted tag");
    assert!(matches!(e, Error::NotFound(_)), "{e}");
    let b = backend(&dir_b);
    let next = b
        .acquire(&request(leaf_core::NodeIdentity::new("10.0.0.6", 2), 0))
        .await
        .expect("acquire the released id");
    assert_eq!(next.worker_id, 0);
    assert_eq!(
        next.prev_mark_ms, None,
        "the id's mark ({last_issued}, the last timestamp issued with it) was evicted: the next \
         holder starts from mark 0"
    );

    let e = RedisStore::connect(&config)
        .await
        .expect_err("a store on maxmemory-policy allkeys-lru");
    let msg = e.to_string();
    assert!(matches!(e, Error::Config(_)), "{e}");
    assert!(
        msg.contains("maxmemory-policy allkeys-lru") && msg.contains("noeviction"),
        "the message names the setting and what to set: {msg}"
    );
    assert!(msg.contains("accept_weak_durability"), "{msg}");
    let dir = tempfile::tempdir().unwrap();
    let registry = RedisClaims::new(&config, "leaf")
        .map(|b| b.registry(dir.path().to_path_buf()))
        .unwrap();
    let e = registry
        .acquire(&request(leaf_core::NodeIdentity::new("10.0.0.6", 3), 0))
        .await
        .expect_err("a registry on maxmemory-policy allkeys-lru");
    assert!(
        matches!(&e, Error::Config(m) if m.contains("maxmemory-policy")),
        "{e}"
    );
}

/// A `volatile-*` policy evicts the keys with a TTL, which are the live leases: set at run time
/// together with a `maxmemory` (Redis evicts nothing without one) and flooded, the server drops
/// a lease of an `accept_weak_durability` registry long before its TTL, and another node claims
/// the id at once. A guarded store finds the setting at its re-check and its calls are
/// `Unavailable` until the policy is `noeviction` again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicting_policy_set_at_run_time_is_found_by_the_guard() {
    let server = dedicated().await;
    let url = server.endpoint().url.clone();
    let ns = namespace_on(&url);
    let store = RedisStore::connect(&config_of(&ns)).await.expect("connect");
    let t = new_tag(&store, "volatile", 10).await;
    store.allocate(&t, None).await.expect("allocate");
    let accepted = RedisConfig {
        accept_weak_durability: true,
        // Far longer than the test: only an eviction can end the lease in time.
        lease_ttl_ms: 120_000,
        ..config_of(&ns)
    };
    let registry = |dir: &tempfile::TempDir| {
        RedisClaims::new(&accepted, "leaf")
            .map(|b| b.registry(dir.path().to_path_buf()))
            .unwrap()
    };
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = registry(&dir_a);
    let lease = a
        .acquire(&request(leaf_core::NodeIdentity::new("10.0.0.7", 1), 0))
        .await
        .expect("acquire");
    assert!(a.renew(&lease, now_ms() + 3000).await.unwrap().is_ok());
    let renewed = Instant::now();

    admin(&url, &["CONFIG", "SET", "maxmemory", "8mb"])
        .await
        .expect("config set");
    admin(&url, &["CONFIG", "SET", "maxmemory-policy", "volatile-lru"])
        .await
        .expect("config set");
    flood_until_evicted(&url, &ns.prefix, &[a.backend().worker_key(0)]).await;
    // Room to write again (the flood filled the memory with keys no volatile policy evicts),
    // under a limit still.
    admin(&url, &["CONFIG", "SET", "maxmemory", "64mb"])
        .await
        .expect("config set");
    let b = registry(&dir_b);
    let next = b
        .acquire(&request(leaf_core::NodeIdentity::new("10.0.0.7", 2), 0))
        .await
        .expect("the evicted lease's id is free");
    assert_eq!(next.worker_id, 0);
    assert!(
        renewed.elapsed() < Duration::from_millis(accepted.lease_ttl_ms),
        "claimed within the first holder's ttl"
    );
    assert_eq!(
        a.renew(&lease, now_ms() + 3000).await.expect("renew"),
        Renewal::LeaseLost
    );

    let deadline = Instant::now() + RECHECK_BOUND;
    let e = loop {
        match store.allocate(&t, None).await {
            Ok(_) => {
                assert!(
                    Instant::now() < deadline,
                    "still allocating {RECHECK_BOUND:?} after maxmemory-policy volatile-lru was set"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => break e,
        }
    };
    assert!(
        matches!(&e, Error::Unavailable(m) if m.contains("maxmemory-policy")),
        "{e}"
    );

    admin(&url, &["CONFIG", "SET", "maxmemory-policy", "noeviction"])
        .await
        .expect("config set");
    store
        .allocate(&t, None)
        .await
        .expect("allocate once the server evicts nothing again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_not_acknowledged_by_the_replicas_are_unavailable() {
    // The shared server has no replicas: `WAIT 1` times out with 0 acknowledgements.
    let fix = StoreFix::new().await;
    let plain = fix.connect().await;
    let t = new_tag(&plain, "wait", 10).await;
    let waiting_config = RedisConfig {
        wait_replicas: 1,
        wait_timeout_ms: 200,
        ..fix.config.clone()
    };
    let waiting = RedisStore::connect(&waiting_config).await.expect("connect");
    let e = waiting
        .allocate(&t, None)
        .await
        .expect_err("an allocation no replica acknowledged");
    assert!(
        matches!(&e, Error::Unavailable(m) if m.contains("wait_replicas")),
        "{e}"
    );
    let next = plain.allocate(&t, None).await.expect("allocate").range();
    assert!(
        next.start > 1,
        "the unacknowledged segment is never handed out again: {next:?}"
    );

    let dir = tempfile::tempdir().unwrap();
    let registry = RedisClaims::new(&waiting_config, "leaf")
        .map(|b| b.registry(dir.path().to_path_buf()))
        .unwrap();
    let e = registry
        .acquire(&request(leaf_core::NodeIdentity::new("10.0.0.4", 1), 0))
        .await
        .expect_err("a claim no replica acknowledged");
    assert!(
        matches!(&e, Error::Unavailable(m) if m.contains("wait_replicas")),
        "{e}"
    );
    // The unacknowledged claim was given back, not left to expire.
    let dir2 = tempfile::tempdir().unwrap();
    let plain_registry = RedisClaims::new(&fix.config, "leaf")
        .map(|b| b.registry(dir2.path().to_path_buf()))
        .unwrap();
    let lease = plain_registry
        .acquire(&request(leaf_core::NodeIdentity::new("10.0.0.4", 2), 0))
        .await
        .expect("the id came back at once");
    assert_eq!(lease.worker_id, 0);
    plain_registry
        .release(&lease, now_ms())
        .await
        .expect("release");
}

/// The `INFO replication` field `field` of the server at `url`.
async fn replication_field(url: &str, field: &str) -> Option<String> {
    let text = match admin(url, &["INFO", "replication"]).await.ok()? {
        redis::Value::BulkString(b) => String::from_utf8(b).ok()?,
        redis::Value::VerbatimString { text, .. } => text,
        _ => return None,
    };
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .map(|v| v.trim().to_owned())
}

/// Waits (30 s at most) until the primary at `url` counts `n` connected replicas.
async fn until_replicas(url: &str, n: u32) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while replication_field(url, "connected_slaves").await != Some(n.to_string()) {
        assert!(
            Instant::now() < deadline,
            "the primary never had {n} replica(s)"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A replica that connects after the store's start-up (it was down, or added later) is found
/// while the store serves: the guard runs again on the open connection, and writes that
/// `wait_replicas = 0` would leave unacknowledged on it stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_connects_while_serving_is_found_by_the_guard() {
    let (primary, replica) = redis_with_replica()
        .await
        .unwrap_or_else(|e| panic!("no Redis primary and replica for the test: {e}"));
    let (url, replica_url) = (
        primary.endpoint().url.clone(),
        replica.endpoint().url.clone(),
    );
    until_replicas(&url, 1).await;
    let master_host = replication_field(&replica_url, "master_host")
        .await
        .unwrap();
    let master_port = replication_field(&replica_url, "master_port")
        .await
        .unwrap();
    admin(&replica_url, &["REPLICAOF", "NO", "ONE"])
        .await
        .unwrap();
    until_replicas(&url, 0).await;

    // Bound to a name: a temporary namespace would be dropped at the end of the statement and
    // its keys deleted in the background, under the test's feet.
    let ns = namespace_on(&url);
    let store = RedisStore::connect(&config_of(&ns))
        .await
        .expect("no replica connected: the guard passes");
    let t = new_tag(&store, "later", 10).await;
    store.allocate(&t, None).await.expect("allocate");

    admin(&replica_url, &["REPLICAOF", &master_host, &master_port])
        .await
        .unwrap();
    until_replicas(&url, 1).await;
    let deadline = Instant::now() + RECHECK_BOUND;
    let e = loop {
        match store.allocate(&t, None).await {
            Ok(_) => {
                assert!(
                    Instant::now() < deadline,
                    "still allocating {RECHECK_BOUND:?} after a replica connected"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => break e,
        }
    };
    assert!(
        matches!(&e, Error::Unavailable(m) if m.contains("wait_replicas")),
        "{e}"
    );
}

/// How long after a replica connects the guard must have found it: its re-check period (5 s)
/// and the slack of a busy machine.
const RECHECK_BOUND: Duration = Duration::from_secs(15);

/// A primary with a connected replica is refused while `wait_replicas` is below the replica
/// count (a failover could promote a replica that missed an acknowledged write), unless
/// `accept_weak_durability`. With `WAIT 1` acknowledged, allocations and claims succeed, and
/// what the primary answered is on the replica when the answer arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_with_a_replica_needs_wait_replicas_and_its_writes_are_on_it() {
    let (primary, replica) = redis_with_replica()
        .await
        .unwrap_or_else(|e| panic!("no Redis primary and replica for the test: {e}"));
    let url = primary.endpoint().url.clone();
    // The replica syncs after it starts: wait until a write is acknowledged by it.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(redis::Value::Int(1)) = admin(&url, &["WAIT", "1", "200"]).await {
            break;
        }
        assert!(Instant::now() < deadline, "the replica never synced");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let ns = namespace_on(&url);
    let unacknowledged = config_of(&ns);
    assert_eq!(unacknowledged.wait_replicas, 0);
    let e = RedisStore::connect(&unacknowledged)
        .await
        .expect_err("a store on a primary whose replica acknowledges nothing");
    assert!(
        matches!(&e, Error::Config(m) if m.contains("wait_replicas is 0")
            && m.contains("1 connected replica") && m.contains("accept_weak_durability")),
        "{e}"
    );
    let dir = tempfile::tempdir().unwrap();
    let e = RedisClaims::new(&unacknowledged, "leaf")
        .map(|b| b.registry(dir.path().to_path_buf()))
        .unwrap()
        .acquire(&request(leaf_core::NodeIdentity::new("10.0.0.5", 1), 0))
        .await
        .expect_err("a claim on a primary whose replica acknowledges nothing");
    assert!(
        matches!(&e, Error::Config(m) if m.contains("wait_replicas")),
        "{e}"
    );
    RedisStore::connect(&RedisConfig {
        accept_weak_durability: true,
        ..unacknowledged.clone()
    })
    .await
    .expect("accepted with accept_weak_durability");

    let config = RedisConfig {
        wait_replicas: 1,
        wait_timeout_ms: 2000,
        ..unacknowledged
    };
    let store = RedisStore::connect(&config).await.expect("connect");
    let t = new_tag(&store, "replicated", 10).await;
    for _ in 0..5 {
        let seg = store
            .allocate(&t, None)
            .await
            .expect("an acknowledged allocation");
        let key = format!("{}:tag:{t}", ns.prefix);
        let on_replica = admin(&replica.endpoint().url, &["HGET", &key, "max_id"])
            .await
            .expect("HGET on the replica");
        let max_id: i64 = match on_replica {
            redis::Value::BulkString(b) => String::from_utf8(b).unwrap().parse().unwrap(),
            other => panic!("max_id on the replica: {other:?}"),
        };
        assert_eq!(
            max_id,
            seg.range().end,
            "the replica holds the segment's end"
        );
    }

    let dir = tempfile::tempdir().unwrap();
    let registry = RedisClaims::new(&config, "leaf")
        .map(|b| b.registry(dir.path().to_path_buf()))
        .unwrap();
    let lease = registry
        .acquire(&request(leaf_core::NodeIdentity::new("10.0.0.5", 1), 0))
        .await
        .expect("an acknowledged claim");
    let renewed = registry
        .renew(&lease, now_ms() + 3000)
        .await
        .expect("an acknowledged renewal");
    assert!(renewed.is_ok(), "{renewed:?}");
    registry.release(&lease, now_ms()).await.expect("release");
    replica.remove().await.unwrap();
    primary.remove().await.unwrap();
}
