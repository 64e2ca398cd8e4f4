//! A wall clock that jumps forward further than `max_forward_step` is not trusted: nothing is
//! issued and the durable mark does not move until it comes back; a restart trusts it again.

mod common;

use std::time::Duration;

use common::{MemRegistry, T0, start};
use leaf_core::{Error, ManualClock};
use leaf_snowflake::{SnowflakeConfig, SnowflakeState};

const YEAR_MS: u64 = 365 * 86_400_000;

#[tokio::test]
async fn a_jump_forward_stops_issuing_without_moving_the_mark_until_it_is_undone() {
    let reg = MemRegistry::new(3);
    let clock = ManualClock::new(T0);
    let sf = start(&reg, &clock, SnowflakeConfig::default()).await;
    let first = sf.next_id().await.unwrap();
    let mark = reg.mark(3).expect("the first mark is durable");

    // The wall clock alone jumps 60 years ahead; the renewer runs twice.
    clock.set_ms(T0 + 60 * YEAR_MS);
    for _ in 0..2 {
        sf.renew_once().await.ok();
        assert_eq!(
            reg.mark(3),
            Some(mark),
            "the mark moved with an untrusted clock"
        );
    }
    match sf.next_id().await {
        Err(Error::ClockJumpedForward { ahead_ms }) => {
            assert!(ahead_ms >= 60 * YEAR_MS - 1000, "{ahead_ms}");
        }
        other => panic!("expected a clock jump error, got {other:?}"),
    }
    assert!(matches!(
        sf.next_ids(3).await,
        Err(Error::ClockJumpedForward { .. })
    ));
    let status = sf.status();
    assert!(
        matches!(status.state, SnowflakeState::ClockJumped { .. }),
        "{status:?}"
    );
    assert_eq!(status.clock_jumps_total, 1, "one jump, counted once");

    // Back within the bound of what the monotonic clock counted: issuing resumes.
    clock.set_ms(T0);
    clock.advance(Duration::from_millis(5));
    assert!(sf.renew_once().await.unwrap().is_ok());
    assert_eq!(sf.status().state, SnowflakeState::Ready);
    let next = sf.next_id().await.unwrap();
    assert!(next > first);
    assert!(
        reg.mark(3).unwrap() < T0 + 60_000,
        "the mark follows the trusted clock"
    );
    assert_eq!(sf.status().clock_jumps_total, 1);
}

#[tokio::test]
async fn a_step_within_the_bound_is_trusted() {
    let reg = MemRegistry::new(3);
    let clock = ManualClock::new(T0);
    let sf = start(&reg, &clock, SnowflakeConfig::default()).await;
    sf.next_id().await.unwrap();
    clock.set_ms(T0 + 59_000);
    assert!(sf.renew_once().await.unwrap().is_ok());
    let id = sf.next_id().await.unwrap();
    assert_eq!(sf.decode(id).unwrap().timestamp_ms, T0 + 59_000);
    assert_eq!(sf.status().clock_jumps_total, 0);
}

#[tokio::test]
async fn a_restart_trusts_the_jumped_clock() {
    let reg = MemRegistry::new(3);
    let clock = ManualClock::new(T0);
    let sf = start(&reg, &clock, SnowflakeConfig::default()).await;
    sf.next_id().await.unwrap();
    let later = T0 + 2 * YEAR_MS;
    clock.set_ms(later);
    sf.renew_once().await.ok();
    assert!(sf.next_id().await.is_err());
    sf.shutdown().await.unwrap();
    assert!(reg.mark(3).unwrap() < T0 + 60_000);

    // The operator meant it: one restart and the clock is trusted as it is.
    let sf = start(&reg, &clock, SnowflakeConfig::default()).await;
    let id = sf.next_id().await.unwrap();
    assert_eq!(sf.decode(id).unwrap().timestamp_ms, later);
    assert!(reg.mark(3).unwrap() > later);
}
