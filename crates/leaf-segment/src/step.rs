//! Leaf's dynamic step: size the next segment by how long the previous one lasted; and the
//! rule that replaces it for an allocator whose tags are sized by someone else.

use std::fmt::Debug;
use std::time::Duration;

use leaf_core::{MAX_STEP, Tag};

use crate::SegmentConfig;

/// Sizes each load of an allocator's tags in place of Leaf's dynamic step
/// ([`SegmentAllocator::with_step_rule`](crate::SegmentAllocator::with_step_rule)).
pub trait StepRule: Send + Sync + Debug {
    /// The step to ask the store for at a load of `tag`: `last` is the step the tag's latest
    /// load used since it was cached (`None` at its first load). `None` asks for the row's
    /// stored step.
    fn step(&self, tag: &Tag, last: Option<i64>) -> Option<i64>;
}

/// The step for the next load, given the step of the latest load (`current`), the step stored in
/// the row (`stored`) and how long the latest segment `lasted` (time between the last two loads).
///
/// Leaf's rule: below `step_double_below` the step doubles while the result stays within
/// `max_step`; below `step_halve_above` it stays; otherwise it halves unless that would go below
/// the stored step. The result is never below the stored step, so raising a row's step takes
/// effect at the next load.
///
/// Whatever the configuration says, the result is at most [`MAX_STEP`]: a store refuses a step
/// its `int` column cannot hold, and a preload asking for one would fail at every retry.
pub(crate) fn next_step(
    current: i64,
    stored: i64,
    lasted: Duration,
    config: &SegmentConfig,
) -> i64 {
    let max = config.max_step.min(MAX_STEP);
    let next = if lasted < config.step_double_below {
        match current.checked_mul(2) {
            Some(doubled) if doubled <= max => doubled,
            _ => current,
        }
    } else if lasted < config.step_halve_above {
        current
    } else if current / 2 >= stored {
        current / 2
    } else {
        current
    };
    next.max(stored).clamp(1, MAX_STEP)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(current: i64, stored: i64, lasted_s: u64, expect: i64) {
        let c = SegmentConfig::default();
        assert_eq!(
            next_step(current, stored, Duration::from_secs(lasted_s), &c),
            expect,
            "current {current}, stored {stored}, lasted {lasted_s} s"
        );
    }

    #[test]
    fn step_rule_table() {
        // Fast consumption doubles.
        check(2000, 2000, 0, 4000);
        check(2000, 2000, 899, 4000);
        check(4000, 2000, 60, 8000);
        // Doubling stops where the result would pass max_step.
        check(500_000, 2000, 10, 1_000_000);
        check(600_000, 2000, 10, 600_000);
        check(1_000_000, 2000, 10, 1_000_000);
        // Between the bounds it stays.
        check(4000, 2000, 900, 4000);
        check(4000, 2000, 1799, 4000);
        // Slow consumption halves, never below the stored step.
        check(8000, 2000, 1800, 4000);
        check(8000, 2000, 7200, 4000);
        check(4000, 2000, 3600, 2000);
        check(2000, 2000, 3600, 2000);
        check(3000, 2000, 3600, 3000);
        // A raised stored step wins at once.
        check(2000, 5000, 3600, 5000);
        check(2000, 5000, 1000, 5000);
        // A stored step above max_step is kept, not doubled.
        check(2_000_000, 2_000_000, 10, 2_000_000);
    }

    #[test]
    fn bounds_are_configurable() {
        let c = SegmentConfig {
            step_double_below: Duration::from_secs(10),
            step_halve_above: Duration::from_secs(20),
            max_step: 100,
            ..Default::default()
        };
        assert_eq!(next_step(10, 10, Duration::from_secs(9), &c), 20);
        assert_eq!(next_step(60, 10, Duration::from_secs(9), &c), 60);
        assert_eq!(next_step(20, 10, Duration::from_secs(10), &c), 20);
        assert_eq!(next_step(20, 10, Duration::from_secs(20), &c), 10);
    }

    #[test]
    fn the_step_column_bounds_every_configuration() {
        // Whatever max_step says, a step the row's `int` column cannot take is never asked for
        // (a store refuses it, and the preload would fail forever).
        let c = SegmentConfig {
            max_step: i64::MAX,
            ..Default::default()
        };
        let fast = Duration::from_secs(1);
        assert_eq!(next_step(1 << 29, 2000, fast, &c), 1 << 30);
        // 2^31 is one past the column's largest value: the step stays.
        assert_eq!(next_step(1 << 30, 2000, fast, &c), 1 << 30);
        assert_eq!(next_step(MAX_STEP, 2000, fast, &c), MAX_STEP);
        assert_eq!(next_step(1 << 62, 2000, fast, &c), MAX_STEP);
        // A stored step past the column (written by another tool) is not asked for either.
        assert_eq!(next_step(2000, MAX_STEP + 1, fast, &c), MAX_STEP);
        for current in [1, 1 << 20, MAX_STEP, i64::MAX] {
            let next = next_step(current, 1, fast, &c);
            assert!((1..=MAX_STEP).contains(&next), "{current} -> {next}");
        }
    }
}
