//! The rules of the requests that name a tag, for the server's HTTP routes and gRPC RPCs (which
//! parse, authorize, call these and render the answer): which counter answers IDs asked of a
//! name, what a lease, a creation and a change of a name may do.

use std::sync::{Arc, PoisonError};

use leaf_core::{DEFAULT_STEP, Error, NewTag, Result, Tag, TagRecord, TagUpdate};
use leaf_format::Reset;

use crate::classify::{Kind, shape};
use crate::{
    BusinessTags, Definition, Properties, check_new_plain, check_plain, check_unclaimed,
    check_update,
};

/// What a leasing client's allocation of a tag reserves ([`BusinessTags::lease`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The tag it is counted under: a period row's base tag (one label per business tag, not
    /// one per period row), else the tag itself.
    pub counted: Tag,
    /// The step to allocate with (`None`: the row's stored step).
    pub step: Option<i64>,
}

/// A new tag's fields as a client sent them (`POST /v1/tags`, gRPC's `CreateTag`).
#[derive(Clone, Debug, Default)]
pub struct CreateTag {
    /// Its name.
    pub tag: String,
    /// A plain tag's first `max_id`.
    pub max_id: Option<i64>,
    /// Its step.
    pub step: Option<i64>,
    /// A plain tag's description.
    pub description: Option<String>,
    /// A business tag's properties (issue 27); any of these four makes one.
    pub reset: Option<String>,
    /// See [`reset`](Self::reset).
    pub time_zone: Option<String>,
    /// See [`reset`](Self::reset).
    pub first: Option<i64>,
    /// See [`reset`](Self::reset).
    pub format: Option<String>,
}

impl CreateTag {
    fn is_business(&self) -> bool {
        self.reset.is_some()
            || self.time_zone.is_some()
            || self.first.is_some()
            || self.format.is_some()
    }
}

/// What [`BusinessTags::create_tag`] created.
#[derive(Clone, Debug)]
pub enum Created {
    /// A plain tag: its row.
    Plain(TagRecord),
    /// A business tag: its definition.
    Business(Arc<Definition>),
}

impl Created {
    /// The tag's name (a business tag's base).
    pub fn tag(&self) -> &Tag {
        match self {
            Created::Plain(record) => &record.tag,
            Created::Business(def) => def.base(),
        }
    }
}

impl BusinessTags {
    /// Refuses IDs asked of a business tag's row (`order@`, `order@20261127`): they are asked
    /// of the base tag. A plain tag of that shape from before business tags (its base has no
    /// definition) is served as ever. No lookup for a name of no row's shape.
    pub async fn refuse_row(&self, tag: &Tag) -> Result<()> {
        let Some(base) = shape(tag.as_str()).base() else {
            return Ok(());
        };
        match self.classify(tag.as_str()).await? {
            Kind::Definition(_) | Kind::Period(_) => Err(Error::InvalidInput(format!(
                "tag {tag} is a row of the business tag {base}: ask for {base}"
            ))),
            _ => Ok(()),
        }
    }

    /// The business tag `tag` names, if it is known here, with no I/O: the hot path of plain
    /// tags costs one lookup in an (often empty) map. A business tag not known here is found
    /// by [`after_plain`](Self::after_plain).
    pub fn known(&self, tag: &str) -> Option<Arc<Definition>> {
        let defs = self.defs.read().unwrap_or_else(PoisonError::into_inner);
        if defs.is_empty() {
            return None;
        }
        defs.get(tag).cloned()
    }

    /// After `err`, what taking IDs of `tag` as a plain tag's failed with: the business tag
    /// `tag` is, when `err` says it may be one (`NotFound`: a business tag created before
    /// claims has no row of its own; `Exhausted`: its claim has no ID left), else `err`.
    pub async fn after_plain(&self, tag: &Tag, err: Error) -> Result<Arc<Definition>> {
        match err {
            Error::NotFound(_) | Error::Exhausted(_) => {
                self.definition(tag.as_str()).await?.ok_or(err)
            }
            err => Err(err),
        }
    }

    /// The business tag `tag`: `InvalidInput` for a name of a row's shape, `NotFound` for a
    /// name that is no business tag's.
    pub async fn business_tag(&self, tag: &Tag) -> Result<Arc<Definition>> {
        check_plain(tag)?;
        match self.classify(tag.as_str()).await? {
            Kind::Base(def) => Ok(def),
            _ => Err(Error::NotFound(format!("business tag {tag}"))),
        }
    }

    /// Refuses `tag` unless it names a plain tag: a business tag's row, as
    /// [`refuse_row`](Self::refuse_row) does, and a business tag's base, `refused` saying why
    /// the caller refuses that one.
    pub async fn require_plain(&self, tag: &Tag, refused: &str) -> Result<()> {
        self.refuse_row(tag).await?;
        match self.classify(tag.as_str()).await? {
            Kind::Base(_) => Err(Error::InvalidInput(format!(
                "tag {tag} is a business tag: {refused}"
            ))),
            _ => Ok(()),
        }
    }

    /// What a leasing client's allocation of `tag` reserves, asked with `asked` (`None`: the
    /// row's step). A business tag's period row within one period of this node's clock is
    /// created if absent ([`ensure_period`](Self::ensure_period)), so that a client without
    /// the admin token counts in it, and leased by at most [`lease_step`](Self::lease_step);
    /// a period out of that window is `InvalidInput`, and so are a business tag's base and
    /// definition row, which are never leased.
    pub async fn lease(&self, tag: &Tag, asked: Option<i64>) -> Result<Lease> {
        if let Some(def) = self.ensure_period(tag).await? {
            return Ok(Lease {
                counted: def.base().clone(),
                step: Some(self.lease_step(&def, tag, asked)?),
            });
        }
        self.require_plain(
            tag,
            "leases are of its period rows (tag@20261127), as leaf-client's business tags take \
             them",
        )
        .await?;
        Ok(Lease {
            counted: tag.clone(),
            step: asked,
        })
    }

    /// Creates a tag as a client asks for it; `AlreadyExists` if it exists. With any of the
    /// business properties it is a business tag ([`create`](Self::create)), which takes no
    /// `max_id` and no description; else a plain tag's row, checked by [`check_new_plain`]. A
    /// business tag's name is refused for a plain tag and the other way round; names of a
    /// business row's shape are refused for both.
    pub async fn create_tag(&self, request: CreateTag) -> Result<Created> {
        let tag = Tag::new(&request.tag)?;
        check_plain(&tag)?;
        if request.is_business() {
            if request.max_id.is_some() {
                return Err(Error::InvalidInput(
                    "max_id is a plain tag's: a business tag's periods start at first".into(),
                ));
            }
            if request.description.is_some() {
                return Err(Error::InvalidInput(
                    "a business tag keeps no description: its definition row's description \
                     holds its properties"
                        .into(),
                ));
            }
            let reset = (request.reset.as_deref())
                .map(str::parse::<Reset>)
                .transpose()?;
            let props = Properties::new(
                reset,
                request.time_zone.as_deref(),
                request.first,
                request.format.as_deref(),
            )?;
            let step = request.step.unwrap_or(DEFAULT_STEP);
            return Ok(Created::Business(self.create(&tag, step, props).await?));
        }
        if let Kind::Base(_) = self.classify(tag.as_str()).await? {
            return Err(Error::AlreadyExists(format!("tag {tag} (a business tag)")));
        }
        let mut new = NewTag::new(tag.clone());
        if let Some(m) = request.max_id {
            new.max_id = m;
        }
        if let Some(s) = request.step {
            new.step = s;
        }
        new.description = request.description;
        check_new_plain(&new)?;
        let record = self.store.create(&new).await?;
        tracing::info!(tag = %tag, step = record.step, max_id = record.max_id, "tag created");
        Ok(Created::Plain(record))
    }

    /// Refuses a change (`PATCH`) of `tag`'s row that [`check_update`] refuses, and any change
    /// of a business tag's claim on its name, read from the store now, not from a cache: a
    /// claim written a moment ago by another node counts.
    pub async fn check_change(&self, tag: &Tag, update: &TagUpdate) -> Result<()> {
        check_update(tag, update)?;
        if let Some(stored) = self.store.get(tag).await? {
            check_unclaimed(&stored)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use leaf_core::{Clock, ManualClock, SegmentStore};
    use leaf_segment::SegmentConfig;
    use leaf_testkit::MemoryStore;

    use super::*;

    /// 2026-11-27 10:00 UTC.
    const NOW_MS: u64 = 1_795_773_600_000;

    fn tag(name: &str) -> Tag {
        Tag::new(name).unwrap()
    }

    /// A store with the daily business tag `order` (`O{date:%Y%m%d}{seq:04}`, step 1000), the
    /// plain tag `plain` and plain tags of a row's shape from before business tags.
    async fn tags() -> (BusinessTags, Arc<MemoryStore>) {
        let store = Arc::new(MemoryStore::new());
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(NOW_MS));
        let tags = BusinessTags::new(store.clone(), clock, SegmentConfig::default());
        let order = CreateTag {
            tag: "order".into(),
            step: Some(1000),
            reset: Some("day".into()),
            format: Some("O{date:%Y%m%d}{seq:04}".into()),
            ..CreateTag::default()
        };
        tags.create_tag(order).await.unwrap();
        for old in ["plain", "old@", "old@2026"] {
            store.create(&NewTag::new(tag(old))).await.unwrap();
        }
        (tags, store)
    }

    /// Holds `got` to `expect`: "ok", or a part of the error's kind and message ("invalid: ...",
    /// "not found: ...", "exists: ...", "other: ...").
    fn check<T>(what: &str, got: &Result<T>, expect: &str) {
        let got = match got {
            Ok(_) => "ok".into(),
            Err(Error::InvalidInput(m)) => format!("invalid: {m}"),
            Err(Error::NotFound(m)) => format!("not found: {m}"),
            Err(Error::AlreadyExists(m)) => format!("exists: {m}"),
            Err(e) => format!("other: {e}"),
        };
        match expect {
            "ok" => assert_eq!(got, "ok", "{what}"),
            _ => assert!(got.contains(expect), "{what}: {got}, expected {expect}"),
        }
    }

    #[tokio::test]
    async fn ids_of_a_name_table() {
        let (tags, _) = tags().await;
        for (name, expect) in [
            ("plain", "ok"),
            ("unknown", "ok"),
            ("order", "ok"),
            ("old@", "ok"),
            ("old@2026", "ok"),
            (
                "order@",
                "invalid: tag order@ is a row of the business tag order: ask for order",
            ),
            ("order@20261127", "a row of the business tag order"),
            ("order@all", "a row of the business tag order"),
        ] {
            check(name, &tags.refuse_row(&tag(name)).await, expect);
        }
        assert!(tags.known("order").is_some());
        assert!(tags.known("plain").is_none());
        // What a plain tag's failure means for a name.
        let other = BusinessTags::new(
            Arc::clone(tags.allocator().store()),
            Arc::new(ManualClock::new(NOW_MS)),
            SegmentConfig::default(),
        );
        assert!(other.known("order").is_none(), "not read yet");
        for (name, err, expect) in [
            ("order", Error::Exhausted("x".into()), "ok"),
            ("order", Error::NotFound("x".into()), "ok"),
            (
                "order",
                Error::Unavailable("x".into()),
                "other: unavailable: x",
            ),
            ("plain", Error::Exhausted("x".into()), "other: exhausted"),
            ("unknown", Error::NotFound("x".into()), "not found: x"),
        ] {
            check(name, &other.after_plain(&tag(name), err).await, expect);
        }
        for (name, expect) in [
            ("order", "ok"),
            ("plain", "not found: business tag plain"),
            ("order@", "invalid: tag order@: names ending in '@'"),
            ("old@2026", "invalid: tag old@2026: names ending in"),
        ] {
            check(name, &tags.business_tag(&tag(name)).await, expect);
        }
    }

    #[tokio::test]
    async fn leases_table() {
        let (tags, store) = tags().await;
        for (name, asked, expect) in [
            // Plain tags, those of a row's shape from before included, as asked.
            ("plain", Some(7), Ok(("plain", Some(7)))),
            ("plain", None, Ok(("plain", None))),
            ("old@2026", None, Ok(("old@2026", None))),
            // Today's row: the capped step (a hundredth of 9,999, whatever is asked above).
            ("order@20261127", None, Ok(("order", Some(99)))),
            ("order@20261127", Some(5000), Ok(("order", Some(99)))),
            ("order@20261127", Some(3), Ok(("order", Some(3)))),
            // Tomorrow's, not started: a node's first load at most.
            ("order@20261128", None, Ok(("order", Some(10)))),
            (
                "order",
                None,
                Err("is a business tag: leases are of its period rows"),
            ),
            ("order@", None, Err("is a row of the business tag order")),
            ("order@20261201", None, Err("is not within one period")),
            ("order@all", None, Err("\"all\" is not a day period")),
        ] {
            let got = tags.lease(&tag(name), asked).await;
            match (&got, expect) {
                (Ok(lease), Ok((counted, step))) => {
                    assert_eq!(
                        (lease.counted.as_str(), lease.step),
                        (counted, step),
                        "{name}"
                    );
                }
                (Err(e), Err(why)) => assert!(e.to_string().contains(why), "{name}: {e}"),
                _ => panic!("{name} {asked:?}: {got:?}"),
            }
        }
        // A leased period row is created on the way, with its capped step.
        let row = store.get(&tag("order@20261128")).await.unwrap().unwrap();
        assert_eq!((row.max_id, row.step), (1, 99));
    }

    #[tokio::test]
    async fn creations_and_changes_table() {
        let (tags, _) = tags().await;
        let plain = |name: &str| CreateTag {
            tag: name.into(),
            ..CreateTag::default()
        };
        let business = |name: &str| CreateTag {
            format: Some("X{seq}".into()),
            ..plain(name)
        };
        for (request, expect) in [
            (plain("fresh"), "ok"),
            (business("ticket"), "ok"),
            (plain("order"), "exists: tag order (a business tag)"),
            (plain("plain"), "exists"),
            (business("plain"), "exists: tag plain exists as a plain tag"),
            (
                plain("fresh@2026"),
                "invalid: tag fresh@2026: names ending in '@'",
            ),
            (
                business("fresh@"),
                "invalid: tag fresh@: names ending in '@'",
            ),
            (
                CreateTag {
                    max_id: Some(5),
                    ..business("b1")
                },
                "invalid: max_id is a plain tag's",
            ),
            (
                CreateTag {
                    description: Some("d".into()),
                    ..business("b2")
                },
                "invalid: a business tag keeps no description",
            ),
            (
                CreateTag {
                    reset: Some("week".into()),
                    ..business("b3")
                },
                "invalid",
            ),
            (
                CreateTag {
                    description: Some("leaf-props:v1 format={seq}".into()),
                    ..plain("p1")
                },
                "invalid: a description starting with",
            ),
            (plain("bad name/"), "invalid"),
        ] {
            let name = request.tag.clone();
            let got = tags.create_tag(request).await;
            if let Ok(created) = &got {
                assert_eq!(created.tag().as_str(), name);
            }
            check(&name, &got, expect);
        }
        let step = TagUpdate {
            step: Some(5),
            description: None,
        };
        for (name, expect) in [
            ("plain", "ok"),
            ("unknown", "ok"),
            ("order", "invalid: tag order is a business tag"),
            (
                "order@",
                "invalid: tag order@: rows named like a business tag's",
            ),
            ("old@2026", "invalid: tag old@2026: rows named like"),
        ] {
            check(name, &tags.check_change(&tag(name), &step).await, expect);
        }
    }
}
