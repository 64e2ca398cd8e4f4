//! The monotonic leader on the in-memory recycling pool, where each node's clock is its own:
//! a new leader whose clock is behind the old one's, and windows asked for on demand.

use std::sync::Arc;
use std::time::{Duration, Instant};

use leaf_core::{Clock, ManualClock, NodeIdentity};
use leaf_snowflake::monotonic::{Leader, LeaderConfig, MAX_ISSUE, Refusal};
use leaf_testkit::MemoryRegistryPool;
use leaf_testkit::history::{Recorder, check, describe};
use leaf_testkit::monotonic_cases::LAYOUT;

fn node(pool: &Arc<MemoryRegistryPool>, i: u16, clock: ManualClock) -> Leader {
    let clock: Arc<dyn Clock> = Arc::new(clock);
    Leader::new(
        Arc::new(pool.node()),
        NodeIdentity::new("10.0.0.1", i),
        clock,
        LeaderConfig::new(LAYOUT),
    )
}

async fn take(history: &Recorder, name: &str, leader: &Leader, n: u64) -> Vec<i64> {
    let invoked = Instant::now();
    let ids: Vec<i64> = leader
        .issue(n)
        .await
        .map(|r| r.map(|id| id as i64).collect())
        .unwrap_or_default();
    history.record("client", name, invoked, Instant::now(), ids.clone());
    ids
}

#[tokio::test]
async fn a_new_leader_whose_clock_is_behind_starts_above_the_old_one() {
    let pool = MemoryRegistryPool::new(true);
    let history = Recorder::new();
    // A's clock is the pool's; B's is 10 s behind it.
    let a = node(&pool, 1, pool.clock().clone());
    let b_clock = ManualClock::new(pool.clock().now_ms() - 10_000);
    let b = node(&pool, 2, b_clock.clone());
    a.step().await.unwrap();
    let mut last_a = 0;
    for _ in 0..50 {
        last_a = *take(&history, "a", &a, 1000).await.last().unwrap();
    }
    // A crashes; its lease ends.
    let ttl = Duration::from_millis(a.status().lease_ttl_ms.unwrap());
    drop(a);
    pool.clock().advance(ttl);
    b_clock.advance(ttl);
    b.step().await.unwrap();
    let first_b = take(&history, "b", &b, 1).await;
    assert!(first_b[0] > last_a, "{} <= {last_a}", first_b[0]);
    // Its IDs run ahead of its own clock, from the old leader's confirmed window on.
    assert!(LAYOUT.ms_of(first_b[0] as u64) > b_clock.now_ms());
    for _ in 0..50 {
        take(&history, "b", &b, 1000).await;
    }
    let ops = history.ops();
    let checked = check(&ops).unwrap_or_else(|v| panic!("{}", describe(&ops, &v)));
    assert_eq!(checked.ids, 50 * 1000 + 1 + 50 * 1000);
}

#[tokio::test]
async fn a_spent_window_is_renewed_on_demand_never_passed_and_never_run_past_the_clock() {
    let pool = MemoryRegistryPool::new(true);
    let clock = pool.clock().clone();
    let a = node(&pool, 1, clock.clone());
    a.step().await.unwrap();
    let first = a.status();
    // The clock does not move: 4M IDs a millisecond carry on through the window's
    // milliseconds, and each time the window is spent a request renews it, until the IDs
    // would run a whole window (3 s) ahead of the clock: then requests are refused.
    let mut last = 0;
    let mut issued = 0;
    let refusal = loop {
        match a.issue(MAX_ISSUE).await {
            Ok(ids) => {
                assert!(*ids.start() > last);
                last = *ids.end();
                issued += 1;
                assert!(
                    LAYOUT.ms_of(last) < a.status().window_end_ms,
                    "no ID reaches the confirmed window"
                );
            }
            Err(r) => break r,
        }
        assert!(issued < 10_000, "never refused");
    };
    assert!(
        matches!(refusal, Refusal::Unavailable(ref why) if why.contains("ahead of the clock")),
        "{refusal:?}"
    );
    let ahead = LAYOUT.ms_of(last) - clock.now_ms();
    assert!((2_990..3_000).contains(&ahead), "{ahead} ms ahead");
    // The clock moves on: the spent window is renewed by the next request, and IDs go on
    // above the last.
    clock.advance(Duration::from_millis(1_000));
    let next = a.issue(1).await.expect("the clock caught up");
    assert!(*next.start() > last);
    assert!(a.status().window_renewals > first.window_renewals);
    assert!(LAYOUT.ms_of(*next.end()) < a.status().window_end_ms);
    assert_eq!(
        a.issue(MAX_ISSUE + 1).await,
        Err(Refusal::TooMany { max: MAX_ISSUE })
    );
}

#[tokio::test]
async fn a_leader_cut_off_from_its_backend_stops_at_its_fence_and_resumes_when_renewed() {
    let pool = MemoryRegistryPool::new(true);
    let clock = pool.clock().clone();
    let a = node(&pool, 1, clock.clone());
    a.step().await.unwrap();
    a.issue(1).await.unwrap();
    let valid = Duration::from_millis(a.status().lease_valid_for_ms.unwrap());
    // No renewal reaches the backend until the fence: issuing stops there.
    clock.advance(valid);
    assert!(matches!(a.issue(1).await, Err(Refusal::Unavailable(_))));
    assert!(!a.status().leader);
    assert_eq!(a.status().fences, 1);
    // A renewal that reaches it while the lease still holds (nobody else was elected).
    a.step().await.unwrap();
    assert!(a.status().leader);
    a.issue(1).await.unwrap();
}

#[tokio::test]
async fn a_claim_whose_window_is_far_ahead_of_the_clock_is_not_taken_up() {
    let pool = MemoryRegistryPool::new(true);
    let history = Recorder::new();
    let a = node(&pool, 1, pool.clock().clone());
    a.step().await.unwrap();
    let last_a = *take(&history, "a", &a, 10).await.last().unwrap();
    let ttl = Duration::from_millis(a.status().lease_ttl_ms.unwrap());
    drop(a);
    pool.clock().advance(ttl);
    // B's clock is a minute behind the window A confirmed: B does not lead, and says why.
    let b_clock = ManualClock::new(pool.clock().now_ms() - 60_000);
    let b = node(&pool, 2, b_clock.clone());
    let e = b.step().await.unwrap_err();
    assert!(e.to_string().contains("ahead of this node's clock"), "{e}");
    assert!(matches!(b.issue(1).await, Err(Refusal::NotLeader { .. })));
    // Its clock catches up: it leads, above A.
    b_clock.advance(Duration::from_secs(60));
    b.step().await.unwrap();
    let first_b = take(&history, "b", &b, 1).await;
    assert!(first_b[0] > last_a);
}

#[tokio::test]
async fn a_node_never_takes_its_own_old_claim_for_a_leader_to_forward_to() {
    let pool = MemoryRegistryPool::new(true);
    let a = node(&pool, 1, pool.clock().clone());
    a.step().await.unwrap();
    // The same identity starts again (a restart) while its old claim lives on.
    let again = node(&pool, 1, pool.clock().clone());
    assert!(again.step().await.is_err());
    assert_eq!(again.status().leader_hint, None);
    assert_eq!(
        again.issue(1).await,
        Err(Refusal::NotLeader { leader: None })
    );
    // Another identity is told who leads.
    let b = node(&pool, 2, pool.clock().clone());
    assert!(b.step().await.is_err());
    assert_eq!(b.status().leader_hint.as_deref(), Some("10.0.0.1:1"));
}

#[tokio::test]
async fn a_wall_clock_that_jumps_ahead_issues_nothing_and_confirms_no_window_from_it() {
    let pool = MemoryRegistryPool::new(true);
    let clock = pool.clock().clone();
    let a = node(&pool, 1, clock.clone());
    a.step().await.unwrap();
    let before = *a.issue(5).await.unwrap().end();
    let start = clock.now_ms();
    // The wall clock alone steps ten minutes ahead (the monotonic clock does not).
    clock.set_ms(start + 600_000);
    match a.issue(1).await {
        Err(Refusal::Unavailable(why)) => assert!(why.contains("jumped"), "{why}"),
        other => panic!("{other:?}"),
    }
    // A renewal meanwhile extends the window from the reckoned time, not from the jump.
    a.step().await.unwrap();
    assert!(
        a.status().window_end_ms < start + 60_000,
        "{:?}",
        a.status()
    );
    // The clock comes back: IDs go on, above the last, near the reckoned time.
    clock.set_ms(start);
    let after = a.issue(1).await.unwrap();
    assert!(*after.start() > before);
    assert!(LAYOUT.ms_of(*after.start()) < start + 10_000);
}
