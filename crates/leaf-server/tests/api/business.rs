//! Business tags over HTTP.

use super::*;

/// 2026-11-27 00:00:00 in Asia/Shanghai.
const SHANGHAI_MIDNIGHT_MS: u64 = 1_795_708_800_000;

async fn on_segment_clock(now_ms: u64) -> (Fixture, ManualClock) {
    let clock = ManualClock::new(now_ms);
    let f = Setup {
        segment_clock: Some(clock.clone()),
        ..Setup::default()
    }
    .build()
    .await;
    (f, clock)
}

async fn post_tag(app: &Router, body: &str) -> Reply {
    send(app, Method::POST, "/v1/tags", LOCAL, JSON, Some(body)).await
}

const ORDER: &str = r#"{"tag":"order","step":100,"reset":"day","time_zone":"Asia/Shanghai","format":"ORD{date:%Y%m%d}{seq:06}"}"#;

#[tokio::test]
async fn an_order_number_tag_restarts_after_midnight_in_its_zone_and_decodes() {
    let (f, clock) = on_segment_clock(SHANGHAI_MIDNIGHT_MS - 60_000).await;
    let r = post_tag(&f.app, ORDER).await;
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(
        r.json(),
        serde_json::json!({"tag": "order", "step": 100, "reset": "day",
            "time_zone": "Asia/Shanghai", "first": 1, "format": "ORD{date:%Y%m%d}{seq:06}"})
    );
    // Leaf's route answers the text; version 1 answers strings.
    let r = get(&f.app, "/api/segment/get/order").await;
    assert_eq!(
        (r.status.as_u16(), r.text()),
        (200, "ORD20261126000001".into())
    );
    assert_eq!(
        text_ids(&get(&f.app, "/v1/segment/order?count=2").await),
        ["ORD20261126000002", "ORD20261126000003"]
    );
    clock.set_ms(SHANGHAI_MIDNIGHT_MS);
    assert_eq!(
        get(&f.app, "/api/segment/get/order").await.text(),
        "ORD20261127000001"
    );
    let d = get(&f.app, "/v1/decode/order?id=ORD20261126000003").await;
    assert_eq!(d.status, 200, "{}", d.text());
    assert_eq!(
        d.json(),
        serde_json::json!({"tag": "order", "id": "ORD20261126000003", "period": "20261126",
            "date": "2026-11-26", "value": 3})
    );
    get(&f.app, "/v1/decode/order?id=ORD2026112600003")
        .await
        .error(400, 400);
    get(&f.app, "/v1/decode/order").await.error(400, 400);
    // A plain tag has nothing to decode.
    get(&f.app, "/v1/decode/t?id=1").await.error(404, -2);
    // Text cannot be numbers, a format is not chosen per request, and the rows are not tags.
    let m = get(&f.app, "/v1/segment/order?as=number")
        .await
        .error(400, 400);
    assert!(m.contains("as=number"), "{m}");
    // ... and took no ID.
    assert_eq!(
        get(&f.app, "/api/segment/get/order").await.text(),
        "ORD20261127000002"
    );
    get(&f.app, "/v1/segment/t?format=base36")
        .await
        .error(400, 400);
    get(&f.app, "/api/segment/get/order@20261127")
        .await
        .error(400, 400);
    // Plain tags answer as before.
    plain_id(&get(&f.app, "/api/segment/get/t").await);
}

#[tokio::test]
async fn bad_business_tags_are_400_and_store_nothing() {
    let (f, clock) = on_segment_clock(SHANGHAI_MIDNIGHT_MS).await;
    let rows = || async { f.store.list().await.unwrap().len() };
    let before = rows().await;
    for (body, says) in [
        (
            r#"{"tag":"b1","reset":"day","time_zone":"Mars/Olympus","format":"B{date:%Y%m%d}{seq}"}"#,
            "Mars/Olympus",
        ),
        (r#"{"tag":"b2","format":"B{seq"}"#, "format"),
        (
            r#"{"tag":"b3","reset":"day","format":"B{date:%Y%m}{seq}"}"#,
            "format",
        ),
        (r#"{"tag":"b4","first":1000,"format":"B{seq:03}"}"#, "1000"),
        (r#"{"tag":"b5","reset":"day"}"#, "format"),
        (r#"{"tag":"b6","reset":"hour","format":"B{seq}"}"#, "hour"),
        (r#"{"tag":"b7","max_id":5,"format":"B{seq}"}"#, "first"),
        (
            r#"{"tag":"b8","description":"x","format":"B{seq}"}"#,
            "description",
        ),
        (r#"{"tag":"b@9","format":"B{seq}"}"#, "@"),
        (
            r#"{"tag":"b10","reset":"day","format":"B{date:%y%m%d}{seq}"}"#,
            "%y repeats",
        ),
        (r#"{"tag":"x@20261126"}"#, "reserved"),
        (r#"{"tag":"x@"}"#, "reserved"),
    ] {
        let m = post_tag(&f.app, body).await.error(400, 400);
        assert!(m.contains(says), "{body}: {m}");
    }
    assert_eq!(rows().await, before, "nothing was stored");
    // A plain tag's name cannot become a business tag's, nor the other way round.
    post_tag(&f.app, r#"{"tag":"t","format":"T{seq}"}"#)
        .await
        .error(409, 409);
    assert_eq!(post_tag(&f.app, ORDER).await.status, 201);
    post_tag(&f.app, r#"{"tag":"order"}"#).await.error(409, 409);
    post_tag(&f.app, ORDER).await.error(409, 409);
    // Its properties and its rows never change, and leasing clients get plain tags only.
    get(&f.app, "/api/segment/get/order").await;
    for tag in ["order", "order@", "order@20261127"] {
        let uri = format!("/v1/tags/{tag}");
        let r = send(
            &f.app,
            Method::PATCH,
            &uri,
            LOCAL,
            JSON,
            Some(r#"{"step":9}"#),
        )
        .await;
        r.error(400, 400);
    }
    let row = |name: &'static str| {
        let store = f.store.clone();
        async move {
            store
                .get(&leaf_core::Tag::new(name).unwrap())
                .await
                .unwrap()
        }
    };
    // One ID taken: a first range, a tenth of the row's step.
    assert_eq!(
        row("order@20261127").await.map(|r| (r.step, r.max_id)),
        Some((100, 11)),
        "untouched"
    );
    // Leases are of period rows (leaf-client's business tags), never of the base or the
    // definition, and never past the row's capped step.
    let allocate = |tag: &str, step: &str| {
        let (app, uri) = (
            f.app.clone(),
            format!("/v1/segment/{tag}/allocate?step={step}"),
        );
        async move { send(&app, Method::POST, &uri, LOCAL, &[], None).await }
    };
    for tag in ["order", "order@"] {
        allocate(tag, "10").await.error(400, 400);
    }
    let a = allocate("order@20261127", "100000").await;
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(a.json()["used_step"], 100, "capped at the row's step");
    assert_eq!(a.json()["max_id"], 111);
    // A period within one of the server's clock is created on first use, as a node would.
    assert!(row("order@20261128").await.is_none());
    let r = get(&f.app, "/v1/tags/order@20261128").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        (r.json()["max_id"].as_i64(), r.json()["step"].as_i64()),
        (Some(1), Some(100))
    );
    // Before its day starts here, a lease of it is a first range at most, whatever the client
    // asks: clients preloading a day hold no more of it than nodes do (issue 32).
    let a = allocate("order@20261128", "100000").await;
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(a.json()["used_step"], 10, "{}", a.text());
    let a = allocate("order@20261126", "10").await;
    assert_eq!(a.status, 200, "the day before: {}", a.text());
    // Farther, or not a period of this tag: 400, nothing created.
    for tag in [
        "order@20261130",
        "order@20261120",
        "order@202611",
        "order@all",
    ] {
        allocate(tag, "10").await.error(400, 400);
        get(&f.app, &format!("/v1/tags/{tag}"))
            .await
            .error(400, 400);
    }
    assert!(row("order@20261130").await.is_none());
    // A stored row is read whatever its period (the window bounds what is created).
    clock.set_ms(SHANGHAI_MIDNIGHT_MS + 10 * 86_400_000);
    let r = get(&f.app, "/v1/tags/order@20261127").await;
    assert_eq!(r.status, 200, "{}", r.text());
    clock.set_ms(SHANGHAI_MIDNIGHT_MS);
}

#[tokio::test]
async fn a_value_past_the_width_is_503_with_its_own_code_and_metric() {
    let (f, _clock) = on_segment_clock(SHANGHAI_MIDNIGHT_MS).await;
    let r = post_tag(&f.app, r#"{"tag":"tiny","first":8,"format":"T{seq:01}"}"#).await;
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(
        text_ids(&get(&f.app, "/v1/segment/tiny?count=2").await),
        ["T8", "T9"]
    );
    let m = get(&f.app, "/v1/segment/tiny").await.error(503, -6);
    assert!(m.contains("T{seq:01}"), "{m}");
    let metrics = get(&f.app, "/metrics").await.text();
    assert!(
        metrics.contains("leaf_format_overflows_total{tag=\"tiny\"} 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn listings_show_business_tags_with_their_periods_under_them() {
    let (f, clock) = on_segment_clock(SHANGHAI_MIDNIGHT_MS - 60_000).await;
    assert_eq!(post_tag(&f.app, ORDER).await.status, 201);
    get(&f.app, "/api/segment/get/order").await;
    clock.set_ms(SHANGHAI_MIDNIGHT_MS);
    get(&f.app, "/api/segment/get/order").await;
    let list = get(&f.app, "/v1/tags").await.json();
    let tags = list["tags"].as_array().unwrap();
    let names: Vec<&str> = tags.iter().map(|t| t["tag"].as_str().unwrap()).collect();
    assert!(names.contains(&"order"), "{list}");
    assert!(names.iter().all(|n| !n.contains('@')), "{list}");
    let order = tags.iter().find(|t| t["tag"] == "order").unwrap();
    assert_eq!(order["format"], "ORD{date:%Y%m%d}{seq:06}", "{order}");
    assert_eq!(order["reset"], "day", "{order}");
    let periods = tag_names(&order["periods"]);
    assert_eq!(periods, ["order@20261126", "order@20261127"], "{order}");
    let today = &order["periods"][1];
    assert_eq!(today["cache"]["initialized"], true, "{today}");
    assert_eq!(today["step"], 100, "{today}");
    let db = get(&f.app, "/db").await.text();
    assert!(db.contains("↳ order@20261127"), "{db}");
    assert!(db.contains(">order<"), "{db}");
}

#[tokio::test]
async fn a_business_tag_claims_its_name_on_every_node_and_before_it() {
    let (a, clock) = on_segment_clock(SHANGHAI_MIDNIGHT_MS).await;
    let b = Setup {
        segment_clock: Some(clock.clone()),
        store: Some(a.store.clone()),
        ..Setup::default()
    }
    .build()
    .await;
    // Node B asks first: nothing yet, and it remembers so for a second.
    get(&b.app, "/api/segment/get/order").await.error(404, -2);
    // A node's first range is a tenth of the step: 100 here, so that taking one ID starts no
    // preload that would race with node B's first range.
    let r = post_tag(&a.app, r#"{"tag":"order","step":1000,"format":"O{seq}"}"#).await;
    assert_eq!(r.status, 201, "{}", r.text());
    // Node B, still remembering no definition, cannot make a plain tag of the name: the
    // business tag claimed it in the store, with no ID left.
    post_tag(&b.app, r#"{"tag":"order"}"#).await.error(409, 409);
    let claim = a
        .store
        .get(&leaf_core::Tag::new("order").unwrap())
        .await
        .unwrap()
        .expect("the claim");
    assert_eq!(claim.max_id, i64::MAX, "{claim:?}");
    // A node that knows no business tags (Java Leaf, an older server) gets no number from it.
    let e = a
        .store
        .allocate(&leaf_core::Tag::new("order").unwrap(), None)
        .await
        .unwrap_err();
    assert!(matches!(e, leaf_core::Error::Exhausted(_)), "{e}");
    clock.advance(std::time::Duration::from_secs(2));
    assert_eq!(get(&a.app, "/api/segment/get/order").await.text(), "O1");
    assert_eq!(get(&b.app, "/api/segment/get/order").await.text(), "O101");
    // The claim is not listed as a tag of its own.
    let list = get(&b.app, "/v1/tags").await.json();
    let orders = list["tags"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["tag"] == "order")
        .count();
    assert_eq!(orders, 1, "{list}");
}

#[tokio::test]
async fn plain_tags_named_like_business_rows_before_them_are_served_as_ever() {
    let store = Arc::new(MemoryStore::with_tags([("job@2024", 10), ("mail@", 10)]));
    let f = Setup {
        store: Some(store),
        ..Setup::default()
    }
    .build()
    .await;
    assert_eq!(plain_id(&get(&f.app, "/api/segment/get/job@2024").await), 1);
    assert_eq!(plain_id(&get(&f.app, "/api/segment/get/mail@").await), 1);
    // Their rows are not changed through the API: a name of that shape is refused by itself
    // (issue 32), since no lookup can tell it from a business tag's row created a moment ago.
    let m = patch_tag(&f.app, "job@2024", &serde_json::json!({ "step": 20 }))
        .await
        .error(400, 400);
    assert!(m.contains("in its database"), "{m}");
    // New names of that shape are refused, and a business tag cannot take such rows over.
    post_tag(&f.app, r#"{"tag":"job@2025"}"#)
        .await
        .error(400, 400);
    for base in ["job", "mail"] {
        let body = format!(r#"{{"tag":"{base}","reset":"year","format":"J{{date:%Y}}{{seq}}"}}"#);
        post_tag(&f.app, &body).await.error(409, 409);
        assert!(
            f.store
                .get(&leaf_core::Tag::new(base).unwrap())
                .await
                .unwrap()
                .is_none(),
            "no claim left behind"
        );
    }
    assert_eq!(plain_id(&get(&f.app, "/api/segment/get/job@2024").await), 2);
}

/// A node as `server::start` builds it from its configuration: segment mode only, on the SQLite
/// file `file` shared with other nodes, with `seeds` as `segment.seed_tags`.
async fn sqlite_node(
    file: &std::path::Path,
    seeds: &[&str],
) -> anyhow::Result<(leaf_server::server::Running, Router)> {
    let mut config = Config::default();
    config.snowflake.enabled = false;
    // The one-node monotonic leader keeps its cache file here, beside the SQLite file, not in
    // the working directory (the crate's source tree under `cargo test`).
    config.snowflake.cache_dir = file.parent().expect("a directory").join("leaf-data");
    config.segment.store = "sqlite".into();
    config
        .segment
        .stores
        .insert("url", format!("sqlite://{}", file.display()));
    config.segment.seed_tags = seeds.iter().map(|s| s.to_string()).collect();
    let running = leaf_server::server::start(&config, "127.0.0.1:8080".parse().unwrap()).await?;
    let app = app(running.state.clone());
    Ok((running, app))
}

async fn patch_tag(app: &Router, tag: &str, body: &Value) -> Reply {
    let uri = format!("/v1/tags/{tag}");
    send(
        app,
        Method::PATCH,
        &uri,
        LOCAL,
        JSON,
        Some(&body.to_string()),
    )
    .await
}

/// Issue 32: a definition created on another node within the second a node remembers "no such
/// tag" was missed by the PATCH guard, and `order@` could be turned from daily to monthly (whose
/// rows print the same IDs). The rows of business tags are refused by name alone, and no tag
/// may hold a description that reads as properties or as a claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_node_changes_a_business_tags_rows_and_no_tag_holds_properties() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("leaf.db");
    let (_a, a) = sqlite_node(&file, &[]).await.unwrap();
    let (_b, b) = sqlite_node(&file, &[]).await.unwrap();
    // Node B asks first, and remembers for a second that there is no such tag.
    get(&b, "/api/segment/get/order").await.error(404, -2);
    let r = post_tag(&a, ORDER).await;
    assert_eq!(r.status, 201, "{}", r.text());
    let daily = get(&a, "/v1/tags/order@").await.json()["description"].clone();
    let monthly = "leaf-props:v1 reset=month zone=Asia/Shanghai first=1 \
                   format=ORD{date:%Y%m}{seq:06}";
    for tag in [
        "order@",
        "order@20261127",
        "order@202611",
        "order@all",
        "order",
    ] {
        for body in [
            serde_json::json!({ "description": monthly }),
            serde_json::json!({ "step": 5 }),
        ] {
            let r = patch_tag(&b, tag, &body).await;
            assert_eq!(r.status, 400, "PATCH {tag} {body} on node B: {}", r.text());
        }
    }
    let stored = get(&a, "/v1/tags/order@").await.json();
    assert_eq!(stored["description"], daily, "{stored}");
    // Text that reads as a definition or a claim is no plain tag's description.
    assert_eq!(
        post_tag(&a, r#"{"tag":"plain","description":"made by hand"}"#)
            .await
            .status,
        201
    );
    for text in [
        monthly,
        "leaf-props:v2 anything",
        "leaf-business: counted in plain@",
    ] {
        let body = serde_json::json!({ "tag": "other", "description": text });
        let m = post_tag(&b, &body.to_string()).await.error(400, 400);
        assert!(m.contains("description"), "{m}");
        let m = patch_tag(&b, "plain", &serde_json::json!({ "description": text }))
            .await
            .error(400, 400);
        assert!(m.contains("description"), "{m}");
    }
    assert_eq!(
        get(&a, "/v1/tags/other").await.status,
        404,
        "nothing created"
    );
    let plain = get(&a, "/v1/tags/plain").await.json();
    assert_eq!(plain["description"], "made by hand", "{plain}");
}

/// Issue 32: `segment.seed_tags = ["seeded@"]` created a row of a business definition's shape,
/// which a PATCH could then make a business tag with no claim. Seeds go through the checks of
/// `POST /v1/tags`, and a bad one stops start-up naming the key, before anything is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_tags_pass_the_checks_of_a_created_tag() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("leaf.db");
    for seed in ["seeded@", "seeded@2026", "seeded@20261127", "seeded@all"] {
        match sqlite_node(&file, &["fine", seed]).await {
            Ok(_) => panic!("segment.seed_tags = [\"fine\", {seed:?}] started"),
            Err(e) => {
                let m = format!("{e:#}");
                assert!(
                    m.contains("segment.seed_tags") && m.contains(seed) && m.contains("reserved"),
                    "{m}"
                );
            }
        }
    }
    let (_node, app) = sqlite_node(&file, &["fine"]).await.unwrap();
    let list = get(&app, "/v1/tags").await.json();
    assert_eq!(tag_names(&list["tags"]), ["fine"], "{list}");
}

/// The `tag` of each object of a JSON array (a listing's tags, a business tag's periods).
fn tag_names(list: &Value) -> Vec<&str> {
    let rows = list.as_array().expect("an array of tags");
    rows.iter().map(|t| t["tag"].as_str().unwrap()).collect()
}

/// Issue 32: `/v1/decode` validates an ID, so it reads only the text the tag prints: wrong
/// widths, leading zeros, a day in a monthly tag's date are 400, as are a snowflake form's
/// leading zeros and signs.
#[tokio::test]
async fn decode_reads_only_the_text_a_tag_prints() {
    let (f, _clock) = on_segment_clock(SHANGHAI_MIDNIGHT_MS).await;
    for body in [
        r#"{"tag":"n","reset":"day","format":"N{date:%Y%m%d}-{seq}"}"#,
        r#"{"tag":"w","reset":"day","format":"W{date:%Y%m%d}-{seq:03}"}"#,
        r#"{"tag":"m","reset":"month","format":"M{date:%Y%m%d}{seq:04}"}"#,
        r#"{"tag":"b","format":"B{seq:base62}"}"#,
    ] {
        let r = post_tag(&f.app, body).await;
        assert_eq!(r.status, 201, "{body}: {}", r.text());
    }
    let decode = |tag: &str, id: &str| {
        let (app, uri) = (f.app.clone(), format!("/v1/decode/{tag}?id={id}"));
        async move { get(&app, &uri).await }
    };
    for (tag, id, value) in [
        ("n", "N20261127-1", 1),
        ("w", "W20261127-001", 1),
        ("m", "M202611010007", 7),
        ("b", "Bzz", 3843),
    ] {
        let r = decode(tag, id).await;
        assert_eq!(r.status, 200, "{tag} {id}: {}", r.text());
        assert_eq!(r.json()["value"], value, "{tag} {id}");
    }
    for (tag, id) in [
        ("n", "N20261127-01"),
        ("w", "W20261127-01"),
        ("w", "W20261127-0001"),
        ("m", "M202611150007"),
        ("b", "B0zz"),
    ] {
        let m = decode(tag, id).await.error(400, 400);
        assert!(m.contains("not an ID"), "{tag} {id}: {m}");
    }
    let layout = SnowflakeLayout::default();
    let id = layout.encode(1_795_699_050_192, 3, 17).unwrap();
    for (format, text, ok) in [
        ("friendly", "20261126131730192-3-17", true),
        ("friendly", "20261126131730192-+3-17", false),
        ("friendly", "20261126131730192-03-17", false),
        (
            "base62",
            &leaf_format::Radix::Base62.encode(id as u64),
            true,
        ),
        (
            "base62",
            &format!("0{}", leaf_format::Radix::Base62.encode(id as u64)),
            false,
        ),
    ] {
        let r = get(
            &f.app,
            &format!("/v1/snowflake/{text}/decode?format={format}"),
        )
        .await;
        if ok {
            assert_eq!(r.status, 200, "{format} {text}: {}", r.text());
            assert_eq!(r.json()["id"], id, "{format} {text}");
        } else {
            r.error(400, 400);
        }
    }
}

/// Issue 32: the metrics of a business tag carry its base tag, never one label per period row
/// (a new one each day, forever), and its period rows' loads are counted like a plain tag's.
#[tokio::test]
async fn business_tags_are_counted_by_base_tag_in_the_metrics() {
    let (f, clock) = on_segment_clock(SHANGHAI_MIDNIGHT_MS).await;
    assert_eq!(post_tag(&f.app, ORDER).await.status, 201);
    for day in 0..3u64 {
        clock.set_ms(SHANGHAI_MIDNIGHT_MS + day * 86_400_000);
        // One ID: a take that crosses no preload point, so that each day loads once.
        text_ids(&get(&f.app, "/v1/segment/order").await);
        let key = if day == 0 { "20261127" } else { "20261128" };
        let uri = format!("/v1/segment/order@{key}/allocate?step=5");
        let r = allocate(&f.app, &uri, &[], None).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let text = metrics_with(
        &f.app,
        &[
            "leaf_client_allocations_total{tag=\"order\",family=\"ipv4\"} 3",
            "leaf_client_allocated_ids_total{tag=\"order\",family=\"ipv4\"} 15",
            "leaf_ids_issued_total{mode=\"segment\",tag=\"order\"} 3",
            "leaf_segment_loads_total{tag=\"order\",result=\"ok\"} 3",
            "leaf_segment_loads_total{tag=\"order\",result=\"error\"} 0",
        ],
    )
    .await;
    let rows: Vec<&str> = text.lines().filter(|l| l.contains("order@")).collect();
    assert!(rows.is_empty(), "labels of period rows: {rows:?}");
}

/// Issue 32: a node starting on a store with business tags reads their definitions before it
/// fills its plain cache, so that their rows never count as plain tags there, not even for the
/// first refresh interval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_starting_node_never_caches_business_rows_as_plain_tags() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("leaf.db");
    let (_a, a) = sqlite_node(&file, &["fine"]).await.unwrap();
    let r = post_tag(&a, r#"{"tag":"ticket","step":1000,"format":"T{seq:05}"}"#).await;
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(text_ids(&get(&a, "/v1/segment/ticket").await), ["T00001"]);
    let (node_b, b) = sqlite_node(&file, &["fine"]).await.unwrap();
    let metrics = get(&b, "/metrics").await.text();
    let plain: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("leaf_segment_loaded{"))
        .collect();
    assert_eq!(plain, ["leaf_segment_loaded{tag=\"fine\"} 0"], "{metrics}");
    let service = node_b.state.segment_service().unwrap();
    let cached: Vec<String> = (service.allocator().snapshot().into_iter())
        .map(|s| s.tag.to_string())
        .collect();
    assert_eq!(cached, ["fine"], "the plain cache");
    assert_eq!(text_ids(&get(&b, "/v1/segment/ticket").await), ["T00101"]);
}
