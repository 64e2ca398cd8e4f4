//! Sessions lost, taken over and recovered, and ZooKeeper going away while a node serves.

use super::*;

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
    // The earlier session's client is kept alive here (that is how the server is made to keep
    // the session), and takes the session back each time the renewal joins it to close it, so
    // the end can take a few tries: a renewal that runs out of time on it is unavailable, and
    // tried again, as the generator does; one that reports the lease lost fails the test.
    let mut r = node.renew(&lease, now_ms() + 3000).await;
    for _ in 0..3 {
        match r {
            Err(Error::Unavailable(_)) => r = node.renew(&lease, now_ms() + 3000).await,
            _ => break,
        }
    }
    let r = r.unwrap();
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
