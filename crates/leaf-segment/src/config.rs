//! `SegmentConfig`: the tunables of the segment allocator (the server's `[segment]` section).

use std::time::Duration;

use leaf_core::{Error, Result};

/// How the allocator preloads, waits, sizes its steps and refreshes its tag list.
#[derive(Clone, Debug)]
pub struct SegmentConfig {
    /// Share of the current segment used before the next one is loaded in the background.
    /// Default `0.1` (Leaf's 10%).
    pub preload_threshold: f64,
    /// How long a request waits for the next segment when both buffers are spent, before it
    /// fails with `Unavailable`. Default 10 ms.
    pub switch_wait: Duration,
    /// A segment that lasted less than this doubles the next step. Default 900 s (15 min).
    pub step_double_below: Duration,
    /// A segment that lasted this long or longer halves the next step. Default 1800 s (30 min).
    pub step_halve_above: Duration,
    /// Doubling stops at this step; at most [`MAX_STEP_LIMIT`](Self::MAX_STEP_LIMIT).
    /// Default 1,000,000 (Leaf's `MAX_STEP`).
    pub max_step: i64,
    /// How often [`spawn_refresher`](crate::SegmentAllocator::spawn_refresher) re-reads the tag
    /// list. Default 60 s.
    pub refresh_interval: Duration,
    /// How long a tag the store does not know is remembered as unknown. Default 1 s.
    pub miss_ttl: Duration,
    /// Background loads that fail retry with a doubling backoff up to this. Default 5 s.
    pub retry_backoff_max: Duration,
}

impl Default for SegmentConfig {
    fn default() -> Self {
        SegmentConfig {
            preload_threshold: 0.1,
            switch_wait: Duration::from_millis(10),
            step_double_below: Duration::from_secs(900),
            step_halve_above: Duration::from_secs(1800),
            max_step: 1_000_000,
            refresh_interval: Duration::from_secs(60),
            miss_ttl: Duration::from_secs(1),
            retry_backoff_max: Duration::from_secs(5),
        }
    }
}

impl SegmentConfig {
    /// The largest `max_step`: Leaf's `step` column is an `int`, so no step may pass it.
    pub const MAX_STEP_LIMIT: i64 = i32::MAX as i64;

    /// Checks the values; the error names the offending field of this struct (a caller reading
    /// them from configuration adds its own keys).
    pub fn validate(&self) -> Result<()> {
        if !(0.0..=1.0).contains(&self.preload_threshold) {
            return Err(Error::Config(format!(
                "preload_threshold must be between 0 and 1, got {}",
                self.preload_threshold
            )));
        }
        if !(1..=Self::MAX_STEP_LIMIT).contains(&self.max_step) {
            return Err(Error::Config(format!(
                "max_step must be from 1 to {} (the step column is an int), got {}",
                Self::MAX_STEP_LIMIT,
                self.max_step
            )));
        }
        if self.step_double_below > self.step_halve_above {
            return Err(Error::Config(format!(
                "step_double_below ({:?}) must not exceed step_halve_above ({:?})",
                self.step_double_below, self.step_halve_above
            )));
        }
        if self.refresh_interval.is_zero() {
            return Err(Error::Config("refresh_interval must be above zero".into()));
        }
        Ok(())
    }

    /// The threshold as used: out-of-range values are clamped, `NaN` means the default.
    pub(crate) fn threshold(&self) -> f64 {
        if self.preload_threshold.is_nan() {
            0.1
        } else {
            self.preload_threshold.clamp(0.0, 1.0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_leafs() {
        let c = SegmentConfig::default();
        assert_eq!(c.preload_threshold, 0.1);
        assert_eq!(c.switch_wait, Duration::from_millis(10));
        assert_eq!(c.step_double_below, Duration::from_secs(900));
        assert_eq!(c.step_halve_above, Duration::from_secs(1800));
        assert_eq!(c.max_step, 1_000_000);
        assert_eq!(c.refresh_interval, Duration::from_secs(60));
        assert_eq!(c.miss_ttl, Duration::from_secs(1));
        assert!(c.validate().is_ok());
    }

    #[test]
    fn validation_names_the_field() {
        let check = |c: SegmentConfig, field: &str| {
            let e = c.validate().unwrap_err();
            assert!(matches!(e, Error::Config(_)), "{e}");
            assert!(e.to_string().contains(field), "{e}");
            // The library names its own fields; the server adds its keys (`segment.`).
            assert!(!e.to_string().contains("segment."), "{e}");
        };
        check(
            SegmentConfig {
                preload_threshold: 1.5,
                ..Default::default()
            },
            "preload_threshold",
        );
        check(
            SegmentConfig {
                preload_threshold: f64::NAN,
                ..Default::default()
            },
            "preload_threshold",
        );
        check(
            SegmentConfig {
                max_step: 0,
                ..Default::default()
            },
            "max_step",
        );
        // The store's step column is an int: a doubled step past it fails every preload.
        check(
            SegmentConfig {
                max_step: i64::from(i32::MAX) + 1,
                ..Default::default()
            },
            "max_step",
        );
        check(
            SegmentConfig {
                max_step: i64::MAX,
                ..Default::default()
            },
            "max_step",
        );
        check(
            SegmentConfig {
                step_double_below: Duration::from_secs(3600),
                ..Default::default()
            },
            "step_double_below",
        );
        check(
            SegmentConfig {
                refresh_interval: Duration::ZERO,
                ..Default::default()
            },
            "refresh_interval",
        );
    }

    #[test]
    fn the_largest_step_the_column_holds_is_valid() {
        let c = SegmentConfig {
            max_step: i64::from(i32::MAX),
            ..Default::default()
        };
        assert!(c.validate().is_ok());
    }

    #[test]
    fn threshold_is_clamped() {
        let t = |v: f64| {
            SegmentConfig {
                preload_threshold: v,
                ..Default::default()
            }
            .threshold()
        };
        assert_eq!(t(0.25), 0.25);
        assert_eq!(t(-1.0), 0.0);
        assert_eq!(t(7.0), 1.0);
        assert_eq!(t(f64::NAN), 0.1);
    }
}
