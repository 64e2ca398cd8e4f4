//! The future of a single-ID request, which both the allocator's by-name `next_id` and a
//! `TagHandle` return.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use leaf_core::Result;

/// `Source::fast`'s answer when the request needs the slow path (IDs are never negative).
pub(crate) const SLOW: i64 = -1;

pub(crate) type SlowFuture<'a> = Pin<Box<dyn Future<Output = Result<i64>> + Send + 'a>>;

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
