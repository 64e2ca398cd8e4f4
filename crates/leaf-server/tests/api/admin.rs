//! The admin rule, the console's pages and tag administration.

use super::*;

#[tokio::test]
async fn admin_rule_without_a_token() {
    let f = fixture().await;
    for uri in ["/v1/tags", "/cache", "/db"] {
        let r = send(&f.app, Method::GET, uri, LOCAL, &[], None).await;
        assert_eq!(r.status, 200, "{uri}: {}", r.text());
        let r = send(&f.app, Method::GET, uri, Some("[::1]:1"), &[], None).await;
        assert_eq!(r.status, 200, "{uri} from ::1");
        send(&f.app, Method::GET, uri, REMOTE, &[], None)
            .await
            .error(403, 403);
        // A header cannot make a remote peer local.
        send(
            &f.app,
            Method::GET,
            uri,
            REMOTE,
            &[("x-forwarded-for", "127.0.0.1"), ("x-real-ip", "127.0.0.1")],
            None,
        )
        .await
        .error(403, 403);
        send(&f.app, Method::GET, uri, None, &[], None)
            .await
            .error(403, 403);
    }
    send(
        &f.app,
        Method::POST,
        "/v1/tags",
        REMOTE,
        JSON,
        Some(r#"{"tag":"x"}"#),
    )
    .await
    .error(403, 403);
    let x = leaf_core::Tag::new("x").unwrap();
    assert!(
        f.store.get(&x).await.unwrap().is_none(),
        "a refused request changes nothing"
    );
}

#[tokio::test]
async fn admin_rule_with_a_token() {
    let mut s = Setup::default();
    s.config.server.admin_token = "s3cret".into();
    let f = s.build().await;
    for uri in ["/v1/tags", "/cache", "/db"] {
        for peer in [LOCAL, REMOTE] {
            let r = send(&f.app, Method::GET, uri, peer, &[], None).await;
            r.error(401, 401);
            // A page challenges with Basic, which a browser answers with a prompt.
            let challenge = if uri.starts_with("/v1") {
                "Bearer"
            } else {
                r#"Basic realm="leaf", charset="UTF-8""#
            };
            assert_eq!(r.headers[header::WWW_AUTHENTICATE], challenge, "{uri}");
            send(
                &f.app,
                Method::GET,
                uri,
                peer,
                &[("authorization", "Bearer wrong")],
                None,
            )
            .await
            .error(401, 401);
            let r = send(
                &f.app,
                Method::GET,
                uri,
                peer,
                &[("authorization", "Bearer s3cret")],
                None,
            )
            .await;
            assert_eq!(r.status, 200, "{uri} {peer:?}: {}", r.text());
        }
    }
}

#[tokio::test]
async fn pages_accept_basic_with_the_token_as_password_and_the_api_does_not() {
    let mut s = Setup::default();
    s.config.server.admin_token = "s3cret".into();
    let f = s.build().await;
    let good = basic("operator:s3cret");
    for uri in ["/cache", "/db"] {
        let r = send(
            &f.app,
            Method::GET,
            uri,
            REMOTE,
            &[("authorization", &good)],
            None,
        )
        .await;
        assert_eq!(r.status, 200, "{uri}: {}", r.text());
        for bad in [
            basic("operator:wrong"),
            basic("s3cret:"),
            "Basic %%%".into(),
        ] {
            let r = send(
                &f.app,
                Method::GET,
                uri,
                REMOTE,
                &[("authorization", &bad)],
                None,
            )
            .await;
            r.error(401, 401);
            assert!(
                r.headers[header::WWW_AUTHENTICATE]
                    .to_str()
                    .unwrap()
                    .starts_with("Basic "),
                "{uri} {bad}"
            );
        }
    }
    // The API keeps to Bearer: credentials a browser remembers never authorise a write.
    send(
        &f.app,
        Method::GET,
        "/v1/tags",
        REMOTE,
        &[("authorization", &good)],
        None,
    )
    .await
    .error(401, 401);
    let headers = [
        ("authorization", good.as_str()),
        ("content-type", "application/json"),
    ];
    send(
        &f.app,
        Method::POST,
        "/v1/tags",
        REMOTE,
        &headers,
        Some(r#"{"tag":"b"}"#),
    )
    .await
    .error(401, 401);
}

/// A loopback client's create of `tag` and update of `t` with `headers`, each refused with
/// `status`; the create's message.
async fn writes_refused(app: &Router, headers: &[(&str, &str)], tag: &str, status: u16) -> String {
    let body = format!(r#"{{"tag":"{tag}"}}"#);
    let m = send(app, Method::POST, "/v1/tags", LOCAL, headers, Some(&body))
        .await
        .error(status, i64::from(status));
    send(
        app,
        Method::PATCH,
        "/v1/tags/t",
        LOCAL,
        headers,
        Some(r#"{"step":9}"#),
    )
    .await
    .error(status, i64::from(status));
    m
}

#[tokio::test]
async fn admin_writes_need_a_json_content_type() {
    let f = fixture().await;
    // What a browser sends cross-site without a preflight: text/plain, forms.
    for content_type in [
        None,
        Some("text/plain"),
        Some("text/plain;charset=UTF-8"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
    ] {
        let headers: Vec<(&str, &str)> = content_type
            .map(|t| ("content-type", t))
            .into_iter()
            .collect();
        let m = writes_refused(&f.app, &headers, "plain", 415).await;
        assert!(m.contains("application/json"), "{m}");
    }
    let plain = leaf_core::Tag::new("plain").unwrap();
    assert!(
        f.store.get(&plain).await.unwrap().is_none(),
        "a refused request changes nothing"
    );
    let headers = [("content-type", "application/json; charset=utf-8")];
    let r = send(
        &f.app,
        Method::POST,
        "/v1/tags",
        LOCAL,
        &headers,
        Some(r#"{"tag":"plain"}"#),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text());
}

#[tokio::test]
async fn admin_writes_from_pages_of_other_origins_are_refused() {
    let f = fixture().await;
    let json = ("content-type", "application/json");
    let host = ("host", "127.0.0.1:8080");
    for headers in [
        vec![json, host, ("origin", "http://localhost:18750")],
        vec![json, host, ("origin", "http://127.0.0.1:18750")],
        vec![json, host, ("origin", "null")],
        vec![json, host, ("sec-fetch-site", "cross-site")],
        vec![json, host, ("sec-fetch-site", "same-site")],
    ] {
        let m = writes_refused(&f.app, &headers, "csrf", 403).await;
        assert!(m.contains("other origins"), "{m}");
    }
    let csrf = leaf_core::Tag::new("csrf").unwrap();
    assert!(
        f.store.get(&csrf).await.unwrap().is_none(),
        "a refused request changes nothing"
    );
    // The server's own pages (same origin), and clients that send no Origin, may write.
    let same = [
        json,
        host,
        ("origin", "http://127.0.0.1:8080"),
        ("sec-fetch-site", "same-origin"),
    ];
    let r = send(
        &f.app,
        Method::POST,
        "/v1/tags",
        LOCAL,
        &same,
        Some(r#"{"tag":"csrf"}"#),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text());
    // Reads are not writes: a page of another origin cannot read the answer anyway.
    let r = send(
        &f.app,
        Method::GET,
        "/v1/tags",
        LOCAL,
        &[("origin", "http://localhost:18750")],
        None,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
}

#[tokio::test]
async fn without_a_token_a_rebound_host_name_is_refused_on_admin_routes_and_pages() {
    let f = fixture().await;
    // DNS rebinding: the attacker's name now resolves to 127.0.0.1, so the peer is loopback
    // and the page's Origin matches its Host; only the Host names another server.
    let rebound = [
        ("content-type", "application/json"),
        ("host", "rebind.attacker.example:8080"),
        ("origin", "http://rebind.attacker.example:8080"),
        ("sec-fetch-site", "same-origin"),
    ];
    let m = writes_refused(&f.app, &rebound, "rebound", 403).await;
    assert!(m.contains("loopback name"), "{m}");
    for uri in ["/v1/tags", "/", "/cache", "/db", "/snowflake"] {
        let r = send(&f.app, Method::GET, uri, LOCAL, &rebound[1..2], None).await;
        assert!(r.error(403, 403).contains("loopback name"), "{uri}");
    }
    let rebound_tag = leaf_core::Tag::new("rebound").unwrap();
    assert!(f.store.get(&rebound_tag).await.unwrap().is_none());
    // The loopback names still pass.
    for host in ["localhost:8080", "127.0.0.1:8080", "[::1]:8080"] {
        let r = send(
            &f.app,
            Method::GET,
            "/v1/tags",
            LOCAL,
            &[("host", host)],
            None,
        )
        .await;
        assert_eq!(r.status, 200, "{host}: {}", r.text());
    }
    // With a token, the token is the rule, whatever the name.
    let mut s = Setup::default();
    s.config.server.admin_token = "s3cret".into();
    let f = s.build().await;
    let headers = [
        ("host", "leaf.example:8080"),
        ("authorization", "Bearer s3cret"),
    ];
    let r = send(&f.app, Method::GET, "/v1/tags", REMOTE, &headers, None).await;
    assert_eq!(r.status, 200, "{}", r.text());
}

#[tokio::test]
async fn a_page_of_another_origin_cannot_make_a_browser_allocate_segments() {
    let f = fixture().await;
    let before = f.store.allocations();
    // An empty form post or a no-cors fetch from another site needs no preflight.
    for headers in [
        vec![("origin", "http://evil.example")],
        vec![("origin", "null")],
        vec![("sec-fetch-site", "cross-site")],
        vec![
            ("host", "127.0.0.1:8080"),
            ("origin", "http://localhost:18750"),
        ],
    ] {
        let r = allocate(
            &f.app,
            "/v1/segment/t/allocate?step=1000000",
            &headers,
            None,
        )
        .await;
        r.error(403, 403);
        assert!(r.text().contains("other origins"), "{}", r.text());
    }
    // Same-origin is not enough (a rebound page is same-origin): with no name in
    // server.allowed_hosts, no page of any origin allocates.
    let same = [
        ("host", "127.0.0.1:8080"),
        ("origin", "http://127.0.0.1:8080"),
    ];
    allocate(&f.app, "/v1/segment/t/allocate", &same, None)
        .await
        .error(403, 403);
    assert_eq!(f.store.allocations(), before, "nothing was reserved");
    // Leasing clients send no Origin.
    let r = allocate(&f.app, "/v1/segment/t/allocate", &[], None).await;
    range_of(&r, "t", 10, 10);
}

#[tokio::test]
async fn tags_admin_create_patch_list() {
    let f = fixture().await;
    // Asked for before it exists: unknown, and remembered as such for a moment.
    get(&f.app, "/api/segment/get/new").await.error(404, -2);
    let r = send(
        &f.app,
        Method::POST,
        "/v1/tags",
        LOCAL,
        JSON,
        Some(r#"{"tag":"new","max_id":100,"step":5,"description":"d"}"#),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text());
    let v = r.json();
    assert_eq!(
        (v["tag"].as_str(), v["max_id"].as_i64(), v["step"].as_i64()),
        (Some("new"), Some(100), Some(5))
    );
    // Creating the tag clears the remembered miss: it serves at once.
    assert_eq!(plain_id(&get(&f.app, "/api/segment/get/new").await), 100);

    send(
        &f.app,
        Method::POST,
        "/v1/tags",
        LOCAL,
        JSON,
        Some(r#"{"tag":"new"}"#),
    )
    .await
    .error(409, 409);
    for bad in [
        "not json",
        r#"{"tag":"a/b"}"#,
        r#"{"tag":""}"#,
        r#"{"tag":"z","step":0}"#,
        r#"{"tag":"z","max_id":-1}"#,
        r#"{"tag":"z","stepp":3}"#,
        r#"{"step":3}"#,
        "",
    ] {
        send(&f.app, Method::POST, "/v1/tags", LOCAL, JSON, Some(bad))
            .await
            .error(400, 400);
    }
    let big = format!(r#"{{"tag":"z","description":"{}"}}"#, "d".repeat(2000));
    send(&f.app, Method::POST, "/v1/tags", LOCAL, JSON, Some(&big))
        .await
        .error(413, 413);

    let r = send(
        &f.app,
        Method::PATCH,
        "/v1/tags/new",
        LOCAL,
        JSON,
        Some(r#"{"step":7}"#),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["step"], 7);
    send(
        &f.app,
        Method::PATCH,
        "/v1/tags/ghost",
        LOCAL,
        JSON,
        Some(r#"{"step":7}"#),
    )
    .await
    .error(404, -2);
    send(
        &f.app,
        Method::PATCH,
        "/v1/tags/a/b",
        LOCAL,
        JSON,
        Some(r#"{"step":7}"#),
    )
    .await
    .error(400, 400);
    send(
        &f.app,
        Method::PATCH,
        "/v1/tags/new",
        LOCAL,
        JSON,
        Some(r#"{"step":-7}"#),
    )
    .await
    .error(400, 400);

    let r = get(&f.app, "/v1/tags").await;
    assert_eq!(r.status, 200);
    let tags = r.json()["tags"].as_array().unwrap().clone();
    let names: Vec<&str> = tags.iter().map(|t| t["tag"].as_str().unwrap()).collect();
    assert_eq!(names, ["leaf-segment-test", "new", "t"]);
    let new = &tags[1];
    assert_eq!(new["step"], 7);
    assert_eq!(new["description"], "d");
    assert_eq!(new["cache"]["initialized"], true, "{new}");
}

#[tokio::test]
async fn monitor_pages_are_escaped_html() {
    let f = fixture().await;
    send(
        &f.app,
        Method::POST,
        "/v1/tags",
        LOCAL,
        JSON,
        Some(r#"{"tag":"<b>x<b>","description":"<script>alert(1)<script>"}"#),
    )
    .await;
    plain_id(&get(&f.app, "/api/segment/get/%3Cb%3Ex%3Cb%3E").await);
    for uri in ["/cache", "/db"] {
        let r = get(&f.app, uri).await;
        assert_eq!(r.status, 200);
        assert!(
            r.headers[header::CONTENT_TYPE]
                .to_str()
                .unwrap()
                .starts_with("text/html")
        );
        let html = r.text();
        assert!(html.contains("&lt;b&gt;x&lt;b&gt;"), "{uri}: {html}");
        assert!(
            !html.contains("<b>x") && !html.contains("<script>"),
            "{uri}: {html}"
        );
    }
}

#[tokio::test]
async fn the_console_shows_the_node_and_every_page_links_to_the_others() {
    let f = fixture().await;
    plain_id(&get(&f.app, "/api/segment/get/t").await);
    let pages = ["/", "/cache", "/db", "/snowflake"];
    for uri in pages {
        let r = get(&f.app, uri).await;
        assert_eq!(r.status, 200, "{uri}: {}", r.text());
        assert!(
            r.headers[header::CONTENT_TYPE]
                .to_str()
                .unwrap()
                .starts_with("text/html"),
            "{uri}"
        );
        let html = r.text();
        assert!(html.contains("name=\"viewport\""), "{uri}");
        assert!(
            html.contains("Generated 20"),
            "{uri}: no time of generation"
        );
        for href in pages.iter().chain(&["/metrics"]) {
            assert!(
                html.contains(&format!("href=\"{href}\"")),
                "{uri} lacks {href}"
            );
        }
        assert!(!html.contains("<script"), "{uri}");
        // Pages reveal business volume: the admin rule applies.
        send(&f.app, Method::GET, uri, REMOTE, &[], None)
            .await
            .error(403, 403);
    }
    let index = get(&f.app, "/").await.text();
    for shown in [
        "10.0.0.1:8080",
        concat!("leaf-server ", env!("CARGO_PKG_VERSION")),
        "store <code>sqlite</code>",
        "workerId mode <code>local</code>",
        "worker id 5",
        "<dt>gRPC</dt><dd>on, this port",
    ] {
        assert!(index.contains(shown), "{shown}: {index}");
    }
    let cache = get(&f.app, "/cache").await.text();
    assert!(cache.contains("data-label=\"stored step\">10<"), "{cache}");
    assert!(
        cache.contains("not loaded"),
        "leaf-segment-test was never asked for: {cache}"
    );
    let sf = get(&f.app, "/snowflake").await.text();
    assert!(sf.contains("issuing"), "{sf}");
    assert!(sf.contains("Worker id</dt><dd>5 (of 0..=1,023)"), "{sf}");
}

/// The embedded default is for one node: the index says so, naming what to set, and says
/// nothing once the configuration leaves it.
#[tokio::test]
async fn the_index_warns_on_the_one_node_default_and_only_there() {
    let index = get(&fixture().await.app, "/").await.text();
    assert!(index.contains("For one node only"), "{index}");
    for named in [
        "segment.store",
        "snowflake.local.worker_id",
        "snowflake.mode",
    ] {
        assert!(index.contains(named), "{named}: {index}");
    }
    let mut config = Setup::default().config;
    config.segment.store = "mysql".into();
    config.snowflake.mode = "zk_recycle".into();
    let f = Setup {
        config,
        ..Setup::default()
    }
    .build()
    .await;
    let index = get(&f.app, "/").await.text();
    assert!(!index.contains("For one node only"), "{index}");
}

#[tokio::test]
async fn console_refresh_is_opt_in_and_checked() {
    let f = fixture().await;
    let html = get(&f.app, "/cache?refresh=5").await.text();
    assert!(
        html.contains("http-equiv=\"refresh\" content=\"5\""),
        "{html}"
    );
    assert!(!get(&f.app, "/cache").await.text().contains("http-equiv"));
    for bad in [
        "/cache?refresh=0",
        "/?refresh=x",
        "/db?refresh=3601",
        "/snowflake?color=red",
    ] {
        get(&f.app, bad).await.error(400, 400);
    }
}
