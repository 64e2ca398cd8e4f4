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

    /// Checks the numbers (`max_id` at least 0, step at least 1) and the description's length.
    pub fn validate(&self) -> Result<()> {
        if self.max_id < 0 {
            return Err(Error::InvalidInput(format!(
                "max_id must be at least 0, got {}",
                self.max_id
            )));
        }
        validate_step(self.step)?;
        validate_description(self.description.as_deref())
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
    /// Checks the step and the description's length.
    pub fn validate(&self) -> Result<()> {
        if let Some(step) = self.step {
            validate_step(step)?;
        }
        validate_description(self.description.as_deref())
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

/// The longest description, in characters: Leaf's `description` column is a `varchar(256)`.
pub const MAX_DESCRIPTION_CHARS: usize = 256;

/// Checks that a description fits Leaf's column.
fn validate_description(description: Option<&str>) -> Result<()> {
    match description.map(|d| d.chars().count()) {
        Some(n) if n > MAX_DESCRIPTION_CHARS => Err(Error::InvalidInput(format!(
            "description must be at most {MAX_DESCRIPTION_CHARS} characters, got {n}"
        ))),
        _ => Ok(()),
    }
}

/// The step an allocation adds to `max_id`: `step`, or what is left before `i64::MAX` when
/// less (so the last IDs of a tag are handed out, not lost to an overflow); `Exhausted` once
/// `max_id` is at `i64::MAX`. Every store uses this so that a tag ends the same way everywhere.
pub fn clamp_step(tag: &Tag, max_id: i64, step: i64) -> Result<i64> {
    // A negative `max_id` (a row written by another tool) leaves more than `i64::MAX`.
    let left = i64::MAX.saturating_sub(max_id);
    if left == 0 {
        return Err(Error::Exhausted(format!(
            "tag {tag} has no ids left: max_id is at i64::MAX"
        )));
    }
    Ok(step.min(left))
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

/// A store of `leaf_alloc` rows. Implementations: in-memory (tests), SQLite, MySQL, etcd, Redis.
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
    /// Near the end the step is cut to what is left before `i64::MAX` ([`clamp_step`]), so
    /// `used_step` may be below the step asked for. `NotFound` for an unknown tag; `Exhausted`
    /// once `max_id` is at `i64::MAX`.
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
    fn description_validation_table() {
        // Leaf's column is varchar(256): characters, not bytes.
        let check = |description: Option<String>, ok: bool| {
            let n = description.as_ref().map(|d| d.chars().count());
            let new = NewTag {
                description: description.clone(),
                ..NewTag::new(Tag::new("t").unwrap())
            };
            assert_eq!(new.validate().is_ok(), ok, "new, {n:?} characters");
            let update = TagUpdate {
                step: None,
                description,
            };
            let r = update.validate();
            assert_eq!(r.is_ok(), ok, "update, {n:?} characters");
            if let Err(e) = r {
                assert!(matches!(e, Error::InvalidInput(_)), "{e}");
                assert!(e.to_string().contains("256"), "{e}");
            }
        };
        check(None, true);
        check(Some(String::new()), true);
        check(Some("x".repeat(256)), true);
        check(Some("\u{e9}".repeat(256)), true);
        check(Some("x".repeat(257)), false);
        check(Some("\u{e9}".repeat(257)), false);
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
    fn the_step_is_clamped_to_what_is_left() {
        let t = Tag::new("t").unwrap();
        let check = |max_id: i64, step: i64, expect: Option<i64>| {
            let got = clamp_step(&t, max_id, step);
            match expect {
                Some(used) => assert_eq!(got.unwrap(), used, "{max_id} + {step}"),
                None => assert!(matches!(got, Err(Error::Exhausted(_))), "{max_id} + {step}"),
            }
        };
        check(1, 2000, Some(2000));
        check(i64::MAX - 2000, 2000, Some(2000));
        check(i64::MAX - 10, 2000, Some(10));
        check(i64::MAX - 1, MAX_STEP, Some(1));
        check(i64::MAX, 1, None);
        check(-5, MAX_STEP, Some(MAX_STEP));
        check(i64::MIN, 7, Some(7));
    }
}
