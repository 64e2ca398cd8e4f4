//! The durable time mark, restarts, the start-up gap, lost leases, fencing and the renewer.

mod common;

use std::time::Duration;

use common::{MemRegistry, T0, start, within};
use leaf_core::{Clock, Error, ManualClock, Renewal};
use leaf_snowflake::{SnowflakeConfig, SnowflakeState};

const MS: Duration = Duration::from_millis(1);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[tokio::test]
async fn no_id_above_the_durable_mark_and_failed_renewals_stop_issuing() {
    let reg = MemRegistry::new(4);
    let clock = ManualClock::new(T0).auto_advance(true);
    let sf = start(&reg, &clock, SnowflakeConfig::default()).await;
    let mark = sf.status().durable_mark_ms;
    assert_eq!(mark, T0 + 3000, "the first mark is one window ahead");
    assert_eq!(reg.mark(4), Some(mark), "and it is in the registry");

    reg.fail_renewals(true);
    assert!(matches!(sf.renew_once().await, Err(Error::Backend { .. })));
    assert_eq!(
        sf.status().durable_mark_ms,
        mark,
        "a failed write is not durable"
    );

    // Issuing goes on up to the mark itself...
    let mut ids = Vec::new();
    while clock.now_ms() <= mark {
        ids.push(sf.next_id().await.unwrap());
        clock.advance(ms(100));
    }
    assert_eq!(sf.decode(*ids.last().unwrap()).unwrap().timestamp_ms, mark);
    // ...and not past it: the generator waits for a renewal (2 x mark_renew), then gives up.
    let r = within(sf.next_id()).await;
    match r {
        Err(Error::Unavailable(msg)) => {
            assert!(msg.contains("injected renewal failure"), "{msg}");
        }
        other => panic!("expected unavailable, got {other:?}"),
    }
    let status = sf.status();
    match &status.state {
        SnowflakeState::Unavailable { reason } => assert!(reason.contains("time mark"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert!(status.mark_lag_ms < 0);
    for id in &ids {
        assert!(sf.decode(*id).unwrap().timestamp_ms <= mark);
    }

    // Renewals work again: so does issuing, below the new mark.
    reg.fail_renewals(false);
    assert_eq!(sf.renew_once().await.unwrap(), Renewal::OK);
    let id = sf.next_id().await.unwrap();
    assert!(id > *ids.last().unwrap());
    assert!(sf.decode(id).unwrap().timestamp_ms <= sf.status().durable_mark_ms);
    assert_eq!(sf.status().state, SnowflakeState::Ready);
}

#[tokio::test]
async fn an_id_waiting_for_the_mark_is_issued_once_the_next_mark_is_written() {
    let reg = MemRegistry::new(4);
    let clock = ManualClock::new(T0);
    let sf = start(&reg, &clock, SnowflakeConfig::default()).await;
    clock.advance(ms(3001)); // one past the mark
    let waiting = tokio::spawn({
        let sf = sf.clone();
        async move { sf.next_id().await }
    });
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert!(!waiting.is_finished(), "no ID above the durable mark");
    assert_eq!(sf.renew_once().await.unwrap(), Renewal::OK);
    let id = within(waiting).await.unwrap().unwrap();
    assert_eq!(sf.decode(id).unwrap().timestamp_ms, T0 + 3001);
    assert!(T0 + 3001 <= sf.status().durable_mark_ms);
}

#[tokio::test]
async fn crash_restart_waits_and_issues_above_everything_earlier() {
    let reg = MemRegistry::new(6);
    let clock = ManualClock::new(T0).auto_advance(true);
    let sf = start(&reg, &clock, SnowflakeConfig::default()).await;
    let mut earlier = sf.next_ids(5000).await.unwrap();
    clock.advance(ms(500));
    earlier.push(sf.next_id().await.unwrap());
    let highest = *earlier.iter().max().unwrap();
    let mark = reg.mark(6).unwrap();
    drop(sf); // a crash: no shutdown, no final mark
    assert!(reg.releases().is_empty());

    clock.advance(ms(100));
    let sf = start(&reg, &clock, SnowflakeConfig::default()).await;
    let behind = mark - clock.now_ms();
    assert_eq!(
        sf.status().state,
        SnowflakeState::WaitingForClock { behind_ms: behind }
    );
    let mono = clock.monotonic();
    let ids = within(sf.next_ids(100)).await.unwrap();
    assert!(
        clock.monotonic() - mono >= ms(behind),
        "next_id waited for the clock to pass the previous mark"
    );
    assert!(sf.decode(ids[0]).unwrap().timestamp_ms > mark);
    assert!(ids.iter().all(|id| *id > highest));
    assert_eq!(sf.status().state, SnowflakeState::Ready);
}

#[tokio::test]
async fn clean_restart_does_not_wait() {
    let reg = MemRegistry::new(6);
    let clock = ManualClock::new(T0).auto_advance(true);
    let sf = start(&reg, &clock, SnowflakeConfig::default()).await;
    let earlier = sf.next_ids(10).await.unwrap();
    let last_ts = sf.decode(*earlier.last().unwrap()).unwrap().timestamp_ms;
    sf.shutdown().await.unwrap();
    assert_eq!(
        reg.releases(),
        vec![(6, last_ts)],
        "final mark = last timestamp issued"
    );
    assert_eq!(sf.status().state, SnowflakeState::Closed);
    assert!(!sf.status().lease_valid);
    assert!(matches!(sf.next_id().await, Err(Error::Unavailable(_))));
    assert!(sf.renew_once().await.is_err());
    sf.shutdown().await.unwrap();
    assert_eq!(reg.releases().len(), 1, "a second shutdown does nothing");

    clock.advance(MS); // the restart takes a moment
    let sf = start(&reg, &clock, SnowflakeConfig::default()).await;
    assert_eq!(sf.status().state, SnowflakeState::Ready);
    let mono = clock.monotonic();
    let id = sf.next_id().await.unwrap();
    assert_eq!(clock.monotonic(), mono, "no wait after a clean shutdown");
    assert!(earlier.iter().all(|e| *e < id));
}

#[tokio::test]
async fn shutdown_without_ids_keeps_the_previous_mark() {
    let reg = MemRegistry::new(2);
    reg.set_mark(2, T0 - 50);
    let clock = ManualClock::new(T0);
    let sf = start(&reg, &clock, SnowflakeConfig::default()).await;
    sf.shutdown().await.unwrap();
    assert_eq!(reg.releases(), vec![(2, T0 - 50)]);
}

#[tokio::test]
async fn clock_far_behind_the_mark_is_unavailable_until_it_catches_up() {
    let reg = MemRegistry::new(8);
    reg.set_mark(8, T0 + 20_000);
    let clock = ManualClock::new(T0);
    let sf = start(&reg, &clock, SnowflakeConfig::default()).await;

    let status = sf.status();
    match &status.state {
        SnowflakeState::Unavailable { reason } => assert!(reason.contains("20000 ms"), "{reason}"),
        other => panic!("{other:?}"),
    }
    match sf.next_id().await {
        Err(Error::Unavailable(msg)) => assert!(msg.contains("20000 ms"), "{msg}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(sf.next_ids(5).await, Err(Error::Unavailable(_))));

    // Within the start-up wait: next_id would wait.
    clock.set_ms(T0 + 15_000);
    assert_eq!(
        sf.status().state,
        SnowflakeState::WaitingForClock { behind_ms: 5000 }
    );

    // Past the previous mark: the renewer's next mark makes it ready.
    clock.set_ms(T0 + 20_001);
    assert_eq!(sf.renew_once().await.unwrap(), Renewal::OK);
    assert_eq!(sf.status().state, SnowflakeState::Ready);
    let id = sf.next_id().await.unwrap();
    assert_eq!(sf.decode(id).unwrap().timestamp_ms, T0 + 20_001);
}

#[tokio::test]
async fn lost_lease_stops_at_once_and_a_new_worker_id_starts_above_its_mark() {
    let reg = MemRegistry::new(5);
    let clock = ManualClock::new(T0);
    let sf = start(&reg, &clock, SnowflakeConfig::default()).await;
    let before = sf.next_id().await.unwrap();

    reg.lose_leases(true);
    assert_eq!(sf.renew_once().await.unwrap(), Renewal::LeaseLost);
    assert!(matches!(sf.next_id().await, Err(Error::LeaseLost(_))));
    assert!(matches!(sf.next_ids(3).await, Err(Error::LeaseLost(_))));
    let status = sf.status();
    assert_eq!(status.state, SnowflakeState::LeaseLost);
    assert!(!status.lease_valid);

    // The renewer's next tick claims a new worker id, which carries its own previous mark.
    reg.lose_leases(false);
    reg.set_worker_id(11);
    reg.set_mark(11, T0 + 2000);
    clock.set_ms(T0 + 2500);
    assert_eq!(sf.renew_once().await.unwrap(), Renewal::OK);
    assert_eq!(sf.worker_id(), 11);
    let id = sf.next_id().await.unwrap();
    let d = sf.decode(id).unwrap();
    assert_eq!(d.worker_id, 11);
    assert!(d.timestamp_ms > T0 + 2000);
    assert!(id > before);
    assert_eq!(sf.status().state, SnowflakeState::Ready);

    let acquires = reg.durable.lock().unwrap().acquires.clone();
    assert_eq!(acquires.len(), 2);
    assert_eq!(acquires[1].max_worker_id, 1023);
    assert_eq!(acquires[1].max_ahead_ms, 10_000);
    assert_eq!(acquires[1].now_ms, T0 + 2500);

    // A lost lease is not released at shutdown; the new one is.
    sf.shutdown().await.unwrap();
    assert_eq!(reg.releases(), vec![(11, T0 + 2500)]);
}

#[tokio::test]
async fn fencing_stops_issuing_when_the_lease_ttl_runs_out() {
    let reg = MemRegistry::new(2).with_ttl(Duration::from_secs(5));
    let clock = ManualClock::new(T0);
    let config = SnowflakeConfig {
        mark_window: Duration::from_secs(10),
        fencing_margin: Duration::from_secs(1),
        ..SnowflakeConfig::default()
    };
    // Valid until 5 s - 1 s after the monotonic time read before the first renewal.
    let sf = start(&reg, &clock, config).await;
    let status = sf.status();
    assert!(status.lease_valid);
    assert_eq!(status.lease_ttl_ms, Some(5000));
    assert_eq!(status.lease_valid_for_ms, Some(4000));
    clock.advance(ms(3999));
    sf.next_id().await.unwrap();
    assert_eq!(sf.status().lease_valid_for_ms, Some(1));
    clock.advance(MS);
    assert_eq!(sf.status().lease_valid_for_ms, Some(0));
    assert!(matches!(sf.next_id().await, Err(Error::LeaseLost(_))));
    assert!(matches!(sf.next_ids(2).await, Err(Error::LeaseLost(_))));
    let status = sf.status();
    assert_eq!(status.state, SnowflakeState::LeaseLost);
    assert!(!status.lease_valid);

    // A renewal resumes issuing. It takes 2 s; the deadline counts from before the call.
    reg.slow_renewals(&clock, Duration::from_secs(2));
    assert!(sf.renew_once().await.unwrap().is_ok());
    sf.next_id().await.unwrap();
    clock.advance(ms(1999));
    sf.next_id().await.unwrap();
    clock.advance(MS);
    assert!(matches!(sf.next_id().await, Err(Error::LeaseLost(_))));
}

#[tokio::test]
async fn renewer_writes_the_mark_every_period_and_ends_at_shutdown() {
    let reg = MemRegistry::new(3);
    let clock = ManualClock::new(T0);
    let sf = start(&reg, &clock, SnowflakeConfig::default()).await;
    assert_eq!(reg.renewals(), 1, "start makes the first mark");
    let renewer = sf.spawn_renewer();
    for expect in 2..=4 {
        within(async {
            while reg.renewals() < expect {
                clock.advance(ms(100));
                for _ in 0..5 {
                    tokio::task::yield_now().await;
                }
            }
        })
        .await;
        let status = sf.status();
        assert_eq!(status.durable_mark_ms, clock.now_ms() + 3000);
        assert_eq!(reg.mark(3), Some(status.durable_mark_ms));
    }
    let elapsed = clock.now_ms() - T0;
    assert!(
        (3000..3400).contains(&elapsed),
        "three renewals took {elapsed} ms"
    );
    sf.shutdown().await.unwrap();
    within(renewer).await.unwrap();
}

#[tokio::test]
async fn a_lead_stopped_at_the_durable_mark_goes_on_when_a_renewal_raises_it() {
    let reg = MemRegistry::new(4);
    let clock = ManualClock::new(T0);
    // 4 IDs a millisecond; the lead may reach the mark's least lead (3000 - 1000 ms).
    let config = SnowflakeConfig {
        layout: leaf_core::SnowflakeLayout::new(41, 10, 2, leaf_core::TWITTER_EPOCH_MS).unwrap(),
        random_start: 0,
        max_borrow: ms(60_000),
        ..SnowflakeConfig::default()
    };
    let sf = start(&reg, &clock, config).await;
    assert_eq!(
        sf.config().max_borrow,
        ms(2000),
        "lowered to the mark's least lead"
    );
    let mark = sf.status().durable_mark_ms;
    // A renewal is late: the clock is 1 s from the mark, and a batch borrows up to it.
    clock.set_ms(mark - 1000);
    let ids = within(sf.next_ids(4 * 1001)).await.unwrap();
    assert_eq!(sf.decode(*ids.last().unwrap()).unwrap().timestamp_ms, mark);
    // The next ID would pass the mark: it waits, for the renewal, not for the clock.
    let waiting = tokio::spawn({
        let sf = sf.clone();
        async move { sf.next_id().await }
    });
    tokio::time::sleep(ms(50)).await;
    assert!(!waiting.is_finished(), "nothing above the durable mark");
    assert_eq!(sf.renew_once().await.unwrap(), Renewal::OK);
    let id = within(waiting).await.unwrap().unwrap();
    assert_eq!(sf.decode(id).unwrap().timestamp_ms, mark + 1);
    assert_eq!(clock.now_ms(), mark - 1000, "the clock never moved");
}
