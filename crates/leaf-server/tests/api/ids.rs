//! The ID routes, Leaf's and /v1: answers, batches, decoding, formats, disabled modes, bad input.

use super::*;

#[tokio::test]
async fn leaf_segment_route_answers_get_and_post_in_plain_text() {
    let f = fixture().await;
    let a = plain_id(&get(&f.app, "/api/segment/get/t").await);
    let b = plain_id(&send(&f.app, Method::POST, "/api/segment/get/t", None, &[], None).await);
    let c = plain_id(&get(&f.app, "/api/segment/get/leaf-segment-test").await);
    assert_eq!(a, 1, "the first segment of a fresh tag starts at max_id 1");
    assert_eq!(b, 2);
    assert_eq!(c, 1, "tags count separately");
    // Past the step of 10: the segment switch is invisible to the client.
    let mut last = b;
    for _ in 0..25 {
        let id = plain_id(&get(&f.app, "/api/segment/get/t").await);
        assert!(id > last);
        last = id;
    }
}

#[tokio::test]
async fn leaf_snowflake_route_ignores_the_key() {
    let f = fixture().await;
    let layout = SnowflakeLayout::default();
    let mut seen = Vec::new();
    for (method, uri) in [
        (Method::GET, "/api/snowflake/get/anything"),
        (Method::POST, "/api/snowflake/get/x"),
        (Method::GET, "/api/snowflake/get/a/b"),
        (Method::GET, "/api/snowflake/get/"),
        (Method::GET, "/api/snowflake/get"),
    ] {
        let id = plain_id(&send(&f.app, method, uri, None, &[], None).await);
        assert_eq!(layout.decode(id).unwrap().worker_id, WORKER);
        seen.push(id);
    }
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
}

#[tokio::test]
async fn unknown_tag_is_404_with_leafs_code() {
    let f = fixture().await;
    let m = get(&f.app, "/api/segment/get/nope").await.error(404, -2);
    assert!(m.contains("nope"), "{m}");
    get(&f.app, "/v1/segment/nope").await.error(404, -2);
    send(
        &f.app,
        Method::POST,
        "/api/segment/get/nope",
        None,
        &[],
        None,
    )
    .await
    .error(404, -2);
}

#[tokio::test]
async fn malformed_tags_are_400() {
    let f = fixture().await;
    let long = "x".repeat(300);
    for tag in [
        "".to_string(),
        long.clone(),
        "a/b".into(),
        "a%2Fb".into(),
        "a%0Ab".into(),
        "a%00b".into(),
        "a%7Fb".into(),
        "%FF%FE".into(),
        // Not percent-encoding at all (the README's "bad percent-encoding").
        "%zz".into(),
        "%".into(),
        "a%2".into(),
        "a%g0b".into(),
    ] {
        for base in ["/api/segment/get/", "/v1/segment/"] {
            let uri = format!("{base}{tag}");
            get(&f.app, &uri).await.error(400, 400);
        }
        let uri = format!("/api/segment/get/{tag}");
        send(&f.app, Method::POST, &uri, None, &[], None)
            .await
            .error(400, 400);
    }
    get(&f.app, "/api/segment/get").await.error(400, 400);
    get(&f.app, "/v1/segment").await.error(400, 400);
    let m = get(&f.app, &format!("/v1/segment/{long}"))
        .await
        .error(400, 400);
    assert!(m.contains("300"), "{m}");
}

#[tokio::test]
async fn v1_segment_batches() {
    let f = fixture().await;
    let r = get(&f.app, "/v1/segment/t?count=25").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["tag"], "t");
    let ids: Vec<i64> = v["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_i64().unwrap())
        .collect();
    assert_eq!(
        ids,
        (1..=25).collect::<Vec<_>>(),
        "ascending across segments of 10"
    );
    let r = get(&f.app, "/v1/segment/t").await;
    assert_eq!(
        r.json()["ids"],
        serde_json::json!([26]),
        "count defaults to 1"
    );
    let r = get(&f.app, "/v1/segment/t?count=2&as=string").await;
    assert_eq!(r.json()["ids"], serde_json::json!(["27", "28"]));
    let r = get(&f.app, "/v1/segment/t?count=50").await;
    assert_eq!(
        r.json()["ids"].as_array().unwrap().len(),
        50,
        "the maximum is allowed"
    );
}

#[tokio::test]
async fn bad_counts_are_400() {
    let f = fixture().await;
    for q in [
        "count=0",
        "count=51",
        "count=abc",
        "count=-1",
        "count=1.5",
        "count=",
        "count=99999999999999999999999",
        "count=1&count=2",
        "as=hex",
    ] {
        let m = get(&f.app, &format!("/v1/segment/t?{q}"))
            .await
            .error(400, 400);
        if q.starts_with("count=") && !q.contains('&') {
            assert!(m.contains("50"), "{q}: the message names the maximum: {m}");
        }
        get(&f.app, &format!("/v1/snowflake?{q}"))
            .await
            .error(400, 400);
    }
}

#[tokio::test]
async fn v1_snowflake_batches() {
    let f = fixture().await;
    let r = get(&f.app, "/v1/snowflake?count=20").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let ids: Vec<i64> = r.json()["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_i64().unwrap())
        .collect();
    assert_eq!(ids.len(), 20);
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    let r = get(&f.app, "/v1/snowflake?as=string").await;
    let s = r.json()["ids"][0].as_str().unwrap().to_string();
    assert!(s.parse::<i64>().unwrap() > ids[19]);
}

#[tokio::test]
async fn decode_routes() {
    let f = fixture().await;
    let layout = SnowflakeLayout::default();
    let id = layout.encode(1_700_000_000_123, 7, 42).unwrap();
    let r = get(&f.app, &format!("/decodeSnowflakeId?snowflakeId={id}")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["timestamp"], "1700000000123(2023-11-14 22:13:20.123)");
    assert_eq!(v["workerId"], "7");
    assert_eq!(v["sequenceId"], "42");

    let r = get(&f.app, &format!("/v1/snowflake/{id}/decode")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["id"], id);
    assert_eq!(v["timestamp_ms"], 1_700_000_000_123u64);
    assert_eq!(v["time"], "2023-11-14T22:13:20.123Z");
    assert_eq!(v["worker_id"], 7);
    assert_eq!(v["sequence"], 42);

    for q in [
        "snowflakeId=abc",
        "snowflakeId=",
        "snowflakeId=-5",
        "other=1",
        "snowflakeId=1e5",
    ] {
        get(&f.app, &format!("/decodeSnowflakeId?{q}"))
            .await
            .error(400, 400);
    }
    for raw in ["abc", "-1", "99999999999999999999"] {
        get(&f.app, &format!("/v1/snowflake/{raw}/decode"))
            .await
            .error(400, 400);
    }
}

#[tokio::test]
async fn snowflake_ids_in_each_format_decode_to_the_parts_of_the_plain_id() {
    // 2026-11-26 13:17:30.192 UTC, as in the friendly example.
    let t0 = 1_795_699_050_192;
    let (f, _clock) = serving_on_manual_clock(t0).await;
    let layout = SnowflakeLayout::default();
    for (format, width) in [
        ("base36", 1..=13),
        ("base62", 1..=11),
        ("friendly", 21..=30),
    ] {
        let app = &f.app;
        let take = |q: &str| {
            let uri = format!("/v1/snowflake?format={format}&{q}");
            async move { get(app, &uri).await }
        };
        let texts = text_ids(&take("count=3").await);
        assert_eq!(texts.len(), 3, "{format}");
        let one = text_ids(&take("as=string").await);
        assert_eq!(
            one.len(),
            1,
            "{format}: as=string is what a format answers anyway"
        );
        for text in texts {
            assert!(width.contains(&text.len()), "{format}: {text}");
            let r = get(
                &f.app,
                &format!("/v1/snowflake/{text}/decode?format={format}"),
            )
            .await;
            assert_eq!(r.status, 200, "{format} {text}: {}", r.text());
            let by_text = r.json();
            let id = by_text["id"].as_i64().unwrap();
            let plain = get(&f.app, &format!("/v1/snowflake/{id}/decode"))
                .await
                .json();
            assert_eq!(by_text, plain, "{format} {text}");
            assert_eq!(plain["worker_id"], WORKER, "{format} {text}");
            assert_eq!(plain["timestamp_ms"], t0, "{format} {text}");
            if format == "friendly" {
                let seq = layout.decode(id).unwrap().sequence;
                assert_eq!(text, format!("20261126131730192-{WORKER}-{seq}"));
            }
        }
    }
}

#[tokio::test]
async fn an_unknown_snowflake_format_is_a_400_and_takes_no_id() {
    let f = fixture().await;
    let issued = |text: String| {
        text.lines()
            .find_map(|l| l.strip_prefix(r#"leaf_ids_issued_total{mode="snowflake",tag=""} "#))
            .map(str::to_owned)
    };
    let before = issued(get(&f.app, "/metrics").await.text());
    for q in [
        "format=hex",
        "format=",
        "format=BASE36",
        "format=base62&format=base36",
        "count=5&format=decimal",
        "format=base62&as=number",
    ] {
        let m = get(&f.app, &format!("/v1/snowflake?{q}"))
            .await
            .error(400, 400);
        if q.contains("hex") || q.contains("decimal") {
            assert!(
                m.contains("base36, base62, friendly"),
                "{q}: the message lists the formats: {m}"
            );
        }
    }
    assert_eq!(issued(get(&f.app, "/metrics").await.text()), before);
    let layout = SnowflakeLayout::default();
    let id = layout.encode(1_700_000_000_123, 7, 42).unwrap();
    for (path, query) in [
        (id.to_string(), "format=hex"),
        ("!".to_owned(), "format=base62"),
        ("ABC".to_owned(), "format=base36"),
        // Above i64::MAX.
        ("zzzzzzzzzzzzzz".to_owned(), "format=base36"),
        (id.to_string(), "format=friendly"),
        ("20231114221320123-7".to_owned(), "format=friendly"),
        ("20231114221320123-7-99999".to_owned(), "format=friendly"),
        ("20231399221320123-7-42".to_owned(), "format=friendly"),
    ] {
        get(&f.app, &format!("/v1/snowflake/{path}/decode?{query}"))
            .await
            .error(400, 400);
    }
}

#[tokio::test]
async fn snowflake_ids_without_a_format_answer_as_before() {
    let f = fixture().await;
    let plain = |r: Reply| {
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.headers[header::CONTENT_TYPE], "application/json");
        r.text()
    };
    // Byte for byte what the route answered before formats: numbers in `ids`, nothing else.
    for q in ["", "?count=3", "?format=number&count=3", "?as=number"] {
        let body = plain(get(&f.app, &format!("/v1/snowflake{q}")).await);
        let ids: Vec<i64> =
            serde_json::from_value(serde_json::from_str::<Value>(&body).unwrap()["ids"].clone())
                .unwrap();
        assert_eq!(body, serde_json::json!({ "ids": ids }).to_string(), "{q}");
        let numbers: Vec<String> = ids.iter().map(i64::to_string).collect();
        assert_eq!(body, format!("{{\"ids\":[{}]}}", numbers.join(",")), "{q}");
    }
    let body = plain(get(&f.app, "/v1/snowflake?as=string&format=number").await);
    assert!(
        body.starts_with("{\"ids\":[\"") && body.ends_with("\"]}"),
        "{body}"
    );
    plain_id(&get(&f.app, "/api/snowflake/get/x?format=base62").await);
}

#[tokio::test]
async fn disabled_modes_answer_404_saying_so() {
    let f = Setup {
        segment: false,
        snowflake: false,
        ..Setup::default()
    }
    .build()
    .await;
    for uri in [
        "/api/segment/get/t",
        "/api/segment/get/",
        "/v1/segment/t?count=2",
        "/v1/tags",
    ] {
        let m = get(&f.app, uri).await.error(404, 404);
        assert!(m.contains("segment mode is disabled"), "{uri}: {m}");
    }
    for uri in ["/api/snowflake/get/x", "/v1/snowflake"] {
        let m = get(&f.app, uri).await.error(404, 404);
        assert!(m.contains("snowflake mode is disabled"), "{uri}: {m}");
    }
    let r = get(&f.app, "/readyz").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["segment"]["enabled"], false);
    assert_eq!(r.json()["snowflake"]["enabled"], false);
    // The console's pages say so, as pages.
    for (uri, says) in [
        ("/", "disabled"),
        ("/cache", "Segment mode is disabled"),
        ("/db", "Segment mode is disabled"),
        ("/snowflake", "Snowflake mode is disabled"),
    ] {
        let r = get(&f.app, uri).await;
        assert_eq!(r.status, 200, "{uri}");
        assert!(r.text().contains(says), "{uri}: {}", r.text());
    }

    // One mode off leaves the other serving.
    let f = Setup {
        segment: false,
        ..Setup::default()
    }
    .build()
    .await;
    plain_id(&get(&f.app, "/api/snowflake/get/x").await);
    get(&f.app, "/api/segment/get/t").await.error(404, 404);
}

#[tokio::test]
async fn descriptions_over_256_characters_are_400() {
    let f = fixture().await;
    let create = |tag: &str, description: String| {
        format!(r#"{{"tag":"{tag}","description":"{description}"}}"#)
    };
    let post = |body: String| {
        let app = f.app.clone();
        async move { send(&app, Method::POST, "/v1/tags", LOCAL, JSON, Some(&body)).await }
    };
    let m = post(create("d1", "x".repeat(257))).await.error(400, 400);
    assert!(m.contains("256"), "{m}");
    assert_eq!(post(create("d2", "\u{e9}".repeat(256))).await.status, 201);
    let patch = |body: String| {
        let app = f.app.clone();
        async move { send(&app, Method::PATCH, "/v1/tags/d2", LOCAL, JSON, Some(&body)).await }
    };
    patch(format!(r#"{{"description":"{}"}}"#, "y".repeat(257)))
        .await
        .error(400, 400);
    assert_eq!(
        patch(format!(r#"{{"description":"{}"}}"#, "y".repeat(256)))
            .await
            .status,
        200
    );
}
