//! What a name is to business tags, decided in one place: [`shape`] reads a name by its shape
//! alone (no I/O: the hot path and the rules that go by the name), and
//! [`BusinessTags::classify`] with the definitions of the store.

use std::sync::Arc;

use leaf_core::Result;

use crate::{ALL_PERIODS, BusinessTags, Definition};

/// A name read by its shape alone. A business tag `order` keeps its rows under names a plain tag
/// can never take (new ones of that shape are refused, [`check_plain`](crate::check_plain)):
/// `order@` (its definition) and `order@` with a period's key (`order@20261127`,
/// `order@202611`, `order@2026`; `order@all` for a tag that never restarts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape<'a> {
    /// No row's shape: a plain tag's name, or a business tag's base (whose own row, if any, is
    /// its claim, [`is_claim`](crate::is_claim)); which of the two, only the definitions tell.
    Name,
    /// `base@`: a definition row's shape.
    Definition {
        /// The name before the `@`.
        base: &'a str,
    },
    /// `base@` and 4, 6 or 8 digits, or `base@all`: a period row's shape.
    Period {
        /// The name before the last `@`.
        base: &'a str,
        /// The period's key, or [`ALL_PERIODS`].
        suffix: &'a str,
    },
}

impl<'a> Shape<'a> {
    /// The base of a row's shape; `None` for a name.
    pub fn base(self) -> Option<&'a str> {
        match self {
            Shape::Name => None,
            Shape::Definition { base } | Shape::Period { base, .. } => Some(base),
        }
    }
}

/// `name` read by its shape. Plain tags of a row's shape from before business tags are served
/// as ever; new ones are refused.
pub fn shape(name: &str) -> Shape<'_> {
    let Some((base, suffix)) = name.rsplit_once('@') else {
        return Shape::Name;
    };
    let digits = suffix.bytes().all(|b| b.is_ascii_digit()) && matches!(suffix.len(), 4 | 6 | 8);
    if suffix.is_empty() {
        Shape::Definition { base }
    } else if suffix == ALL_PERIODS || digits {
        Shape::Period { base, suffix }
    } else {
        Shape::Name
    }
}

/// What a name is in a store, with the definition of the business tag it belongs to.
#[derive(Clone, Debug)]
pub enum Kind {
    /// A plain tag's name (stored or not).
    Plain,
    /// A business tag's base name (`order`), which IDs are asked by; its own row is the tag's
    /// claim on the name.
    Base(Arc<Definition>),
    /// A business tag's definition row (`order@`).
    Definition(Arc<Definition>),
    /// A business tag's period row (`order@20261127`, `ticket@all`).
    Period(Arc<Definition>),
    /// A name of a row's shape whose base is no business tag: a plain tag from before business
    /// tags, served as ever (a new one is refused).
    Reserved,
}

impl BusinessTags {
    /// What `name` is here: read by its [`shape`], then by the definition of the business tag
    /// it would belong to (read from the store the first time, as
    /// [`definition`](Self::definition) reads it).
    pub async fn classify(&self, name: &str) -> Result<Kind> {
        Ok(match shape(name) {
            Shape::Name => self.definition(name).await?.map_or(Kind::Plain, Kind::Base),
            Shape::Definition { base } => {
                (self.definition(base).await?).map_or(Kind::Reserved, Kind::Definition)
            }
            Shape::Period { base, .. } => {
                (self.definition(base).await?).map_or(Kind::Reserved, Kind::Period)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use leaf_core::{Clock, ManualClock, NewTag, SegmentStore, Tag};
    use leaf_format::Reset;
    use leaf_segment::SegmentConfig;
    use leaf_testkit::MemoryStore;

    use super::*;
    use crate::Properties;

    #[test]
    fn shapes_table() {
        let check = |name: &str, expect: Shape<'_>| {
            assert_eq!(shape(name), expect, "{name}");
        };
        let period = |base, suffix| Shape::Period { base, suffix };
        check("order", Shape::Name);
        check("order@", Shape::Definition { base: "order" });
        check("order@all", period("order", "all"));
        check("order@2026", period("order", "2026"));
        check("order@202611", period("order", "202611"));
        check("order@20261127", period("order", "20261127"));
        // Only the last '@' counts, and only 4, 6 or 8 digits or "all" make a period.
        check("mail@host", Shape::Name);
        check("a@b@2026", period("a@b", "2026"));
        check("a@2026@", Shape::Definition { base: "a@2026" });
        check("order@2026112", Shape::Name);
        check("order@202611270", Shape::Name);
        check("order@20x6", Shape::Name);
        check("order@ALL", Shape::Name);
        check("@", Shape::Definition { base: "" });
        check("@2026", period("", "2026"));
        assert_eq!(shape("order@2026").base(), Some("order"));
        assert_eq!(shape("order").base(), None);
    }

    /// Every answer of `classify`, on a store holding a business tag, a plain tag and plain tags
    /// of a row's shape from before business tags.
    #[tokio::test]
    async fn kinds_table() {
        let store = Arc::new(MemoryStore::new());
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(1_795_737_600_000));
        let tags = BusinessTags::new(store.clone(), clock, SegmentConfig::default());
        let props = Properties::new(Some(Reset::Day), None, None, Some("O{date:%Y%m%d}{seq:04}"));
        let order = Tag::new("order").unwrap();
        tags.create(&order, 10, props.unwrap()).await.unwrap();
        for old in ["plain", "old@", "old@2026"] {
            store
                .create(&NewTag::new(Tag::new(old).unwrap()))
                .await
                .unwrap();
        }
        let kind = |k: &Kind| match k {
            Kind::Plain => "plain",
            Kind::Base(_) => "base",
            Kind::Definition(_) => "definition",
            Kind::Period(_) => "period",
            Kind::Reserved => "reserved",
        };
        for (name, expect) in [
            ("plain", "plain"),
            ("never-stored", "plain"),
            ("order", "base"),
            ("order@", "definition"),
            ("order@20261127", "period"),
            ("order@2026", "period"),
            ("order@all", "period"),
            ("old@", "reserved"),
            ("old@2026", "reserved"),
            ("nobody@20261127", "reserved"),
            ("order@x", "plain"),
        ] {
            let got = tags.classify(name).await.unwrap();
            assert_eq!(kind(&got), expect, "{name}");
            if let Kind::Base(d) | Kind::Definition(d) | Kind::Period(d) = got {
                assert_eq!(d.base(), &order, "{name}");
            }
        }
    }
}
