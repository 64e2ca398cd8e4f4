//! Listings: a store's rows with each business tag's period rows grouped under its
//! definition, and each with this node's cache of it.

use std::collections::HashMap;

use leaf_core::{Tag, TagRecord};
use leaf_segment::TagSnapshot;

use crate::classify::{Shape, shape};
use crate::{BusinessTags, Definition, is_claim};

/// One entry of a store's listing with business tags grouped: a plain row, or a business
/// tag's definition with its period rows under it (oldest first).
#[derive(Clone, Debug)]
pub struct Grouped {
    /// The row: a plain tag's, or a business tag's definition row (`base@`).
    pub record: TagRecord,
    /// The definition, for a business tag.
    pub definition: Option<Definition>,
    /// A business tag's period rows.
    pub periods: Vec<TagRecord>,
}

impl Grouped {
    /// A row shown on its own, as a plain row is.
    fn alone(record: TagRecord) -> Self {
        Grouped {
            record,
            definition: None,
            periods: Vec::new(),
        }
    }
}

/// `rows` (a store's listing) with each business tag's period rows under its definition, so
/// that a listing shows base tags, not one row per day forever. A period row whose definition
/// is missing or unreadable stays at the top level, as a plain row would.
pub fn group_rows(rows: Vec<TagRecord>) -> Vec<Grouped> {
    let mut out: Vec<Grouped> = Vec::with_capacity(rows.len());
    let mut by_base: HashMap<String, usize> = HashMap::new();
    let mut periods: Vec<(String, TagRecord)> = Vec::new();
    let mut claims: Vec<TagRecord> = Vec::new();
    for record in rows {
        if is_claim(&record) {
            claims.push(record);
            continue;
        }
        let row = match shape(record.tag.as_str()) {
            Shape::Name => None,
            Shape::Definition { base } => Some((base.to_owned(), true)),
            Shape::Period { base, .. } => Some((base.to_owned(), false)),
        };
        match row {
            Some((base, true)) => match Definition::from_record(&record) {
                Some(Ok(def)) => {
                    by_base.insert(base, out.len());
                    out.push(Grouped {
                        record,
                        definition: Some(def),
                        periods: Vec::new(),
                    });
                }
                _ => out.push(Grouped::alone(record)),
            },
            Some((base, false)) => periods.push((base, record)),
            None => out.push(Grouped::alone(record)),
        }
    }
    // A claim is shown with its tag; one without a definition (a creation cut short) alone.
    for record in claims {
        if !by_base.contains_key(record.tag.as_str()) {
            out.push(Grouped::alone(record));
        }
    }
    for (base, record) in periods {
        match by_base.get(&base) {
            Some(&i) => out[i].periods.push(record),
            None => out.push(Grouped::alone(record)),
        }
    }
    out.sort_by(|a, b| a.record.tag.cmp(&b.record.tag));
    for g in &mut out {
        g.periods.sort_by(|a, b| a.tag.cmp(&b.tag));
    }
    out
}

/// A tag of a listing with this node's cache of it: a plain row with the plain allocator's, a
/// business tag with each of its period rows' own.
#[derive(Debug)]
pub struct Listed {
    /// The row, or the business tag with its period rows.
    pub group: Grouped,
    /// A plain row's cache, when this node holds one.
    pub cache: Option<TagSnapshot>,
    /// Each period row's cache (in the order of `group.periods`), when this node holds one.
    pub period_caches: Vec<Option<TagSnapshot>>,
}

impl BusinessTags {
    /// `rows` (a store's listing) grouped by [`group_rows`], each with this node's cache of it:
    /// a plain row's from `plain` (the plain allocator's snapshot), a period row's from the
    /// allocator of the period rows.
    pub fn listing(&self, rows: Vec<TagRecord>, mut plain: Vec<TagSnapshot>) -> Vec<Listed> {
        let mut periods = self.alloc.snapshot();
        group_rows(rows)
            .into_iter()
            .map(|group| {
                let cache = take_snapshot(&mut plain, &group.record.tag);
                let period_caches = group
                    .periods
                    .iter()
                    .map(|p| take_snapshot(&mut periods, &p.tag))
                    .collect();
                Listed {
                    group,
                    cache,
                    period_caches,
                }
            })
            .collect()
    }
}

/// `tag`'s snapshot, taken out of `snapshots`.
fn take_snapshot(snapshots: &mut Vec<TagSnapshot>, tag: &Tag) -> Option<TagSnapshot> {
    snapshots
        .iter()
        .position(|s| &s.tag == tag)
        .map(|i| snapshots.swap_remove(i))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str, max_id: i64, description: Option<&str>) -> TagRecord {
        TagRecord {
            tag: Tag::new(name).unwrap(),
            max_id,
            step: 10,
            description: description.map(str::to_owned),
            updated_at_ms: None,
        }
    }

    /// What a listing shows at its top level, and under each business tag.
    #[test]
    fn grouping_table() {
        let props = "leaf-props:v1 reset=day zone=UTC first=1 format=O{date:%Y%m%d}{seq:04}";
        let rows = vec![
            row("order@20261128", 1, Some("period of order")),
            row("order", i64::MAX, Some("leaf-business: counted in order@")),
            row("plain", 1, None),
            row("order@", 0, Some(props)),
            row("order@20261127", 1, Some("period of order")),
            // A claim whose creation was cut short before its definition.
            row("cut", i64::MAX, Some("leaf-business: counted in cut@")),
            // Rows of the shape from before business tags, and a period row without its tag.
            row("old@", 1, Some("by hand")),
            row("lost@2026", 1, None),
            // A draft is no definition.
            row(
                "draft@",
                0,
                Some("leaf-draft:v1 zone=UTC first=1 format=D{seq}"),
            ),
        ];
        let shown: Vec<(String, bool, Vec<String>)> = group_rows(rows)
            .into_iter()
            .map(|g| {
                let periods = g.periods.iter().map(|p| p.tag.to_string()).collect();
                (g.record.tag.to_string(), g.definition.is_some(), periods)
            })
            .collect();
        let expect = |name: &str, business: bool, periods: &[&str]| {
            let periods = periods.iter().map(|p| p.to_string()).collect();
            (name.to_owned(), business, periods)
        };
        assert_eq!(
            shown,
            [
                expect("cut", false, &[]),
                expect("draft@", false, &[]),
                expect("lost@2026", false, &[]),
                expect("old@", false, &[]),
                expect("order@", true, &["order@20261127", "order@20261128"]),
                expect("plain", false, &[]),
            ]
        );
    }
}
