//! The servers a client may ask, and what it knows of each: which answered last (asked first),
//! which failed and until when each is skipped (back-off, `Retry-After`). Pure bookkeeping on
//! monotonic times the caller passes in, so the rules are tested without waiting.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// What a client knows of one endpoint, from [`LeafClient::endpoints`](crate::LeafClient::endpoints).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct EndpointStatus {
    /// The base URL, as configured (without a trailing `/`).
    pub url: String,
    /// Whether it is the one asked first (the last that answered).
    pub preferred: bool,
    /// Requests it answered (any answer that is not a server-side failure).
    pub answered: u64,
    /// Requests that failed on it (no connection, no answer in time, a 5xx, a `Retry-After`).
    pub failed: u64,
    /// Failures since its last answer.
    pub failures_in_a_row: u32,
    /// How long it is still skipped; zero when it may be asked.
    pub skipped_for: Duration,
    /// Why it last failed.
    pub last_error: Option<String>,
    /// The HTTP status of its last answer, whatever it was (`None` before one, or when the
    /// last request got none: refused, cut, timed out).
    pub last_status: Option<u16>,
}

#[derive(Debug, Default)]
struct Health {
    answered: u64,
    failed: u64,
    failures_in_a_row: u32,
    /// Monotonic time before which it is skipped.
    until: Duration,
    last_error: Option<String>,
    last_status: Option<u16>,
}

#[derive(Debug)]
struct Endpoint {
    url: String,
    health: Mutex<Health>,
}

impl Endpoint {
    fn health(&self) -> MutexGuard<'_, Health> {
        self.health.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The back-off rule: `min` after the first failure in a row, doubling, at most `max`; at least
/// the server's `Retry-After` (itself cut to `max_retry_after`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Backoff {
    pub(crate) min: Duration,
    pub(crate) max: Duration,
    pub(crate) max_retry_after: Duration,
}

impl Backoff {
    fn after(&self, failures_in_a_row: u32, retry_after: Option<Duration>) -> Duration {
        let doublings = failures_in_a_row.saturating_sub(1).min(31);
        let exponential = self.min.saturating_mul(1 << doublings).min(self.max);
        exponential.max(self.asked(retry_after))
    }

    /// The server's `Retry-After`, cut to `max_retry_after`.
    fn asked(&self, retry_after: Option<Duration>) -> Duration {
        retry_after.map_or(Duration::ZERO, |r| r.min(self.max_retry_after))
    }
}

/// The endpoints of one client, shared by all its calls.
#[derive(Debug)]
pub(crate) struct Endpoints {
    list: Vec<Endpoint>,
    preferred: AtomicUsize,
    backoff: Backoff,
}

impl Endpoints {
    /// `urls` in the configured order (at least one); the first is preferred until another
    /// answers instead.
    pub(crate) fn new(urls: Vec<String>, backoff: Backoff) -> Self {
        Endpoints {
            list: urls
                .into_iter()
                .map(|url| Endpoint {
                    url,
                    health: Mutex::default(),
                })
                .collect(),
            preferred: AtomicUsize::new(0),
            backoff,
        }
    }

    /// The base URL of endpoint `i`.
    pub(crate) fn url(&self, i: usize) -> &str {
        &self.list[i].url
    }

    /// The endpoints to ask at `now`, in order: the preferred one, then the others in the
    /// configured order after it (wrapping round), leaving out those skipped until later.
    pub(crate) fn ready(&self, now: Duration) -> Vec<usize> {
        let n = self.list.len();
        let first = self.preferred.load(Ordering::Relaxed) % n;
        (0..n)
            .map(|k| (first + k) % n)
            .filter(|&i| self.list[i].health().until <= now)
            .collect()
    }

    /// When the first skipped endpoint may be asked again (`None`: none is skipped at `now`).
    pub(crate) fn next_ready_at(&self, now: Duration) -> Option<Duration> {
        self.list
            .iter()
            .map(|e| e.health().until)
            .filter(|&until| until > now)
            .min()
    }

    /// Endpoint `i` answered with `status`: it is asked first from now on, and its failures
    /// are forgotten.
    pub(crate) fn answered(&self, i: usize, status: u16) {
        let mut h = self.list[i].health();
        h.answered += 1;
        h.last_status = Some(status);
        h.failures_in_a_row = 0;
        h.until = Duration::ZERO;
        drop(h);
        self.preferred.store(i, Ordering::Relaxed);
    }

    /// Endpoint `i` failed at `now` because of `why`, the server asking for `retry_after` if it
    /// did: it is skipped for the back-off, and the time it is skipped from `now` returned.
    /// A failure while it is already skipped is of a call that began before: the same outage,
    /// not one more in a row (calls failing together would otherwise double the back-off once
    /// each); only a longer `Retry-After` moves the end of the skip.
    pub(crate) fn failed(
        &self,
        i: usize,
        now: Duration,
        retry_after: Option<Duration>,
        status: Option<u16>,
        why: String,
    ) -> Duration {
        let mut h = self.list[i].health();
        h.failed += 1;
        h.last_error = Some(why);
        h.last_status = status;
        let skip = if now < h.until {
            self.backoff.asked(retry_after)
        } else {
            h.failures_in_a_row = h.failures_in_a_row.saturating_add(1);
            self.backoff.after(h.failures_in_a_row, retry_after)
        };
        h.until = h.until.max(now.saturating_add(skip));
        h.until - now
    }

    /// Every endpoint's state at `now`.
    pub(crate) fn status(&self, now: Duration) -> Vec<EndpointStatus> {
        let preferred = self.preferred.load(Ordering::Relaxed) % self.list.len();
        self.list
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let h = e.health();
                EndpointStatus {
                    url: e.url.clone(),
                    preferred: i == preferred,
                    answered: h.answered,
                    failed: h.failed,
                    failures_in_a_row: h.failures_in_a_row,
                    skipped_for: h.until.saturating_sub(now),
                    last_error: h.last_error.clone(),
                    last_status: h.last_status,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn backoff() -> Backoff {
        Backoff {
            min: ms(100),
            max: ms(5000),
            max_retry_after: ms(30_000),
        }
    }

    fn three() -> Endpoints {
        Endpoints::new(vec!["a".into(), "b".into(), "c".into()], backoff())
    }

    #[test]
    fn backoff_table() {
        let check = |failures: u32, retry_after_ms: Option<u64>, expect_ms: u64| {
            let got = backoff().after(failures, retry_after_ms.map(ms));
            assert_eq!(got, ms(expect_ms), "{failures} {retry_after_ms:?}");
        };
        check(1, None, 100);
        check(2, None, 200);
        check(3, None, 400);
        check(6, None, 3200);
        check(7, None, 5000);
        check(u32::MAX, None, 5000);
        // Retry-After is honoured when longer, up to its own bound.
        check(1, Some(1000), 1000);
        check(7, Some(1000), 5000);
        check(1, Some(60_000), 30_000);
        check(1, Some(0), 100);
    }

    #[test]
    fn the_last_good_endpoint_is_asked_first_then_the_others_in_order() {
        let e = three();
        assert_eq!(e.ready(Duration::ZERO), [0, 1, 2]);
        e.answered(1, 200);
        assert_eq!(e.ready(Duration::ZERO), [1, 2, 0]);
        e.answered(2, 200);
        assert_eq!(e.ready(Duration::ZERO), [2, 0, 1]);
    }

    #[test]
    fn a_failed_endpoint_is_skipped_until_its_backoff_ends() {
        let e = three();
        let now = ms(1000);
        assert_eq!(e.failed(0, now, None, None, "refused".into()), ms(100));
        assert_eq!(e.ready(now), [1, 2], "skipped, even though preferred");
        assert_eq!(e.next_ready_at(now), Some(ms(1100)));
        assert_eq!(e.ready(ms(1099)), [1, 2]);
        assert_eq!(e.ready(ms(1100)), [0, 1, 2]);
        assert_eq!(e.next_ready_at(ms(1100)), None);
        // A second failure in a row doubles the skip; an answer forgets them all.
        assert_eq!(e.failed(0, ms(1100), None, None, "refused".into()), ms(200));
        assert_eq!(e.ready(ms(1299)), [1, 2]);
        e.answered(0, 200);
        assert_eq!(e.ready(ms(1100)), [0, 1, 2]);
        assert_eq!(e.failed(0, ms(2000), None, None, "refused".into()), ms(100));
    }

    #[test]
    fn calls_failing_together_count_as_one_failure() {
        // Eight calls in flight when the server went away all fail within a few milliseconds:
        // one outage, not eight failures in a row (which would skip it for 12.8 s, not 0.1).
        let e = three();
        for i in 0..8 {
            e.failed(0, ms(1000 + i), None, None, "refused".into());
        }
        assert_eq!(e.status(ms(1008))[0].failures_in_a_row, 1);
        assert_eq!(
            e.status(ms(1008))[0].failed,
            8,
            "each failure is still counted"
        );
        assert_eq!(e.next_ready_at(ms(1008)), Some(ms(1100)));
        // A longer Retry-After from one of them still holds.
        e.failed(0, ms(1009), Some(ms(500)), None, "503 -3".into());
        assert_eq!(e.next_ready_at(ms(1009)), Some(ms(1509)));
        // A failure once the skip is over is the next in the row.
        assert_eq!(e.failed(0, ms(1509), None, None, "refused".into()), ms(200));
        assert_eq!(e.status(ms(1509))[0].failures_in_a_row, 2);
    }

    #[test]
    fn retry_after_keeps_an_endpoint_skipped_that_long() {
        let e = three();
        e.answered(2, 200);
        e.failed(2, Duration::ZERO, Some(ms(1000)), None, "503 -3".into());
        e.failed(0, Duration::ZERO, None, None, "refused".into());
        assert_eq!(e.ready(ms(50)), [1]);
        assert_eq!(
            e.ready(ms(999)),
            [0, 1],
            "the preferred one is still skipped"
        );
        assert_eq!(e.ready(ms(1000)), [2, 0, 1]);
        assert_eq!(e.next_ready_at(Duration::ZERO), Some(ms(100)));
        assert_eq!(e.next_ready_at(ms(100)), Some(ms(1000)));
    }

    #[test]
    fn status_reports_each_endpoint() {
        let e = three();
        e.answered(1, 200);
        e.failed(0, ms(10), Some(ms(2000)), None, "503 -3 store down".into());
        let s = e.status(ms(1010));
        assert_eq!(s.len(), 3);
        assert_eq!(
            (
                s[0].url.as_str(),
                s[0].preferred,
                s[0].failed,
                s[0].skipped_for
            ),
            ("a", false, 1, ms(1000))
        );
        assert_eq!(s[0].last_error.as_deref(), Some("503 -3 store down"));
        assert_eq!((s[1].preferred, s[1].answered), (true, 1));
        assert_eq!(s[2].skipped_for, Duration::ZERO);
    }
}
