//! Snowflake milliseconds borrowed ahead of the wall clock (`snowflake.max_borrow_ms`), in the
//! built binary on its embedded default: a batch that needs more than the layout's IDs per
//! millisecond is answered from the milliseconds ahead of the clock, at most `max_borrow_ms`
//! ahead of it; a process killed -9 while ahead restarts above every borrowed ID, with its
//! clock where it was and with its clock set back (libfaketime).

use super::*;
use common::{clock_set_back, gauge};

/// 16 IDs a millisecond, so that a batch of 4,000 needs 250 ms of sequence.
const SEQUENCE_BITS: u32 = 4;
const MAX_BORROW_MS: u64 = 200;
const BATCH: usize = 4000;
/// Twitter's epoch, the default.
const EPOCH_MS: u64 = 1_288_834_974_657;

fn env() -> Vec<(&'static str, String)> {
    vec![
        ("LEAF_SNOWFLAKE__SEQUENCE_BITS", SEQUENCE_BITS.to_string()),
        ("LEAF_SNOWFLAKE__MAX_BORROW_MS", MAX_BORROW_MS.to_string()),
        ("LEAF_SNOWFLAKE__RANDOM_START", "0".into()),
    ]
}

/// The wall time in a snowflake ID of this layout (10 worker bits, the default).
fn time_of(id: i64) -> u64 {
    (id as u64 >> (10 + SEQUENCE_BITS)) + EPOCH_MS
}

/// The value of `name` in `s`'s `/metrics`.
fn metric(s: &Server, name: &str) -> f64 {
    gauge(&s.get("/metrics").body, name)
}

/// One batch of [`BATCH`]: it must have borrowed (its last ID's time is later than the moment
/// the answer arrived, which no ID issued from the clock can be) and stayed within the bound.
fn burst(s: &Server, ids: &mut Vec<i64>) {
    let r = s.get(&format!("/v1/snowflake?count={BATCH}"));
    let answered = now_ms();
    let got = r.ids();
    assert_eq!(got.len(), BATCH);
    assert!(got.windows(2).all(|w| w[0] < w[1]), "ascending");
    let last = time_of(*got.last().unwrap());
    assert!(
        last > answered,
        "the batch's last ID ({last} ms) is not ahead of the clock at the answer ({answered} ms): \
         nothing was borrowed"
    );
    assert!(
        last <= answered + MAX_BORROW_MS,
        "the batch's last ID ({last} ms) is more than {MAX_BORROW_MS} ms ahead of the clock \
         ({answered} ms)"
    );
    ids.extend(got);
}

/// IDs from a node that may still be waiting for its clock to pass the previous mark: the
/// request waits with it (up to `max_startup_wait_ms`) or is answered 503, asked again.
fn ids_once_ready(s: &Server) -> Vec<i64> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = s.get("/v1/snowflake?count=100");
        if r.status == 200 {
            return r.ids();
        }
        assert!(
            r.status == 503 && Instant::now() < deadline,
            "{} {}\n{}",
            r.status,
            r.body,
            s.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn assert_above(what: &str, after: &[i64], before: &[i64]) {
    let (low, high) = (after.iter().min().unwrap(), before.iter().max().unwrap());
    assert!(
        low > high,
        "{what}: {low} ({} ms) is not above the highest earlier ID {high} ({} ms)",
        time_of(*low),
        time_of(*high)
    );
}

#[test]
fn a_borrowed_lead_survives_kill_9_with_the_clock_unchanged_and_set_back() {
    let dir = tempfile::tempdir().unwrap();
    let env = env();
    let plain: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut before = Vec::new();

    let s = Server::start_with(dir.path(), 1, &plain);
    burst(&s, &mut before);
    // Ahead of the clock is no step back: the node stays ready.
    let ready = s.get("/readyz");
    assert_eq!(ready.status, 200, "ready while ahead: {}", ready.body);
    assert!(metric(&s, "leaf_snowflake_lead_seconds") > 0.0);
    assert!(metric(&s, "leaf_snowflake_borrowed_ms_total") >= 1.0);
    // Killed while its last IDs are ahead of the clock: no final mark.
    s.sigkill();

    // The clock unchanged: the restart starts above the borrowed milliseconds.
    let s = Server::start_with(dir.path(), 2, &plain);
    let after = ids_once_ready(&s);
    assert_above("after kill -9, the clock unchanged", &after, &before);
    before.extend(after);
    burst(&s, &mut before);
    s.sigkill();

    // The clock set back 2 s: still above, after the start-up wait.
    let back = Duration::from_secs(2);
    let mut set_back = env.clone();
    set_back.extend(clock_set_back(back));
    let set_back: Vec<(&str, &str)> = set_back.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let s = Server::start_with(dir.path(), 3, &set_back);
    let after = ids_once_ready(&s);
    assert_above("after kill -9, the clock set back", &after, &before);
    // Once the node's clock has passed its previous mark it issues from that clock: IDs about
    // 2 s behind the machine's show that the clock really was set back.
    std::thread::sleep(Duration::from_millis(1200));
    let later = ids_once_ready(&s);
    assert_above("later, the clock set back", &later, &before);
    let lag = now_ms().saturating_sub(time_of(later[0]));
    assert!(
        lag >= 1000,
        "the node's IDs are only {lag} ms behind the machine's clock: libfaketime did not take"
    );
    let mut all = before;
    all.extend(after);
    all.extend(later);
    assert_unique("snowflake across the restarts", &all);
    assert!(s.sigterm().0.success());
}
