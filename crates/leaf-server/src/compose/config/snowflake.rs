//! `[snowflake]`: snowflake mode, its bit layout and its workerId mode's sections.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use leaf_core::{Result, SnowflakeLayout, TWITTER_EPOCH_MS};
use serde::{Deserialize, Serialize};

use super::sections::Sections;
use super::{bad, check_bounds, keyed, name_keys};

/// `[snowflake]`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default)]
pub struct SnowflakeSection {
    /// Serve snowflake mode. Default `true`.
    pub enabled: bool,
    /// The workerId mode: the `mode` name of a line of the server's table of backends
    /// (`crate::compose::backends::BACKENDS`), behind that line's cargo feature; its settings are the
    /// table `[snowflake.<table>]` (`zk` for both ZooKeeper modes). Default `local`.
    pub mode: String,
    /// The epoch, Unix milliseconds. Default 1288834974657 (Twitter's, Leaf's).
    pub epoch_ms: u64,
    /// The node's ip (its identity `ip:port`). Default empty: the first non-loopback address
    /// of `interface`, or of the machine.
    pub ip: String,
    /// The node's port. Default 0: the listen port.
    pub port: u16,
    /// Where the worker-id cache file and the warm-restart tag list live; must persist.
    /// Default `leaf-data`.
    pub cache_dir: PathBuf,
    /// Take the node's ip from this network interface when `ip` is empty. Default empty: any.
    pub interface: String,
    /// Bits of the timestamp. Default 41.
    pub timestamp_bits: u32,
    /// Bits of the worker id. Default 10.
    pub worker_bits: u32,
    /// Bits of the sequence. Default 12.
    pub sequence_bits: u32,
    /// A new millisecond starts the sequence at a random value in `0..random_start`; 0: off.
    /// Default 100.
    pub random_start: u64,
    /// A clock that went back by at most this is waited out; by more, requests fail. Default 5.
    pub max_backwards_ms: u64,
    /// A spent millisecond's sequence moves on to the next millisecond ahead of the wall
    /// clock, at most this far ahead and never past the durable mark, instead of waiting
    /// (with the default layout only batches and in-process loops spend one); 0: wait, as
    /// Leaf. Lowered to `mark_window_ms - mark_renew_ms` if above. Default 300.
    pub max_borrow_ms: u64,
    /// The persisted time mark runs this far ahead of the issued timestamps. Default 3000.
    pub mark_window_ms: u64,
    /// How often the mark is written. Default 1000.
    pub mark_renew_ms: u64,
    /// At start-up, a clock behind the previous mark by at most this is waited out; by more,
    /// snowflake mode stays unavailable (segment mode serves). Never below `mark_window_ms`.
    /// Default 10000.
    pub max_startup_wait_ms: u64,
    /// Recycling modes stop issuing this long before their lease could expire. Default 1000.
    pub fencing_margin_ms: u64,
    /// A wall clock step forward larger than this (against the monotonic clock) is not trusted:
    /// snowflake mode stops until the clock comes back; a restart trusts it. Default 60000.
    pub max_forward_step_ms: u64,
    /// Each workerId mode's table, by the table's name in the table of backends.
    #[serde(flatten)]
    pub backends: Sections,
}

impl Default for SnowflakeSection {
    fn default() -> Self {
        SnowflakeSection {
            enabled: true,
            mode: "local".into(),
            epoch_ms: TWITTER_EPOCH_MS,
            ip: String::new(),
            port: 0,
            cache_dir: PathBuf::from("leaf-data"),
            interface: String::new(),
            timestamp_bits: 41,
            worker_bits: 10,
            sequence_bits: 12,
            random_start: 100,
            max_backwards_ms: 5,
            max_borrow_ms: 300,
            mark_window_ms: 3000,
            mark_renew_ms: 1000,
            max_startup_wait_ms: 10_000,
            fencing_margin_ms: 1000,
            max_forward_step_ms: 60_000,
            backends: Sections::default(),
        }
    }
}

/// leaf-snowflake's `SnowflakeConfig` field names and the keys they are read from.
const GENERATOR_FIELD_KEYS: &[(&str, &str)] = &[
    ("layout", "snowflake.timestamp_bits"),
    ("random_start", "snowflake.random_start"),
    ("max_backwards", "snowflake.max_backwards_ms"),
    ("max_borrow", "snowflake.max_borrow_ms"),
    ("mark_window", "snowflake.mark_window_ms"),
    ("mark_renew", "snowflake.mark_renew_ms"),
    ("max_startup_wait", "snowflake.max_startup_wait_ms"),
    ("fencing_margin", "snowflake.fencing_margin_ms"),
    ("max_forward_step", "snowflake.max_forward_step_ms"),
];

impl SnowflakeSection {
    /// The generator's configuration, with `layout` (see [`layout`](Self::layout)).
    pub fn generator_config(&self, layout: SnowflakeLayout) -> leaf_snowflake::SnowflakeConfig {
        leaf_snowflake::SnowflakeConfig {
            layout,
            random_start: self.random_start,
            max_backwards: Duration::from_millis(self.max_backwards_ms),
            max_borrow: Duration::from_millis(self.max_borrow_ms),
            mark_window: Duration::from_millis(self.mark_window_ms),
            mark_renew: Duration::from_millis(self.mark_renew_ms),
            max_startup_wait: Duration::from_millis(self.max_startup_wait_ms),
            fencing_margin: Duration::from_millis(self.fencing_margin_ms),
            max_forward_step: Duration::from_millis(self.max_forward_step_ms),
        }
    }

    /// The bit layout and epoch; `Config` naming the key when invalid.
    pub fn layout(&self) -> Result<SnowflakeLayout> {
        SnowflakeLayout::new(
            self.timestamp_bits,
            self.worker_bits,
            self.sequence_bits,
            self.epoch_ms,
        )
        .map_err(|e| keyed("snowflake", e))
    }

    /// Bounds the numbers, then the layout, the mark and the identity.
    pub(super) fn validate(&self) -> Result<()> {
        const HOUR_MS: u64 = 3_600_000;
        check_bounds(&[
            // The largest sequence space (62 bits); the generator clamps to the layout's.
            ("snowflake.random_start", self.random_start, 0, 1 << 62),
            (
                "snowflake.max_backwards_ms",
                self.max_backwards_ms,
                0,
                60_000,
            ),
            ("snowflake.max_borrow_ms", self.max_borrow_ms, 0, 60_000),
            ("snowflake.mark_window_ms", self.mark_window_ms, 0, HOUR_MS),
            ("snowflake.mark_renew_ms", self.mark_renew_ms, 1, HOUR_MS),
            (
                "snowflake.max_startup_wait_ms",
                self.max_startup_wait_ms,
                0,
                24 * HOUR_MS,
            ),
            (
                "snowflake.fencing_margin_ms",
                self.fencing_margin_ms,
                0,
                HOUR_MS,
            ),
            (
                "snowflake.max_forward_step_ms",
                self.max_forward_step_ms,
                1,
                24 * HOUR_MS,
            ),
        ])?;
        // The generator's own timing rules, once, named by these keys.
        self.generator_config(self.layout()?)
            .validate()
            .map_err(|e| name_keys(e, GENERATOR_FIELD_KEYS))?;
        if !self.ip.is_empty() && self.ip.parse::<IpAddr>().is_err() {
            return bad(
                "snowflake.ip",
                format!("{:?} is not an ip address", self.ip),
            );
        }
        if self.cache_dir.as_os_str().is_empty() {
            return bad("snowflake.cache_dir", "must not be empty".into());
        }
        Ok(())
    }

    /// Checks `layout` against the wall clock `now_ms`; `Config` naming the key.
    pub fn check_layout_now(layout: &SnowflakeLayout, now_ms: u64) -> Result<()> {
        layout.check_now(now_ms).map_err(|e| keyed("snowflake", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_generator_field_has_a_key() {
        // A new SnowflakeConfig field must be added to GENERATOR_FIELD_KEYS.
        let c = leaf_snowflake::SnowflakeConfig::default();
        let leaf_snowflake::SnowflakeConfig {
            layout: _,
            random_start: _,
            max_backwards: _,
            max_borrow: _,
            mark_window: _,
            mark_renew: _,
            max_startup_wait: _,
            fencing_margin: _,
            max_forward_step: _,
        } = c;
        let keys: Vec<&str> = GENERATOR_FIELD_KEYS.iter().map(|(f, _)| *f).collect();
        assert_eq!(
            keys,
            [
                "layout",
                "random_start",
                "max_backwards",
                "max_borrow",
                "mark_window",
                "mark_renew",
                "max_startup_wait",
                "fencing_margin",
                "max_forward_step"
            ]
        );
    }

    #[test]
    fn the_generators_timing_rule_names_the_keys() {
        let s = SnowflakeSection {
            mark_renew_ms: 2000,
            mark_window_ms: 1500,
            ..SnowflakeSection::default()
        };
        let e = s.validate().unwrap_err().to_string();
        assert!(
            e.contains("snowflake.mark_renew_ms") && e.contains("snowflake.mark_window_ms"),
            "{e}"
        );
    }
}
