//! The tag list refreshed from the store, and the consumption sampled, on the refresher's tick.

use std::sync::PoisonError;

use leaf_core::Result;

use super::{Inner, lock};
use crate::tags::TagMap;

impl Inner {
    pub(super) async fn refresh_tags(&self) -> Result<()> {
        // Only tags cached before the listing may be dropped: one added by a lookup meanwhile
        // may be newer than the list.
        let before = self.tags.load_full();
        let mut listed = self.store.tags().await?;
        if listed.is_empty() {
            tracing::warn!(
                store = self.store.kind(),
                "the store listed no tags; keeping the cached ones"
            );
            return Ok(());
        }
        let keep = self
            .listed
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(keep) = keep {
            listed.retain(|t| keep(t.as_str()));
        }
        let (added, removed) = {
            let _writer = lock(&self.map_write);
            let current = self.tags.load_full();
            let mut map = TagMap::with_capacity(listed.len());
            let mut added = 0usize;
            for tag in &listed {
                let entry = current.get(tag.as_str()).cloned().unwrap_or_else(|| {
                    added += 1;
                    self.new_entry(tag.clone())
                });
                map.insert(entry);
            }
            let mut removed = Vec::new();
            for entry in current.entries() {
                let tag = &entry.tag;
                if map.contains(tag.as_str()) {
                    continue;
                }
                if before.contains(tag.as_str()) {
                    entry.remove();
                    removed.push(tag.clone());
                } else {
                    map.insert(entry.clone());
                }
            }
            if added > 0 || !removed.is_empty() {
                self.publish_map(map);
            }
            (added, removed)
        };
        {
            let mut m = lock(&self.misses);
            for tag in &listed {
                m.until.remove(tag);
            }
            m.epoch += 1;
        }
        // The row may have been changed by hand (`max_id` lowered): let the store answer again,
        // once per refresh.
        for entry in self.tags.load().entries() {
            entry.lock().exhausted = None;
        }
        if added > 0 || !removed.is_empty() {
            tracing::info!(added, removed = ?removed, "tag list refreshed");
        }
        Ok(())
    }

    /// Records every tag's consumption (the refresher's tick), for rates and `recently_used`.
    pub(super) fn sample_all(&self) {
        let now = self.clock.monotonic();
        for entry in self.tags.load().entries() {
            let mut s = entry.lock();
            let issued = entry.issued(&s);
            s.usage.sample(now, issued);
        }
    }
}
