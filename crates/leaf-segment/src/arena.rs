//! Every tag entry an allocator ever created, at a fixed index: the hot path reaches the entry
//! of the thread's last tag by index, with plain loads and no reference counting.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use crate::entry::TagEntry;

/// The first `FIRST` slots live inline, one pointer hop from the allocator (the hot path is a
/// chain of dependent loads ending in a locked instruction, so every hop shows); chunk `k` of
/// the rest holds `FIRST << k` slots, allocated when first needed and never moved.
const FIRST: usize = 64;
/// Room for `FIRST * (2^(CHUNKS + 1) - 1)` entries, far beyond any tag count.
const CHUNKS: usize = 25;

type Slot = OnceLock<Arc<TagEntry>>;

/// Append-only. Entries of dropped tags stay (marked removed) until the allocator is dropped:
/// a few hundred bytes per tag ever cached.
#[derive(Debug)]
pub(crate) struct Arena {
    first: [Slot; FIRST],
    /// Chunk `k` (from 1) at `rest[k - 1]`.
    rest: [OnceLock<Box<[Slot]>>; CHUNKS],
    len: AtomicUsize,
}

impl Default for Arena {
    fn default() -> Self {
        Arena {
            first: std::array::from_fn(|_| OnceLock::new()),
            rest: Default::default(),
            len: AtomicUsize::new(0),
        }
    }
}

/// The chunk and the slot in it of index `i` (chunk 0 is `first`).
#[inline(always)]
pub(crate) fn locate(i: usize) -> (usize, usize) {
    let n = i / FIRST + 1;
    let k = (usize::BITS - 1 - n.leading_zeros()) as usize;
    (k, i - FIRST * ((1 << k) - 1))
}

impl Arena {
    /// The entry at [`locate`]`(index)`.
    #[inline(always)]
    pub(crate) fn get(&self, (chunk, slot): (usize, usize)) -> Option<&Arc<TagEntry>> {
        let slot = if chunk == 0 {
            self.first.get(slot)?
        } else {
            self.rest.get(chunk - 1)?.get()?.get(slot)?
        };
        slot.get()
    }

    /// Adds the entry `make` builds for its index. Callers serialise pushes (the allocator's map
    /// writer lock); `None` only past the arena's (unreachable) capacity.
    pub(crate) fn push(&self, make: impl FnOnce(usize) -> TagEntry) -> Option<Arc<TagEntry>> {
        let i = self.len.load(Ordering::Relaxed);
        let (k, j) = locate(i);
        let slot = if k == 0 {
            self.first.get(j)?
        } else {
            self.rest
                .get(k - 1)?
                .get_or_init(|| (0..FIRST << k).map(|_| OnceLock::new()).collect())
                .get(j)?
        };
        let entry = Arc::new(make(i));
        slot.set(entry.clone()).ok()?;
        self.len.store(i + 1, Ordering::Relaxed);
        Some(entry)
    }
}

#[cfg(test)]
mod tests {
    use leaf_core::Tag;

    use super::*;

    #[test]
    fn chunks_tile_the_indices() {
        let check = |i: usize, expect: (usize, usize)| assert_eq!(locate(i), expect, "{i}");
        check(0, (0, 0));
        check(63, (0, 63));
        check(64, (1, 0));
        check(191, (1, 127));
        check(192, (2, 0));
        check(447, (2, 255));
        check(448, (3, 0));
        let mut next = 0;
        for k in 0..6 {
            for j in 0..FIRST << k {
                assert_eq!(locate(next), (k, j));
                next += 1;
            }
        }
    }

    #[test]
    fn entries_keep_their_index() {
        let a = Arena::default();
        for n in 0..300 {
            let e = a
                .push(|i| TagEntry::new(Tag::new(format!("t{n}")).unwrap(), i))
                .unwrap();
            assert_eq!(e.index, n);
        }
        assert_eq!(a.get(locate(0)).unwrap().tag.as_str(), "t0");
        assert_eq!(a.get(locate(99)).unwrap().tag.as_str(), "t99");
        assert_eq!(a.get(locate(299)).unwrap().tag.as_str(), "t299");
        assert!(a.get(locate(300)).is_none());
    }
}
