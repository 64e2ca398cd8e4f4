//! Consumption monitoring per tag: a recent IDs/s rate and when the tag was last used.
//!
//! Nothing here runs per ID: the count of issued IDs is read off the segment cursor when a
//! sample is taken (a load, a switch, a snapshot, a refresh tick), so the hot path never reads
//! the clock.

use std::collections::VecDeque;
use std::time::Duration;

/// The rate is measured over at least this span, when samples that old exist.
const RATE_WINDOW: Duration = Duration::from_secs(10);
/// Samples closer together than this are not kept (a burst of snapshots adds one).
const MIN_SPACING: Duration = Duration::from_secs(1);
/// Bounds memory when samples come often.
const MAX_SAMPLES: usize = 32;

#[derive(Debug, Default)]
pub(crate) struct Usage {
    /// `(monotonic time, IDs issued so far)`, oldest first.
    samples: VecDeque<(Duration, u64)>,
    last_total: u64,
    /// When a sample first saw the count change: the tag was used at or before this time.
    last_change: Option<Duration>,
}

impl Usage {
    pub(crate) fn sample(&mut self, now: Duration, total: u64) {
        if total != self.last_total {
            self.last_total = total;
            self.last_change = Some(now);
        }
        let keep = self
            .samples
            .back()
            .is_none_or(|&(t, _)| now.saturating_sub(t) >= MIN_SPACING);
        if keep {
            self.samples.push_back((now, total));
        }
        // Keep one sample at or before the window's start as the base of the rate.
        while self.samples.len() > 1
            && (self.samples[1].0 + RATE_WINDOW <= now || self.samples.len() > MAX_SAMPLES)
        {
            self.samples.pop_front();
        }
    }

    /// IDs per second since the base sample; 0 when no time has passed.
    pub(crate) fn rate(&self, now: Duration, total: u64) -> f64 {
        let Some(&(t0, n0)) = self.samples.front() else {
            return 0.0;
        };
        let span = now.saturating_sub(t0);
        if span.is_zero() {
            return 0.0;
        }
        total.saturating_sub(n0) as f64 / span.as_secs_f64()
    }

    pub(crate) fn last_change(&self) -> Option<Duration> {
        self.last_change
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    #[test]
    fn rate_over_the_recent_window() {
        let mut u = Usage::default();
        u.sample(s(0), 0);
        assert_eq!(u.rate(s(0), 0), 0.0);
        u.sample(s(2), 1000);
        assert_eq!(u.rate(s(2), 1000), 500.0);
        // A later burst is diluted only by the window, not by the whole history.
        for t in 3..=30 {
            u.sample(s(t), 1000);
        }
        assert_eq!(u.rate(s(30), 1000), 0.0);
        u.sample(s(31), 1000 + 11_000);
        let r = u.rate(s(31), 12_000);
        assert!((1000.0..=1100.0).contains(&r), "{r}");
    }

    #[test]
    fn last_change_is_the_first_sample_that_saw_new_ids() {
        let mut u = Usage::default();
        u.sample(s(0), 0);
        assert_eq!(u.last_change(), None);
        u.sample(s(5), 3);
        assert_eq!(u.last_change(), Some(s(5)));
        u.sample(s(9), 3);
        assert_eq!(u.last_change(), Some(s(5)));
    }

    #[test]
    fn samples_are_bounded() {
        let mut u = Usage::default();
        for t in 0..1000 {
            u.sample(s(t), t * 10);
        }
        assert!(u.samples.len() <= MAX_SAMPLES);
        assert_eq!(u.rate(s(999), 9990), 10.0);
    }
}
