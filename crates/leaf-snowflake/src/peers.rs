//! The peer clock check of Leaf's design, which open-source Leaf dropped: before snowflake mode
//! starts in a mode that lists its peers (the ZooKeeper modes), the node asks each running peer
//! for its clock and refuses snowflake mode when its own clock is off the peers' average by more
//! than the directory's bound (`snowflake.zk.max_peer_skew_ms`). A clock that is wrong at
//! start-up passes the time mark rule when this node has never run (no mark to compare with);
//! its peers are the only witnesses. How a peer's clock is read (the server's `GET /v1/time`) is
//! the caller's, passed in.

use std::future::Future;

use leaf_core::{Clock, NodeIdentity, PeerDirectory};

/// What the check found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerClock {
    /// No peer to compare with: none is listed, or none of the `asked` answered.
    NoPeers {
        /// How many peers were listed (and did not answer).
        asked: usize,
    },
    /// This clock minus the peers' average is within the bound.
    Agrees {
        /// This clock minus the average of the peers', in milliseconds.
        skew_ms: i64,
        /// How many peers answered.
        peers: usize,
    },
    /// This clock is off the peers' average by more than the bound: no snowflake mode.
    Off {
        /// This clock minus the average of the peers', in milliseconds.
        skew_ms: i64,
        /// How many peers answered.
        peers: usize,
        /// The bound (`snowflake.zk.max_peer_skew_ms`).
        max_skew_ms: u64,
    },
}

impl PeerClock {
    /// Why snowflake mode must stay off, if it must (what `/readyz` says).
    pub fn refusal(&self) -> Option<String> {
        match self {
            PeerClock::Off {
                skew_ms,
                peers,
                max_skew_ms,
            } => Some(format!(
                "this node's clock is {skew_ms} ms off the average of its {peers} running \
                 peers' (more than snowflake.zk.max_peer_skew_ms = {max_skew_ms}); fix the \
                 clock and restart"
            )),
            _ => None,
        }
    }
}

/// Compares `clock` with the clocks of `peers` (`ip:port` each; this node's own entry left
/// out by the caller), read through `get`, which returns a peer's `now_ms` or why it could not.
///
/// Each peer's answer is placed halfway through its round trip on this clock (Leaf's estimate:
/// the request and the answer take as long). Peers that do not answer are left out with a
/// warning: a listed peer may have just died, its ephemeral node not yet expired.
pub async fn check<G, F>(
    peers: &[String],
    clock: &dyn Clock,
    max_skew_ms: u64,
    mut get: G,
) -> PeerClock
where
    G: FnMut(String) -> F,
    F: Future<Output = Result<u64, String>>,
{
    let mut offsets: Vec<i128> = Vec::with_capacity(peers.len());
    for peer in peers {
        let sent = clock.now_ms();
        let answer = get(peer.clone()).await;
        let received = clock.now_ms();
        match answer {
            Ok(peer_ms) => {
                // Twice the offset, to stay in integers until the average.
                let mid_twice = i128::from(sent) + i128::from(received);
                offsets.push(2 * i128::from(peer_ms) - mid_twice);
                tracing::debug!(
                    peer = %peer,
                    peer_ms,
                    round_trip_ms = received.saturating_sub(sent),
                    "peer clock"
                );
            }
            Err(e) => {
                tracing::warn!(peer = %peer, error = %e, "a listed peer did not tell its time; left out of the clock check")
            }
        }
    }
    if offsets.is_empty() {
        return PeerClock::NoPeers { asked: peers.len() };
    }
    let n = offsets.len() as i128;
    // This clock minus the peers' average: minus the average (doubled) offset, halved.
    let skew = -offsets.iter().sum::<i128>() / (2 * n);
    let skew_ms = i64::try_from(skew).unwrap_or(if skew < 0 { i64::MIN } else { i64::MAX });
    if skew_ms.unsigned_abs() > max_skew_ms {
        PeerClock::Off {
            skew_ms,
            peers: offsets.len(),
            max_skew_ms,
        }
    } else {
        PeerClock::Agrees {
            skew_ms,
            peers: offsets.len(),
        }
    }
}

/// The start-up gate of snowflake mode in a mode that lists its peers: lists them (this node's
/// own entry, left by an earlier run of it, left out), [`check`]s the clock with `get`, and
/// lists this node for the others once it passed. `Err` is why snowflake mode stays off.
///
/// A directory that cannot be listed (ZooKeeper down at start-up: the worker id then comes
/// from the cache file, under the time mark rule) skips the check with a warning.
pub async fn gate<G, F>(
    directory: &dyn PeerDirectory,
    identity: &NodeIdentity,
    clock: &dyn Clock,
    max_skew_ms: u64,
    get: G,
) -> Result<PeerClock, String>
where
    G: FnMut(String) -> F,
    F: Future<Output = Result<u64, String>>,
{
    let me = identity.to_string();
    let result = match directory.peers().await {
        Ok(mut peers) => {
            peers.retain(|p| *p != me);
            check(&peers, clock, max_skew_ms, get).await
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot list the running peers; the peer clock check is skipped");
            return Ok(PeerClock::NoPeers { asked: 0 });
        }
    };
    match &result {
        PeerClock::NoPeers { asked: 0 } => {
            tracing::info!("no running peer to compare the clock with; the peer clock check passes")
        }
        PeerClock::NoPeers { asked } => tracing::warn!(
            asked,
            "no listed peer told its time; the peer clock check passes"
        ),
        PeerClock::Agrees { skew_ms, peers } => {
            tracing::info!(skew_ms, peers, "the clock agrees with the running peers'")
        }
        PeerClock::Off { .. } => {}
    }
    if let Some(why) = result.refusal() {
        return Err(why);
    }
    if let Err(e) = directory.register(identity).await {
        // The registry keeps trying; until it succeeds, peers starting meanwhile miss this one.
        tracing::warn!(error = %e, "cannot list this node for its peers yet");
    }
    Ok(result)
}

/// How often [`watch`] compares the clock with the peers' again once snowflake mode runs.
pub const RECHECK: std::time::Duration = std::time::Duration::from_secs(30);

/// After the start-up [`gate`], the same comparison again every `every`, for as long as the
/// node runs, each result handed to `report` (the server's
/// `leaf_snowflake_peer_clock_skew_seconds`): the gate reads the clock once, but a clock that
/// drifts or is stepped later is seen only here. Never refuses anything (an alert's job); a
/// directory that cannot be listed skips that round.
pub async fn watch<G, F, R>(
    directory: &dyn PeerDirectory,
    identity: &NodeIdentity,
    clock: &dyn Clock,
    every: std::time::Duration,
    mut get: G,
    mut report: R,
) where
    G: FnMut(String) -> F,
    F: Future<Output = Result<u64, String>>,
    R: FnMut(&PeerClock),
{
    let me = identity.to_string();
    loop {
        tokio::time::sleep(every).await;
        match directory.peers().await {
            Ok(mut peers) => {
                peers.retain(|p| *p != me);
                report(&check(&peers, clock, u64::MAX, &mut get).await);
            }
            Err(e) => {
                tracing::debug!(error = %e, "cannot list the running peers; the clock comparison waits for the next round")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use std::time::Duration;

    use leaf_core::ManualClock;

    use super::*;

    const NOW: u64 = 1_700_000_000_000;

    /// A getter whose peers answer `clock + offset` after half of `round_trip`, and whose
    /// answer reaches this node after the other half.
    fn fake(
        clock: &ManualClock,
        offsets: &[(&str, Result<i64, &str>)],
        round_trip: Duration,
    ) -> impl FnMut(String) -> std::future::Ready<Result<u64, String>> {
        let clock = clock.clone();
        let offsets: HashMap<String, Result<i64, String>> = offsets
            .iter()
            .map(|(p, o)| (p.to_string(), o.map_err(str::to_string)))
            .collect();
        move |peer| {
            clock.advance(round_trip / 2);
            let answer = match &offsets[&peer] {
                Ok(off) => Ok(clock.now_ms().checked_add_signed(*off).unwrap()),
                Err(e) => Err(e.clone()),
            };
            clock.advance(round_trip / 2);
            std::future::ready(answer)
        }
    }

    fn peers(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[tokio::test]
    async fn peers_at_the_same_time_agree_once_the_round_trip_is_halved() {
        let clock = ManualClock::new(NOW);
        // A 400 ms round trip: read at either end, the peer would seem 200 ms off, beyond the
        // 100 ms bound; halfway, it agrees exactly.
        let get = fake(
            &clock,
            &[("a:1", Ok(0)), ("b:1", Ok(0))],
            Duration::from_millis(400),
        );
        let r = check(&peers(&["a:1", "b:1"]), &clock, 100, get).await;
        assert_eq!(
            r,
            PeerClock::Agrees {
                skew_ms: 0,
                peers: 2
            }
        );
        assert_eq!(r.refusal(), None);
    }

    #[tokio::test]
    async fn a_clock_off_the_peers_average_is_refused() {
        let clock = ManualClock::new(NOW);
        // Peers 6 s and 8 s ahead: this clock is 7 s behind their average.
        let get = fake(
            &clock,
            &[("a:1", Ok(6000)), ("b:1", Ok(8000))],
            Duration::from_millis(10),
        );
        let r = check(&peers(&["a:1", "b:1"]), &clock, 5000, get).await;
        assert_eq!(
            r,
            PeerClock::Off {
                skew_ms: -7000,
                peers: 2,
                max_skew_ms: 5000
            }
        );
        let why = r.refusal().unwrap();
        assert!(why.contains("-7000 ms"), "{why}");
        assert!(
            why.contains("snowflake.zk.max_peer_skew_ms = 5000"),
            "{why}"
        );
    }

    #[tokio::test]
    async fn the_average_decides_not_one_peer() {
        let check_with = |offsets: Vec<(&'static str, Result<i64, &'static str>)>| async move {
            let clock = ManualClock::new(NOW);
            let names: Vec<&str> = offsets.iter().map(|(p, _)| *p).collect();
            let get = fake(&clock, &offsets, Duration::from_millis(2));
            check(&peers(&names), &clock, 5000, get).await
        };
        // One peer 9 s ahead, two on time: 3 s ahead on average, within 5 s.
        assert_eq!(
            check_with(vec![("a:1", Ok(9000)), ("b:1", Ok(0)), ("c:1", Ok(0))]).await,
            PeerClock::Agrees {
                skew_ms: -3000,
                peers: 3
            }
        );
        // The bound itself passes; one millisecond more does not.
        assert!(matches!(
            check_with(vec![("a:1", Ok(-5000))]).await,
            PeerClock::Agrees { skew_ms: 5000, .. }
        ));
        assert!(matches!(
            check_with(vec![("a:1", Ok(-5001))]).await,
            PeerClock::Off { skew_ms: 5001, .. }
        ));
    }

    #[tokio::test]
    async fn silent_peers_are_left_out_and_no_peer_passes() {
        let clock = ManualClock::new(NOW);
        let get = fake(
            &clock,
            &[("a:1", Err("connection refused")), ("b:1", Ok(7000))],
            Duration::from_millis(2),
        );
        let r = check(&peers(&["a:1", "b:1"]), &clock, 5000, get).await;
        assert_eq!(
            r,
            PeerClock::Off {
                skew_ms: -7000,
                peers: 1,
                max_skew_ms: 5000
            }
        );

        let get = fake(&clock, &[("a:1", Err("timeout"))], Duration::from_millis(2));
        let r = check(&peers(&["a:1"]), &clock, 5000, get).await;
        assert_eq!(r, PeerClock::NoPeers { asked: 1 });
        assert_eq!(r.refusal(), None);

        let get = fake(&clock, &[], Duration::ZERO);
        assert_eq!(
            check(&[], &clock, 5000, get).await,
            PeerClock::NoPeers { asked: 0 }
        );
    }

    /// A directory of fixed peers (or a listing error), recording registrations.
    #[derive(Default)]
    struct FakeDirectory {
        peers: Option<Vec<String>>,
        registered: std::sync::Mutex<Vec<String>>,
    }

    #[async_trait::async_trait]
    impl PeerDirectory for FakeDirectory {
        async fn peers(&self) -> leaf_core::Result<Vec<String>> {
            self.peers
                .clone()
                .ok_or_else(|| leaf_core::Error::Unavailable("zookeeper is down".into()))
        }
        async fn register(&self, identity: &NodeIdentity) -> leaf_core::Result<()> {
            self.registered.lock().unwrap().push(identity.to_string());
            Ok(())
        }
        fn max_skew_ms(&self) -> u64 {
            5000
        }
    }

    #[tokio::test]
    async fn the_gate_leaves_this_node_out_and_lists_it_once_it_passed() {
        let clock = ManualClock::new(NOW);
        let me = NodeIdentity::new("10.0.0.1", 8080);
        // This node's own entry, left by its previous run, would say it is 7 s off itself.
        let dir = FakeDirectory {
            peers: Some(peers(&["10.0.0.1:8080", "10.0.0.2:8080"])),
            ..Default::default()
        };
        let get = fake(
            &clock,
            &[("10.0.0.1:8080", Ok(-7000)), ("10.0.0.2:8080", Ok(20))],
            Duration::from_millis(2),
        );
        let r = gate(&dir, &me, &clock, 5000, get).await;
        assert_eq!(
            r,
            Ok(PeerClock::Agrees {
                skew_ms: -20,
                peers: 1
            })
        );
        assert_eq!(*dir.registered.lock().unwrap(), vec!["10.0.0.1:8080"]);
    }

    #[tokio::test]
    async fn the_gate_refuses_an_off_clock_without_listing_the_node() {
        let clock = ManualClock::new(NOW);
        let me = NodeIdentity::new("10.0.0.1", 8080);
        let dir = FakeDirectory {
            peers: Some(peers(&["10.0.0.2:8080"])),
            ..Default::default()
        };
        let get = fake(&clock, &[("10.0.0.2:8080", Ok(-9000))], Duration::ZERO);
        let why = gate(&dir, &me, &clock, 5000, get).await.unwrap_err();
        assert!(why.contains("9000 ms off"), "{why}");
        assert!(dir.registered.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn the_gate_passes_without_peers_or_without_a_listing() {
        let clock = ManualClock::new(NOW);
        let me = NodeIdentity::new("10.0.0.1", 8080);
        let alone = FakeDirectory {
            peers: Some(Vec::new()),
            ..Default::default()
        };
        let r = gate(&alone, &me, &clock, 5000, fake(&clock, &[], Duration::ZERO)).await;
        assert_eq!(r, Ok(PeerClock::NoPeers { asked: 0 }));
        assert_eq!(alone.registered.lock().unwrap().len(), 1);

        let down = FakeDirectory::default();
        let r = gate(&down, &me, &clock, 5000, fake(&clock, &[], Duration::ZERO)).await;
        assert_eq!(r, Ok(PeerClock::NoPeers { asked: 0 }));
    }

    #[tokio::test(start_paused = true)]
    async fn the_watch_compares_again_every_round_and_sees_a_drifting_clock() {
        let clock = ManualClock::new(NOW);
        let me = NodeIdentity::new("10.0.0.1", 8080);
        let dir = FakeDirectory {
            peers: Some(peers(&["10.0.0.1:8080", "10.0.0.2:8080"])),
            registered: std::sync::Mutex::default(),
        };
        // The peer drifts 1 s further ahead of this clock at every round.
        let rounds = std::sync::Arc::new(std::sync::atomic::AtomicI64::new(0));
        let drift = std::sync::Arc::clone(&rounds);
        let peer_clock = clock.clone();
        let get = move |peer: String| {
            assert_eq!(peer, "10.0.0.2:8080", "this node's own entry is left out");
            let n = drift.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
            std::future::ready(Ok(peer_clock
                .now_ms()
                .checked_add_signed(n * 1000)
                .unwrap()))
        };
        let seen = std::sync::Mutex::new(Vec::new());
        let watched = watch(&dir, &me, &clock, RECHECK, get, |found| {
            seen.lock().unwrap().push(found.clone())
        });
        // Three rounds, then the watch is dropped.
        let _ = tokio::time::timeout(RECHECK * 3 + RECHECK / 2, watched).await;
        let seen = seen.into_inner().unwrap();
        let skews: Vec<i64> = seen
            .iter()
            .map(|p| match p {
                PeerClock::Agrees { skew_ms, peers: 1 } => *skew_ms,
                other => panic!("{other:?}"),
            })
            .collect();
        // Never Off, however far: the watch reports, the start-up gate refuses.
        assert_eq!(skews, [-1000, -2000, -3000]);
    }
}
