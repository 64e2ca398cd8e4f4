//! The monotonic mode's leader (`leaf_snowflake::monotonic::Leader`) on a real registry: the
//! cases every recycling workerId mode runs (`registry_conformance!` with `recycles = true`).
//! Each records every request in a [`history`](crate::history) and checks it: no ID twice,
//! and a request invoked after another completed gets larger IDs, across a crash, a freeze
//! past the lease and a hand-over.

use std::sync::Arc;
use std::time::{Duration, Instant};

use leaf_core::WorkerIdRegistry;
use leaf_snowflake::monotonic::{Leader, LeaderConfig, MAX_ISSUE, MonotonicLayout, Refusal};

use crate::RegistryFixture;
use crate::history::{Recorder, check, describe};

/// The layout of the cases' IDs.
pub const LAYOUT: MonotonicLayout = MonotonicLayout {
    epoch_ms: 1_700_000_000_000,
};

fn leader(fixture: &dyn RegistryFixture, registry: Arc<dyn WorkerIdRegistry>, i: u16) -> Leader {
    let mut config = LeaderConfig::new(LAYOUT);
    // A window longer than any lease here: a frozen leader's window outlives its lease, so
    // that only the fence stops it.
    config.window = Duration::from_secs(60);
    config.max_ahead = Duration::from_secs(120);
    Leader::new(registry, fixture.identity(i), fixture.clock(), config)
}

/// Asks `node` for `n` IDs `times` times in a row, recording each request; the IDs of the
/// last one that succeeded.
async fn take(history: &Recorder, name: &str, node: &Leader, n: u64, times: usize) -> Vec<i64> {
    let mut last = Vec::new();
    for _ in 0..times {
        let invoked = Instant::now();
        let got = node.issue(n).await;
        let completed = Instant::now();
        let ids: Vec<i64> = match got {
            Ok(range) => range.map(|id| id as i64).collect(),
            Err(_) => Vec::new(),
        };
        history.record("client", name, invoked, completed, ids.clone());
        if !ids.is_empty() {
            last = ids;
        }
    }
    last
}

/// Makes `node` issue (unrecorded) until its IDs run `ms` ahead of `clock`: the last ID. A new
/// leader's first ID is then above it only if it started above the confirmed window, not by
/// its clock.
async fn run_ahead(node: &Leader, clock: &dyn leaf_core::Clock, ms: u64) -> i64 {
    let target = clock.now_ms() + ms;
    loop {
        let ids = node.issue(MAX_ISSUE).await.expect("within the window");
        if LAYOUT.ms_of(*ids.end()) >= target {
            return *ids.end() as i64;
        }
    }
}

/// Records one request that must be refused, and what refused it.
async fn refused(history: &Recorder, name: &str, node: &Leader) -> Refusal {
    let invoked = Instant::now();
    let got = node.issue(1).await;
    history.record("client", name, invoked, Instant::now(), Vec::new());
    match got {
        Ok(ids) => panic!("{name} issued {ids:?} where it must refuse"),
        Err(r) => r,
    }
}

fn checked(history: &Recorder) -> usize {
    let ops = history.ops();
    match check(&ops) {
        Ok(c) => c.ids,
        Err(v) => panic!("the history breaks the order:\n{}", describe(&ops, &v)),
    }
}

/// One node leads; another is refused as a follower. The leader freezes past its lease: it
/// refuses from its fence on, the other node is elected and starts above every ID the first
/// one issued, and the first one, thawed, finds its claim lost. The new leader then crashes
/// without a release, and a third node takes over once its lease ended.
pub async fn a_monotonic_claim_taken_over_after_a_freeze_or_a_crash_keeps_ids_in_order(
    fixture: &dyn RegistryFixture,
) {
    let history = Recorder::new();
    let a = leader(fixture, fixture.node().await, 1);
    let b = leader(fixture, fixture.node().await, 2);
    a.step().await.expect("the first node to ask is elected");
    assert!(a.status().leader);
    assert!(b.step().await.is_err(), "the claim is a pool of one");
    // The follower learns who leads from the claim (where its requests are forwarded).
    let leads = Some(fixture.identity(1).to_string());
    assert_eq!(b.status().leader_hint, leads);
    assert_eq!(
        refused(&history, "b", &b).await,
        Refusal::NotLeader { leader: leads }
    );
    assert!(!take(&history, "a", &a, 100, 20).await.is_empty());
    // A runs ahead of the clock, further than the takeover takes.
    let ttl = Duration::from_millis(a.status().lease_ttl_ms.expect("a recycled claim has a ttl"));
    let ahead_ms = ttl.as_millis() as u64 + 5_000;
    let last_a = run_ahead(&a, &*fixture.clock(), ahead_ms).await;

    // A freezes: nothing renews its lease until the registry lets it go.
    fixture.let_expire(ttl).await;
    b.step()
        .await
        .expect("the claim is free once the lease ended");
    let first_b = take(&history, "b", &b, 1, 1).await;
    assert!(
        first_b[0] > last_a,
        "the new leader started at {}, below the old one's {last_a}: not above its window",
        first_b[0]
    );
    take(&history, "b", &b, 100, 20).await;
    // A thaws: a request reaches it before its renewal does. Past its fence it must refuse;
    // had it answered, its IDs would be below B's, and the history check says so.
    let thawed = take(&history, "a", &a, 1, 1).await;
    // Its renewal finds the claim gone, and it follows.
    assert!(a.step().await.is_err());
    assert!(matches!(
        refused(&history, "a", &a).await,
        Refusal::NotLeader { .. }
    ));
    take(&history, "b", &b, 7, 10).await;
    let last_b = run_ahead(&b, &*fixture.clock(), ahead_ms + 20_000).await;

    // B crashes: no release; its claim ends with its lease.
    let ttl = Duration::from_millis(b.status().lease_ttl_ms.expect("ttl"));
    drop(b);
    let c = leader(fixture, fixture.node().await, 3);
    fixture.let_expire(ttl).await;
    c.step()
        .await
        .expect("the claim is free once the lease ended");
    let first_c = take(&history, "c", &c, 1, 1).await;
    assert!(first_c[0] > last_b, "{} <= {last_b}", first_c[0]);
    take(&history, "c", &c, 50, 10).await;
    let ids = checked(&history);
    assert!(thawed.is_empty(), "a leader past its fence refuses");
    assert_eq!(ids, 20 * 100 + 1 + 20 * 100 + 7 * 10 + 1 + 50 * 10);
    c.shutdown().await.expect("release");
}

/// A leader that shuts down releases the claim: another node is elected at once, not after
/// the lease, and starts above every ID the first one issued.
pub async fn a_released_monotonic_claim_goes_to_the_next_node_at_once(
    fixture: &dyn RegistryFixture,
) {
    let history = Recorder::new();
    let a = leader(fixture, fixture.node().await, 1);
    let b = leader(fixture, fixture.node().await, 2);
    a.step().await.expect("elected");
    take(&history, "a", &a, 1000, 5).await;
    let last_a = run_ahead(&a, &*fixture.clock(), 10_000).await;
    a.shutdown().await.expect("the claim is released");
    assert!(matches!(
        refused(&history, "a", &a).await,
        Refusal::Unavailable(_)
    ));
    b.step().await.expect("a released claim is free at once");
    let first_b = take(&history, "b", &b, 1, 1).await;
    assert!(
        first_b[0] > last_a,
        "{} <= {last_a}: below the final mark",
        first_b[0]
    );
    take(&history, "b", &b, 1000, 5).await;
    assert_eq!(checked(&history), 5 * 1000 + 1 + 5 * 1000);
    b.shutdown().await.expect("release");
}
