//! What a business tag is: its [`Properties`] (fixed when it is created, held in the
//! description of its definition row `base@`), and the [`Definition`] read back from that row,
//! which names its period rows and sizes their loads.

use leaf_core::{Error, NewTag, Result, Tag, TagRecord};
use leaf_format::{Period, Reset, Template, Zone};

use crate::classify::{Shape, shape};

/// What starts a definition row's description.
pub const PROPS_PREFIX: &str = "leaf-props:v1 ";
/// What starts a definition row's description while it is written and read back: no node
/// reads a draft as a business tag. As long as [`PROPS_PREFIX`], so that both fit alike.
pub const DRAFT_PREFIX: &str = "leaf-draft:v1 ";
const _: () = assert!(DRAFT_PREFIX.len() == PROPS_PREFIX.len());
/// What starts the description of a business tag's claim on its base name (the base's own
/// row, with no ID left).
pub const CLAIM_PREFIX: &str = "leaf-business: counted in ";
/// The suffix of the one counter of a tag that never restarts.
pub const ALL_PERIODS: &str = "all";
/// A period row's step is at most this share of what its format's width can print, so that
/// the loads of many nodes cannot burn a fixed-width day: 1 / 100.
pub const STEP_SHARE: i64 = 100;
/// A node's first load of a period takes at most this share of the row's capped step: 1 / 10.
pub const FIRST_SHARE: i64 = 10;
/// The longest base name: the row names add `@` and up to eight characters, within Leaf's
/// `biz_tag varchar(128)`.
pub const MAX_BASE_CHARS: usize = leaf_core::MAX_TAG_CHARS - 9;

/// Whether `record` is a business tag's claim on its base name.
pub fn is_claim(record: &TagRecord) -> bool {
    record.max_id == i64::MAX
        && record
            .description
            .as_deref()
            .is_some_and(|d| d.starts_with(CLAIM_PREFIX))
}

/// The definition row of `base`: `base@`.
pub fn definition_tag(base: &Tag) -> Result<Tag> {
    Tag::new(format!("{base}@"))
}

/// A business tag's properties, fixed when it is created.
#[derive(Clone, Debug, PartialEq)]
pub struct Properties {
    pub(crate) reset: Option<Reset>,
    pub(crate) zone: Zone,
    pub(crate) first: i64,
    pub(crate) format: Template,
}

impl Properties {
    /// Checks and joins the properties as a client gives them: a `format` is required (a
    /// counter that restarts is meaningless without its date, and a template is what makes a
    /// tag a business tag), `time_zone` defaults to UTC, `first` to 1.
    pub fn new(
        reset: Option<Reset>,
        time_zone: Option<&str>,
        first: Option<i64>,
        format: Option<&str>,
    ) -> Result<Self> {
        let Some(format) = format else {
            return Err(Error::InvalidInput(match reset {
                Some(r) => format!(
                    "a tag that restarts each {r} needs a format with its date, such as \
                     \"ORD{{date:%Y%m%d}}{{seq:06}}\""
                ),
                None => "time_zone and first need a format (and a reset to restart)".into(),
            }));
        };
        let zone = match time_zone {
            Some(name) => Zone::new(name)?,
            None => Zone::utc(),
        };
        let first = first.unwrap_or(1);
        let format = Template::parse(format, reset)?;
        format.check_first(first)?;
        let props = Properties {
            reset,
            zone,
            first,
            format,
        };
        let text = props.to_description();
        let chars = text.chars().count();
        if chars > leaf_core::MAX_DESCRIPTION_CHARS {
            return Err(Error::InvalidInput(format!(
                "the properties take {chars} characters in the definition row, at most {} fit: \
                 shorten the format",
                leaf_core::MAX_DESCRIPTION_CHARS
            )));
        }
        Ok(props)
    }

    /// How the counter restarts (`None`: never).
    pub fn reset(&self) -> Option<Reset> {
        self.reset
    }

    /// The zone its periods are read in.
    pub fn zone(&self) -> &Zone {
        &self.zone
    }

    /// Each period's first value.
    pub fn first(&self) -> i64 {
        self.first
    }

    /// How its values are printed.
    pub fn format(&self) -> &Template {
        &self.format
    }

    /// The definition row's description; the format comes last, since it may hold any text.
    pub fn to_description(&self) -> String {
        self.text(PROPS_PREFIX)
    }

    /// The description of the definition row while it is checked ([`DRAFT_PREFIX`]).
    pub(crate) fn to_draft(&self) -> String {
        self.text(DRAFT_PREFIX)
    }

    fn text(&self, prefix: &str) -> String {
        let mut s = String::from(prefix);
        if let Some(r) = self.reset {
            s.push_str("reset=");
            s.push_str(r.as_str());
            s.push(' ');
        }
        s.push_str(&format!(
            "zone={} first={} format={}",
            self.zone.name(),
            self.first,
            self.format.as_str()
        ));
        s
    }

    /// The properties a definition row's description holds.
    pub fn from_description(text: &str) -> Result<Self> {
        let bad = |why: &str| Error::InvalidInput(format!("definition {text:?}: {why}"));
        let mut rest = text
            .strip_prefix(PROPS_PREFIX)
            .ok_or_else(|| bad("not a leaf-props:v1 definition"))?;
        let (mut reset, mut zone, mut first) = (None, None, None);
        let format = loop {
            if let Some(f) = rest.strip_prefix("format=") {
                break f;
            }
            let (pair, tail) = rest.split_once(' ').ok_or_else(|| bad("no format"))?;
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| bad("a field without ="))?;
            match key {
                "reset" => reset = Some(value.parse::<Reset>()?),
                "zone" => zone = Some(value),
                "first" => first = Some(value.parse::<i64>().map_err(|_| bad("first"))?),
                _ => return Err(bad(&format!("unknown field {key:?}"))),
            }
            rest = tail;
        };
        Properties::new(reset, zone, first, Some(format))
    }

    /// The step of a period row for a tag created with `step`: at most 1/[`STEP_SHARE`] of
    /// the values the format's width can print (at least 1).
    pub fn row_step(&self, step: i64) -> i64 {
        match self.format.max_value() {
            Some(max) => {
                let share = (i128::from(max) - i128::from(self.first) + 1) / i128::from(STEP_SHARE);
                step.min(i64::try_from(share).unwrap_or(i64::MAX).max(1))
            }
            None => step,
        }
    }

    /// The period of a value taken at `unix_ms` (`None` for a tag that never restarts).
    pub fn period_at(&self, unix_ms: i64) -> Result<Option<Period>> {
        self.reset
            .map(|r| Period::at(r, &self.zone, unix_ms))
            .transpose()
    }
}

/// A business tag as read from its definition row.
#[derive(Clone, Debug)]
pub struct Definition {
    pub(crate) base: Tag,
    pub(crate) step: i64,
    pub(crate) props: Properties,
}

impl Definition {
    /// Reads a definition row (`base@`); `None` if the row is not one.
    pub fn from_record(record: &TagRecord) -> Option<Result<Self>> {
        let Shape::Definition { base } = shape(record.tag.as_str()) else {
            return None;
        };
        let text = record.description.as_deref().unwrap_or_default();
        if !text.starts_with(PROPS_PREFIX) {
            // A plain tag of that shape, from before business tags.
            return None;
        }
        Some(
            Tag::new(base)
                .and_then(|base| Ok((base, Properties::from_description(text)?)))
                .map(|(base, props)| Definition {
                    base,
                    step: record.step,
                    props,
                }),
        )
    }

    /// The base tag.
    pub fn base(&self) -> &Tag {
        &self.base
    }

    /// The step it was created with (each period row's is [`Properties::row_step`] of it).
    pub fn step(&self) -> i64 {
        self.step
    }

    /// Its properties.
    pub fn props(&self) -> &Properties {
        &self.props
    }

    /// The step of one load of a period row by one node: a tenth of the row's capped step
    /// ([`Properties::row_step`]) at its first load of the period, then twice its `last`, up
    /// to the cap. A period is reserved as it is used: nodes that preload it hold little of it
    /// (100 nodes preloading a `{seq:06}` day at the largest cap hold 10% of it before it
    /// starts), and a busy node reaches the cap within a few loads.
    pub fn load_step(&self, last: Option<i64>) -> i64 {
        let cap = self.props.row_step(self.step);
        // At least 1: a cap of 1 to 10 starts at 1.
        let first = (cap + FIRST_SHARE - 1) / FIRST_SHARE;
        match last {
            None => first,
            Some(last) => last.saturating_mul(2).clamp(first, cap),
        }
    }

    /// The row that counts `period` (`None`: the tag's one counter).
    pub fn row(&self, period: Option<Period>) -> Result<Tag> {
        match period {
            Some(p) => Tag::new(format!("{}@{}", self.base, p.key())),
            None => Tag::new(format!("{}@{ALL_PERIODS}", self.base)),
        }
    }

    /// The row to create for a new business tag, its description a draft.
    pub(crate) fn new_row(&self) -> Result<NewTag> {
        Ok(NewTag {
            tag: definition_tag(&self.base)?,
            // Never counted from: the periods have rows of their own.
            max_id: 0,
            step: self.step,
            description: Some(self.props.to_draft()),
        })
    }

    /// The period and value of `text`, an ID this tag printed.
    pub fn decode(&self, text: &str) -> Result<(Option<Period>, i64)> {
        let (date, value) = self.props.format.decode(text)?;
        let period = match (self.props.reset, date) {
            (Some(r), Some(d)) => Some(Period::of(r, d)),
            _ => None,
        };
        Ok((period, value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_steps_table() {
        let check = |format: &str, step: i64, last: Option<i64>, expect: i64| {
            let props = Properties::new(Some(Reset::Day), None, None, Some(format)).unwrap();
            let def = Definition {
                base: Tag::new("t").unwrap(),
                step,
                props,
            };
            assert_eq!(
                def.load_step(last),
                expect,
                "{format} step {step} after {last:?}"
            );
        };
        let six = "O{date:%Y%m%d}{seq:06}";
        // The largest cap of a six-digit day is 9,999: a node starts at 1,000 and doubles.
        check(six, 1_000_000, None, 1000);
        check(six, 1_000_000, Some(1000), 2000);
        check(six, 1_000_000, Some(4000), 8000);
        check(six, 1_000_000, Some(8000), 9_999);
        check(six, 1_000_000, Some(9_999), 9_999);
        // A smaller step is its own cap.
        check(six, 100, None, 10);
        check(six, 100, Some(10), 20);
        check(six, 100, Some(80), 100);
        check(six, 95, None, 10);
        // Never below the first range, never 0.
        check(six, 100, Some(1), 10);
        check(six, 1, None, 1);
        check(six, 1, Some(1), 1);
        check("O{date:%Y%m%d}{seq:02}", 1000, None, 1);
        check("O{date:%Y%m%d}{seq}", 50_000, None, 5_000);
        check("O{date:%Y%m%d}{seq}", 50_000, Some(40_000), 50_000);
    }
}
