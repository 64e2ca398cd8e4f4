//! The generator's side of the lease contract: a TTL too short for the renew period and
//! fencing margin is refused, a lease that failed to start or was lost is abandoned (never
//! released), and a release that failed at shutdown is tried again by the next shutdown.

mod common;

use std::time::Duration;

use common::{MemRegistry, T0, start, try_start};
use leaf_core::{Error, ManualClock, Renewal, min_lease_ttl};
use leaf_snowflake::SnowflakeConfig;

#[tokio::test]
async fn a_lease_ttl_not_above_the_minimum_is_refused_and_abandoned() {
    let config = SnowflakeConfig::default();
    let min = min_lease_ttl(config.mark_renew, config.fencing_margin);
    for ttl in [Duration::from_secs(1), min] {
        let reg = MemRegistry::new(2).with_ttl(ttl);
        let r = try_start(&reg, &ManualClock::new(T0), config.clone()).await;
        match r {
            Err(Error::Config(msg)) => {
                assert!(msg.contains("ttl"), "{msg}");
                assert!(
                    msg.contains("mark_renew") && msg.contains("fencing_margin"),
                    "{msg}"
                );
            }
            other => panic!("ttl {ttl:?}: {other:?}"),
        }
        assert_eq!(reg.abandons(), vec![2], "ttl {ttl:?}");
        assert_eq!(reg.release_calls(), 0, "ttl {ttl:?}");
    }
    // Just above the minimum is enough.
    let reg = MemRegistry::new(2).with_ttl(min + Duration::from_millis(1));
    start(&reg, &ManualClock::new(T0), config).await;
}

#[tokio::test]
async fn a_failed_first_mark_abandons_the_lease() {
    let reg = MemRegistry::new(4);
    reg.fail_renewals(true);
    let r = try_start(&reg, &ManualClock::new(T0), SnowflakeConfig::default()).await;
    assert!(matches!(r, Err(Error::Backend { .. })), "{r:?}");
    assert_eq!(reg.abandons(), vec![4]);
    assert_eq!(reg.release_calls(), 0);
}

#[tokio::test]
async fn a_lost_lease_is_abandoned() {
    let reg = MemRegistry::new(5);
    let sf = start(&reg, &ManualClock::new(T0), SnowflakeConfig::default()).await;
    reg.lose_leases(true);
    assert_eq!(sf.renew_once().await.unwrap(), Renewal::LeaseLost);
    assert_eq!(reg.abandons(), vec![5]);
    // Not released at shutdown either: it is not ours.
    sf.shutdown().await.unwrap();
    assert_eq!(reg.release_calls(), 0);
}

#[tokio::test]
async fn a_failed_release_at_shutdown_is_retried_by_the_next_shutdown() {
    let reg = MemRegistry::new(6);
    let clock = ManualClock::new(T0);
    let sf = start(&reg, &clock, SnowflakeConfig::default()).await;
    let id = sf.next_id().await.unwrap();
    let last = sf.decode(id).unwrap().timestamp_ms;

    reg.fail_releases(true);
    assert!(matches!(sf.shutdown().await, Err(Error::Backend { .. })));
    assert!(matches!(sf.next_id().await, Err(Error::Unavailable(_))));
    assert!(
        matches!(sf.shutdown().await, Err(Error::Backend { .. })),
        "a second shutdown tries the release again"
    );
    assert_eq!(reg.release_calls(), 2);

    reg.fail_releases(false);
    sf.shutdown().await.unwrap();
    assert_eq!(reg.releases(), vec![(6, last)]);
    // Released: later calls do nothing.
    sf.shutdown().await.unwrap();
    assert_eq!(reg.release_calls(), 3);
}
