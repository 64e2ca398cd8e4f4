//! A business tag's period rows: created on first use, insert-if-absent, within one period of
//! this node's clock, and leased to clients by no more than a node would load of them.

use std::sync::Arc;

use leaf_core::{Error, NewTag, Result, SegmentStore, Tag};
use leaf_format::Period;

use crate::classify::{Shape, shape};
use crate::{ALL_PERIODS, BusinessTags, Definition};

impl BusinessTags {
    /// For a period row of a business tag (`order@20261127`, `ticket@all`) whose period is
    /// within one period of the clock's now (in the tag's zone): creates it if absent, as a node would
    /// on first use, and gives the definition. `None` for a name that is no business tag's row
    /// (a plain tag, a definition row, a row whose base has no definition); `InvalidInput` for a
    /// period the tag cannot have or too far from now (a leasing client's clock gone astray must
    /// not create rows for years ahead).
    pub async fn ensure_period(&self, row: &Tag) -> Result<Option<Arc<Definition>>> {
        let now_ms = self.clock.now_ms() as i64;
        let Shape::Period { base, suffix } = shape(row.as_str()) else {
            return Ok(None);
        };
        let Some(def) = self.definition(base).await? else {
            return Ok(None);
        };
        let period = match def.props.reset {
            None if suffix == ALL_PERIODS => None,
            None => {
                return Err(Error::InvalidInput(format!(
                    "tag {base} never restarts: its one row is {base}@{ALL_PERIODS}"
                )));
            }
            Some(reset) => Some(Period::from_key(reset, suffix)?),
        };
        // A stored row is read as it is; the window bounds only what is created.
        if self.store.get(row).await?.is_some() {
            return Ok(Some(def));
        }
        if let (Some(p), Some(now)) = (period, def.props.period_at(now_ms)?) {
            let before = def.props.period_at(now.start_ms(&def.props.zone)? - 1)?;
            if p != now && Some(p) != before && p != now.next() {
                return Err(Error::InvalidInput(format!(
                    "period {p} of tag {base} is not within one period of this server's clock \
                     ({now})"
                )));
            }
        }
        self.ensure_row(&def, row).await?;
        Ok(Some(def))
    }

    /// How much a lease of `row`, a period row of `def`, reserves for a leasing client that
    /// `asked` for that much (`None`: the most): at most the row's capped step once its period
    /// has started at this node's clock, and at most a node's first load of a period
    /// ([`Definition::load_step`]) before, so that clients preloading a period hold no more of
    /// it than nodes do, whatever they ask.
    pub fn lease_step(&self, def: &Definition, row: &Tag, asked: Option<i64>) -> Result<i64> {
        let started = match (def.props.reset, shape(row.as_str())) {
            (Some(reset), Shape::Period { suffix, .. }) => {
                let start = Period::from_key(reset, suffix)?.start_ms(&def.props.zone)?;
                start <= self.clock.now_ms() as i64
            }
            _ => true,
        };
        let most = if started {
            def.props.row_step(def.step)
        } else {
            def.load_step(None)
        };
        Ok(asked.map_or(most, |a| a.clamp(1, most)))
    }

    /// Creates `row` if absent, with the tag's first value and capped step.
    pub(crate) async fn ensure_row(&self, def: &Definition, row: &Tag) -> Result<()> {
        ensure_row(self.store.as_ref(), def, row).await?;
        self.alloc.forget_miss(row.as_str());
        Ok(())
    }
}

/// Creates `row` if absent; a row created meanwhile by another node is fine (its ranges are
/// allocated like any other).
pub(crate) async fn ensure_row(
    store: &dyn SegmentStore,
    def: &Definition,
    row: &Tag,
) -> Result<()> {
    let new = NewTag {
        tag: row.clone(),
        max_id: def.props.first,
        step: def.props.row_step(def.step),
        description: Some(format!("period of {}", def.base)),
    };
    match store.create(&new).await {
        Ok(_) => {
            tracing::info!(row = %row, step = new.step, "period row created");
            Ok(())
        }
        Err(Error::AlreadyExists(_)) => Ok(()),
        Err(e) => Err(e),
    }
}
