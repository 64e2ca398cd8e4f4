//! The worker-id registry conformance cases. Each takes a [`RegistryFixture`] and panics, with
//! a message saying what broke, if the registry does not keep the lease contract of
//! `leaf_core::WorkerIdRegistry`.

use std::collections::BTreeSet;
use std::sync::Arc;

use leaf_core::{Error, Lease, NodeIdentity, Renewal, WorkerIdRegistry};

use crate::RegistryFixture;
use crate::fixture::now_ms;
pub use crate::fixture::request;

/// The largest worker id of Leaf's default layout (10 worker bits).
pub const DEFAULT_MAX_WORKER_ID: u64 = 1023;

async fn acquire(registry: &dyn WorkerIdRegistry, identity: NodeIdentity, max: u64) -> Lease {
    registry
        .acquire(&request(identity.clone(), max))
        .await
        .unwrap_or_else(|e| panic!("acquire for {identity}: {e}"))
}

async fn renew(registry: &dyn WorkerIdRegistry, lease: &Lease, mark: u64) {
    let r = registry.renew(lease, mark).await.expect("renew");
    assert!(r.is_ok(), "renewing a lease just acquired: {r:?}");
}

// In a recycling registry an identity holds no id of its own; asking for a pool of one id
// (`max_worker_id` 0) makes "the same id again" well defined there too.
fn single_id_max(registry: &dyn WorkerIdRegistry) -> u64 {
    if registry.capabilities().recycles {
        0
    } else {
        DEFAULT_MAX_WORKER_ID
    }
}

/// A node acquires an id within the layout, with a TTL in recycling modes and none where
/// nothing fences (a fencing mode that does not recycle may grant one: `zk_normal` with
/// `fence_on_disconnect`), renews it and releases it.
pub async fn acquire_renew_release(fixture: &dyn RegistryFixture) {
    let node = fixture.node().await;
    let caps = node.capabilities();
    let lease = acquire(&*node, fixture.identity(1), DEFAULT_MAX_WORKER_ID).await;
    assert!(lease.worker_id <= DEFAULT_MAX_WORKER_ID);
    if caps.recycles || !caps.confirms_marks {
        assert_eq!(
            lease.ttl.is_some(),
            caps.recycles,
            "a lease has a TTL in recycling modes, none where nothing fences"
        );
    }
    if let Some(mark) = lease.prev_mark_ms {
        panic!(
            "a fresh namespace has no mark for worker id {}, got {mark}",
            lease.worker_id
        );
    }
    renew(&*node, &lease, now_ms() + 3000).await;
    node.release(&lease, now_ms()).await.expect("release");
}

/// Eight nodes of eight identities acquire at once and get eight distinct ids.
pub async fn distinct_identities_get_distinct_ids(fixture: &dyn RegistryFixture) {
    let mut tasks = Vec::new();
    for i in 1..=8 {
        let node = fixture.node().await;
        let identity = fixture.identity(i);
        tasks.push(tokio::spawn(async move {
            let lease = acquire(&*node, identity, DEFAULT_MAX_WORKER_ID).await;
            (node, lease)
        }));
    }
    let mut ids = BTreeSet::new();
    let mut held = Vec::new();
    for t in tasks {
        let (node, lease) = t.await.expect("acquiring task");
        assert!(lease.worker_id <= DEFAULT_MAX_WORKER_ID);
        assert!(
            ids.insert(lease.worker_id),
            "worker id {} given twice",
            lease.worker_id
        );
        held.push((node, lease));
    }
    for (node, lease) in held {
        node.release(&lease, now_ms()).await.expect("release");
    }
}

/// Renew with mark M, release with final mark F, restart, acquire: the same id comes back
/// with `prev_mark_ms == Some(F)`.
pub async fn mark_comes_back_on_reacquire(fixture: &dyn RegistryFixture) {
    let node = fixture.node().await;
    let max = single_id_max(&*node);
    let lease = acquire(&*node, fixture.identity(1), max).await;
    let (m, f) = (now_ms() + 2000, now_ms() + 1000);
    renew(&*node, &lease, m).await;
    node.release(&lease, f).await.expect("release");
    let node = fixture.restarted(node).await;
    let again = acquire(&*node, fixture.identity(1), max).await;
    assert_eq!(
        again.worker_id, lease.worker_id,
        "the same id after a restart"
    );
    assert_eq!(again.prev_mark_ms, Some(f), "the final mark comes back");
    node.release(&again, f).await.expect("release");
}

/// Release and acquire again on the same registry: the id comes back and can be renewed.
pub async fn release_then_reacquire(fixture: &dyn RegistryFixture) {
    let node = fixture.node().await;
    let max = single_id_max(&*node);
    let lease = acquire(&*node, fixture.identity(2), max).await;
    renew(&*node, &lease, now_ms() + 3000).await;
    let f = now_ms();
    node.release(&lease, f).await.expect("release");
    let again = acquire(&*node, fixture.identity(2), max).await;
    assert_eq!(again.worker_id, lease.worker_id);
    assert!(
        again.prev_mark_ms >= Some(f),
        "the mark was lost: {:?}",
        again.prev_mark_ms
    );
    renew(&*node, &again, now_ms() + 3000).await;
    node.release(&again, now_ms()).await.expect("release");
}

/// A released lease cannot be renewed: `LeaseLost`, never a mark written for an id the node
/// no longer holds.
pub async fn renew_after_release_is_lease_lost(fixture: &dyn RegistryFixture) {
    let node = fixture.node().await;
    let lease = acquire(&*node, fixture.identity(3), DEFAULT_MAX_WORKER_ID).await;
    node.release(&lease, now_ms()).await.expect("release");
    let r = node.renew(&lease, now_ms() + 3000).await.expect("renew");
    assert_eq!(r, Renewal::LeaseLost);
}

/// (`recycles = false`) An identity keeps its id: acquired, released, and acquired on a new
/// node (a new cache directory), it is the same; another identity's differs.
pub async fn same_identity_gets_the_same_id(fixture: &dyn RegistryFixture) {
    let first = fixture.node().await;
    assert!(!first.capabilities().recycles, "run only without recycling");
    let lease = acquire(&*first, fixture.identity(3), DEFAULT_MAX_WORKER_ID).await;
    first.release(&lease, now_ms()).await.expect("release");
    let second = fixture.node().await;
    let again = acquire(&*second, fixture.identity(3), DEFAULT_MAX_WORKER_ID).await;
    assert_eq!(again.worker_id, lease.worker_id);
    let other = fixture.node().await;
    let theirs = acquire(&*other, fixture.identity(4), DEFAULT_MAX_WORKER_ID).await;
    assert_ne!(theirs.worker_id, again.worker_id);
}

/// (`recycles = false`) A renewed mark survives a crash: renew M, drop the node without a
/// release, restart it: the same id, with `prev_mark_ms >= M`.
pub async fn renewed_mark_survives_a_crash(fixture: &dyn RegistryFixture) {
    let node = fixture.node().await;
    assert!(!node.capabilities().recycles, "run only without recycling");
    let lease = acquire(&*node, fixture.identity(5), DEFAULT_MAX_WORKER_ID).await;
    let m = now_ms() + 3000;
    renew(&*node, &lease, m - 1000).await;
    renew(&*node, &lease, m).await;
    let node = fixture.restarted(node).await;
    let again = acquire(&*node, fixture.identity(5), DEFAULT_MAX_WORKER_ID).await;
    assert_eq!(again.worker_id, lease.worker_id);
    assert!(
        again.prev_mark_ms >= Some(m),
        "mark {m} was renewed before the crash, got {:?}",
        again.prev_mark_ms
    );
}

/// Marks only rise: a renewal with a mark below the stored one (a late or repeated write, or a
/// new claimer that knows less) never lowers it. In a shared registry the check reaches the
/// backend's own guard: after a crash (no release), a node with a fresh cache directory (in
/// recycling modes once the lease expired) claims the id, reads the high mark from the
/// registry, renews with a lower one (its cache-file half, which has raised nothing yet, passes
/// it on as it is) and crashes; the next such node must still read the high mark. In `local`
/// mode, whose only record is the cache file, a lower renewal of one claim must not lower it.
pub async fn a_late_lower_mark_never_lowers_the_stored_one(fixture: &dyn RegistryFixture) {
    let node = fixture.node().await;
    let caps = node.capabilities();
    let max = single_id_max(&*node);
    let lease = acquire(&*node, fixture.identity(1), max).await;
    let high = now_ms() + 60_000;
    let low = high - 50_000;
    renew(&*node, &lease, high).await;
    // `max_ahead_ms` above `high`: the id must come back, carrying whatever mark is stored.
    let req = |i| request(fixture.identity(i), max).with_max_ahead_ms(120_000);
    if !caps.assigns_distinct_ids {
        renew(&*node, &lease, low).await;
        let next = fixture.restarted(node).await;
        let again = next
            .acquire(&req(1))
            .await
            .expect("acquire after the restart");
        assert!(
            again.prev_mark_ms >= Some(high),
            "mark {high} was renewed, then {low}: the restarted node read {:?}",
            again.prev_mark_ms
        );
        return;
    }
    // The id after a crash of its holder, on a node with a fresh cache directory.
    let claim_after_crash = |holder: Arc<dyn WorkerIdRegistry>, held: Lease, i: u16| async move {
        if caps.recycles {
            holder.abandon(&held).await;
            fixture.let_expire(held.ttl.expect("ttl")).await;
        }
        drop(holder);
        let next = fixture.node().await;
        let lease = next
            .acquire(&req(if caps.recycles { i } else { 1 }))
            .await
            .expect("acquire after the crash");
        assert_eq!(lease.worker_id, held.worker_id, "the same id comes back");
        (next, lease)
    };
    let (b, theirs) = claim_after_crash(node, lease, 2).await;
    assert!(
        theirs.prev_mark_ms >= Some(high),
        "mark {high} was renewed before the crash; a node with no cache file read {:?}",
        theirs.prev_mark_ms
    );
    renew(&*b, &theirs, low).await;
    let (c, third) = claim_after_crash(b, theirs, 3).await;
    assert!(
        third.prev_mark_ms >= Some(high),
        "mark {high} was stored, then {low} renewed: the next claimer read {:?}",
        third.prev_mark_ms
    );
    c.release(&third, now_ms()).await.expect("release");
}

/// (`confirms_marks = true`) A renewal that answered `Ok` is on the registry's server: after a
/// crash (no release), a node with no cache file of this id (another machine) claims it (in
/// recycling modes once the lease expired) and starts past the mark.
pub async fn a_confirmed_mark_survives_a_crash_on_another_node(fixture: &dyn RegistryFixture) {
    let node = fixture.node().await;
    let caps = node.capabilities();
    assert!(caps.confirms_marks, "run only where marks are confirmed");
    let max = single_id_max(&*node);
    let lease = acquire(&*node, fixture.identity(5), max).await;
    let m = now_ms() + 3000;
    renew(&*node, &lease, m - 1000).await;
    renew(&*node, &lease, m).await;
    if caps.recycles {
        node.abandon(&lease).await;
        fixture.let_expire(lease.ttl.expect("ttl")).await;
    }
    // The crash: the registry goes without a release.
    drop(node);
    let elsewhere = fixture.node().await;
    let identity = fixture.identity(if caps.recycles { 6 } else { 5 });
    let again = acquire(&*elsewhere, identity, max).await;
    assert_eq!(again.worker_id, lease.worker_id);
    assert!(
        again.prev_mark_ms >= Some(m),
        "mark {m} was confirmed before the crash; a node with no cache file read {:?}",
        again.prev_mark_ms
    );
    elsewhere.release(&again, now_ms()).await.expect("release");
}

/// (`recycles = false`) An identity whose id is above the request's `max_worker_id` is refused
/// with `Config`.
pub async fn id_beyond_the_layout_is_config(fixture: &dyn RegistryFixture) {
    let mut highest = (0, fixture.identity(1));
    for i in 1..=2 {
        let node = fixture.node().await;
        let lease = acquire(&*node, fixture.identity(i), DEFAULT_MAX_WORKER_ID).await;
        node.release(&lease, now_ms()).await.expect("release");
        if lease.worker_id >= highest.0 {
            highest = (lease.worker_id, fixture.identity(i));
        }
    }
    let (id, identity) = highest;
    assert!(id > 0, "two identities got id 0");
    let node = fixture.node().await;
    let e = node
        .acquire(&request(identity, id - 1))
        .await
        .expect_err("an id above max_worker_id");
    assert!(matches!(e, Error::Config(_)), "{e}");
}

/// (`recycles = true`) A released id goes to the next node with its final mark, so the new
/// owner starts past the previous owner's last timestamp.
pub async fn released_id_carries_its_mark(fixture: &dyn RegistryFixture) {
    let a = fixture.node().await;
    assert!(a.capabilities().recycles, "run only with recycling");
    let lease = acquire(&*a, fixture.identity(1), 0).await;
    assert_eq!(lease.worker_id, 0);
    renew(&*a, &lease, now_ms() + 2000).await;
    let f = now_ms() + 1000;
    a.release(&lease, f).await.expect("release");
    let b = fixture.node().await;
    let next = acquire(&*b, fixture.identity(2), 0).await;
    assert_eq!(next.worker_id, 0);
    assert!(next.prev_mark_ms >= Some(f), "got {:?}", next.prev_mark_ms);
    let r = a.renew(&lease, now_ms() + 3000).await.expect("renew");
    assert_eq!(
        r,
        Renewal::LeaseLost,
        "the previous owner renewed a recycled id"
    );
    b.release(&next, now_ms()).await.expect("release");
}

/// (`recycles = true`) A pool never hands out an id above `max_worker_id`, nor one id twice;
/// a full pool refuses, and a released id can be claimed again.
pub async fn pool_stays_within_the_layout(fixture: &dyn RegistryFixture) {
    let mut held: Vec<(Arc<dyn WorkerIdRegistry>, Lease)> = Vec::new();
    let mut ids = BTreeSet::new();
    for i in 1..=4 {
        let node = fixture.node().await;
        let lease = acquire(&*node, fixture.identity(i), 3).await;
        assert!(lease.worker_id <= 3, "id {} above 3", lease.worker_id);
        assert!(ids.insert(lease.worker_id), "id {} twice", lease.worker_id);
        held.push((node, lease));
    }
    let fifth = fixture.node().await;
    fifth
        .acquire(&request(fixture.identity(5), 3))
        .await
        .expect_err("a full pool refuses");
    let (node, lease) = held.pop().expect("four held");
    node.release(&lease, now_ms()).await.expect("release");
    let got = acquire(&*fifth, fixture.identity(5), 3).await;
    assert_eq!(got.worker_id, lease.worker_id);
}

/// (`assigns_distinct_ids = true`) Identities nobody configured get distinct ids.
pub async fn new_identities_get_distinct_ids(fixture: &dyn RegistryFixture) {
    let mut ids = BTreeSet::new();
    for i in 101..=108 {
        let node = fixture.node().await;
        assert!(node.capabilities().assigns_distinct_ids);
        let lease = acquire(&*node, fixture.identity(i), DEFAULT_MAX_WORKER_ID).await;
        assert!(ids.insert(lease.worker_id), "id {} twice", lease.worker_id);
    }
}

/// (`assigns_distinct_ids = false`) An identity without a configured id is refused with
/// `Config`, never given a default that another node may hold too.
pub async fn unconfigured_identity_is_config(fixture: &dyn RegistryFixture) {
    let node = fixture.node().await;
    assert!(!node.capabilities().assigns_distinct_ids);
    let e = node
        .acquire(&request(fixture.identity(999), DEFAULT_MAX_WORKER_ID))
        .await
        .expect_err("an identity without a configured id");
    assert!(matches!(e, Error::Config(_)), "{e}");
}

/// After `LeaseLost` (or a failed start) the caller abandons its lease: the abandoned lease
/// renews and releases as one not held, and the same registry instance acquires again (its
/// cache directory still locked by it) and renews the new lease.
pub async fn acquire_after_abandon_on_the_same_instance(fixture: &dyn RegistryFixture) {
    let node = fixture.node().await;
    let max = DEFAULT_MAX_WORKER_ID;
    let lease = acquire(&*node, fixture.identity(6), max).await;
    let m = now_ms() + 3000;
    renew(&*node, &lease, m).await;
    node.abandon(&lease).await;
    let r = node.renew(&lease, m + 1000).await.expect("renew");
    assert_eq!(r, Renewal::LeaseLost, "an abandoned lease renewed");
    let again = acquire(&*node, fixture.identity(6), max).await;
    if !node.capabilities().recycles {
        assert_eq!(again.worker_id, lease.worker_id, "the identity's own id");
        assert!(
            again.prev_mark_ms >= Some(m),
            "mark {m} was renewed before the abandon, got {:?}",
            again.prev_mark_ms
        );
    }
    renew(&*node, &again, now_ms() + 3000).await;
    node.release(&again, now_ms()).await.expect("release");
}

/// (`exclusive_identity = true`) While a node holds its identity, a second live node with the
/// same `ip:port` (its own cache directory) is refused with an error naming the identity;
/// once the first releases, the second gets the same id.
pub async fn second_live_holder_of_an_identity_is_refused(fixture: &dyn RegistryFixture) {
    let first = fixture.node().await;
    assert!(first.capabilities().exclusive_identity);
    let identity = fixture.identity(7);
    let lease = acquire(&*first, identity.clone(), DEFAULT_MAX_WORKER_ID).await;
    let second = fixture.node().await;
    let e = second
        .acquire(&request(identity.clone(), DEFAULT_MAX_WORKER_ID))
        .await
        .expect_err("a second live holder of one identity");
    assert!(
        e.to_string().contains(&identity.to_string()),
        "the error names the identity: {e}"
    );
    assert!(!e.is_retryable(), "a start-up refusal, not an outage: {e}");
    first.release(&lease, now_ms()).await.expect("release");
    let got = acquire(&*second, identity, DEFAULT_MAX_WORKER_ID).await;
    assert_eq!(got.worker_id, lease.worker_id);
    second.release(&got, now_ms()).await.expect("release");
}

/// (`recycles = true`) A lease's TTL leaves the holder time to renew: above the request's
/// minimum, at acquire and in every renewal's answer.
pub async fn granted_ttl_fits_the_callers_timing(fixture: &dyn RegistryFixture) {
    let node = fixture.node().await;
    let req = request(fixture.identity(1), DEFAULT_MAX_WORKER_ID);
    let lease = node.acquire(&req).await.expect("acquire");
    let ttl = lease.ttl.expect("a recycling lease has a ttl");
    assert!(
        ttl > req.min_ttl(),
        "ttl {ttl:?} <= minimum {:?}",
        req.min_ttl()
    );
    match node.renew(&lease, now_ms() + 3000).await.expect("renew") {
        Renewal::Ok { ttl: Some(t) } => assert!(t > req.min_ttl(), "renewal granted {t:?}"),
        other => panic!("a renewal of a recycling lease grants a ttl, got {other:?}"),
    }
    node.release(&lease, now_ms()).await.expect("release");
}

/// (`recycles = true`) A node that crashed (no release, no renewals) loses its id after the
/// TTL: the next claimer gets it with `prev_mark_ms` at least the last renewed mark, under a
/// new token, and the old owner's renewal then answers `LeaseLost`.
pub async fn expired_id_returns_with_its_last_renewed_mark(fixture: &dyn RegistryFixture) {
    let a = fixture.node().await;
    let lease = acquire(&*a, fixture.identity(1), 0).await;
    let m = now_ms() + 3000;
    renew(&*a, &lease, m).await;
    fixture.let_expire(lease.ttl.expect("ttl")).await;
    let b = fixture.node().await;
    let next = acquire(&*b, fixture.identity(2), 0).await;
    assert_eq!(next.worker_id, 0);
    assert!(
        next.prev_mark_ms >= Some(m),
        "mark {m} was renewed before the crash, got {:?}",
        next.prev_mark_ms
    );
    assert_ne!(next.token, lease.token, "a new claim has a new token");
    let r = a.renew(&lease, m + 1000).await.expect("renew");
    assert_eq!(
        r,
        Renewal::LeaseLost,
        "the expired owner renewed a recycled id"
    );
    b.release(&next, now_ms()).await.expect("release");
}

/// (`recycles = true`) An id whose mark is further ahead of the claimer's clock than
/// `max_ahead_ms` (another machine's clock ran fast) is left alone and another id claimed.
pub async fn far_ahead_mark_is_skipped(fixture: &dyn RegistryFixture) {
    let a = fixture.node().await;
    let lease = acquire(&*a, fixture.identity(1), 1).await;
    let far = now_ms() + 3_600_000;
    a.release(&lease, far).await.expect("release");
    let b = fixture.node().await;
    let req = request(fixture.identity(2), 1).with_max_ahead_ms(10_000);
    let next = b.acquire(&req).await.expect("acquire");
    assert_ne!(
        next.worker_id, lease.worker_id,
        "an id marked an hour ahead was claimed"
    );
    b.release(&next, now_ms()).await.expect("release");
}

/// The registry's `capabilities()` are exactly those the test declares.
pub async fn capabilities_are_as_declared(
    fixture: &dyn RegistryFixture,
    declared: &[(&str, bool)],
) {
    let caps = fixture.node().await.capabilities();
    let actual = [
        ("recycles", caps.recycles),
        ("assigns_distinct_ids", caps.assigns_distinct_ids),
        ("exclusive_identity", caps.exclusive_identity),
        ("confirms_marks", caps.confirms_marks),
    ];
    crate::macros::check_declared(&actual, declared);
}
