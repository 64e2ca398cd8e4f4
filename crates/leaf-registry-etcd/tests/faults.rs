//! The etcd backend under faults, against real servers: etcd stopped while serving, many
//! claimers and allocators at once, an owner frozen past its lease, and a three-member cluster
//! losing a member.

mod common;

use std::collections::BTreeSet;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{EtcdFix, StallingProxy, now_ms, request};
use leaf_core::{Error, NewTag, Renewal, SegmentStore, Tag, WorkerIdRegistry};
use leaf_testkit::provision;

fn tag(name: &str) -> Tag {
    Tag::new(name).unwrap()
}

/// Asserts that no two ranges overlap.
fn assert_disjoint(ranges: &[Range<i64>]) {
    let mut sorted = ranges.to_vec();
    sorted.sort_by_key(|r| r.start);
    for w in sorted.windows(2) {
        assert!(
            w[0].end <= w[1].start,
            "segments {:?} and {:?} overlap",
            w[0],
            w[1]
        );
    }
}

/// Retries `f` while it fails with a retryable error, for at most `patience`.
async fn retrying<T, F, Fut>(patience: Duration, mut f: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, Error>>,
{
    let start = Instant::now();
    loop {
        match f().await {
            Err(e) if e.is_retryable() && start.elapsed() < patience => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            r => return r,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_fail_unavailable_while_etcd_is_stopped_and_work_again_after() {
    let server = provision::dedicated(&provision::ETCD)
        .await
        .unwrap_or_else(|e| panic!("no etcd for the test: {e}"));
    let fix = EtcdFix::on(std::slice::from_ref(&server.endpoint().url), "/faults");
    let store = fix.new_store().await;
    let t = tag("stopped");
    store.create(&NewTag::new(t.clone())).await.expect("create");
    let before = store.allocate(&t, None).await.expect("allocate").range();
    let node = fix.registry();
    let lease = node
        .acquire(&request(fix_identity(1), 1023))
        .await
        .expect("acquire");
    let renewed = now_ms() + 3000;
    assert!(node.renew(&lease, renewed).await.expect("renew").is_ok());

    server.stop(Duration::ZERO).await.expect("stop etcd");
    let limit = Duration::from_millis(fix.config.timeout_ms) + Duration::from_secs(2);
    let started = Instant::now();
    let e = store.allocate(&t, None).await.expect_err("etcd is down");
    assert!(matches!(e, Error::Unavailable(_)), "{e}");
    assert!(started.elapsed() < limit, "took {:?}", started.elapsed());
    let e = store.get(&t).await.expect_err("etcd is down");
    assert!(matches!(e, Error::Unavailable(_)), "{e}");
    let started = Instant::now();
    let e = node
        .renew(&lease, renewed + 1000)
        .await
        .expect_err("a renewal while etcd is down");
    assert!(matches!(e, Error::Unavailable(_)), "{e}");
    assert!(started.elapsed() < limit, "took {:?}", started.elapsed());

    server.start().await.expect("start etcd");
    let patience = Duration::from_secs(15);
    let after = retrying(patience, || store.allocate(&t, None))
        .await
        .expect("allocate after the restart")
        .range();
    assert_disjoint(&[before, after]);
    // The lease may have outlived the outage (etcd restarts leases with a full TTL) or not.
    match retrying(patience, || node.renew(&lease, now_ms() + 3000))
        .await
        .expect("renew after the restart")
    {
        Renewal::Ok { ttl } => assert!(ttl.is_some()),
        Renewal::LeaseLost => {
            let again = node
                .acquire(&request(fix_identity(1), 1023))
                .await
                .expect("acquire after a lost lease");
            assert!(
                again.prev_mark_ms >= Some(renewed),
                "{:?}",
                again.prev_mark_ms
            );
        }
    }
    server.remove().await.expect("remove");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_server_never_hangs_a_caller() {
    let ns = common::namespace().await;
    let proxy = StallingProxy::start(&ns.endpoints[0]).await;
    let fix = EtcdFix::on(std::slice::from_ref(&proxy.url), &ns.prefix);
    let store = fix.new_store().await;
    let t = tag("stalled");
    store.create(&NewTag::new(t.clone())).await.expect("create");
    let before = store.allocate(&t, None).await.expect("allocate").range();
    let node = fix.registry();
    let lease = node
        .acquire(&request(fix_identity(1), 1023))
        .await
        .expect("acquire");
    assert!(
        node.renew(&lease, now_ms() + 3000)
            .await
            .expect("renew")
            .is_ok()
    );

    proxy.set_frozen(true);
    let limit = Duration::from_millis(fix.config.timeout_ms) + Duration::from_secs(3);
    let started = Instant::now();
    let e = store
        .allocate(&t, None)
        .await
        .expect_err("a stalled server");
    assert!(matches!(e, Error::Unavailable(_)), "{e}");
    assert!(started.elapsed() < limit, "took {:?}", started.elapsed());
    let started = Instant::now();
    let e = node
        .renew(&lease, now_ms() + 3000)
        .await
        .expect_err("a renewal on a stalled server");
    assert!(matches!(e, Error::Unavailable(_)), "{e}");
    assert!(started.elapsed() < limit, "took {:?}", started.elapsed());
    let started = Instant::now();
    let e = fix
        .registry()
        .acquire(&request(fix_identity(2), 1023))
        .await
        .expect_err("a claim on a stalled server");
    assert!(matches!(e, Error::Unavailable(_)), "{e}");
    assert!(started.elapsed() < limit, "took {:?}", started.elapsed());

    proxy.set_frozen(false);
    let patience = Duration::from_secs(15);
    let after = retrying(patience, || store.allocate(&t, None))
        .await
        .expect("allocate after the stall")
        .range();
    assert_disjoint(&[before, after]);
    retrying(patience, || node.release(&lease, now_ms()))
        .await
        .expect("release");
}

fn fix_identity(i: u16) -> leaf_core::NodeIdentity {
    leaf_core::NodeIdentity::new("10.0.0.2", 9000 + i)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_concurrent_claimers_get_twenty_distinct_ids() {
    let fix = EtcdFix::new().await;
    let mut tasks = Vec::new();
    for i in 0..20 {
        let node = fix.registry();
        tasks.push(tokio::spawn(async move {
            let lease = node.acquire(&request(fix_identity(i), 1023)).await;
            (node, lease)
        }));
    }
    let mut ids = BTreeSet::new();
    let mut held = Vec::new();
    for t in tasks {
        let (node, lease) = t.await.expect("claiming task");
        let lease = lease.expect("acquire");
        assert!(ids.insert(lease.worker_id), "id {} twice", lease.worker_id);
        held.push((node, lease));
    }
    assert_eq!(ids.len(), 20);
    // The lowest free ids: nothing else runs in this prefix.
    assert_eq!(ids, (0..20).collect::<BTreeSet<u64>>());
    for (node, lease) in held {
        node.release(&lease, now_ms()).await.expect("release");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_store_handles_allocating_one_tag_get_disjoint_segments() {
    let fix = EtcdFix::new().await;
    let t = tag("contended");
    let first = fix.new_store().await;
    first
        .create(&NewTag {
            step: 10,
            ..NewTag::new(t.clone())
        })
        .await
        .expect("create");
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let store = fix.new_store().await;
        let t = t.clone();
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            for _ in 0..25 {
                got.push(store.allocate(&t, None).await.expect("allocate").range());
            }
            got
        }));
    }
    let mut ranges = Vec::new();
    for task in tasks {
        ranges.extend(task.await.expect("allocating task"));
    }
    assert_eq!(ranges.len(), 100);
    assert!(ranges.iter().all(|r| r.end - r.start == 10), "{ranges:?}");
    assert_disjoint(&ranges);
    // Without faults nothing is skipped either: the segments tile [1, 1001).
    let row = first.get(&t).await.expect("get").expect("the tag");
    assert_eq!(row.max_id, 1001);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_owner_gets_lease_lost_and_the_new_owner_starts_past_its_mark() {
    let fix = EtcdFix::new().await;
    let a = fix.registry();
    let lease = a
        .acquire(&request(fix_identity(1), 0))
        .await
        .expect("acquire");
    let ttl = lease.ttl.expect("a recycling lease has a ttl");
    let m = now_ms() + 3000;
    assert!(a.renew(&lease, m).await.expect("renew").is_ok());
    // Frozen: no renewal for longer than the TTL, while another node claims the id.
    tokio::time::sleep(ttl + Duration::from_secs(3)).await;
    let b = fix.registry();
    let next = b
        .acquire(&request(fix_identity(2), 0))
        .await
        .expect("acquire");
    assert_eq!(next.worker_id, lease.worker_id);
    assert_ne!(next.token, lease.token);
    assert!(
        next.prev_mark_ms >= Some(m),
        "{:?} < {m}",
        next.prev_mark_ms
    );
    let r = a.renew(&lease, m + 5000).await.expect("late renew");
    assert_eq!(r, Renewal::LeaseLost);
    // The thawed owner wrote nothing: the new owner renews, and its mark is the one kept.
    let m2 = now_ms() + 3000;
    assert!(b.renew(&next, m2).await.expect("renew").is_ok());
    b.release(&next, m2).await.expect("release");
    let c = fix.registry();
    let third = c
        .acquire(&request(fix_identity(3), 0))
        .await
        .expect("acquire");
    assert_eq!(third.prev_mark_ms, Some(m2));
    c.release(&third, m2).await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_member_cluster_keeps_allocating_with_one_member_stopped() {
    let cluster = provision::etcd_cluster()
        .await
        .unwrap_or_else(|e| panic!("no etcd cluster for the test: {e}"));
    let fix = EtcdFix::on(cluster.endpoints(), "/cluster");
    let store: Arc<dyn SegmentStore> = fix.new_store().await;
    let t = tag("clustered");
    store
        .create(&NewTag {
            step: 100,
            ..NewTag::new(t.clone())
        })
        .await
        .expect("create");
    let node = fix.registry();
    let lease = node
        .acquire(&request(fix_identity(1), 1023))
        .await
        .expect("acquire");
    // The node renews every 500 ms throughout, as the generator would.
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let renewer = {
        let (node, lease) = (node.clone(), lease.clone());
        tokio::spawn(async move {
            let (mut ok, mut failed) = (0u32, Vec::new());
            loop {
                match node.renew(&lease, now_ms() + 3000).await {
                    Ok(Renewal::Ok { .. }) => ok += 1,
                    Ok(Renewal::LeaseLost) => {
                        return Err(format!(
                            "lease lost after {ok} renewals; failures {failed:?}"
                        ));
                    }
                    Err(e) => failed.push(e.to_string()),
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                    _ = stopped.changed() => return Ok((ok, failed)),
                }
            }
        })
    };
    let patience = Duration::from_secs(20);
    let mut ranges = Vec::new();
    for _ in 0..20 {
        ranges.push(store.allocate(&t, None).await.expect("allocate").range());
    }
    cluster.members()[0]
        .stop(Duration::ZERO)
        .await
        .expect("stop a member");
    for _ in 0..40 {
        let r = retrying(patience, || store.allocate(&t, None))
            .await
            .expect("allocate with a member down");
        ranges.push(r.range());
    }
    cluster.members()[0]
        .start()
        .await
        .expect("start the member");
    for _ in 0..20 {
        let r = retrying(patience, || store.allocate(&t, None))
            .await
            .expect("allocate after the member came back");
        ranges.push(r.range());
    }
    stop.send_replace(true);
    let (ok, failed) = renewer
        .await
        .expect("renewing task")
        .unwrap_or_else(|e| panic!("{e}"));
    // A renewal may fail while the cluster elects a leader, never for the whole TTL.
    assert!(ok >= 2, "{ok} renewals succeeded; failures {failed:?}");
    assert_eq!(ranges.len(), 80);
    assert_disjoint(&ranges);
    // The cluster may still be settling after the member's return: a release that cannot reach
    // it keeps the claim, so trying again is safe.
    retrying(patience, || node.release(&lease, now_ms()))
        .await
        .expect("release");
    cluster.remove().await.expect("remove the cluster");
}

/// A client of the test's etcd of its own, as another process (or a late packet) would use.
async fn raw_client(fix: &EtcdFix) -> etcd_client::Client {
    etcd_client::Client::connect(&fix.config.endpoints, None)
        .await
        .expect("a raw etcd client")
}

/// What `marks/{id}` holds, read straight from etcd.
async fn stored_mark(raw: &mut etcd_client::Client, fix: &EtcdFix, id: u64) -> Option<u64> {
    let key = format!("{}/{}/marks/{id}", fix.config.prefix, common::NAME);
    let got = raw.get(key.as_str(), None).await.expect("read the mark");
    got.kvs().first().map(|kv| {
        kv.value_str()
            .expect("utf-8")
            .parse()
            .unwrap_or_else(|e| panic!("{key} holds no mark: {e}"))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_mark_write_never_lowers_the_stored_mark() {
    let fix = EtcdFix::new().await;
    let node = fix.registry();
    let lease = node
        .acquire(&request(fix_identity(1), 0))
        .await
        .expect("acquire");
    let first = now_ms() + 3000;
    assert!(node.renew(&lease, first).await.expect("renew").is_ok());
    // A renewal's mark write whose answer is lost (the client timed out) while the write is
    // still on its way to etcd: held here, sent after the next renewal.
    let late_mark = first + 1000;
    let late = node
        .backend()
        .mark_write_txn(&lease, late_mark)
        .await
        .expect("the lease is held");
    let high = first + 2000;
    assert!(node.renew(&lease, high).await.expect("renew").is_ok());
    let mut raw = raw_client(&fix).await;
    let landed = raw.txn(late).await.expect("the late write");
    assert_eq!(
        stored_mark(&mut raw, &fix, lease.worker_id).await,
        Some(high),
        "the mark write of {late_mark} landed after the renewal of {high} (committed: {})",
        landed.succeeded()
    );
    assert!(!landed.succeeded(), "the late write committed");
    // And the next claimer of the id starts past the high mark.
    node.abandon(&lease).await;
    tokio::time::sleep(lease.ttl.expect("ttl") + Duration::from_secs(3)).await;
    let next = fix.registry();
    let again = next
        .acquire(&request(fix_identity(2), 0).with_max_ahead_ms(60_000))
        .await
        .expect("acquire after the expiry");
    assert_eq!(again.worker_id, lease.worker_id);
    assert!(again.prev_mark_ms >= Some(high), "{:?}", again.prev_mark_ms);
    next.release(&again, now_ms()).await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mark_write_of_mine_that_landed_unseen_is_kept_or_raised_never_a_lost_lease() {
    let fix = EtcdFix::new().await;
    let mut raw = raw_client(&fix).await;
    let node = fix.registry();
    let lease = node
        .acquire(&request(fix_identity(1), 0))
        .await
        .expect("acquire");
    let id = lease.worker_id;
    let m = now_ms() + 3000;
    assert!(node.renew(&lease, m).await.expect("renew").is_ok());

    // A write of this holder lands, its answer lost; the next renewal asks for less: the
    // stored mark stays, the lease with it.
    let unseen = node
        .backend()
        .mark_write_txn(&lease, m + 2000)
        .await
        .expect("held");
    assert!(raw.txn(unseen).await.expect("txn").succeeded());
    let r = node.renew(&lease, m + 1000).await.expect("renew");
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(stored_mark(&mut raw, &fix, id).await, Some(m + 2000));

    // Again, then a renewal that asks for more: written over the unseen one.
    let unseen = node
        .backend()
        .mark_write_txn(&lease, m + 3000)
        .await
        .expect("held");
    assert!(raw.txn(unseen).await.expect("txn").succeeded());
    let r = node.renew(&lease, m + 4000).await.expect("renew");
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(stored_mark(&mut raw, &fix, id).await, Some(m + 4000));

    // And the release's final mark (the last timestamp issued, below the renewed marks) is
    // written over an unseen renewal's too.
    let unseen = node
        .backend()
        .mark_write_txn(&lease, m + 5000)
        .await
        .expect("held");
    assert!(raw.txn(unseen).await.expect("txn").succeeded());
    let last = now_ms();
    node.release(&lease, last).await.expect("release");
    assert_eq!(stored_mark(&mut raw, &fix, id).await, Some(last));
    let next = fix.registry();
    let again = next
        .acquire(&request(fix_identity(2), 0))
        .await
        .expect("acquire");
    assert_eq!((again.worker_id, again.prev_mark_ms), (id, Some(last)));
    next.release(&again, now_ms()).await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_lost_between_grant_and_claim_is_granted_again_and_never_stops_the_start() {
    let fix = EtcdFix::new().await;
    let node = fix.registry();
    node.backend().revoke_granted_leases(1);
    let lease = node
        .acquire(&request(fix_identity(1), 1023))
        .await
        .expect("acquire with the first lease gone before the claim");
    assert!(
        node.renew(&lease, now_ms() + 3000)
            .await
            .expect("renew")
            .is_ok()
    );

    // Every lease gone before its claim: a bounded number of tries, then a retryable error
    // (the server's start-up retries it), never `NotFound`.
    let other = fix.registry();
    other.backend().revoke_granted_leases(u32::MAX);
    let e = other
        .acquire(&request(fix_identity(2), 1023))
        .await
        .expect_err("every lease gone before its claim");
    assert!(matches!(e, Error::Unavailable(_)), "{e}");
    other.backend().revoke_granted_leases(0);
    let theirs = other
        .acquire(&request(fix_identity(2), 1023))
        .await
        .expect("acquire");
    assert_ne!(theirs.worker_id, lease.worker_id);
    other.release(&theirs, now_ms()).await.expect("release");
    node.release(&lease, now_ms()).await.expect("release");
}
