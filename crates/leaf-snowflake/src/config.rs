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
    /// `mark_window` if it was below.
    pub(crate) fn validated(mut self) -> Result<Self> {
        self.validate()?;
        // A restart after a crash may find the clock up to one window behind its own mark;
        // waiting less than that would make every crash restart unavailable.
        self.max_startup_wait = self.max_startup_wait.max(self.mark_window);
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
    fn timing_rules_table() {
        check(1000, 3000, 10_000, Some(10_000));
        check(1000, 3000, 500, Some(3000)); // clamped up to the window
        check(0, 3000, 10_000, None);
        check(3000, 3000, 10_000, None);
        check(4000, 3000, 10_000, None);
        check(10, 20, 0, Some(20));
    }
}
