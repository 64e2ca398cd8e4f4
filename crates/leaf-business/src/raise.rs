//! Raising every counter of a store after a restore from an older copy (`leaf-server store
//! raise`): the copy's counters are behind the IDs handed out since it was taken, and each must
//! move past them before a node serves again.
//!
//! A raise is planned from the rows alone ([`plan`]), so that `--dry-run` shows exactly what a
//! run changes and a run changes nothing when one row cannot be raised; then applied through the
//! store's own atomic [`allocate`](SegmentStore::allocate) ([`apply`]), which every store has, so
//! one command serves them all and never writes a number a store would not (a `REAL` on
//! SQLite) or a claim's `i64::MAX` plus anything.
//!
//! - A plain tag's row is raised by `by`; a row at `i64::MAX` (spent) is left as it is, and one
//!   that `by` would carry past `i64::MAX` is refused.
//! - A business tag's claim on its base name and its definition row are never counted from:
//!   left alone.
//! - A business tag's period row is raised by `period_by` (`by` unless told), and refused,
//!   naming the row and the values its format can still print, if its next value would no
//!   longer fit the format's width; a row already past its width is spent and left alone.
//! - The row of the period the clock is in, missing from a copy taken before that period
//!   began, is created at the tag's first value plus `period_by`: a node would otherwise create
//!   it at the first value and print the period's numbers again.
//! - A definition row this version cannot read refuses the raise: its period rows can be told
//!   neither from plain ones nor against their width.

use std::collections::HashMap;
use std::fmt;

use leaf_core::{Error, MAX_STEP, NewTag, Result, SegmentStore, Tag, TagRecord};

use crate::classify::{Shape, shape};
use crate::{Definition, is_claim};

/// What a raise does to one row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// `max_id` goes from `from` to `to`.
    Raise {
        /// `max_id` as read.
        from: i64,
        /// `max_id` after the raise (at least: nodes still serving may allocate meanwhile).
        to: i64,
    },
    /// A business tag's row of the period the clock is in, missing from the restored store
    /// (first used after the copy was taken): created at its first value plus the raise, as if
    /// it had been there at its first value.
    Create {
        /// Its `max_id`.
        max_id: i64,
        /// Its step (the tag's capped row step).
        step: i64,
        /// The raise, should a node create the row first (at the tag's first value).
        by: i64,
    },
    /// Left alone, and why.
    Keep(&'static str),
}

/// One row of a plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Planned {
    /// The row.
    pub tag: Tag,
    /// What it is: `plain`, `period of BASE`, `claim of BASE`, `definition of BASE`.
    pub kind: String,
    /// What the raise does to it.
    pub change: Change,
}

impl fmt::Display for Planned {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.change {
            Change::Raise { from, to } => {
                write!(f, "{}  {}  max_id {from} -> {to}", self.tag, self.kind)
            }
            Change::Create { max_id, .. } => write!(
                f,
                "{}  {}  missing (first used after the copy?): created at max_id {max_id}",
                self.tag, self.kind
            ),
            Change::Keep(why) => write!(f, "{}  {}  left alone: {why}", self.tag, self.kind),
        }
    }
}

/// Plans a raise of `rows` (a store's [`list`](SegmentStore::list)) at wall-clock `now_ms`:
/// plain rows by `by`, period rows by `period_by`, and each business tag's row of the period
/// `now_ms` is in created if the restored store lacks it. `InvalidInput` for an amount below 1,
/// or naming every row that cannot be raised by it and every definition this version cannot
/// read (nothing is changed then).
pub fn plan(rows: &[TagRecord], by: i64, period_by: i64, now_ms: i64) -> Result<Vec<Planned>> {
    for (name, n) in [("--by", by), ("--period-by", period_by)] {
        if n < 1 {
            return Err(Error::InvalidInput(format!(
                "{name} must be at least 1, got {n}"
            )));
        }
    }
    let mut refused = Vec::new();
    let mut definitions: HashMap<&str, Definition> = HashMap::new();
    for r in rows {
        match Definition::from_record(r) {
            Some(Ok(def)) => {
                definitions.insert(r.tag.as_str(), def);
            }
            // Its period rows cannot be told from plain ones, nor their width known: raising
            // them by `by` could burn a fixed-width period, leaving them could repeat IDs.
            Some(Err(e)) => refused.push(format!(
                "{}: a business tag's definition this version cannot read ({e})",
                r.tag
            )),
            None => {}
        }
    }
    let definition_of = |base: &str| definitions.get(format!("{base}@").as_str());
    let mut planned = Vec::with_capacity(rows.len());
    for row in rows {
        let name = row.tag.as_str();
        let (kind, change) = if is_claim(row) {
            (
                format!("claim of {name}"),
                Change::Keep("a claim, never counted from"),
            )
        } else if let Some(def) = definitions.get(name) {
            (
                format!("definition of {}", def.base()),
                Change::Keep("a definition, never counted from"),
            )
        } else if let Shape::Period { base, .. } = shape(name)
            && let Some(def) = definition_of(base)
        {
            let kind = format!("period of {base}");
            let width = def.props().format().max_value();
            if width.is_some_and(|max| row.max_id > max) {
                planned.push(Planned {
                    tag: row.tag.clone(),
                    kind,
                    change: Change::Keep("spent (past its format's width)"),
                });
                continue;
            }
            match raise(row.max_id, period_by, width) {
                Ok(change) => (kind, change),
                Err(why) => {
                    refused.push(format!("{name} ({kind}): {why}"));
                    continue;
                }
            }
        } else {
            match raise(row.max_id, by, None) {
                Ok(change) => ("plain".to_string(), change),
                Err(why) => {
                    refused.push(format!("{name}: {why}"));
                    continue;
                }
            }
        };
        planned.push(Planned {
            tag: row.tag.clone(),
            kind,
            change,
        });
    }
    // The period the clock is in, for each business tag: a row first used after the copy was
    // taken is missing, and a node would create it at the tag's first value again.
    let mut bases: Vec<&Definition> = definitions.values().collect();
    bases.sort_by(|a, b| a.base().cmp(b.base()));
    for def in bases {
        let row = def
            .props()
            .period_at(now_ms)
            .and_then(|period| def.row(period))?;
        if rows.iter().any(|r| r.tag == row) {
            continue;
        }
        let kind = format!("period of {}", def.base());
        let first = def.props().first();
        match raise(first, period_by, def.props().format().max_value()) {
            Ok(Change::Raise { to, .. }) => planned.push(Planned {
                tag: row,
                kind,
                change: Change::Create {
                    max_id: to,
                    step: def.props().row_step(def.step()),
                    by: period_by,
                },
            }),
            Ok(_) => {}
            Err(why) => refused.push(format!("{row} ({kind}, missing): {why}")),
        }
    }
    if !refused.is_empty() {
        return Err(Error::InvalidInput(format!(
            "nothing was changed: {} row(s) cannot be raised: {}",
            refused.len(),
            refused.join("; ")
        )));
    }
    Ok(planned)
}

/// `max_id` raised by `by`, the next value (`max_id` itself, after the raise) within `width`
/// (the largest value the row may print) if it has one.
fn raise(max_id: i64, by: i64, width: Option<i64>) -> std::result::Result<Change, String> {
    if max_id == i64::MAX {
        return Ok(Change::Keep("spent (max_id is at i64::MAX)"));
    }
    let Some(to) = max_id.checked_add(by) else {
        return Err(format!(
            "max_id {max_id} has only {} left before i64::MAX",
            i64::MAX - max_id
        ));
    };
    if let Some(max) = width
        && to > max
    {
        let left = (max - max_id).max(0);
        return Err(format!(
            "its format prints values up to {max}; max_id {max_id} can be raised by at most \
             {left} (use --period-by)"
        ));
    }
    Ok(Change::Raise { from: max_id, to })
}

/// What [`apply`] did: the raised rows with their `max_id` after, in the plan's order, and the
/// row it stopped at, if one failed (the rows after it are untouched; running the same raise
/// again raises the done ones once more, which is safe).
#[derive(Debug)]
pub struct Applied {
    /// Each raised row and its `max_id` after the raise.
    pub done: Vec<(Tag, i64)>,
    /// The row that failed and the store's error.
    pub failed: Option<(Tag, Error)>,
}

/// Applies `plan` to `store`: each raised row's `max_id` moves up by at least what was planned,
/// in allocations of at most [`MAX_STEP`], through the store's atomic allocation (nodes that
/// still serve may allocate in between, and never get a range the raise took).
pub async fn apply(store: &dyn SegmentStore, plan: &[Planned]) -> Applied {
    let mut done = Vec::new();
    for p in plan {
        match apply_one(store, p).await {
            Ok(Some(max_id)) => done.push((p.tag.clone(), max_id)),
            Ok(None) => {}
            Err(e) => {
                return Applied {
                    done,
                    failed: Some((p.tag.clone(), e)),
                };
            }
        }
    }
    Applied { done, failed: None }
}

/// One row of [`apply`]: its `max_id` after, or `None` for a row left alone.
async fn apply_one(store: &dyn SegmentStore, p: &Planned) -> Result<Option<i64>> {
    let (from, to) = match p.change {
        Change::Keep(_) => return Ok(None),
        Change::Raise { from, to } => (from, to),
        Change::Create { max_id, step, by } => {
            let new = NewTag {
                tag: p.tag.clone(),
                max_id,
                step,
                description: Some(format!("{} (made by store raise)", p.kind)),
            };
            match store.create(&new).await {
                Ok(_) => return Ok(Some(max_id)),
                // A node made it meanwhile, at the tag's first value: raised as planned.
                Err(Error::AlreadyExists(_)) => match store.get(&p.tag).await? {
                    Some(r) => (r.max_id, r.max_id.saturating_add(by)),
                    None => (max_id, max_id),
                },
                Err(e) => return Err(e),
            }
        }
    };
    let mut left = to - from;
    let mut max_id = from;
    while left > 0 {
        let step = left.min(MAX_STEP);
        let a = store.allocate(&p.tag, Some(step)).await?;
        left -= a.used_step;
        max_id = a.max_id;
        if a.used_step < step {
            // Cut at i64::MAX by other nodes' allocations meanwhile: none left.
            break;
        }
    }
    Ok(Some(max_id))
}

#[cfg(test)]
mod tests {
    use leaf_core::{NewTag, SegmentStore};
    use leaf_testkit::MemoryStore;

    use super::*;
    use crate::{CLAIM_PREFIX, PROPS_PREFIX};

    fn row(tag: &str, max_id: i64, description: Option<&str>) -> TagRecord {
        TagRecord {
            tag: Tag::new(tag).unwrap(),
            max_id,
            step: 1000,
            description: description.map(String::from),
            updated_at_ms: None,
        }
    }

    /// A business tag `order` with a six-digit day (values up to 999,999), as the store holds
    /// it: its claim, its definition, two days' rows.
    fn order_rows(today: i64) -> Vec<TagRecord> {
        let props =
            format!("{PROPS_PREFIX}reset=day zone=UTC first=1 format=O{{date:%Y%m%d}}{{seq:06}}");
        vec![
            row("order", i64::MAX, Some(&format!("{CLAIM_PREFIX}order@"))),
            row("order@", 0, Some(&props)),
            row("order@20261126", 5_000, None),
            row("order@20261127", today, None),
        ]
    }

    fn changes(plan: &[Planned]) -> Vec<(String, Change)> {
        plan.iter()
            .map(|p| (p.tag.to_string(), p.change.clone()))
            .collect()
    }

    /// 2026-11-27 12:00 UTC: the day of `order_rows`' second row.
    const NOW: i64 = 1_795_780_800_000;

    #[test]
    fn plain_rows_are_raised_claims_and_definitions_left_alone() {
        let mut rows = order_rows(1_000);
        rows.push(row("plain", 7, None));
        rows.push(row("spent", i64::MAX, None));
        // A plain tag of a row's shape from before business tags: counted from, raised.
        rows.push(row("legacy@2026", 3, None));
        let plan = plan(&rows, 10_000_000, 100_000, NOW).unwrap();
        let raise = |from, to| Change::Raise { from, to };
        assert_eq!(
            changes(&plan),
            [
                ("order".into(), Change::Keep("a claim, never counted from")),
                (
                    "order@".into(),
                    Change::Keep("a definition, never counted from")
                ),
                ("order@20261126".into(), raise(5_000, 105_000)),
                ("order@20261127".into(), raise(1_000, 101_000)),
                ("plain".into(), raise(7, 10_000_007)),
                (
                    "spent".into(),
                    Change::Keep("spent (max_id is at i64::MAX)")
                ),
                ("legacy@2026".into(), raise(3, 10_000_003)),
            ]
        );
        assert_eq!(plan[2].kind, "period of order");
        assert_eq!(plan[4].to_string(), "plain  plain  max_id 7 -> 10000007");
    }

    #[test]
    fn a_period_row_past_its_width_is_refused_by_name_and_nothing_is_planned() {
        let mut rows = order_rows(950_000);
        rows.push(row("plain", 7, None));
        let err = plan(&rows, 100_000, 100_000, NOW).unwrap_err().to_string();
        assert!(err.contains("nothing was changed: 1 row(s)"), "{err}");
        assert!(err.contains("order@20261127 (period of order)"), "{err}");
        assert!(err.contains("raised by at most 49999"), "{err}");
        // The last value the width prints is still allowed.
        assert!(plan(&rows, 100_000, 49_999, NOW).is_ok());
        assert!(plan(&rows, 100_000, 50_000, NOW).is_err());
    }

    #[test]
    fn overflow_and_bad_amounts_are_refused() {
        let rows = [row("near", i64::MAX - 10, None)];
        let err = plan(&rows, 11, 1, NOW).unwrap_err().to_string();
        assert!(err.contains("near: max_id"), "{err}");
        assert!(err.contains("only 10 left"), "{err}");
        assert!(plan(&rows, 10, 1, NOW).is_ok());
        for (by, period_by) in [(0, 1), (1, 0), (-5, 1)] {
            let err = plan(&rows, by, period_by, NOW).unwrap_err();
            assert!(matches!(err, Error::InvalidInput(_)), "{err}");
        }
    }

    #[tokio::test]
    async fn apply_moves_each_row_and_steps_past_the_largest_step() {
        let store = MemoryStore::new();
        for (tag, max_id) in [("a", 1), ("b", 100)] {
            let mut new = NewTag::new(Tag::new(tag).unwrap());
            new.max_id = max_id;
            store.create(&new).await.unwrap();
        }
        let by = 2 * MAX_STEP + 5;
        let rows = store.list().await.unwrap();
        let applied = apply(&store, &plan(&rows, by, 1, NOW).unwrap()).await;
        assert!(applied.failed.is_none(), "{:?}", applied.failed);
        let done = applied.done;
        assert_eq!(
            done,
            [
                (Tag::new("a").unwrap(), 1 + by),
                (Tag::new("b").unwrap(), 100 + by)
            ]
        );
        for (tag, max_id) in done {
            assert_eq!(store.get(&tag).await.unwrap().unwrap().max_id, max_id);
        }
    }

    #[test]
    fn a_spent_period_row_is_left_alone_and_does_not_block_the_others() {
        let mut rows = order_rows(1_000);
        // Yesterday printed its last value: a load went past the width.
        rows[2].max_id = 1_000_050;
        let plan = plan(&rows, 10, 500_000, NOW).unwrap();
        assert_eq!(
            plan[2].change,
            Change::Keep("spent (past its format's width)")
        );
        assert_eq!(
            plan[3].change,
            Change::Raise {
                from: 1_000,
                to: 501_000
            }
        );
    }

    #[test]
    fn a_definition_this_version_cannot_read_refuses_the_raise() {
        let mut rows = order_rows(1_000);
        rows[1].description = Some(format!(
            "{PROPS_PREFIX}zone=UTC first=1 colour=red format=x"
        ));
        let err = plan(&rows, 10, 10, NOW).unwrap_err().to_string();
        assert!(
            err.contains("order@: a business tag's definition this version cannot read"),
            "{err}"
        );
        assert!(err.contains("nothing was changed"), "{err}");
    }

    #[tokio::test]
    async fn the_period_of_now_missing_from_the_copy_is_created_above_its_first_value() {
        let store = MemoryStore::new();
        // The copy was taken yesterday: today's row came after it.
        let rows: Vec<TagRecord> = order_rows(1_000).into_iter().take(3).collect();
        for r in &rows {
            store.put(r.clone());
        }
        let plan = plan(&rows, 10, 20_000, NOW).unwrap();
        let today = Tag::new("order@20261127").unwrap();
        let created = plan.iter().find(|p| p.tag == today).expect("today's row");
        assert_eq!(
            created.change,
            Change::Create {
                max_id: 20_001,
                step: 1_000,
                by: 20_000
            }
        );
        assert!(
            created.to_string().contains("created at max_id 20001"),
            "{created}"
        );
        let applied = apply(&store, &plan).await;
        assert!(applied.failed.is_none(), "{:?}", applied.failed);
        assert_eq!(store.get(&today).await.unwrap().unwrap().max_id, 20_001);

        // A node made the row meanwhile and took from it: it is raised from where it is.
        let store = MemoryStore::new();
        for r in &rows {
            store.put(r.clone());
        }
        let mut made = NewTag::new(today.clone());
        made.max_id = 1;
        store.create(&made).await.unwrap();
        store.allocate(&today, Some(300)).await.unwrap();
        let applied = apply(&store, &plan).await;
        assert!(applied.failed.is_none(), "{:?}", applied.failed);
        assert_eq!(
            store.get(&today).await.unwrap().unwrap().max_id,
            301 + 20_000
        );
    }
}
