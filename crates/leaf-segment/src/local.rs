//! `LocalTagHandle`: one thread's (or one task's) share of a tag, taken from the tag's segment
//! a chunk at a time, so that threads sharing a tag meet on its cursor once a chunk instead of
//! once an ID.

use std::fmt;

use leaf_core::{Error, Result, Tag};

use crate::TagHandle;

/// The largest chunk: a chunk is one atomic step on the tag's cursor, and a step never takes
/// more than what is left of the current segment anyway.
pub const MAX_CHUNK: u64 = 1 << 20;

impl TagHandle {
    /// A handle of this tag for one thread (or task) alone: it takes `chunk` IDs at a time
    /// from the tag's current segment with one atomic step, and hands them out from its own
    /// range with no atomic operation at all. For in-process users on many cores, who would
    /// otherwise meet on the tag's cursor at every ID.
    ///
    /// What it changes: a local handle's IDs ascend, but two local handles interleave (one
    /// may hand out an ID below another's last one, by up to a chunk); the IDs left in a chunk
    /// when the handle is dropped are never issued (a gap, as a restart leaves); and the tag's
    /// issued count ([`TagSnapshot`](crate::TagSnapshot)) counts a chunk when it is taken.
    /// Where every ID of one process must ascend in the order they are taken, use
    /// [`next_id`](Self::next_id) itself.
    ///
    /// `InvalidInput` for a chunk of 0 or above [`MAX_CHUNK`].
    pub fn local(&self, chunk: u64) -> Result<LocalTagHandle> {
        if !(1..=MAX_CHUNK).contains(&chunk) {
            return Err(Error::InvalidInput(format!(
                "a local handle's chunk must be 1..={MAX_CHUNK}, not {chunk}"
            )));
        }
        Ok(LocalTagHandle {
            handle: self.clone(),
            chunk,
            next: 0,
            end: 0,
        })
    }
}

/// One thread's share of a tag, from [`TagHandle::local`]: see there for what it changes.
/// `Send` but not shared: [`next_id`](Self::next_id) takes `&mut self`.
pub struct LocalTagHandle {
    handle: TagHandle,
    chunk: u64,
    /// The range `next..end` taken and not handed out yet.
    next: i64,
    end: i64,
}

impl LocalTagHandle {
    /// The tag.
    pub fn tag(&self) -> &Tag {
        self.handle.tag()
    }

    /// The next ID of this handle's range, taking another chunk when it is spent (the errors of
    /// [`SegmentAllocator::next_id`](crate::SegmentAllocator::next_id) then). Completes on
    /// its first poll unless a chunk has to wait for a segment.
    #[inline]
    pub async fn next_id(&mut self) -> Result<i64> {
        if self.next < self.end {
            let id = self.next;
            self.next += 1;
            return Ok(id);
        }
        self.refill().await
    }

    /// Takes the next chunk and hands out its first ID.
    #[cold]
    async fn refill(&mut self) -> Result<i64> {
        let (start, count) = self.handle.take(self.chunk).await?;
        self.next = start + 1;
        self.end = start + count as i64;
        Ok(start)
    }

    /// How many IDs of the current chunk are left.
    pub fn remaining(&self) -> u64 {
        (self.end - self.next) as u64
    }
}

impl fmt::Debug for LocalTagHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalTagHandle")
            .field("tag", self.tag())
            .field("chunk", &self.chunk)
            .field("remaining", &self.remaining())
            .finish()
    }
}
