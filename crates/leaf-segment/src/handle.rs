//! `TagHandle`: one tag of an allocator, found once, so that its requests skip the name lookup;
//! and the request future both it and the allocator's by-name `next_id` return.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use leaf_core::{Result, Tag};

use crate::allocator::Inner;
use crate::entry::TagEntry;

/// `Source::fast`'s answer when the request needs the slow path (IDs are never negative).
pub(crate) const SLOW: i64 = -1;

type SlowFuture<'a> = Pin<Box<dyn Future<Output = Result<i64>> + Send + 'a>>;

/// Where a request gets its ID: a fast path that answers at once (an ID or [`SLOW`]), and the
/// slow path's future. Implemented by `Copy` references, so that only values move around on
/// the fast path.
pub(crate) trait Source<'a>: Copy + Unpin {
    fn fast(self) -> i64;
    fn slow(self) -> SlowFuture<'a>;
}

/// The future of a single-ID request. A small hand-written one, so that the fast path (which
/// completes on the first poll) inlines into the caller and its result stays in registers; only
/// a request that has to wait allocates its slow-path future.
pub(crate) struct NextId<'a, S> {
    source: S,
    slow: Option<SlowFuture<'a>>,
}

impl<'a, S: Source<'a>> NextId<'a, S> {
    pub(crate) fn new(source: S) -> Self {
        NextId { source, slow: None }
    }
}

impl<'a, S: Source<'a>> Future for NextId<'a, S> {
    type Output = Result<i64>;

    #[inline(always)]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<i64>> {
        let this = &mut *self;
        if let Some(slow) = &mut this.slow {
            return slow.as_mut().poll(cx);
        }
        let id = this.source.fast();
        if id >= 0 {
            return Poll::Ready(Ok(id));
        }
        this.slow.insert(this.source.slow()).as_mut().poll(cx)
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
    pub(crate) fn new(inner: Arc<Inner>, entry: Arc<TagEntry>) -> Self {
        TagHandle { inner, entry }
    }

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
