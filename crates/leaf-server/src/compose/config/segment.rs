//! `[segment]`: segment mode and its store.

use std::time::Duration;

use leaf_core::{Error, NewTag, Result, Tag};
use leaf_segment::SegmentConfig;
use serde::{Deserialize, Serialize};

use figment::value::Value;

use super::sections::Sections;
use super::{check_bounds, name_keys};

/// `[segment]`: segment mode, the allocator's settings, which store, and each store's own
/// table (`[segment.<table>]`, as the table of backends names it), read by that store's crate.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default)]
pub struct SegmentSection {
    /// Serve segment mode. Default `true`.
    pub enabled: bool,
    /// Load the next segment once this share of the current one is used. Default 0.1.
    pub preload_threshold: f64,
    /// How long a request waits for the next segment when both are spent. Default 10.
    pub switch_wait_ms: u64,
    /// The step doubles when a segment lasted less than this. Default 900.
    pub step_double_below_s: u64,
    /// The step halves when a segment lasted more than this. Default 1800.
    pub step_halve_above_s: u64,
    /// The dynamic step never doubles past this. Default 1000000.
    pub max_step: i64,
    /// How often the tag list is re-read from the store. Default 60.
    pub refresh_s: u64,
    /// How long "unknown tag" is remembered before the store is asked again. Default 1000.
    pub miss_ttl_ms: u64,
    /// Failed loads are retried with a backoff growing up to this. Default 5000.
    pub retry_backoff_max_ms: u64,
    /// The store: the `store` name of a line of the server's table of backends
    /// (`crate::compose::backends::BACKENDS`), behind that line's cargo feature; its settings are the
    /// table `[segment.<table>]`. Default `sqlite`.
    pub store: String,
    /// Tags created at start-up when missing (an existing row is never touched).
    /// Default `["leaf-segment-test"]`, Leaf's quick-start tag.
    pub seed_tags: Vec<String>,
    /// Each store's table, by name, and the [`ALIASES`] of earlier versions' flat keys as
    /// they were written.
    #[serde(flatten)]
    pub stores: Sections,
}

/// The keys of `[segment]` kept from earlier versions (and Leaf's `leaf.jdbc.url`): each, when
/// set, stands for a key of the chosen store's table (the first of its targets the store has),
/// unless that table sets it itself; a store without such a key ignores it. With the range each
/// number accepts whatever the store (`None`: text).
pub const ALIASES: &[(&str, &[&str], Range)] = &[
    ("url", &["url", "endpoints"], None),
    ("max_connections", &["max_connections"], Some((1, 1_000))),
    (
        "busy_timeout_ms",
        &["busy_timeout_ms"],
        Some((0, 3_600_000)),
    ),
    (
        "connect_timeout_ms",
        &["connect_timeout_ms"],
        Some((0, 3_600_000)),
    ),
    ("timeout_ms", &["timeout_ms"], Some((0, 3_600_000))),
    (
        "lock_wait_timeout_s",
        &["lock_wait_timeout_s"],
        Some((0, 3_600)),
    ),
];

/// The numbers an alias accepts, `(min, max)`; `None` for text.
pub type Range = Option<(u64, u64)>;

/// An alias that is set: its key, the store keys it may stand for, its value.
pub type Alias = (&'static str, &'static [&'static str], Value);

impl Default for SegmentSection {
    fn default() -> Self {
        SegmentSection {
            enabled: true,
            preload_threshold: 0.1,
            switch_wait_ms: 10,
            step_double_below_s: 900,
            step_halve_above_s: 1800,
            max_step: 1_000_000,
            refresh_s: 60,
            miss_ttl_ms: 1000,
            retry_backoff_max_ms: 5000,
            store: "sqlite".into(),
            seed_tags: vec!["leaf-segment-test".into()],
            stores: Sections::default(),
        }
    }
}

impl SegmentSection {
    /// The aliases set in `[segment]` (see [`ALIASES`]), checked: text for `url`, numbers
    /// within their range; errors name the key.
    pub fn aliases(&self) -> Result<Vec<Alias>> {
        let mut set = Vec::new();
        for &(key, targets, range) in ALIASES {
            let Some(value) = self.stores.get(key) else {
                continue;
            };
            let ok = match (value, range) {
                (Value::String(..), None) => true,
                (v, Some((min, max))) => v
                    .to_u128()
                    .or_else(|| v.to_i128().and_then(|n| u128::try_from(n).ok()))
                    .is_some_and(|n| (u128::from(min)..=u128::from(max)).contains(&n)),
                _ => false,
            };
            if !ok {
                let expected = range.map_or_else(
                    || "text".to_owned(),
                    |(min, max)| format!("a number from {min} to {max}"),
                );
                return Err(leaf_core::Error::Config(format!(
                    "segment.{key}: must be {expected}"
                )));
            }
            set.push((key, targets, value.clone()));
        }
        Ok(set)
    }

    /// The seed tags as rows to create, checked as `POST /v1/tags` checks a plain tag (a
    /// name of a business row's shape is refused).
    pub fn seed_tags(&self) -> Result<Vec<NewTag>> {
        self.seed_tags
            .iter()
            .map(|t| {
                let new = Tag::new(t).map(NewTag::new).and_then(|new| {
                    leaf_business::check_new_plain(&new)?;
                    Ok(new)
                });
                new.map_err(|e| Error::Config(format!("segment.seed_tags: {t:?}: {e}")))
            })
            .collect()
    }

    /// The allocator's configuration.
    pub fn allocator_config(&self) -> SegmentConfig {
        SegmentConfig {
            preload_threshold: self.preload_threshold,
            switch_wait: Duration::from_millis(self.switch_wait_ms),
            step_double_below: Duration::from_secs(self.step_double_below_s),
            step_halve_above: Duration::from_secs(self.step_halve_above_s),
            max_step: self.max_step,
            refresh_interval: Duration::from_secs(self.refresh_s),
            miss_ttl: Duration::from_millis(self.miss_ttl_ms),
            retry_backoff_max: Duration::from_millis(self.retry_backoff_max_ms),
        }
    }

    /// Bounds the numbers, then applies the allocator's own rules (named by these keys). The
    /// store's table is its crate's to check (`compose::config::tables::check`).
    pub(super) fn validate(&self) -> Result<()> {
        const HOUR_MS: u64 = 3_600_000;
        const MONTH_S: u64 = 30 * 86_400;
        check_bounds(&[
            ("segment.switch_wait_ms", self.switch_wait_ms, 0, 60_000),
            (
                "segment.step_double_below_s",
                self.step_double_below_s,
                0,
                MONTH_S,
            ),
            (
                "segment.step_halve_above_s",
                self.step_halve_above_s,
                0,
                MONTH_S,
            ),
            // Above zero: leaf-segment's rule.
            ("segment.refresh_s", self.refresh_s, 0, 86_400),
            ("segment.miss_ttl_ms", self.miss_ttl_ms, 0, HOUR_MS),
            (
                "segment.retry_backoff_max_ms",
                self.retry_backoff_max_ms,
                0,
                HOUR_MS,
            ),
        ])?;
        self.allocator_config()
            .validate()
            .map_err(|e| name_keys(e, FIELD_KEYS))?;
        self.seed_tags()?;
        self.aliases()?;
        Ok(())
    }
}

/// leaf-segment's field names and the keys they are read from.
const FIELD_KEYS: &[(&str, &str)] = &[
    ("preload_threshold", "segment.preload_threshold"),
    ("switch_wait", "segment.switch_wait_ms"),
    ("step_double_below", "segment.step_double_below_s"),
    ("step_halve_above", "segment.step_halve_above_s"),
    ("max_step", "segment.max_step"),
    ("refresh_interval", "segment.refresh_s"),
    ("miss_ttl", "segment.miss_ttl_ms"),
    ("retry_backoff_max", "segment.retry_backoff_max_ms"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocator_field_names_become_keys() {
        let check = |message: &str, expect: &str| {
            let e = name_keys(Error::Config(message.into()), FIELD_KEYS);
            assert_eq!(e.to_string(), Error::Config(expect.into()).to_string());
        };
        check(
            "step_double_below (3600s) must not exceed step_halve_above (1800s)",
            "segment.step_double_below_s (3600s) must not exceed segment.step_halve_above_s (1800s)",
        );
        check(
            "max_step must be from 1 to 2147483647, got 0",
            "segment.max_step must be from 1 to 2147483647, got 0",
        );
        check(
            "refresh_interval must be above zero",
            "segment.refresh_s must be above zero",
        );
        // Only whole words: a longer identifier that starts with a field name stays.
        check("max_steps x", "max_steps x");
    }

    #[test]
    fn every_allocator_field_has_a_key() {
        // A new SegmentConfig field must be added to FIELD_KEYS (and read in allocator_config).
        let c = format!("{:?}", SegmentSection::default().allocator_config());
        let fields: Vec<&str> = c
            .trim_start_matches("SegmentConfig { ")
            .split(", ")
            .filter_map(|kv| kv.split_once(": ").map(|(k, _)| k))
            .collect();
        let keys: Vec<&str> = FIELD_KEYS.iter().map(|(f, _)| *f).collect();
        assert_eq!(fields, keys);
    }
}
