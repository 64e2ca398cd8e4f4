//! Creating a business tag: its name claimed first (insert-if-absent, no ID left), then its
//! definition written as a draft no node reads, read back, and made the definition only if the
//! store holds it as written.

use std::sync::Arc;

use leaf_core::{Error, NewTag, Result, Tag, TagRecord, TagUpdate};

use crate::checks::check_base;
use crate::classify::shape;
use crate::{BusinessTags, CLAIM_PREFIX, Definition, Properties, is_claim};

impl BusinessTags {
    /// Creates `base` with `props` and `step` (its definition row), refusing a base that is
    /// a plain tag already or has a reserved shape; `AlreadyExists` if it exists.
    pub async fn create(
        &self,
        base: &Tag,
        step: i64,
        props: Properties,
    ) -> Result<Arc<Definition>> {
        check_base(base)?;
        leaf_core::validate_step(step)?;
        let def = Definition {
            base: base.clone(),
            step,
            props,
        };
        let row = def.new_row()?;
        // Rows of the reserved shape under this base from before business tags (plain tags
        // named `order@2026`, `order@`) would become this tag's rows: refused. A draft of the
        // definition is a creation of this tag, judged below.
        let draft =
            |r: &TagRecord| r.tag == row.tag && r.description.as_ref() == row.description.as_ref();
        if let Some(old) = self
            .store
            .list()
            .await?
            .into_iter()
            .find(|r| shape(r.tag.as_str()).base() == Some(base.as_str()) && !draft(r))
        {
            return Err(Error::AlreadyExists(format!(
                "tag {} exists: a business tag {base} would take it as one of its rows",
                old.tag
            )));
        }
        // The name is claimed first, in one atomic step: the base's own row, insert-if-absent,
        // with no ID left (`max_id` at `i64::MAX`). A plain creation of the name then fails on
        // it, and a node that knows no business tags (an older one, Java Leaf) answers it
        // "exhausted", never a number.
        let claim = NewTag {
            tag: base.clone(),
            max_id: i64::MAX,
            step: 1,
            description: Some(format!("{CLAIM_PREFIX}{base}@")),
        };
        match self.store.create(&claim).await {
            Ok(_) => {}
            // A claim without a definition is a creation cut short: finish it.
            Err(Error::AlreadyExists(_))
                if self.store.get(base).await?.is_some_and(|r| is_claim(&r)) => {}
            Err(Error::AlreadyExists(_)) => {
                return Err(Error::AlreadyExists(format!(
                    "tag {base} exists as a plain tag: a business tag needs a name of its own"
                )));
            }
            Err(e) => return Err(e),
        }
        // The definition is written as a draft, which no node reads as a business tag, and read
        // back: a store that changed its text (a MySQL column in latin1 or 3-byte utf8, in
        // non-strict mode, stores '?' for what it lacks) would have other nodes print other IDs
        // than this one. Only a draft read back as written becomes the definition.
        let written = row.description.clone().unwrap_or_default();
        match self.store.create(&row).await {
            Ok(_) => {}
            // The same draft: a creation cut short, or racing with this one, of the same tag.
            Err(Error::AlreadyExists(_))
                if self.store.get(&row.tag).await?.is_some_and(|r| draft(&r)) => {}
            Err(Error::AlreadyExists(_)) => {
                return Err(Error::AlreadyExists(format!("tag {base} exists")));
            }
            Err(e) => return Err(e),
        }
        self.read_back(&def, &row.tag, &written).await?;
        let text = def.props.to_description();
        let activate = TagUpdate {
            step: None,
            description: Some(text.clone()),
        };
        self.store.update(&row.tag, &activate).await?;
        if let Err(e) = self.read_back(&def, &row.tag, &text).await {
            // Back to a draft (its ASCII start survives any column): never read as a tag.
            let undo = TagUpdate {
                step: None,
                description: Some(written),
            };
            self.store.update(&row.tag, &undo).await?;
            return Err(e);
        }
        let def = Arc::new(def);
        self.remember(Arc::clone(&def));
        tracing::info!(tag = %base, definition = %def.props.to_description(), "business tag created");
        Ok(def)
    }

    /// `InvalidInput` unless `row`, the definition row of `def`, holds `text` as written.
    async fn read_back(&self, def: &Definition, row: &Tag, text: &str) -> Result<()> {
        let stored = self.store.get(row).await?.and_then(|r| r.description);
        if stored.as_deref() == Some(text) {
            return Ok(());
        }
        let base = &def.base;
        tracing::error!(tag = %base, written = text, stored = ?stored, "the store changed a business tag's definition; not created");
        Err(Error::InvalidInput(format!(
            "business tag {base} is not created: the store holds {stored:?} where {text:?} was \
             written, so its description column cannot hold these characters (a MySQL column in \
             latin1 or 3-byte utf8, in non-strict mode?). Use characters it holds, or a column \
             that holds them; the rows {base} and {base}@ hold no ID and no node reads them as \
             a business tag: remove them to use the name again"
        )))
    }
}

#[cfg(test)]
mod tests {
    use leaf_core::{Clock, ManualClock, SegmentStore};
    use leaf_format::Reset;
    use leaf_segment::SegmentConfig;
    use leaf_testkit::MemoryStore;

    use super::*;
    use crate::DRAFT_PREFIX;

    /// 2026-11-27 00:00:00 UTC.
    const MIDNIGHT_MS: i64 = 1_795_737_600_000;

    /// A store whose description column holds Latin-1 only, and stores `?` for the rest, as
    /// MySQL does in non-strict mode.
    #[derive(Debug)]
    struct Latin1(MemoryStore);

    fn latin1(text: &Option<String>) -> Option<String> {
        let keep = |c: char| if u32::from(c) < 256 { c } else { '?' };
        text.as_ref().map(|t| t.chars().map(keep).collect())
    }

    #[async_trait::async_trait]
    impl SegmentStore for Latin1 {
        fn kind(&self) -> &'static str {
            "latin1"
        }
        fn capabilities(&self) -> leaf_core::StoreCapabilities {
            self.0.capabilities()
        }
        async fn allocate(&self, tag: &Tag, step: Option<i64>) -> Result<leaf_core::Allocation> {
            self.0.allocate(tag, step).await
        }
        async fn get(&self, tag: &Tag) -> Result<Option<TagRecord>> {
            self.0.get(tag).await
        }
        async fn list(&self) -> Result<Vec<TagRecord>> {
            self.0.list().await
        }
        async fn create(&self, new: &NewTag) -> Result<TagRecord> {
            let description = latin1(&new.description);
            self.0
                .create(&NewTag {
                    description,
                    ..new.clone()
                })
                .await
        }
        async fn update(&self, tag: &Tag, update: &TagUpdate) -> Result<TagRecord> {
            let description = latin1(&update.description);
            let update = TagUpdate {
                description,
                ..update.clone()
            };
            self.0.update(tag, &update).await
        }
    }

    fn daily(format: &str) -> Properties {
        Properties::new(Some(Reset::Day), None, None, Some(format)).unwrap()
    }

    /// Issue 32: a definition the store does not hold as written is refused by the node that
    /// writes it, and no node reads what the store holds as a business tag.
    #[tokio::test]
    async fn a_definition_the_store_changes_is_refused_and_never_read() {
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(MIDNIGHT_MS as u64));
        let store = Arc::new(Latin1(MemoryStore::new()));
        let node = || BusinessTags::new(store.clone(), clock.clone(), SegmentConfig::default());
        let (a, b) = (node(), node());
        let order = tag("order");
        let e = a
            .create(&order, 10, daily("订单{date:%Y%m%d}{seq:06}"))
            .await
            .unwrap_err();
        assert!(
            matches!(&e, Error::InvalidInput(m) if m.contains("cannot hold")),
            "{e}"
        );
        for n in [&a, &b, &node()] {
            assert!(
                n.definition("order").await.unwrap().is_none(),
                "read as a tag"
            );
        }
        let stored = store.get(&tag("order@")).await.unwrap().unwrap();
        assert!(stored.description.unwrap().starts_with(DRAFT_PREFIX));
        // Tried again, it is refused: what the store holds is not its draft.
        let e = a
            .create(&order, 10, daily("订单{date:%Y%m%d}{seq:06}"))
            .await
            .unwrap_err();
        assert!(matches!(e, Error::AlreadyExists(_)), "{e}");
        // What the column holds is created as ever, Latin-1 included.
        let def = a
            .create(&tag("bon"), 10, daily("Bön{date:%Y%m%d}{seq:06}"))
            .await
            .unwrap();
        assert_eq!(b.next(&def, 1).await.unwrap().ids, ["Bön20261127000001"]);
    }

    /// A creation cut short after its draft is finished by the same creation; a draft of other
    /// properties is never taken over.
    #[tokio::test]
    async fn a_draft_is_finished_only_by_its_own_creation() {
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(MIDNIGHT_MS as u64));
        let store = Arc::new(MemoryStore::new());
        let tags = BusinessTags::new(store.clone(), clock, SegmentConfig::default());
        let props = daily("T{date:%Y%m%d}{seq:04}");
        let cut = NewTag {
            description: Some(props.to_draft()),
            max_id: 0,
            ..NewTag::new(tag("ticket@"))
        };
        store.create(&cut).await.unwrap();
        assert!(
            tags.definition("ticket").await.unwrap().is_none(),
            "a draft is no tag"
        );
        let e = tags
            .create(&tag("ticket"), 10, daily("U{date:%Y%m%d}{seq:04}"))
            .await;
        assert!(matches!(e, Err(Error::AlreadyExists(_))), "{e:?}");
        tags.create(&tag("ticket"), 10, props.clone())
            .await
            .unwrap();
        let stored = store.get(&tag("ticket@")).await.unwrap().unwrap();
        assert_eq!(stored.description, Some(props.to_description()));
        let e = tags.create(&tag("ticket"), 10, props).await.unwrap_err();
        assert!(matches!(e, Error::AlreadyExists(_)), "created twice: {e}");
    }

    fn tag(name: &str) -> Tag {
        Tag::new(name).unwrap()
    }
}
