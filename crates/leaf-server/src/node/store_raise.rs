//! `leaf-server store raise`: the plan of [`leaf_business::raise`] over the store the
//! configuration names, printed, then applied unless `--dry-run`.

use std::io::Write;

use anyhow::{Context, Result, bail};
use leaf_business::raise::{self, Change};

use crate::Config;
use crate::cli::Raise;
use crate::compose::backends;

/// Runs `raise` on the segment store of `config`, writing what it plans and does to `out`.
/// Fails, changing nothing, when the store cannot be reached or a row cannot be raised.
pub async fn run(config: &Config, raise: &Raise, out: &mut dyn Write) -> Result<()> {
    if !config.segment.enabled {
        bail!("segment.enabled is false: this configuration has no segment store to raise");
    }
    let store = backends::segment_store_now(config)
        .await
        .with_context(|| format!("cannot open the {} store", config.segment.store))?;
    let rows = store.list().await.context("cannot list the store's rows")?;
    let period_by = raise.period_by.unwrap_or(raise.by);
    // The period each business tag is in now: a row first used after the copy is created.
    let now_ms = leaf_core::Clock::now_ms(&leaf_core::SystemClock::new()) as i64;
    let plan = raise::plan(&rows, raise.by, period_by, now_ms)?;
    let raised = plan
        .iter()
        .filter(|p| matches!(p.change, Change::Raise { .. } | Change::Create { .. }))
        .count();
    writeln!(
        out,
        "store raise: the {} store, {} rows; plain tags by {}, period rows by {period_by}",
        store.kind(),
        rows.len(),
        raise.by
    )?;
    for p in &plan {
        writeln!(out, "  {p}")?;
    }
    if raise.dry_run {
        writeln!(
            out,
            "dry run: {raised} rows would be raised, {} left alone; nothing was changed",
            plan.len() - raised
        )?;
        return Ok(());
    }
    let applied = raise::apply(store.as_ref(), &plan).await;
    for (tag, max_id) in &applied.done {
        writeln!(out, "  raised {tag}: max_id now {max_id}")?;
    }
    if let Some((tag, e)) = applied.failed {
        bail!(
            "raising {tag} failed after {} of {raised} rows were raised: {e}; run the same \
             command again once the store answers (raising a row twice is safe)",
            applied.done.len()
        );
    }
    writeln!(
        out,
        "raised {raised} rows, left {} alone",
        plan.len() - raised
    )?;
    Ok(())
}
