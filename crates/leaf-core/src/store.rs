//! `SegmentStore`: where segment mode reserves ranges of IDs (Leaf's `leaf_alloc` table).

use std::fmt::Debug;
use std::ops::Range;

use async_trait::async_trait;

use crate::{Error, Result, Tag};

/// Leaf's customary step for a new tag.
pub const DEFAULT_STEP: i64 = 2000;

/// One tag's stored row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TagRecord {
    /// The tag (`biz_tag`).
    pub tag: Tag,
    /// The first ID not yet reserved by anyone (`max_id`).
    pub max_id: i64,
    /// The stored step (`step`).
    pub step: i64,
    /// Free text (`description`).
    pub description: Option<String>,
    /// Last update, Unix milliseconds (`update_time`), when the store keeps it.
    pub updated_at_ms: Option<i64>,
}

/// The result of one allocation: the row after `max_id = max_id + used_step`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allocation {
    /// The tag allocated for.
    pub tag: Tag,
    /// `max_id` after the update: the end (exclusive) of the reserved range.
    pub max_id: i64,
    /// The step stored in the row.
    pub step: i64,
    /// The step this allocation added (the stored step, or the caller's dynamic one).
    pub used_step: i64,
}

impl Allocation {
    /// The reserved IDs: `[max_id - used_step, max_id)`.
    pub fn range(&self) -> Range<i64> {
        self.max_id - self.used_step..self.max_id
    }
}

/// A tag to create.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewTag {
    /// The tag.
    pub tag: Tag,
    /// The first ID to hand out; default 1, as Leaf's DDL.
    pub max_id: i64,
    /// The step; default [`DEFAULT_STEP`].
    pub step: i64,
    /// Free text.
    pub description: Option<String>,
}

impl NewTag {
    /// A tag with Leaf's defaults: `max_id` 1, step [`DEFAULT_STEP`].
    pub fn new(tag: Tag) -> Self {
        NewTag {
            tag,
            max_id: 1,
            step: DEFAULT_STEP,
            description: None,
        }
    }

    /// Checks the numbers: `max_id` at least 0, step at least 1.
    pub fn validate(&self) -> Result<()> {
        if self.max_id < 0 {
            return Err(Error::InvalidInput(format!(
                "max_id must be at least 0, got {}",
                self.max_id
            )));
        }
        validate_step(self.step)
    }
}

/// A change to a tag's row; `None` leaves a column as it is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TagUpdate {
    /// A new step.
    pub step: Option<i64>,
    /// A new description.
    pub description: Option<String>,
}

impl TagUpdate {
    /// Checks the numbers.
    pub fn validate(&self) -> Result<()> {
        match self.step {
            Some(step) => validate_step(step),
            None => Ok(()),
        }
    }
}

/// The largest step a row may hold: Leaf's `step` column is a signed 32-bit `int`.
pub const MAX_STEP: i64 = i32::MAX as i64;

/// Checks that `step` fits Leaf's `int` column and is positive.
pub fn validate_step(step: i64) -> Result<()> {
    if (1..=MAX_STEP).contains(&step) {
        Ok(())
    } else {
        Err(Error::InvalidInput(format!(
            "step must be between 1 and {MAX_STEP}, got {step}"
        )))
    }
}

/// The `max_id` after adding `step`, or `Exhausted` past `i64::MAX`. Every store uses this so
/// that an overflowing row fails the same way everywhere.
pub fn checked_advance(tag: &Tag, max_id: i64, step: i64) -> Result<i64> {
    max_id.checked_add(step).ok_or_else(|| {
        Error::Exhausted(format!(
            "tag {tag} cannot advance max_id {max_id} by {step} without passing i64::MAX"
        ))
    })
}

/// What a store can do beyond the required methods; the conformance suite picks cases by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreCapabilities {
    /// Reserved ranges survive a restart of the process.
    pub durable: bool,
    /// Several processes may allocate from one store at once.
    pub multi_process: bool,
}

impl StoreCapabilities {
    /// Capabilities with the given flags.
    pub const fn new(durable: bool, multi_process: bool) -> Self {
        StoreCapabilities {
            durable,
            multi_process,
        }
    }
}

/// A store of `leaf_alloc` rows. Implementations: in-memory (tests), SQLite, MySQL, etcd.
///
/// `allocate` is the only call on the ID path; it must be atomic: two concurrent allocations for
/// one tag, from any number of processes, never return overlapping ranges.
#[async_trait]
pub trait SegmentStore: Send + Sync + Debug {
    /// The store's kind, for logs and metrics (`sqlite`, `mysql`, ...).
    fn kind(&self) -> &'static str;

    /// What the store can do.
    fn capabilities(&self) -> StoreCapabilities;

    /// Reserves the next range of `tag` in one transaction: `max_id = max_id + step` where `step`
    /// is `step` if given (Leaf's dynamic step) or the stored one, then reads the row.
    /// `NotFound` for an unknown tag; `Exhausted` if `max_id` would pass `i64::MAX`.
    async fn allocate(&self, tag: &Tag, step: Option<i64>) -> Result<Allocation>;

    /// One tag's row, `None` if unknown.
    async fn get(&self, tag: &Tag) -> Result<Option<TagRecord>>;

    /// Every row, ordered by tag.
    async fn list(&self) -> Result<Vec<TagRecord>>;

    /// Every tag, ordered. The default reads [`list`](Self::list).
    async fn tags(&self) -> Result<Vec<Tag>> {
        Ok(self.list().await?.into_iter().map(|r| r.tag).collect())
    }

    /// Creates a row; `AlreadyExists` if the tag has one.
    async fn create(&self, new: &NewTag) -> Result<TagRecord>;

    /// Changes a row; `NotFound` if the tag has none.
    async fn update(&self, tag: &Tag, update: &TagUpdate) -> Result<TagRecord>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocation_range_is_the_used_step_below_max() {
        let a = Allocation {
            tag: Tag::new("t").unwrap(),
            max_id: 2001,
            step: 2000,
            used_step: 2000,
        };
        assert_eq!(a.range(), 1..2001);
        let a = Allocation {
            used_step: 4000,
            max_id: 6001,
            ..a
        };
        assert_eq!(a.range(), 2001..6001);
    }

    #[test]
    fn step_validation_table() {
        let check = |step: i64, ok: bool| assert_eq!(validate_step(step).is_ok(), ok, "{step}");
        check(1, true);
        check(2000, true);
        check(MAX_STEP, true);
        check(0, false);
        check(-5, false);
        check(MAX_STEP + 1, false);
    }

    #[test]
    fn new_tag_validation() {
        let mut n = NewTag::new(Tag::new("t").unwrap());
        assert!(n.validate().is_ok());
        n.max_id = -1;
        assert!(matches!(n.validate(), Err(Error::InvalidInput(_))));
    }

    #[test]
    fn advance_overflow_is_exhausted() {
        let t = Tag::new("t").unwrap();
        assert_eq!(checked_advance(&t, 1, 2000).unwrap(), 2001);
        assert!(matches!(
            checked_advance(&t, i64::MAX - 10, 2000),
            Err(Error::Exhausted(_))
        ));
    }
}
