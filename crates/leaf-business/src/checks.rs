//! The checks that go by a name or a description alone, with no lookup: what a plain tag, a
//! business tag's base and a change of a row may be.

use leaf_core::{Error, NewTag, Result, Tag, TagRecord, TagUpdate};

use crate::classify::{Shape, shape};
use crate::{MAX_BASE_CHARS, is_claim};

/// Refuses base names that cannot be a business tag's.
pub(crate) fn check_base(base: &Tag) -> Result<()> {
    let chars = base.as_str().chars().count();
    if chars > MAX_BASE_CHARS {
        return Err(Error::InvalidInput(format!(
            "a business tag has at most {MAX_BASE_CHARS} characters (its rows add up to 9), got \
             {chars}"
        )));
    }
    if base.as_str().contains('@') {
        return Err(Error::InvalidInput(format!(
            "tag {base}: a business tag's name has no '@' (its rows' names use it)"
        )));
    }
    Ok(())
}

/// Refuses a plain tag whose name has the shape of a business tag's row.
pub fn check_plain(tag: &Tag) -> Result<()> {
    match shape(tag.as_str()) {
        Shape::Name => Ok(()),
        _ => Err(Error::InvalidInput(format!(
            "tag {tag}: names ending in '@', '@all' or '@' and 4, 6 or 8 digits are reserved for \
             business tags' rows"
        ))),
    }
}

/// The starts of the descriptions this crate writes (a definition's properties in any version,
/// a claim in any wording): a row holding one is read as part of a business tag.
const RESERVED_DESCRIPTIONS: [&str; 3] = ["leaf-props:", "leaf-draft:", "leaf-business:"];

/// Refuses a description that a node would read as a business tag's properties or claim, on
/// any tag: written by hand on a plain tag, it would make one a business tag without a claim,
/// or give a business tag a second definition.
pub fn check_description(description: Option<&str>) -> Result<()> {
    match description {
        Some(d) if RESERVED_DESCRIPTIONS.iter().any(|p| d.starts_with(p)) => {
            Err(Error::InvalidInput(format!(
                "a description starting with {} is reserved for business tags' rows",
                RESERVED_DESCRIPTIONS.map(|p| format!("{p:?}")).join(" or ")
            )))
        }
        _ => Ok(()),
    }
}

/// Refuses a new plain tag that is not one: a name of a business row's shape, a description
/// that reads as properties, bad numbers. `POST /v1/tags` and the seed tags go through it.
pub fn check_new_plain(new: &NewTag) -> Result<()> {
    check_plain(&new.tag)?;
    check_description(new.description.as_deref())?;
    new.validate()
}

/// Refuses a change (`PATCH`) of `tag`'s row: every name of a business row's shape, by the name
/// alone (a definition created a moment ago on another node is not seen by any lookup here),
/// and a description that reads as properties. See [`check_unclaimed`] for the base name.
pub fn check_update(tag: &Tag, update: &TagUpdate) -> Result<()> {
    if shape(tag.as_str()) != Shape::Name {
        return Err(Error::InvalidInput(format!(
            "tag {tag}: rows named like a business tag's (ending in '@', '@all' or '@' and 4, 6 \
             or 8 digits) are never changed here: a business tag's properties and steps are \
             fixed (a different numbering is a new tag), and a plain tag of that shape from \
             before business tags is changed in its database"
        )));
    }
    check_description(update.description.as_deref())?;
    update.validate()
}

/// Refuses a change of `stored` (the row as read from the store just before) when it is a
/// business tag's claim on its base name.
pub fn check_unclaimed(stored: &TagRecord) -> Result<()> {
    if is_claim(stored) {
        return Err(Error::InvalidInput(format!(
            "tag {} is a business tag: its properties and its rows' steps never change (a \
             different numbering is a new tag)",
            stored.tag
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tag(name: &str) -> Tag {
        Tag::new(name).unwrap()
    }

    #[test]
    fn changes_table() {
        let check = |name: &str, description: Option<&str>, ok: bool| {
            let update = TagUpdate {
                step: Some(10),
                description: description.map(str::to_owned),
            };
            let got = check_update(&tag(name), &update);
            assert_eq!(got.is_ok(), ok, "{name} {description:?}: {got:?}");
        };
        // Rows of a business tag's shape, whatever the change, with no lookup.
        for name in [
            "order@",
            "order@all",
            "order@2026",
            "order@202611",
            "order@20261127",
        ] {
            check(name, None, false);
            check(name, Some("x"), false);
        }
        check("order", None, true);
        check("mail@host", Some("a mail tag"), true);
        check("order@2026112", None, true);
        // Descriptions that read as properties or a claim, on any tag.
        for d in [
            "leaf-props:v1 zone=UTC first=1 format=X{seq}",
            "leaf-props:v9",
            "leaf-business: counted in t@",
            "leaf-business:",
        ] {
            check("plain", Some(d), false);
        }
        for d in [
            "",
            "Leaf-props:v1",
            " leaf-props:v1",
            "leaf-propsv1",
            "made by hand",
        ] {
            check("plain", Some(d), true);
        }
    }

    #[test]
    fn new_plain_tags_table() {
        let check = |name: &str, description: Option<&str>, step: i64, ok: bool| {
            let new = NewTag {
                description: description.map(str::to_owned),
                step,
                ..NewTag::new(tag(name))
            };
            let got = check_new_plain(&new);
            assert_eq!(got.is_ok(), ok, "{name} {description:?} {step}: {got:?}");
        };
        check("seeded", None, 10, true);
        check("seeded@", None, 10, false);
        check("seeded@2026", None, 10, false);
        check("seeded", Some("leaf-props:v1 format={seq}"), 10, false);
        check(
            "seeded",
            Some("leaf-business: counted in seeded@"),
            10,
            false,
        );
        check("seeded", None, 0, false);
    }

    #[test]
    fn claims_are_not_changed() {
        let record = |max_id: i64, description: &str| TagRecord {
            tag: tag("order"),
            max_id,
            step: 1,
            description: Some(description.into()),
            updated_at_ms: None,
        };
        assert!(check_unclaimed(&record(i64::MAX, "leaf-business: counted in order@")).is_err());
        assert!(check_unclaimed(&record(5, "leaf-business: counted in order@")).is_ok());
        assert!(check_unclaimed(&record(i64::MAX, "used up by hand")).is_ok());
    }
}
