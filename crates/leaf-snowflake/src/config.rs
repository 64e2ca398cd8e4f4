//! `SnowflakeConfig`: the generator's layout, random start, clock tolerance and time-mark timing.

use std::time::Duration;

use leaf_core::{Error, Result, SnowflakeLayout};

/// How the generator behaves. The server builds it from its own configuration file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnowflakeConfig {
    /// Bit layout and epoch. Default: [`SnowflakeLayout::default`] (41 + 10 + 12 bits,
    /// Twitter's epoch, as Leaf).
    pub layout: SnowflakeLayout,
    /// A new millisecond starts its sequence at a random value in `0..random_start` (Leaf's
    /// choice, so that IDs taken modulo a shard count spread evenly); `0` starts at 0.
    /// Values above the sequence capacity are clamped to it. Default: 100.
    pub random_start: u64,
    /// A clock step back of at most this much is waited out; a larger one fails at once with
    /// `ClockMovedBackwards`. Default: 5 ms.
    pub max_backwards: Duration,
    /// When a millisecond's sequence is spent, the next one is taken ahead of the wall clock
    /// instead of waiting for it, as long as the last issued timestamp stays at most this far
    /// ahead of the clock and at or under the durable time mark (which a restart and any later
    /// holder of the worker id start above, so this never repeats an ID); at the bound, the
    /// clock catches up first. An ID's time is then up to this much later than when it was
    /// issued. Only more than one millisecond's sequence of IDs in one millisecond borrows
    /// (4,096 with the default layout, e.g. a large batch). `0` waits for the clock, as Leaf
    /// does. Lowered to `mark_window - mark_renew` if above it (how far ahead of the clock the
    /// durable mark stays between two renewals on time). Default: 300 ms.
    pub max_borrow: Duration,
    /// How far ahead of the wall clock each renewal puts the durable time mark. Default: 3000 ms.
    pub mark_window: Duration,
    /// How often the renewer writes the mark (and extends the lease); must be below
    /// `mark_window`. Default: 1000 ms.
    pub mark_renew: Duration,
    /// The longest start-up wait for the clock to pass the worker id's previous mark; further
    /// behind, the generator stays unavailable until the clock catches up. Never below
    /// `mark_window` (raised to it). Default: 10000 ms.
    pub max_startup_wait: Duration,
    /// Subtracted from the lease TTL (recycling modes) when computing how long the generator may
    /// issue after a successful renewal, so that it stops before the id can be recycled.
    /// Default: 1000 ms.
    pub fencing_margin: Duration,
    /// A wall clock found further ahead than this of what the monotonic clock counted since
    /// the last trusted reading (checked at every renewal) is not trusted: nothing is issued
    /// and no mark is written from it until it comes back within this bound. A restart trusts
    /// the clock again. Must be above 0. Default: 60000 ms.
    pub max_forward_step: Duration,
}

impl Default for SnowflakeConfig {
    fn default() -> Self {
        SnowflakeConfig {
            layout: SnowflakeLayout::default(),
            random_start: 100,
            max_backwards: Duration::from_millis(5),
            max_borrow: Duration::from_millis(300),
            mark_window: Duration::from_millis(3000),
            mark_renew: Duration::from_millis(1000),
            max_startup_wait: Duration::from_millis(10_000),
            fencing_margin: Duration::from_millis(1000),
            max_forward_step: Duration::from_millis(60_000),
        }
    }
}

impl SnowflakeConfig {
    /// Checks the timing fields; the error names the offending field of this struct (a caller
    /// reading them from configuration adds its own keys).
    pub fn validate(&self) -> Result<()> {
        if self.mark_renew.is_zero() {
            return Err(Error::Config("mark_renew must be above 0".into()));
        }
        if self.mark_renew >= self.mark_window {
            return Err(Error::Config(format!(
                "mark_renew ({} ms) must be below mark_window ({} ms), or the mark runs out \
                 between two renewals",
                self.mark_renew.as_millis(),
                self.mark_window.as_millis()
            )));
        }
        if self.max_forward_step.is_zero() {
            return Err(Error::Config("max_forward_step must be above 0".into()));
        }
        Ok(())
    }

    /// [`validate`](Self::validate)s and returns the config with `max_startup_wait` raised to
    /// `mark_window` if it was below and `max_borrow` lowered to `mark_window - mark_renew` if
    /// it was above.
    pub(crate) fn validated(mut self) -> Result<Self> {
        self.validate()?;
        // A restart after a crash may find the clock up to one window behind its own mark;
        // waiting less than that would make every crash restart unavailable.
        self.max_startup_wait = self.max_startup_wait.max(self.mark_window);
        // Between two renewals on time the durable mark is at least this far ahead of the
        // clock: a lead within it never waits for the mark.
        self.max_borrow = self.max_borrow.min(self.mark_window - self.mark_renew);
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(renew_ms: u64, window_ms: u64, startup_ms: u64, expect: Option<u64>) {
        let c = SnowflakeConfig {
            mark_renew: Duration::from_millis(renew_ms),
            mark_window: Duration::from_millis(window_ms),
            max_startup_wait: Duration::from_millis(startup_ms),
            ..SnowflakeConfig::default()
        };
        let r = c.validated();
        match expect {
            Some(startup) => assert_eq!(
                r.unwrap().max_startup_wait,
                Duration::from_millis(startup),
                "renew {renew_ms} window {window_ms}"
            ),
            None => {
                let e = r.unwrap_err();
                assert!(
                    matches!(&e, Error::Config(m) if m.starts_with("mark_renew")),
                    "renew {renew_ms} window {window_ms}: {e:?}"
                );
                // The library names its fields; the server adds its keys (`snowflake.`).
                assert!(!e.to_string().contains("snowflake."), "{e}");
            }
        }
    }

    #[test]
    fn the_borrowing_lead_stays_within_the_marks_least_lead() {
        let borrow = |window_ms: u64, renew_ms: u64, borrow_ms: u64| {
            SnowflakeConfig {
                mark_window: Duration::from_millis(window_ms),
                mark_renew: Duration::from_millis(renew_ms),
                max_borrow: Duration::from_millis(borrow_ms),
                ..SnowflakeConfig::default()
            }
            .validated()
            .unwrap()
            .max_borrow
        };
        assert_eq!(borrow(3000, 1000, 300), Duration::from_millis(300));
        assert_eq!(borrow(1001, 1000, 300), Duration::from_millis(1));
        assert_eq!(borrow(3000, 1000, 60_000), Duration::from_millis(2000));
        assert_eq!(borrow(3000, 1000, 0), Duration::ZERO);
    }

    #[test]
    fn timing_rules_table() {
        check(1000, 3000, 10_000, Some(10_000));
        check(1000, 3000, 500, Some(3000)); // clamped up to the window
        check(0, 3000, 10_000, None);
        check(3000, 3000, 10_000, None);
        check(4000, 3000, 10_000, None);
        check(10, 20, 0, Some(20));
    }
}
