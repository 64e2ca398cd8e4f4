//! The routes of clients that lease segments: allocate, one tag's row, the client token.

use super::*;

#[tokio::test]
async fn allocate_reserves_ranges_from_the_store_never_from_the_servers_buffers() {
    let f = fixture().await;
    let a = range_of(
        &allocate(&f.app, "/v1/segment/t/allocate", &[], None).await,
        "t",
        10,
        10,
    );
    assert_eq!(a, (1, 11));
    // The server's own buffer loads after it, from the store.
    assert_eq!(plain_id(&get(&f.app, "/api/segment/get/t").await), 11);
    let b = range_of(
        &allocate(&f.app, "/v1/segment/t/allocate", &[], None).await,
        "t",
        10,
        10,
    );
    assert!(b.0 >= 21, "{b:?} overlaps the server's segment 11..21");
    let before = f.store.allocations();
    let c = range_of(
        &allocate(&f.app, "/v1/segment/t/allocate", &[], None).await,
        "t",
        10,
        10,
    );
    assert_eq!(c.0, b.1, "consecutive allocations are contiguous");
    assert_eq!(
        f.store.allocations(),
        before + 1,
        "one store allocation per request"
    );
    // The server keeps serving from its own segment, untouched by the clients' ranges.
    assert_eq!(plain_id(&get(&f.app, "/api/segment/get/t").await), 12);
}

#[tokio::test]
async fn allocate_takes_a_step_in_the_query_or_the_body() {
    let f = fixture().await;
    let uri = "/v1/segment/t/allocate";
    let r = allocate(&f.app, "/v1/segment/t/allocate?step=5", &[], None).await;
    assert_eq!(range_of(&r, "t", 10, 5), (1, 6));
    let r = allocate(&f.app, uri, JSON, Some(r#"{"step":7}"#)).await;
    assert_eq!(range_of(&r, "t", 10, 7), (6, 13));
    let r = allocate(&f.app, uri, JSON, Some(r#"{}"#)).await;
    assert_eq!(range_of(&r, "t", 10, 10), (13, 23));
    let r = allocate(&f.app, uri, &[], Some("")).await;
    assert_eq!(
        range_of(&r, "t", 10, 10),
        (23, 33),
        "an empty body needs no type"
    );
    let max = format!("{uri}?step=1000000");
    range_of(&allocate(&f.app, &max, &[], None).await, "t", 10, 1_000_000);
    for (q, body) in [
        ("?step=0", None),
        ("?step=-1", None),
        ("?step=abc", None),
        ("?step=", None),
        ("?step=1.5", None),
        ("?step=2", Some(r#"{"step":2}"#)),
        ("", Some(r#"{"step":0}"#)),
        ("", Some(r#"{"step":"5"}"#)),
        ("", Some(r#"{"stepp":5}"#)),
        ("", Some("not json")),
    ] {
        let m = allocate(&f.app, &format!("{uri}{q}"), JSON, body)
            .await
            .error(400, 400);
        if q == "?step=0" {
            assert!(m.contains("1000000"), "the message names the maximum: {m}");
        }
    }
    allocate(
        &f.app,
        uri,
        &[("content-type", "text/plain")],
        Some("step=5"),
    )
    .await
    .error(415, 415);
    let row = f
        .store
        .get(&leaf_core::Tag::new("t").unwrap())
        .await
        .unwrap();
    assert_eq!(
        row.unwrap().max_id,
        1_000_033,
        "refused requests changed nothing"
    );
}

#[tokio::test]
async fn allocate_errors_follow_the_servers_codes() {
    let f = fixture().await;
    allocate(&f.app, "/v1/segment/nope/allocate", &[], None)
        .await
        .error(404, -2);
    for bad in [
        "a%2Fb/allocate",
        "%zz/allocate",
        "/allocate",
        &"x".repeat(129),
    ] {
        let uri = if bad.ends_with("/allocate") {
            format!("/v1/segment/{bad}")
        } else {
            format!("/v1/segment/{bad}/allocate")
        };
        allocate(&f.app, &uri, &[], None).await.error(400, 400);
    }
    // Only `.../allocate` takes a POST; an escaped slash is part of the tag, not the route.
    for uri in [
        "/v1/segment/t",
        "/v1/segment/t%2Fallocate",
        "/v1/segment/t/other",
    ] {
        allocate(&f.app, uri, &[], None).await.error(405, 405);
    }
    f.store.fail(true);
    let m = allocate(&f.app, "/v1/segment/t/allocate", &[], None)
        .await
        .error(503, -3);
    assert!(
        !m.contains("injected"),
        "backend details stay in the log: {m}"
    );
    f.store.fail(false);
    let end = leaf_core::NewTag {
        max_id: i64::MAX - 4,
        step: 10,
        ..leaf_core::NewTag::new(leaf_core::Tag::new("end").unwrap())
    };
    f.store.create(&end).await.unwrap();
    let r = allocate(&f.app, "/v1/segment/end/allocate", &[], None).await;
    assert_eq!(range_of(&r, "end", 10, 4), (i64::MAX - 4, i64::MAX));
    let r = allocate(&f.app, "/v1/segment/end/allocate", &[], None).await;
    r.error(503, -5);
}

#[tokio::test]
async fn one_tags_row_is_open_to_clients() {
    let f = fixture().await;
    for peer in [LOCAL, REMOTE] {
        let r = send(&f.app, Method::GET, "/v1/tags/t", peer, &[], None).await;
        assert_eq!(r.status, 200, "{}", r.text());
        let v = r.json();
        assert_eq!(
            (v["tag"].as_str(), v["max_id"].as_i64(), v["step"].as_i64()),
            (Some("t"), Some(1), Some(10)),
            "{v}"
        );
        assert!(v.get("cache").is_none(), "no cached state: {v}");
    }
    get(&f.app, "/v1/tags/nope").await.error(404, -2);
    get(&f.app, "/v1/tags/a/b").await.error(400, 400);
    // Its neighbours stay admin routes.
    send(&f.app, Method::GET, "/v1/tags", REMOTE, &[], None)
        .await
        .error(403, 403);
    send(
        &f.app,
        Method::PATCH,
        "/v1/tags/t",
        REMOTE,
        JSON,
        Some(r#"{"step":7}"#),
    )
    .await
    .error(403, 403);
}

#[tokio::test]
async fn the_client_token_guards_the_id_and_allocate_routes() {
    let mut s = Setup::default();
    s.config.server.client_token = "t0ken".into();
    let f = s.build().await;
    let routes: &[(Method, &str)] = &[
        (Method::GET, "/api/segment/get/t"),
        (Method::POST, "/api/segment/get/t"),
        (Method::GET, "/api/snowflake/get/x"),
        (Method::GET, "/v1/segment/t"),
        (Method::GET, "/v1/snowflake"),
        (Method::POST, "/v1/segment/t/allocate"),
        (Method::GET, "/v1/tags/t"),
    ];
    for (method, uri) in routes {
        for peer in [LOCAL, REMOTE] {
            let r = send(&f.app, method.clone(), uri, peer, &[], None).await;
            r.error(401, 401);
            assert_eq!(r.headers[header::WWW_AUTHENTICATE], "Bearer", "{uri}");
            send(
                &f.app,
                method.clone(),
                uri,
                peer,
                &[("authorization", "Bearer t0ke")],
                None,
            )
            .await
            .error(401, 401);
            let r = send(
                &f.app,
                method.clone(),
                uri,
                peer,
                &[("authorization", "Bearer t0ken")],
                None,
            )
            .await;
            assert_eq!(r.status, 200, "{method} {uri} {peer:?}: {}", r.text());
        }
    }
    // Decoding reveals nothing the ID does not carry; the admin routes keep their own rule.
    assert_eq!(get(&f.app, "/v1/snowflake/1/decode").await.status, 200);
    assert_eq!(get(&f.app, "/v1/tags").await.status, 200);
    send(
        &f.app,
        Method::GET,
        "/v1/tags",
        REMOTE,
        &[("authorization", "Bearer t0ken")],
        None,
    )
    .await
    .error(403, 403);
}

#[tokio::test]
async fn client_allocations_are_counted_by_tag_and_address_family() {
    let f = fixture().await;
    let uri = "/v1/segment/t/allocate";
    allocate(&f.app, uri, &[], None).await;
    allocate(&f.app, &format!("{uri}?step=5"), &[], None).await;
    send(&f.app, Method::POST, uri, Some("[::1]:40000"), &[], None).await;
    allocate(&f.app, "/v1/segment/nope/allocate", &[], None).await;
    let text = metrics_with(
        &f.app,
        &[
            "leaf_client_allocations_total{tag=\"t\",family=\"ipv4\"} 2",
            "leaf_client_allocations_total{tag=\"t\",family=\"ipv6\"} 1",
            "leaf_client_allocated_ids_total{tag=\"t\",family=\"ipv4\"} 15",
            "leaf_client_allocated_ids_total{tag=\"t\",family=\"ipv6\"} 10",
            "leaf_requests_total{route=\"/v1/segment/{*tag}\",status=\"404\"} 1",
        ],
    )
    .await;
    assert!(
        !text.contains("nope"),
        "an unknown tag never becomes a label"
    );
}

#[tokio::test]
async fn allocate_lowers_a_step_above_max_step_to_it_and_reports_the_step_used() {
    // Issue 24 item 3: rows may hold steps up to i32::MAX, and after its first load a leasing
    // client asks at least the row's step; a 400 there ended its leases.
    let mut s = Setup::default();
    s.config.segment.max_step = 100;
    let f = s.build().await;
    let big = leaf_core::Tag::new("big").unwrap();
    let new = leaf_core::NewTag {
        step: 200,
        ..leaf_core::NewTag::new(big.clone())
    };
    f.store.create(&new).await.unwrap();
    let uri = "/v1/segment/big/allocate";
    // No step: the stored one, as before.
    let r = allocate(&f.app, uri, &[], None).await;
    let mut end = range_of(&r, "big", 200, 200).1;
    for (query, body, used) in [
        ("?step=200", None, 100),
        ("?step=100", None, 100),
        ("?step=7", None, 7),
        ("?step=2147483647", None, 100),
        ("?step=9223372036854775807", None, 100),
        ("", Some(r#"{"step":500}"#), 100),
    ] {
        let r = allocate(&f.app, &format!("{uri}{query}"), JSON, body).await;
        let (start, next) = range_of(&r, "big", 200, used);
        assert_eq!(start, end, "{query} {body:?}: contiguous");
        end = next;
    }
    // Below 1 and non-numbers stay client mistakes, and change nothing.
    for (query, body) in [
        ("?step=0", None),
        ("?step=-1", None),
        ("?step=abc", None),
        ("?step=1.5", None),
        ("?step=", None),
        ("?step=99999999999999999999", None),
        ("", Some(r#"{"step":0}"#)),
        ("", Some(r#"{"step":"200"}"#)),
    ] {
        let m = allocate(&f.app, &format!("{uri}{query}"), JSON, body)
            .await
            .error(400, 400);
        if body.is_none() {
            assert!(m.contains("step must be"), "{query}: {m}");
        }
    }
    let row = f.store.get(&big).await.unwrap().unwrap();
    assert_eq!(row.max_id, end, "refused requests reserved nothing");
}
