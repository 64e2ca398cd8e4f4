//! The business-tag conformance cases (feature `business`): counters that restart each period
//! in a time zone and formatted IDs, driven through `leaf_business::BusinessTags` over the store
//! under test, with test clocks. Each case works under its own random tag prefix.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use leaf_business::{BusinessTags, Properties, check_plain, definition_tag};
use leaf_core::{Clock, Error, ManualClock, NewTag, SegmentStore, Tag};
use leaf_format::Reset;
use leaf_segment::SegmentConfig;

use crate::StoreFixture;
use crate::store_cases::namespace;

/// 2026-11-27 00:00:00 in Asia/Shanghai (16:00 UTC the day before).
const SHANGHAI_MIDNIGHT_MS: u64 = 1_795_708_800_000;
/// 2026-12-01 00:00:00 UTC.
const DECEMBER_MS: u64 = 1_796_083_200_000;
/// 2027-01-01 00:00:00 UTC.
const YEAR_2027_MS: u64 = 1_798_761_600_000;
/// 2026-03-08 01:59 in America/New_York (EST), a minute before clocks jump to 03:00 (EDT).
const NEW_YORK_BEFORE_DST_MS: u64 = 1_772_953_140_000;
/// 2026-03-09 00:00 in America/New_York (EDT).
const NEW_YORK_DAY_AFTER_DST_MS: u64 = 1_773_028_800_000;
/// 2026-11-01 00:00 in America/New_York (EDT); clocks fall back at 02:00, the day has 25 h.
const NEW_YORK_FALL_BACK_DAY_MS: u64 = 1_793_505_600_000;
/// 2026-11-02 00:00 in America/New_York (EST).
const NEW_YORK_DAY_AFTER_FALL_BACK_MS: u64 = 1_793_595_600_000;

fn base(ns: &str, name: &str) -> Tag {
    Tag::new(format!("{ns}-{name}")).expect("test tags are valid")
}

/// A node on `store` and `clock`. These cases hold IDs unique across periods, not the latency a
/// store adds: a request waits up to 5 s for the next segment (the default 10 ms, a store round
/// trip on a loaded machine outlasted it and the request answered `Unavailable`, a server's
/// 503, which is right under load but not what is checked here).
fn node(store: Arc<dyn SegmentStore>, clock: &ManualClock) -> BusinessTags {
    BusinessTags::new(
        store,
        Arc::new(clock.clone()) as Arc<dyn Clock>,
        SegmentConfig {
            switch_wait: std::time::Duration::from_secs(5),
            ..SegmentConfig::default()
        },
    )
}

fn props(reset: Option<Reset>, zone: &str, first: i64, format: &str) -> Properties {
    Properties::new(reset, Some(zone), Some(first), Some(format))
        .unwrap_or_else(|e| panic!("properties {format:?}: {e}"))
}

/// Takes `n` IDs of `tag` on `tags`, as printed.
async fn take(tags: &BusinessTags, tag: &Tag, n: usize) -> Vec<String> {
    let def = tags
        .definition(tag.as_str())
        .await
        .unwrap_or_else(|e| panic!("definition of {tag}: {e}"))
        .unwrap_or_else(|| panic!("{tag} has no definition"));
    tags.next(&def, n)
        .await
        .unwrap_or_else(|e| panic!("{n} IDs of {tag}: {e}"))
        .ids
}

fn strs(ids: &[&str]) -> Vec<String> {
    ids.iter().map(|s| s.to_string()).collect()
}

/// A daily counter in Asia/Shanghai: numbers restart at midnight there (16:00 UTC), the next
/// day's row is preloaded before midnight, and a second handle (another node) reads the
/// definition from the store and shares each day's row without a duplicate.
pub async fn a_daily_counter_restarts_at_midnight_in_its_zone(fixture: &dyn StoreFixture) {
    let (a, b) = (fixture.store().await, fixture.another_handle().await);
    let clock = ManualClock::new(SHANGHAI_MIDNIGHT_MS - 10_000);
    let (one, two) = (node(Arc::clone(&a), &clock), node(Arc::clone(&b), &clock));
    let t = base(&namespace(), "order");
    let p = props(
        Some(Reset::Day),
        "Asia/Shanghai",
        1,
        "ORD{date:%Y%m%d}{seq:06}",
    );
    // Each node's first range of a day is a tenth of the row's step: 100 here.
    one.create(&t, 1000, p)
        .await
        .expect("create the business tag");

    let day1 = take(&one, &t, 3).await;
    assert_eq!(
        day1,
        strs(&[
            "ORD20261126000001",
            "ORD20261126000002",
            "ORD20261126000003"
        ])
    );
    // Another node of the same store: the same day's row, a range of its own.
    let other = take(&two, &t, 2).await;
    assert_eq!(other, strs(&["ORD20261126000101", "ORD20261126000102"]));

    // Ten seconds before midnight the next day's row is created ahead of its first request.
    let next_row = Tag::new(format!("{t}@20261127")).expect("row name");
    let mut waited = Duration::ZERO;
    while a.get(&next_row).await.expect("get").is_none() {
        assert!(
            waited < Duration::from_secs(10),
            "{next_row} was not preloaded before midnight"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
        waited += Duration::from_millis(20);
    }

    clock.set_ms(SHANGHAI_MIDNIGHT_MS);
    // Both nodes preloaded the day: which of them holds its first range is a race.
    let mut day2 = take(&one, &t, 2).await;
    day2.extend(take(&two, &t, 2).await);
    day2.sort();
    assert_eq!(
        day2,
        strs(&[
            "ORD20261127000001",
            "ORD20261127000002",
            "ORD20261127000101",
            "ORD20261127000102"
        ])
    );
    // The day before keeps its own counter: nothing after midnight is printed for it. The
    // base name is claimed by a row with no ID left, so that a plain tag cannot take it and a
    // node that knows no business tags gets "exhausted" for it, never a number.
    let rows: Vec<String> = a
        .list()
        .await
        .expect("list")
        .into_iter()
        .map(|r| r.tag.to_string())
        .filter(|name| name.starts_with(t.as_str()))
        .collect();
    assert_eq!(
        rows,
        strs(&[
            t.as_str(),
            &format!("{t}@"),
            &format!("{t}@20261126"),
            &format!("{t}@20261127")
        ])
    );
    let e = a.allocate(&t, None).await.expect_err("the claim has no ID");
    assert!(matches!(e, Error::Exhausted(_)), "{e}");
    let e = b
        .create(&NewTag::new(t.clone()))
        .await
        .expect_err("a plain tag of the name");
    assert!(matches!(e, Error::AlreadyExists(_)), "{e}");
}

/// Two nodes whose clocks straddle midnight take IDs of one tag at once, each in its own day's
/// row: no printed ID is issued twice, before, across and after the boundary.
pub async fn two_nodes_across_midnight_print_no_id_twice(fixture: &dyn StoreFixture) {
    let (a, b) = (fixture.store().await, fixture.another_handle().await);
    let (late, early) = (
        ManualClock::new(SHANGHAI_MIDNIGHT_MS - 100),
        ManualClock::new(SHANGHAI_MIDNIGHT_MS + 100),
    );
    let t = base(&namespace(), "straddle");
    // Two nodes on each side of midnight, each pair sharing its day's row.
    let nodes = [
        Arc::new(node(Arc::clone(&a), &late)),
        Arc::new(node(Arc::clone(&b), &late)),
        Arc::new(node(a, &early)),
        Arc::new(node(b, &early)),
    ];
    let one = Arc::clone(&nodes[0]);
    one.create(
        &t,
        10,
        props(Some(Reset::Day), "Asia/Shanghai", 1, "S{date:%Y%m%d}-{seq}"),
    )
    .await
    .expect("create");
    let mut tasks = Vec::new();
    for i in 0..8 {
        let node = Arc::clone(&nodes[i % 4]);
        let t = t.clone();
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            for _ in 0..15 {
                got.extend(take(&node, &t, 3).await);
            }
            got
        }));
    }
    let mut seen = HashSet::new();
    for task in tasks {
        for id in task.await.expect("taking task") {
            assert!(seen.insert(id.clone()), "{id} was issued twice");
        }
    }
    // The late node's clock reaches midnight too: its IDs join the same day's row.
    late.set_ms(SHANGHAI_MIDNIGHT_MS + 200);
    for id in take(&one, &t, 40).await {
        assert!(seen.insert(id.clone()), "{id} was issued twice");
    }
    assert_eq!(seen.len(), 8 * 15 * 3 + 40);
    let days: HashSet<&str> = seen.iter().map(|id| &id[1..9]).collect();
    assert_eq!(days, HashSet::from(["20261126", "20261127"]));
}

/// Monthly and yearly counters restart at their period's end (UTC here).
pub async fn month_and_year_ends_restart_their_counters(fixture: &dyn StoreFixture) {
    let store = fixture.store().await;
    let ns = namespace();
    let clock = ManualClock::new(DECEMBER_MS - 1);
    let tags = node(store, &clock);
    let (month, year) = (base(&ns, "month"), base(&ns, "year"));
    tags.create(
        &month,
        5,
        props(Some(Reset::Month), "UTC", 1, "M{date:%Y-%m}/{seq}"),
    )
    .await
    .expect("create the monthly tag");
    tags.create(
        &year,
        5,
        props(Some(Reset::Year), "UTC", 7, "Y{date:%Y}{seq:04}"),
    )
    .await
    .expect("create the yearly tag");
    assert_eq!(
        take(&tags, &month, 2).await,
        strs(&["M2026-11/1", "M2026-11/2"])
    );
    clock.set_ms(DECEMBER_MS);
    assert_eq!(take(&tags, &month, 1).await, strs(&["M2026-12/1"]));
    clock.set_ms(YEAR_2027_MS - 1);
    assert_eq!(take(&tags, &month, 1).await, strs(&["M2026-12/2"]));
    assert_eq!(
        take(&tags, &year, 2).await,
        strs(&["Y20260007", "Y20260008"])
    );
    clock.set_ms(YEAR_2027_MS);
    assert_eq!(take(&tags, &month, 1).await, strs(&["M2027-01/1"]));
    assert_eq!(take(&tags, &year, 1).await, strs(&["Y20270007"]));
}

/// Days in America/New_York across both daylight-saving changes: the 23-hour and the 25-hour
/// day are one period each, and the counter restarts at local midnight after them.
pub async fn daylight_saving_changes_keep_local_days(fixture: &dyn StoreFixture) {
    let store = fixture.store().await;
    let clock = ManualClock::new(NEW_YORK_BEFORE_DST_MS);
    let tags = node(store, &clock);
    let t = base(&namespace(), "ny");
    tags.create(
        &t,
        10,
        props(
            Some(Reset::Day),
            "America/New_York",
            1,
            "NY{date:%Y%m%d}{seq:03}",
        ),
    )
    .await
    .expect("create");
    assert_eq!(take(&tags, &t, 1).await, strs(&["NY20260308001"]));
    // Two minutes later it is 03:01 (the clocks jumped an hour): the same day.
    clock.set_ms(NEW_YORK_BEFORE_DST_MS + 120_000);
    assert_eq!(take(&tags, &t, 1).await, strs(&["NY20260308002"]));
    clock.set_ms(NEW_YORK_DAY_AFTER_DST_MS - 1);
    assert_eq!(take(&tags, &t, 1).await, strs(&["NY20260308003"]));
    clock.set_ms(NEW_YORK_DAY_AFTER_DST_MS);
    assert_eq!(take(&tags, &t, 1).await, strs(&["NY20260309001"]));
    // The day the clocks fall back lasts 25 hours, all of it one period.
    clock.set_ms(NEW_YORK_FALL_BACK_DAY_MS);
    assert_eq!(take(&tags, &t, 1).await, strs(&["NY20261101001"]));
    clock.set_ms(NEW_YORK_DAY_AFTER_FALL_BACK_MS - 1);
    assert_eq!(take(&tags, &t, 1).await, strs(&["NY20261101002"]));
    clock.set_ms(NEW_YORK_DAY_AFTER_FALL_BACK_MS);
    assert_eq!(take(&tags, &t, 1).await, strs(&["NY20261102001"]));
}

/// A value past its format's fixed width is an error (`Exhausted`), never a wider or cut ID;
/// the row's step is capped to a hundredth of what the width holds.
pub async fn a_value_past_the_width_is_an_error_and_steps_are_capped(fixture: &dyn StoreFixture) {
    let store = fixture.store().await;
    let clock = ManualClock::new(DECEMBER_MS);
    let tags = node(Arc::clone(&store), &clock);
    let ns = namespace();
    let narrow = base(&ns, "narrow");
    tags.create(&narrow, 1000, props(None, "UTC", 95, "T{seq:02}"))
        .await
        .expect("create");
    assert_eq!(
        take(&tags, &narrow, 5).await,
        strs(&["T95", "T96", "T97", "T98", "T99"])
    );
    let def = tags
        .definition(narrow.as_str())
        .await
        .expect("definition")
        .expect("a business tag");
    let e = tags
        .next(&def, 1)
        .await
        .expect_err("100 does not fit 2 digits");
    assert!(matches!(e, Error::Exhausted(_)), "{e}");
    let row = store
        .get(&Tag::new(format!("{narrow}@all")).expect("row"))
        .await
        .expect("get")
        .expect("the row of a tag that never restarts");
    assert_eq!(row.step, 1, "5 values at most: the step is capped at 1");

    let wide = base(&ns, "wide");
    tags.create(
        &wide,
        1000,
        props(Some(Reset::Day), "UTC", 1, "W{date:%Y%m%d}{seq:04}"),
    )
    .await
    .expect("create");
    take(&tags, &wide, 1).await;
    let row = store
        .get(&Tag::new(format!("{wide}@20261201")).expect("row"))
        .await
        .expect("get")
        .expect("the day's row");
    assert_eq!(row.step, 99, "9,999 values a day: at most 99 per load");
}

/// IDs in base 36 and base 62 decode back to their period and value.
pub async fn base36_and_base62_ids_round_trip(fixture: &dyn StoreFixture) {
    let store = fixture.store().await;
    let clock = ManualClock::new(SHANGHAI_MIDNIGHT_MS);
    let tags = node(store, &clock);
    let ns = namespace();
    for (name, format, first) in [
        ("b36", "Q{seq:base36:06}", 46_655),
        ("b62", "R{date:%Y%m%d}{seq:base62}", 3843),
    ] {
        let t = base(&ns, name);
        let reset = format.contains("date").then_some(Reset::Day);
        tags.create(&t, 10, props(reset, "Asia/Shanghai", first, format))
            .await
            .expect("create");
        let def = tags
            .definition(t.as_str())
            .await
            .expect("get")
            .expect("def");
        let issued = tags.next(&def, 3).await.expect("take");
        for (id, value) in issued.ids.iter().zip(&issued.values) {
            let (period, back) = def.decode(id).unwrap_or_else(|e| panic!("{id}: {e}"));
            assert_eq!(back, *value, "{id}");
            assert_eq!(period, issued.period, "{id}");
        }
        let expected = match name {
            "b36" => strs(&["Q000zzz", "Q001000", "Q001001"]),
            _ => strs(&["R20261127zz", "R20261127100", "R20261127101"]),
        };
        assert_eq!(issued.ids, expected);
    }
}

/// Names of the rows' shape are refused as plain tags; a business tag cannot take a plain
/// tag's name; the definition survives in the store for a new handle, as written.
pub async fn reserved_names_and_definitions(fixture: &dyn StoreFixture) {
    let store = fixture.store().await;
    let ns = namespace();
    for name in ["x@", "x@all", "x@2026", "x@202611", "x@20261126"] {
        let t = Tag::new(format!("{ns}-{name}")).expect("a valid tag");
        assert!(check_plain(&t).is_err(), "{t} is reserved");
    }
    for name in ["x@y", "mail@host", "x@123", "x@2026112"] {
        let t = Tag::new(format!("{ns}-{name}")).expect("a valid tag");
        assert!(check_plain(&t).is_ok(), "{t} is a plain name");
    }
    let clock = ManualClock::new(DECEMBER_MS);
    let tags = node(Arc::clone(&store), &clock);
    let plain = base(&ns, "plain");
    store
        .create(&NewTag::new(plain.clone()))
        .await
        .expect("create a plain tag");
    let e = tags
        .create(&plain, 10, props(None, "UTC", 1, "P{seq}"))
        .await
        .expect_err("a plain tag's name");
    assert!(matches!(e, Error::AlreadyExists(_)), "{e}");
    assert!(
        store
            .get(&definition_tag(&plain).expect("name"))
            .await
            .expect("get")
            .is_none(),
        "nothing was stored"
    );

    let t = base(&ns, "kept");
    let p = props(
        Some(Reset::Month),
        "Europe/Berlin",
        42,
        "K{date:%Y%m}{seq:05}",
    );
    tags.create(&t, 10, p.clone()).await.expect("create");
    let e = tags
        .create(&t, 10, p.clone())
        .await
        .expect_err("created twice");
    assert!(matches!(e, Error::AlreadyExists(_)), "{e}");
    let fresh = node(fixture.another_handle().await, &clock);
    let def = fresh
        .definition(t.as_str())
        .await
        .expect("read the definition")
        .expect("a business tag");
    assert_eq!(def.props(), &p);
    assert_eq!(def.step(), 10);
    assert!(
        fresh
            .definition(plain.as_str())
            .await
            .expect("get")
            .is_none(),
        "a plain tag has no definition"
    );
}

/// Issue 32: 60 nodes (leasing clients count as nodes) that each preload tomorrow's row of a
/// `{seq:06}` tag, created with the largest step, reserve at most a tenth of its values before
/// the day starts; a node that then uses the day gets ranges that grow with its use, never past
/// the row's capped step (1/100 of the width: 9,999).
pub async fn sixty_nodes_preloading_a_day_reserve_at_most_a_tenth_of_it(
    fixture: &dyn StoreFixture,
) {
    let store = fixture.store().await;
    // 20 s before midnight in Shanghai: within the preload window of the next day.
    let clock = ManualClock::new(SHANGHAI_MIDNIGHT_MS - 20_000);
    let t = base(&namespace(), "budget");
    let p = props(
        Some(Reset::Day),
        "Asia/Shanghai",
        1,
        "B{date:%Y%m%d}{seq:06}",
    );
    let nodes: Vec<BusinessTags> = (0..60).map(|_| node(Arc::clone(&store), &clock)).collect();
    nodes[0]
        .create(&t, 1_000_000, p)
        .await
        .expect("create the business tag");
    for n in &nodes {
        take(n, &t, 1).await;
    }
    let tomorrow = Tag::new(format!("{t}@20261127")).expect("row name");
    let loaded = |n: &BusinessTags| {
        n.allocator()
            .snapshot()
            .iter()
            .any(|s| s.tag == tomorrow && s.initialized)
    };
    let mut waited = Duration::ZERO;
    while !nodes.iter().all(loaded) {
        let done = nodes.iter().filter(|n| loaded(n)).count();
        assert!(
            waited < Duration::from_secs(30),
            "{done} of 60 nodes preloaded {tomorrow}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
        waited += Duration::from_millis(20);
    }
    let row = store.get(&tomorrow).await.expect("get").expect("the row");
    let reserved = row.max_id - 1;
    assert!(
        reserved <= 100_000,
        "60 nodes reserved {reserved} of the 1,000,000 values of {tomorrow} before it started"
    );

    // The day starts: one node's reservations grow as it uses it, up to the capped step.
    clock.set_ms(SHANGHAI_MIDNIGHT_MS);
    let mut issued = HashSet::new();
    for _ in 0..30 {
        for id in take(&nodes[0], &t, 1000).await {
            assert!(issued.insert(id.clone()), "{id} issued twice");
        }
    }
    let steps: Vec<i64> = nodes[0]
        .allocator()
        .snapshot()
        .iter()
        .filter(|s| s.tag == tomorrow)
        .map(|s| s.step)
        .collect();
    assert_eq!(steps, [9_999], "the capped step, reached by growing");
    let row = store.get(&tomorrow).await.expect("get").expect("the row");
    assert_eq!(row.step, 9_999, "the row's capped step");
}

/// A restore from an older copy, then `leaf-server store raise`'s plan and apply
/// ([`leaf_business::raise`]) over the store: a plain tag and a daily business tag hand out IDs,
/// the rows are copied, more IDs are handed out, the copy is written back
/// ([`RestoreFixture::restore`]) and raised; new nodes then hand out no ID handed out before,
/// the business tag's claim and definition are as they were, and its day row stays within the
/// format's width.
pub async fn a_raise_after_a_restore_from_an_older_copy_repeats_no_id(
    fixture: &dyn RestoreFixture,
) {
    use leaf_business::raise;

    let store = fixture.store().await;
    let ns = namespace();
    let plain = base(&ns, "plain");
    let mut new = NewTag::new(plain.clone());
    new.step = 100;
    store.create(&new).await.expect("create the plain tag");
    let clock = ManualClock::new(DECEMBER_MS + 3_600_000);
    let order = base(&ns, "order");
    let before = node(Arc::clone(&store), &clock);
    before
        .create(
            &order,
            1000,
            props(Some(Reset::Day), "UTC", 1, "O{date:%Y%m%d}{seq:06}"),
        )
        .await
        .expect("create the business tag");

    let mut plain_ids = HashSet::new();
    let mut order_ids: HashSet<String> = HashSet::new();
    plain_ids.extend(
        store
            .allocate(&plain, None)
            .await
            .expect("allocate")
            .range(),
    );
    order_ids.extend(take(&before, &order, 150).await);
    // The rows of this case, without the update time a restore and a raise rewrite.
    let ours = |rows: Vec<leaf_core::TagRecord>| -> Vec<leaf_core::TagRecord> {
        rows.into_iter()
            .filter(|r| r.tag.as_str().starts_with(&ns))
            .map(|r| leaf_core::TagRecord {
                updated_at_ms: None,
                ..r
            })
            .collect()
    };
    let copy = ours(store.list().await.expect("list"));
    assert_eq!(copy.len(), 4, "plain, claim, definition, day: {copy:?}");

    // Handed out after the copy: a restore sets the store back before these.
    for _ in 0..3 {
        plain_ids.extend(
            store
                .allocate(&plain, None)
                .await
                .expect("allocate")
                .range(),
        );
    }
    order_ids.extend(take(&before, &order, 400).await);
    assert_ne!(
        ours(store.list().await.expect("list")),
        copy,
        "nothing moved"
    );
    fixture.restore(&copy).await;
    let restored = ours(store.list().await.expect("list after the restore"));
    assert_eq!(restored, copy, "the restore did not set the rows back");

    // Raised by more than was handed out since the copy: 300 plain IDs; of the day, one
    // node's loads (a tenth of the row's step of 1,000, doubling up to it) of 550 IDs and a
    // preload ahead: less than 5,000.
    let plan = raise::plan(&restored, 10_000, 5_000, clock.now_ms() as i64).expect("plan");
    let applied = raise::apply(store.as_ref(), &plan).await;
    assert!(applied.failed.is_none(), "{:?}", applied.failed);
    assert_eq!(applied.done.len(), 2, "the plain tag and the day: {plan:?}");
    let after = ours(store.list().await.expect("list after the raise"));
    for (was, now) in copy.iter().zip(&after) {
        assert_eq!(was.tag, now.tag);
        let planned = plan.iter().find(|p| p.tag == was.tag).expect("planned");
        match planned.change {
            raise::Change::Keep(_) => assert_eq!(now, was, "{} must be left alone", was.tag),
            raise::Change::Raise { to, .. } => assert_eq!(now.max_id, to, "{}", was.tag),
            raise::Change::Create { .. } => panic!("{} was in the copy", was.tag),
        }
    }
    let day = after
        .iter()
        .find(|r| r.tag.as_str() == format!("{order}@20261201"))
        .expect("the day's row");
    assert!(day.max_id <= 999_999, "past the width: {day:?}");

    // New nodes (no segment held from before) hand out IDs again: none was handed out before.
    let fresh = node(Arc::clone(&store), &clock);
    for _ in 0..3 {
        let a = store.allocate(&plain, None).await.expect("allocate");
        for id in a.range() {
            assert!(!plain_ids.contains(&id), "plain ID {id} handed out twice");
        }
    }
    for id in take(&fresh, &order, 300).await {
        assert!(!order_ids.contains(&id), "{id} handed out twice");
    }
}

/// A store whose rows a test can set back to an older copy's, as a restore of a backup does.
#[async_trait::async_trait]
pub trait RestoreFixture: StoreFixture {
    /// Writes each row of `copy` back into the store as the copy holds it (its `max_id` and
    /// step), by the backend's own means (SQL, the key-value API), not the trait's.
    async fn restore(&self, copy: &[leaf_core::TagRecord]);
}

#[async_trait::async_trait]
impl RestoreFixture for crate::MemoryFixture {
    async fn restore(&self, copy: &[leaf_core::TagRecord]) {
        for row in copy {
            self.0.put(row.clone());
        }
    }
}
