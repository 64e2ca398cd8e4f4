//! The generator's ID rules: layouts, clock steps back, sequence wraps, the end of the
//! timestamp field, decode, batches.

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::{MemRegistry, T0, start, start_on, try_start, within};
use leaf_core::{BoxFuture, Clock, Error, ManualClock, SnowflakeLayout, TWITTER_EPOCH_MS};
use leaf_snowflake::{Snowflake, SnowflakeConfig, SnowflakeState};

fn config(layout: SnowflakeLayout, random_start: u64) -> SnowflakeConfig {
    SnowflakeConfig {
        layout,
        random_start,
        ..SnowflakeConfig::default()
    }
}

/// What starting with `layout` and `worker_id` must give: IDs below `2^bits`, or a start-up
/// error of the given kind whose message contains the given text.
enum Expect {
    Ids { bits: u32 },
    Fails(fn(&Error) -> bool, &'static str),
}

async fn check(layout: SnowflakeLayout, worker_id: u64, now: u64, expect: Expect) {
    let reg = MemRegistry::new(worker_id);
    let clock = ManualClock::new(now).auto_advance(true);
    let r = try_start(&reg, &clock, config(layout, 100)).await;
    match (expect, r) {
        (Expect::Ids { bits }, Ok(sf)) => {
            let mut ids = sf.next_ids(3 * layout.ids_per_ms() as usize).await.unwrap();
            ids.push(sf.next_id().await.unwrap());
            for w in ids.windows(2) {
                assert!(w[0] < w[1], "{layout:?}: ascending");
            }
            for id in ids {
                assert!(id >= 0 && (id as u64) < 1u64 << bits, "{layout:?}: {id}");
                assert_eq!(sf.decode(id).unwrap().worker_id, worker_id, "{layout:?}");
            }
        }
        (Expect::Fails(kind, text), Err(e)) => {
            assert!(kind(&e), "{layout:?} worker {worker_id}: wrong kind {e:?}");
            assert!(
                e.to_string().contains(text),
                "{layout:?}: {e} lacks {text:?}"
            );
            assert!(
                reg.releases().len() <= 1,
                "an unusable id is given back at most once"
            );
        }
        (_, r) => panic!("{layout:?} worker {worker_id}: unexpected {r:?}"),
    }
}

fn config_err(e: &Error) -> bool {
    matches!(e, Error::Config(_))
}

fn exhausted(e: &Error) -> bool {
    matches!(e, Error::Exhausted(_))
}

#[tokio::test]
async fn layouts_as_used_by_the_generator() {
    let layout = |t, w, s| SnowflakeLayout::new(t, w, s, TWITTER_EPOCH_MS).unwrap();
    // Leaf's default, 63 bits.
    check(
        SnowflakeLayout::default(),
        1023,
        T0,
        Expect::Ids { bits: 63 },
    )
    .await;
    // JavaScript-safe: 41 + 5 + 7 = 53 bits.
    check(layout(41, 5, 7), 31, T0, Expect::Ids { bits: 53 }).await;
    // No worker bits at all: one worker, id 0.
    check(layout(41, 0, 12), 0, T0, Expect::Ids { bits: 53 }).await;
    // A worker id beyond the layout is refused by name.
    check(
        layout(41, 5, 7),
        32,
        T0,
        Expect::Fails(config_err, "worker id 32"),
    )
    .await;
    check(
        SnowflakeLayout::default(),
        1024,
        T0,
        Expect::Fails(config_err, "1024"),
    )
    .await;
    check(
        layout(41, 0, 12),
        1,
        T0,
        Expect::Fails(config_err, "worker id 1"),
    )
    .await;
    // The epoch must be in the past.
    let future_epoch = SnowflakeLayout::new(41, 10, 12, T0 + 1).unwrap();
    check(future_epoch, 1, T0, Expect::Fails(config_err, "epoch")).await;
    // A layout whose timestamps already ran out does not start.
    let short = SnowflakeLayout::new(30, 10, 12, TWITTER_EPOCH_MS).unwrap();
    check(short, 1, T0, Expect::Fails(exhausted, "ran out")).await;
}

#[tokio::test]
async fn small_step_back_is_waited_out_larger_fails_at_once() {
    let reg = MemRegistry::new(3);
    let clock = ManualClock::new(T0).auto_advance(true);
    let sf = start(&reg, &clock, SnowflakeConfig::default()).await;
    let first = sf.next_id().await.unwrap();

    // 3 ms back, below the 5 ms limit: waited out.
    clock.back(3);
    let mono = clock.monotonic();
    let second = within(sf.next_id()).await.unwrap();
    assert!(second > first);
    assert!(
        clock.monotonic() >= mono + Duration::from_millis(3),
        "the generator waited for the clock"
    );
    assert_eq!(sf.status().clock_backwards_total, 1);

    // 6 ms back: fails at once, without waiting.
    clock.back(6);
    let mono = clock.monotonic();
    let r = sf.next_id().await;
    assert!(
        matches!(
            r,
            Err(Error::ClockMovedBackwards {
                behind_ms: 6,
                waited: false
            })
        ),
        "{r:?}"
    );
    assert_eq!(clock.monotonic(), mono, "no wait for a large step back");
    assert_eq!(sf.status().clock_backwards_total, 2);

    // Once the clock is past the last timestamp again, IDs continue above the old ones.
    clock.advance(Duration::from_millis(7));
    let third = sf.next_id().await.unwrap();
    assert!(third > second);
}

/// A clock whose wall time stands still except that every sleep steps it back by `back_ms`:
/// the worst case for a generator waiting for the next millisecond.
#[derive(Debug)]
struct StepsBackWhileWaiting {
    wall: AtomicU64,
    mono_ns: AtomicU64,
    back_ms: u64,
}

impl Clock for StepsBackWhileWaiting {
    fn now_ms(&self) -> u64 {
        self.wall.load(Ordering::SeqCst)
    }
    fn monotonic(&self) -> Duration {
        Duration::from_nanos(self.mono_ns.load(Ordering::SeqCst))
    }
    fn sleep(&self, d: Duration) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.mono_ns
                .fetch_add(d.as_nanos() as u64, Ordering::SeqCst);
            self.wall.fetch_sub(self.back_ms, Ordering::SeqCst);
            tokio::task::yield_now().await;
        })
    }
}

/// (step back per sleep, expected error): a big jump fails without a clock wait, a small one
/// is waited out once and then, still behind, fails as waited.
const STEP_BACK_CASES: [(u64, u64, bool); 2] = [(50, 50, false), (3, 6, true)];

/// A generator of 4 IDs a millisecond (2 sequence bits) borrowing up to `max_borrow_ms`, on a
/// clock standing at `T0` that steps back `back_ms` at every sleep.
async fn stepping_back(
    back_ms: u64,
    max_borrow_ms: u64,
) -> (Arc<StepsBackWhileWaiting>, Snowflake) {
    let clock = Arc::new(StepsBackWhileWaiting {
        wall: AtomicU64::new(T0),
        mono_ns: AtomicU64::new(0),
        back_ms,
    });
    let layout = SnowflakeLayout::new(41, 10, 2, TWITTER_EPOCH_MS).unwrap();
    let config = SnowflakeConfig {
        max_borrow: Duration::from_millis(max_borrow_ms),
        ..config(layout, 0)
    };
    let sf = start_on(&MemRegistry::new(1), clock.clone(), config)
        .await
        .unwrap();
    (clock, sf)
}

/// The next ID, which has to wait for the clock, must fail with `(behind_ms, waited)`.
async fn expect_clock_error(sf: &Snowflake, (back_ms, behind_ms, waited): (u64, u64, bool)) {
    match within(sf.next_id()).await {
        Err(Error::ClockMovedBackwards {
            behind_ms: b,
            waited: w,
        }) => assert_eq!((b, w), (behind_ms, waited), "step back {back_ms}"),
        other => panic!("step back {back_ms}: expected a clock error, got {other:?}"),
    }
    assert_eq!(sf.status().clock_backwards_total, 1);
}

#[tokio::test]
async fn jump_back_during_a_sequence_wrap_wait_does_not_hang() {
    for case in STEP_BACK_CASES {
        // No borrowing: the fifth ID waits for the clock, which steps back meanwhile.
        let (_, sf) = stepping_back(case.0, 0).await;
        assert_eq!(sf.next_ids(4).await.unwrap().len(), 4);
        expect_clock_error(&sf, case).await;
        // The batch form does not hang either.
        let r = within(sf.next_ids(10)).await;
        assert!(matches!(r, Err(Error::ClockMovedBackwards { .. })), "{r:?}");
    }
}

#[tokio::test]
async fn jump_back_during_a_borrowed_leads_catch_up_is_reported_not_slept_through() {
    for case in STEP_BACK_CASES {
        let (clock, sf) = stepping_back(case.0, 2).await;
        // T0, then T0 + 1 and T0 + 2 borrowed with the clock standing at T0: the bound.
        let ids = within(sf.next_ids(12)).await.unwrap();
        let last = sf.decode(*ids.last().unwrap()).unwrap();
        assert_eq!(last.timestamp_ms, T0 + 2);
        let st = sf.status();
        assert_eq!(
            (st.lead_ms, st.borrowed_ms_total, st.clock_behind_ms),
            (2, 2, 0)
        );
        assert_eq!(clock.now_ms(), T0, "nothing slept");
        // The 13th waits for the clock to reach T0 + 1, which steps back instead.
        expect_clock_error(&sf, case).await;
        assert_eq!(
            sf.status().clock_behind_ms,
            case.1,
            "measured from the clock's last reading"
        );
    }
}

#[tokio::test]
async fn end_of_timestamp_field_is_exhausted_never_negative() {
    // 8 timestamp bits: the field ends 255 ms after the epoch; the clock starts 5 ms before.
    let epoch = T0 - 250;
    let layout = SnowflakeLayout::new(8, 2, 2, epoch).unwrap();
    let reg = MemRegistry::new(2);
    let clock = ManualClock::new(T0).auto_advance(true);
    let sf = start(&reg, &clock, config(layout, 0)).await;
    let mut last = None;
    let mut outcome = None;
    for _ in 0..1000 {
        match within(sf.next_id()).await {
            Ok(id) => {
                assert!((0..1 << 12).contains(&id), "{id} outside the 12-bit layout");
                if let Some(prev) = last {
                    assert!(id > prev);
                }
                last = Some(id);
            }
            Err(e) => {
                outcome = Some(e);
                break;
            }
        }
    }
    let e = outcome.expect("the generator stops at the end of the field");
    assert!(matches!(e, Error::Exhausted(_)), "{e:?}");
    let last = sf.decode(last.expect("IDs before the end")).unwrap();
    assert_eq!(last.timestamp_ms, layout.max_timestamp_ms());
    assert_eq!(last.sequence, layout.max_sequence());
    // Every millisecond up to the end was used in full: 6 ms of 4 IDs.
    assert!(matches!(sf.next_ids(3).await, Err(Error::Exhausted(_))));
}

#[tokio::test]
async fn decode_inverts_encode() {
    let layouts = [
        SnowflakeLayout::default(),
        SnowflakeLayout::new(41, 5, 7, TWITTER_EPOCH_MS).unwrap(),
        SnowflakeLayout::new(42, 3, 18, 1_600_000_000_000).unwrap(),
    ];
    for layout in layouts {
        let worker_id = layout.max_worker_id() / 2 + 1;
        let reg = MemRegistry::new(worker_id);
        let clock = ManualClock::new(T0).auto_advance(true);
        let sf = start(&reg, &clock, config(layout, 100)).await;
        let n = (2 * layout.ids_per_ms() as usize).min(10_000);
        let ids = sf.next_ids(n).await.unwrap();
        let before = T0;
        // Milliseconds borrowed ahead of the clock are at most `max_borrow` ahead of it.
        let after = clock.now_ms() + sf.config().max_borrow.as_millis() as u64;
        for id in ids {
            let d = sf.decode(id).unwrap();
            assert_eq!(d.worker_id, worker_id);
            assert!((before..=after).contains(&d.timestamp_ms), "{d:?}");
            assert_eq!(
                layout
                    .encode(d.timestamp_ms, d.worker_id, d.sequence)
                    .unwrap(),
                id
            );
        }
        assert!(matches!(sf.decode(-1), Err(Error::InvalidInput(_))));
    }
}

#[tokio::test]
async fn random_start_spreads_and_zero_turns_it_off() {
    for (random_start, expect_zero_only) in [(0, true), (100, false)] {
        let reg = MemRegistry::new(1);
        let clock = ManualClock::new(T0);
        let sf = start(
            &reg,
            &clock,
            config(SnowflakeLayout::default(), random_start),
        )
        .await;
        let mut firsts = HashSet::new();
        for _ in 0..200 {
            clock.advance(Duration::from_millis(1));
            let seq = sf.decode(sf.next_id().await.unwrap()).unwrap().sequence;
            assert!(
                seq < random_start.max(1),
                "sequence {seq} for random start {random_start}"
            );
            firsts.insert(seq);
        }
        assert_eq!(firsts.len() == 1, expect_zero_only, "{firsts:?}");
    }
}

#[tokio::test]
async fn batch_is_ascending_unique_and_spans_milliseconds() {
    let reg = MemRegistry::new(9);
    let clock = ManualClock::new(T0).auto_advance(true);
    let sf = start(&reg, &clock, SnowflakeConfig::default()).await;
    let n = 10_000; // more than two milliseconds' worth of 4096
    let ids = within(sf.next_ids(n)).await.unwrap();
    assert_eq!(ids.len(), n);
    for w in ids.windows(2) {
        assert!(w[0] < w[1]);
    }
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), n);
    let stamps: HashSet<u64> = ids
        .iter()
        .map(|id| sf.decode(*id).unwrap().timestamp_ms)
        .collect();
    assert!(stamps.len() >= 3, "spans {} milliseconds", stamps.len());
    let single = sf.next_id().await.unwrap();
    assert!(single > *ids.last().unwrap());
    assert!(matches!(sf.next_ids(0).await, Err(Error::InvalidInput(_))));
    assert_eq!(sf.status().state, SnowflakeState::Ready);
}

#[tokio::test]
async fn status_is_not_ready_once_the_timestamp_field_ran_out() {
    // 16 timestamp bits: the field ends 65,535 ms after the epoch; the clock starts 1 s before.
    let layout = SnowflakeLayout::new(16, 2, 2, T0 - 64_535).unwrap();
    let reg = MemRegistry::new(1);
    let clock = ManualClock::new(T0);
    let sf = start(&reg, &clock, config(layout, 0)).await;
    sf.next_id().await.unwrap();
    assert_eq!(sf.status().state, SnowflakeState::Ready);
    clock.advance(Duration::from_millis(2000));
    // The mark moves on as always; only the field's end stops issuing.
    assert!(sf.renew_once().await.unwrap().is_ok());
    assert!(matches!(sf.next_id().await, Err(Error::Exhausted(_))));
    match sf.status().state {
        SnowflakeState::Exhausted { reason } => {
            assert!(reason.contains("ran out"), "{reason}");
        }
        other => panic!("expected exhausted, got {other:?}"),
    }
}
