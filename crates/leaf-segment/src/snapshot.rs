//! What the allocator reports about each tag: buffers, loads and consumption.

use std::fmt::Debug;
use std::time::Duration;

use leaf_core::Tag;

/// One buffered segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentView {
    /// The next ID to hand out (`max` when the segment is spent).
    pub value: i64,
    /// The end of the segment, exclusive.
    pub max: i64,
    /// The segment's length (the step its load used).
    pub step: i64,
}

/// One tag's state, for the `/cache` page and the metrics.
#[derive(Clone, Debug)]
pub struct TagSnapshot {
    /// The tag.
    pub tag: Tag,
    /// Whether its first segment has been loaded.
    pub initialized: bool,
    /// The two buffers; `None` until first filled.
    pub buffers: [Option<SegmentView>; 2],
    /// Which buffer is current.
    pub current: usize,
    /// Whether the other buffer holds a loaded, unused segment.
    pub next_ready: bool,
    /// Whether a load is in flight (or waiting to retry).
    pub loading: bool,
    /// The step used by the latest load (Leaf's dynamic step); 0 before the first.
    pub step: i64,
    /// IDs left in the current and the next segment.
    pub remaining: i64,
    /// Recent consumption, IDs per second.
    pub ids_per_sec: f64,
    /// How long `remaining` lasts at that rate; `None` when the rate is 0.
    pub buffered_secs: Option<f64>,
    /// Loads that succeeded.
    pub loads_ok: u64,
    /// Loads that failed (each retry counts).
    pub loads_failed: u64,
}

/// Told about every load attempt, for metrics (`leaf_segment_loads_total`,
/// `leaf_segment_load_duration_seconds`).
pub trait LoadObserver: Send + Sync + Debug {
    /// A load of `tag` ended: `ok` whether it succeeded, `took` how long the store took.
    fn on_load(&self, tag: &Tag, ok: bool, took: Duration);
}
