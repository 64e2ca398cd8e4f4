//! `TagHandle`: one tag of an allocator, found once, so that its requests skip the name lookup.
//! It builds on the allocator (never the other way round): `SegmentAllocator::handle` lives here.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use leaf_core::{Result, Tag};

use crate::SegmentAllocator;
use crate::allocator::Inner;
use crate::entry::TagEntry;
use crate::next_id::{NextId, SlowFuture, Source};

impl SegmentAllocator {
    /// A handle on `tag`, whose requests skip the name lookup (the fastest way to take IDs of
    /// one tag). `NotFound` for a tag the store does not know (one store lookup for a tag not
    /// cached yet), `InvalidInput` for a malformed one. The tag's first segment loads on the
    /// handle's first request.
    pub async fn handle(&self, tag: &str) -> Result<TagHandle> {
        let inner = self.inner();
        let entry = inner.entry_for(tag).await?;
        Ok(TagHandle {
            inner: inner.clone(),
            entry,
        })
    }
}

/// One tag of a [`SegmentAllocator`](crate::SegmentAllocator), from
/// [`handle`](crate::SegmentAllocator::handle). Its [`next_id`](Self::next_id) goes straight
/// to the tag's buffers: no name comparison, no lookup. Cheap to clone; it shares everything
/// with the allocator.
///
/// A handle whose tag a refresh dropped (the row vanished from the store) keeps working through
/// the allocator's by-name path, which finds the tag again if it comes back, at the cost of a
/// lookup per request: take a new handle then.
#[derive(Clone)]
pub struct TagHandle {
    inner: Arc<Inner>,
    entry: Arc<TagEntry>,
}

impl TagHandle {
    /// The tag.
    pub fn tag(&self) -> &Tag {
        &self.entry.tag
    }

    /// The next ID of the tag; the errors of
    /// [`SegmentAllocator::next_id`](crate::SegmentAllocator::next_id). Used as an `async fn`;
    /// completes on its first poll unless it has to wait for a segment.
    pub fn next_id(&self) -> impl Future<Output = Result<i64>> + Send + '_ {
        NextId::new(self)
    }

    /// `n` (at least 1) unique IDs of the tag in ascending order, as
    /// [`SegmentAllocator::next_ids`](crate::SegmentAllocator::next_ids).
    pub async fn next_ids(&self, n: usize) -> Result<Vec<i64>> {
        if self.entry.is_removed() {
            return self.inner.next_ids(self.entry.tag.as_str(), n).await;
        }
        self.inner.take_ids(&self.entry, n).await
    }

    /// Up to `want` (at least 1) consecutive IDs in one atomic step, as `(first, count)`: what
    /// is left of the current segment at most. For [`LocalTagHandle`](crate::LocalTagHandle).
    pub(crate) async fn take(&self, want: u64) -> Result<(i64, u64)> {
        if self.entry.is_removed() {
            // Found again by name (a new entry if the tag is back): one ID at a time.
            return Ok((self.inner.next_id_slow(self.entry.tag.as_str()).await?, 1));
        }
        self.inner.take_slow(&self.entry, want).await
    }
}

impl<'a> Source<'a> for &'a TagHandle {
    /// One `fetch_add` on the tag's cursor.
    #[inline(always)]
    fn fast(self) -> i64 {
        self.inner.take_one(&self.entry)
    }

    #[cold]
    #[inline(never)]
    fn slow(self) -> SlowFuture<'a> {
        Box::pin(async move {
            if self.entry.is_removed() {
                return self.inner.next_id_slow(self.entry.tag.as_str()).await;
            }
            Ok(self.inner.take_slow(&self.entry, 1).await?.0)
        })
    }
}

impl fmt::Debug for TagHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TagHandle")
            .field("tag", &self.entry.tag)
            .finish_non_exhaustive()
    }
}
