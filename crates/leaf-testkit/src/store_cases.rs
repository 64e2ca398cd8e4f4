//! The segment-store conformance cases. Each takes a [`StoreFixture`] and panics, with a message
//! saying what broke, if the store does not behave as `leaf_core::SegmentStore` promises.
//!
//! Every case works under its own random tag prefix, so cases may share a database.

use std::ops::Range;
use std::sync::Arc;

use leaf_core::{Error, NewTag, SegmentStore, Tag, TagRecord, TagUpdate};

use crate::StoreFixture;

/// A fresh tag prefix: the namespace of one case.
pub fn namespace() -> String {
    format!("lt{:012x}", fastrand::u64(..) >> 16)
}

fn tag(ns: &str, name: &str) -> Tag {
    Tag::new(format!("{ns}-{name}")).expect("test tags are valid")
}

async fn create(store: &dyn SegmentStore, tag: &Tag, max_id: i64, step: i64) -> TagRecord {
    let new = NewTag {
        max_id,
        step,
        ..NewTag::new(tag.clone())
    };
    store
        .create(&new)
        .await
        .unwrap_or_else(|e| panic!("create {tag}: {e}"))
}

/// Asserts that `ranges` are pairwise disjoint and together exactly `start..end`.
pub fn assert_disjoint_and_contiguous(ranges: &[Range<i64>], start: i64, end: i64) {
    let mut sorted = ranges.to_vec();
    sorted.sort_by_key(|r| r.start);
    let mut next = start;
    for r in &sorted {
        assert!(r.start < r.end, "empty range {r:?}");
        assert!(
            r.start >= next,
            "range {r:?} overlaps the one before it (ends at {next})"
        );
        assert_eq!(r.start, next, "a gap before {r:?}");
        next = r.end;
    }
    assert_eq!(next, end, "the ranges do not reach {end}");
}

/// Several tasks on two handles allocate one tag at once: every range has the step, no two
/// ranges overlap, and together they cover the IDs from the first `max_id` without a gap.
pub async fn disjoint_ranges_under_concurrency(fixture: &dyn StoreFixture) {
    const TASKS: usize = 8;
    const EACH: usize = 20;
    const STEP: i64 = 10;
    let (a, b) = (fixture.store().await, fixture.another_handle().await);
    let t = tag(&namespace(), "concurrent");
    create(&*a, &t, 1, STEP).await;
    let mut tasks = Vec::new();
    for i in 0..TASKS {
        let store: Arc<dyn SegmentStore> = if i % 2 == 0 { a.clone() } else { b.clone() };
        let t = t.clone();
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::with_capacity(EACH);
            for _ in 0..EACH {
                let alloc = store.allocate(&t, None).await.expect("allocate");
                assert_eq!(alloc.used_step, STEP);
                assert_eq!(alloc.step, STEP);
                assert_eq!(alloc.tag, t);
                got.push(alloc.range());
            }
            got
        }));
    }
    let mut ranges = Vec::new();
    for task in tasks {
        ranges.extend(task.await.expect("allocating task"));
    }
    let total = (TASKS * EACH) as i64;
    assert_eq!(ranges.len() as i64, total);
    assert_disjoint_and_contiguous(&ranges, 1, 1 + total * STEP);
    let row = a.get(&t).await.expect("get").expect("row");
    assert_eq!(row.max_id, 1 + total * STEP);
}

/// `allocate(tag, Some(n))` adds `n` (Leaf's dynamic step) and leaves the stored step alone.
pub async fn custom_step(fixture: &dyn StoreFixture) {
    let store = fixture.store().await;
    let t = tag(&namespace(), "custom");
    create(&*store, &t, 1, 100).await;
    let first = store.allocate(&t, None).await.expect("allocate");
    assert_eq!(
        (first.range(), first.step, first.used_step),
        (1..101, 100, 100)
    );
    let custom = store.allocate(&t, Some(500)).await.expect("allocate 500");
    assert_eq!(custom.range(), 101..601);
    assert_eq!((custom.step, custom.used_step), (100, 500));
    let row = store.get(&t).await.expect("get").expect("row");
    assert_eq!((row.max_id, row.step), (601, 100));
    let after = store.allocate(&t, None).await.expect("allocate");
    assert_eq!(after.range(), 601..701);
}

/// An unknown tag is `NotFound` for `allocate` and `update`, and `None` for `get`.
pub async fn unknown_tag_is_not_found(fixture: &dyn StoreFixture) {
    let store = fixture.store().await;
    let t = tag(&namespace(), "missing");
    let e = store
        .allocate(&t, None)
        .await
        .expect_err("allocate unknown");
    assert!(matches!(e, Error::NotFound(_)), "allocate: {e}");
    let e = store
        .allocate(&t, Some(10))
        .await
        .expect_err("allocate unknown");
    assert!(matches!(e, Error::NotFound(_)), "allocate with step: {e}");
    assert_eq!(store.get(&t).await.expect("get"), None);
    let update = TagUpdate {
        step: Some(5),
        description: None,
    };
    let e = store.update(&t, &update).await.expect_err("update unknown");
    assert!(matches!(e, Error::NotFound(_)), "update: {e}");
    assert!(!store.tags().await.expect("tags").contains(&t));
}

/// `list` and `tags` are ordered by tag and hold every created tag with its row.
pub async fn listing_is_ordered_and_complete(fixture: &dyn StoreFixture) {
    let store = fixture.store().await;
    let ns = namespace();
    let names = ["c", "a", "b2", "b1"];
    for (i, n) in names.iter().enumerate() {
        create(&*store, &tag(&ns, n), 1 + i as i64, 10 + i as i64).await;
    }
    let list = store.list().await.expect("list");
    assert!(
        list.windows(2).all(|w| w[0].tag < w[1].tag),
        "list is not ordered by tag"
    );
    let mine: Vec<&TagRecord> = list
        .iter()
        .filter(|r| r.tag.as_str().starts_with(&ns))
        .collect();
    let order: Vec<&str> = mine
        .iter()
        .map(|r| &r.tag.as_str()[ns.len() + 1..])
        .collect();
    assert_eq!(order, ["a", "b1", "b2", "c"]);
    for r in &mine {
        let i = names
            .iter()
            .position(|n| r.tag == tag(&ns, n))
            .expect("a created name") as i64;
        assert_eq!((r.max_id, r.step), (1 + i, 10 + i), "row of {}", r.tag);
    }
    let tags = store.tags().await.expect("tags");
    assert!(tags.windows(2).all(|w| w[0] < w[1]), "tags are not ordered");
    for n in names {
        assert!(tags.contains(&tag(&ns, n)), "tags lacks {n}");
    }
}

/// `create` stores the row as given; creating it again is `AlreadyExists` and changes nothing.
pub async fn create_and_duplicate_create(fixture: &dyn StoreFixture) {
    let store = fixture.store().await;
    let t = tag(&namespace(), "created");
    let new = NewTag {
        tag: t.clone(),
        max_id: 100,
        step: 7,
        description: Some("conformance".into()),
    };
    let made = store.create(&new).await.expect("create");
    assert_eq!(
        (
            &made.tag,
            made.max_id,
            made.step,
            made.description.as_deref()
        ),
        (&t, 100, 7, Some("conformance"))
    );
    let got = store.get(&t).await.expect("get").expect("row");
    assert_eq!(got, made);
    let again = NewTag {
        max_id: 5,
        step: 9,
        ..new.clone()
    };
    let e = store.create(&again).await.expect_err("duplicate create");
    assert!(matches!(e, Error::AlreadyExists(_)), "{e}");
    let got = store.get(&t).await.expect("get").expect("row");
    assert_eq!(
        (got.max_id, got.step),
        (100, 7),
        "a refused create changed the row"
    );
    let alloc = store.allocate(&t, None).await.expect("allocate");
    assert_eq!(alloc.range(), 100..107);
    let plain = store
        .create(&NewTag::new(tag(&namespace(), "defaults")))
        .await
        .expect("create with defaults");
    assert_eq!((plain.max_id, plain.step), (1, leaf_core::DEFAULT_STEP));
    assert_eq!(plain.description, None);
}

/// `update` changes the step (the next allocation uses it) and the description independently;
/// `NotFound` for an unknown tag.
pub async fn step_update(fixture: &dyn StoreFixture) {
    let store = fixture.store().await;
    let ns = namespace();
    let t = tag(&ns, "updated");
    create(&*store, &t, 1, 10).await;
    assert_eq!(
        store.allocate(&t, None).await.expect("allocate").range(),
        1..11
    );
    let step = TagUpdate {
        step: Some(50),
        description: None,
    };
    let row = store.update(&t, &step).await.expect("update step");
    assert_eq!((row.step, row.max_id), (50, 11));
    let alloc = store.allocate(&t, None).await.expect("allocate");
    assert_eq!(
        (alloc.range(), alloc.step, alloc.used_step),
        (11..61, 50, 50)
    );
    let text = TagUpdate {
        step: None,
        description: Some("new text".into()),
    };
    let row = store.update(&t, &text).await.expect("update description");
    assert_eq!(
        (row.step, row.description.as_deref()),
        (50, Some("new text"))
    );
    assert_eq!(store.get(&t).await.expect("get").expect("row"), row);
    let e = store
        .update(&tag(&ns, "unknown"), &step)
        .await
        .expect_err("update unknown");
    assert!(matches!(e, Error::NotFound(_)), "{e}");
}

/// A step of 0 (or a negative `max_id`) is `InvalidInput` everywhere and changes nothing.
pub async fn invalid_input_is_refused(fixture: &dyn StoreFixture) {
    let store = fixture.store().await;
    let ns = namespace();
    let bad = tag(&ns, "bad");
    for new in [
        NewTag {
            step: 0,
            ..NewTag::new(bad.clone())
        },
        NewTag {
            step: -3,
            ..NewTag::new(bad.clone())
        },
        NewTag {
            max_id: -1,
            ..NewTag::new(bad.clone())
        },
    ] {
        let e = store.create(&new).await.expect_err("invalid create");
        assert!(matches!(e, Error::InvalidInput(_)), "create {new:?}: {e}");
    }
    assert_eq!(
        store.get(&bad).await.expect("get"),
        None,
        "an invalid tag was created"
    );

    let t = tag(&ns, "good");
    create(&*store, &t, 1, 10).await;
    let zero = TagUpdate {
        step: Some(0),
        description: None,
    };
    let e = store.update(&t, &zero).await.expect_err("step 0 update");
    assert!(matches!(e, Error::InvalidInput(_)), "update: {e}");
    for step in [0, -1] {
        let e = store.allocate(&t, Some(step)).await.expect_err("bad step");
        assert!(matches!(e, Error::InvalidInput(_)), "allocate {step}: {e}");
    }
    let row = store.get(&t).await.expect("get").expect("row");
    assert_eq!(
        (row.max_id, row.step),
        (1, 10),
        "refused input changed the row"
    );
}

/// Near `i64::MAX` a step (stored or dynamic) is cut to what is left, so every ID up to the end
/// is handed out; then the tag is `Exhausted` and its row stays at `i64::MAX`.
pub async fn the_last_ids_are_handed_out_then_exhausted(fixture: &dyn StoreFixture) {
    let store = fixture.store().await;
    let t = tag(&namespace(), "overflow");
    let start = i64::MAX - 25;
    create(&*store, &t, start, 10).await;
    let a = store
        .allocate(&t, None)
        .await
        .expect("a stored step that fits");
    assert_eq!(
        (a.range(), a.used_step, a.step),
        (start..start + 10, 10, 10)
    );
    // A dynamic step larger than what is left gets the rest.
    let b = store
        .allocate(&t, Some(1000))
        .await
        .expect("the rest, for a dynamic step");
    assert_eq!(
        (b.range(), b.used_step, b.step),
        (start + 10..i64::MAX, 15, 10)
    );
    for step in [None, Some(1)] {
        let e = store
            .allocate(&t, step)
            .await
            .expect_err("an allocation past the end");
        assert!(matches!(e, Error::Exhausted(_)), "{e}");
    }
    assert_eq!(
        store.get(&t).await.expect("get").expect("row").max_id,
        i64::MAX
    );
    // The stored step is cut the same way.
    let u = tag(&namespace(), "overflow-stored");
    create(&*store, &u, i64::MAX - 3, 10).await;
    let c = store.allocate(&u, None).await.expect("the last three");
    assert_eq!((c.range(), c.used_step), (i64::MAX - 3..i64::MAX, 3));
}

/// (`durable`) Rows written through one handle are there, unchanged, for a new handle opened
/// after the first is gone, and allocation carries on past them.
pub async fn durable_across_a_new_handle(fixture: &dyn StoreFixture) {
    assert!(
        fixture.store().await.capabilities().durable,
        "the store runs the durable cases but does not claim to be durable"
    );
    let ns = namespace();
    let t = tag(&ns, "durable");
    {
        let store = fixture.another_handle().await;
        create(&*store, &t, 1, 10).await;
        store.allocate(&t, None).await.expect("allocate");
        store.allocate(&t, Some(30)).await.expect("allocate");
    }
    let store = fixture.another_handle().await;
    let row = store.get(&t).await.expect("get").expect("the row survived");
    assert_eq!((row.max_id, row.step), (41, 10));
    assert_eq!(
        store.allocate(&t, None).await.expect("allocate").range(),
        41..51
    );
}

/// (`multi_process`) Two independent handles see each other's writes at once: a tag created
/// on one allocates on the other, and a step changed on one is used by the other.
pub async fn handles_share_one_namespace(fixture: &dyn StoreFixture) {
    let (a, b) = (fixture.store().await, fixture.another_handle().await);
    assert!(
        a.capabilities().multi_process,
        "the store runs the multi_process cases but does not claim multi_process"
    );
    let t = tag(&namespace(), "shared");
    create(&*a, &t, 1, 10).await;
    assert_eq!(
        b.allocate(&t, None).await.expect("b allocates").range(),
        1..11
    );
    assert_eq!(
        a.allocate(&t, None).await.expect("a allocates").range(),
        11..21
    );
    let step = TagUpdate {
        step: Some(100),
        description: None,
    };
    b.update(&t, &step).await.expect("b updates");
    assert_eq!(
        a.allocate(&t, None).await.expect("a allocates").range(),
        21..121
    );
    assert!(b.tags().await.expect("tags").contains(&t));
    let e = b
        .create(&NewTag::new(t.clone()))
        .await
        .expect_err("duplicate");
    assert!(matches!(e, Error::AlreadyExists(_)), "{e}");
}

/// The store's `capabilities()` are exactly those the test declares (`declared` holds each
/// capability name with its value), so that no capability's cases are skipped by omission.
pub async fn capabilities_are_as_declared(fixture: &dyn StoreFixture, declared: &[(&str, bool)]) {
    let caps = fixture.store().await.capabilities();
    let actual = [
        ("durable", caps.durable),
        ("multi_process", caps.multi_process),
    ];
    crate::macros::check_declared(&actual, declared);
}
