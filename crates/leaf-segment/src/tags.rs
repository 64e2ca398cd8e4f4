//! The tag map, and each thread's cached view of it (the hot path's only lookup).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::Arc;

use leaf_core::Tag;

use crate::arena;
use crate::entry::TagEntry;

type Hasher = foldhash::fast::RandomState;

/// The cached tags. Immutable once published; a change builds a new map.
#[derive(Clone, Default)]
pub(crate) struct TagMap {
    entries: HashMap<Tag, Arc<TagEntry>, Hasher>,
}

impl TagMap {
    pub(crate) fn with_capacity(n: usize) -> Self {
        TagMap {
            entries: HashMap::with_capacity_and_hasher(n, Hasher::default()),
        }
    }

    pub(crate) fn get(&self, tag: &str) -> Option<&Arc<TagEntry>> {
        self.entries.get(tag)
    }

    pub(crate) fn contains(&self, tag: &str) -> bool {
        self.entries.contains_key(tag)
    }

    /// Adds `entry`; a tag already present keeps its entry.
    pub(crate) fn insert(&mut self, entry: Arc<TagEntry>) {
        self.entries.entry(entry.tag.clone()).or_insert(entry);
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn entries(&self) -> impl Iterator<Item = &Arc<TagEntry>> {
        self.entries.values()
    }
}

thread_local! {
    /// The tag this thread asked for last, and where its entry is in the allocator's arena.
    /// Only `Copy` data with a constant initialiser: reading it is a few plain loads, with no
    /// borrow flag to write and no destructor state to check, so the whole request inlines into
    /// its caller (measured: a `RefCell` holding an `Arc` here kept `LocalKey::try_with` out of
    /// line and cost about half of the request).
    static RECENT: Cell<Recent> = const { Cell::new(Recent::NONE) };

    /// Each thread's copy of the latest map of the allocator it looked a tag up in last, for
    /// requests naming another tag than the previous one. Reading the map through `ArcSwap` would
    /// cost two locked instructions per lookup (a hazard slot taken and released); a thread-local
    /// `Arc` checked against a version number does not. The copy (and the entries it holds)
    /// lives until the thread looks up a tag again.
    static MAP: RefCell<LocalMap> = const {
        RefCell::new(LocalMap { owner: 0, version: 0, map: None })
    };
}

/// The thread's last tag: its allocator, its length and, for tags of up to 16 bytes, its bytes
/// as two words; where its entry is in the arena.
#[derive(Clone, Copy)]
struct Recent {
    owner: u64,
    len: usize,
    key: [u64; 2],
    at: (usize, usize),
}

impl Recent {
    /// Allocator ids start at 1.
    const NONE: Recent = Recent {
        owner: 0,
        len: 0,
        key: [0; 2],
        at: (0, 0),
    };
}

struct LocalMap {
    owner: u64,
    version: u64,
    map: Option<Arc<TagMap>>,
}

/// Whether the thread's last tag is `tag` of allocator `owner`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Recently {
    /// Yes, its entry is here in the arena.
    Is((usize, usize)),
    /// Possibly, here: a tag longer than 16 bytes, compare it with the entry's.
    Compare((usize, usize)),
    /// No.
    Not,
}

/// Where the arena holds the entry of `tag` if it is the last tag this thread asked allocator `owner` for.
///
/// The map's version is not checked here: the entry stays where it is even if a refresh dropped
/// its tag; the caller checks the entry's `removed` flag, and the slow path then forgets it
/// ([`forget`]).
#[inline(always)]
pub(crate) fn recently(owner: u64, tag: &str) -> Recently {
    let r = RECENT.with(Cell::get);
    let b = tag.as_bytes();
    let n = b.len();
    if r.owner != owner || r.len != n {
        return Recently::Not;
    }
    // The common lengths inline; the rest in a call, to keep the hot path small.
    let same = if (8..=KEY_BYTES).contains(&n) {
        r.key == [word8(b, 0), word8(b, n - 8)]
    } else if n > KEY_BYTES {
        return Recently::Compare(r.at);
    } else {
        r.key == short_key(b)
    };
    if same {
        Recently::Is(r.at)
    } else {
        Recently::Not
    }
}

/// Remembers `tag`, whose entry has arena index `index`, as the thread's last tag of allocator
/// `owner`.
pub(crate) fn remember(owner: u64, tag: &str, index: usize) {
    let b = tag.as_bytes();
    RECENT.with(|r| {
        r.set(Recent {
            owner,
            len: b.len(),
            key: if b.len() <= KEY_BYTES { key(b) } else { [0; 2] },
            at: arena::locate(index),
        })
    });
}

/// Forgets the thread's last tag of allocator `owner`.
pub(crate) fn forget(owner: u64) {
    RECENT.with(|r| {
        if r.get().owner == owner {
            r.set(Recent::NONE);
        }
    });
}

/// The arena index of `tag`'s entry in allocator `owner`'s latest map, reloaded with `load` when
/// `version` says this thread's copy is older. `None` when the tag is not cached.
pub(crate) fn lookup(
    owner: u64,
    version: u64,
    load: impl FnOnce() -> Arc<TagMap>,
    tag: &str,
) -> Option<usize> {
    MAP.try_with(|cell| {
        let mut local = cell.try_borrow_mut().ok()?;
        if local.owner != owner || local.version != version || local.map.is_none() {
            local.map = Some(load());
            local.owner = owner;
            local.version = version;
        }
        local.map.as_ref()?.get(tag).map(|e| e.index)
    })
    .ok()
    .flatten()
}

/// Tags up to this long are compared as two words.
const KEY_BYTES: usize = 16;

/// The bytes of a string of at most 16 bytes as two words; with the length, it identifies the
/// string exactly (the windows overlap to cover every byte).
#[inline(always)]
fn key(b: &[u8]) -> [u64; 2] {
    let n = b.len();
    if n >= 8 {
        [word8(b, 0), word8(b, n - 8)]
    } else if n >= 4 {
        [word4(b, 0), word4(b, n - 4)]
    } else if n > 0 {
        let at = |i: usize| b.get(i).copied().map_or(0, u64::from);
        [at(0) | at(n / 2) << 8 | at(n - 1) << 16, 0]
    } else {
        [0, 0]
    }
}

/// [`key`] for strings under 8 bytes, out of line.
#[inline(never)]
fn short_key(b: &[u8]) -> [u64; 2] {
    key(b)
}

#[inline(always)]
fn word8(s: &[u8], at: usize) -> u64 {
    s.get(at..at + 8)
        .and_then(|w| <[u8; 8]>::try_from(w).ok())
        .map_or(0, u64::from_ne_bytes)
}

#[inline(always)]
fn word4(s: &[u8], at: usize) -> u64 {
    s.get(at..at + 4)
        .and_then(|w| <[u8; 4]>::try_from(w).ok())
        .map_or(0, |w| u64::from(u32::from_ne_bytes(w)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_identify_short_strings() {
        let words = [
            "",
            "a",
            "b",
            "ab",
            "ba",
            "abc",
            "acb",
            "abcd",
            "abce",
            "abcdefg",
            "abcdefh",
            "bbcdefg",
            "abcdefgh",
            "abcdefgi",
            "bench-tag",
            "bench-tab",
            "cench-tag",
            "0123456789abcdef",
            "0123456789abcdeF",
            "0123456789a_cdef",
        ];
        for a in words {
            for b in words {
                let same = a.len() == b.len() && key(a.as_bytes()) == key(b.as_bytes());
                assert_eq!(same, a == b, "{a:?} {b:?}");
            }
        }
    }

    fn entry(tag: &str, index: usize) -> Arc<TagEntry> {
        Arc::new(TagEntry::new(Tag::new(tag).unwrap(), index))
    }

    #[test]
    fn map_keeps_the_first_entry_of_a_tag() {
        let mut m = TagMap::with_capacity(2);
        m.insert(entry("a", 0));
        m.insert(entry("b", 1));
        m.insert(entry("a", 2));
        assert_eq!(m.len(), 2);
        assert_eq!(m.get("a").unwrap().index, 0);
        assert!(m.contains("b") && !m.contains("c"));
    }

    #[test]
    fn the_last_tag_is_recognised() {
        let owner = u64::MAX - 1;
        let long = "y".repeat(30);
        assert_eq!(recently(owner, "bench-tag"), Recently::Not);
        for (tag, index) in [("bench-tag", 4), ("ab", 5), ("order", 6)] {
            remember(owner, tag, index);
            assert_eq!(
                recently(owner, tag),
                Recently::Is(arena::locate(index)),
                "{tag}"
            );
            assert_eq!(recently(owner - 1, tag), Recently::Not, "another allocator");
        }
        assert_eq!(recently(owner, "ordex"), Recently::Not);
        assert_eq!(recently(owner, "orde"), Recently::Not);
        remember(owner, &long, 7);
        let at = arena::locate(7);
        assert_eq!(recently(owner, &long), Recently::Compare(at));
        forget(owner - 1);
        assert_eq!(
            recently(owner, &long),
            Recently::Compare(at),
            "not that allocator's"
        );
        forget(owner);
        assert_eq!(recently(owner, &long), Recently::Not);
    }

    #[test]
    fn the_thread_map_follows_the_version() {
        let map = |tag: &str| {
            let mut m = TagMap::default();
            m.insert(entry(tag, 0));
            Arc::new(m)
        };
        let (one, two) = (map("a"), map("b"));
        let owner = u64::MAX - 2;
        let found = |version, m: &Arc<TagMap>, tag| lookup(owner, version, || m.clone(), tag);
        assert_eq!(found(1, &one, "a"), Some(0));
        assert_eq!(found(1, &two, "b"), None, "same version: the cached map");
        assert_eq!(found(2, &two, "b"), Some(0), "new version: reloaded");
        assert_eq!(found(2, &one, "a"), None);
    }
}
