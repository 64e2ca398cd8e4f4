//! What no answer may do: HEAD taking an ID, a missing safety header, a rebound host name or another origin's page reaching a route.

use super::*;

/// The first ID of a 200 answer of an ID route: the plain-text ID, or `ids[0]` of the JSON.
fn first_id(r: &Reply) -> i64 {
    if r.headers[header::CONTENT_TYPE] == "application/json" {
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        r.json()["ids"][0].as_i64().expect("an id")
    } else {
        plain_id(r)
    }
}

#[tokio::test]
async fn head_takes_no_id_on_any_id_route() {
    // Issue 24 item 8: axum answers HEAD with the GET handler and drops the body, so a HEAD
    // took IDs nobody saw. The snowflake clock stands still, so its IDs go up by one.
    let (f, _clock) = serving_on_manual_clock(1_700_000_000_000).await;
    let mut took = Vec::new();
    for uri in [
        "/api/segment/get/t",
        "/api/snowflake/get/x",
        "/api/snowflake/get/",
        "/api/snowflake/get",
        "/v1/segment/t",
        "/v1/segment/t?count=3",
        "/v1/snowflake",
        "/v1/snowflake?count=3",
    ] {
        let before = get(&f.app, uri).await;
        let count = if before.headers[header::CONTENT_TYPE] == "application/json" {
            before.json()["ids"].as_array().unwrap().len() as i64
        } else {
            1
        };
        let last = first_id(&before) + count - 1;
        let head = send(&f.app, Method::HEAD, uri, LOCAL, &[], None).await;
        let next = first_id(&get(&f.app, uri).await);
        let allow = head.headers.get(header::ALLOW).map(|a| a.to_str().unwrap());
        let listed = allow.is_some_and(|a| a.contains("GET") && !a.contains("HEAD"));
        if head.status == StatusCode::METHOD_NOT_ALLOWED && !listed {
            took.push(format!("HEAD {uri}: Allow {allow:?}"));
        }
        if head.status != StatusCode::METHOD_NOT_ALLOWED || next != last + 1 {
            took.push(format!(
                "HEAD {uri}: {}, then GET from {next} where the last GET stopped at {last}",
                head.status
            ));
        }
    }
    // The routes that take no ID answer HEAD the same way.
    for uri in [
        "/api/segment/get/",
        "/api/segment/get",
        "/v1/segment/",
        "/v1/segment",
    ] {
        let head = send(&f.app, Method::HEAD, uri, LOCAL, &[], None).await;
        if head.status != StatusCode::METHOD_NOT_ALLOWED {
            took.push(format!("HEAD {uri}: {}", head.status));
        }
    }
    // The allocate route: a HEAD reserves nothing, and the next range follows the last one.
    let uri = "/v1/segment/t/allocate";
    let (_, end) = range_of(&allocate(&f.app, uri, &[], None).await, "t", 10, 10);
    let before = f.store.allocations();
    let head = send(&f.app, Method::HEAD, uri, LOCAL, &[], None).await;
    let allocations = f.store.allocations() - before;
    let (start, _) = range_of(&allocate(&f.app, uri, &[], None).await, "t", 10, 10);
    if head.status != StatusCode::METHOD_NOT_ALLOWED || allocations != 0 || start != end {
        took.push(format!(
            "HEAD {uri}: {}, {allocations} store allocations, then a range from {start} \
             where the last ended at {end}",
            head.status
        ));
    }
    assert!(took.is_empty(), "{}", took.join("\n"));
}

/// What `r` lacks of `X-Content-Type-Options: nosniff` and `Cache-Control: no-store`.
fn lacks_safety_headers(r: &Reply) -> Option<String> {
    let nosniff = r.headers.get("x-content-type-options");
    let cache = r.headers.get(header::CACHE_CONTROL);
    (nosniff.is_none_or(|v| v != "nosniff") || cache.is_none_or(|v| v != "no-store")).then(|| {
        format!(
            "{}: X-Content-Type-Options {nosniff:?}, Cache-Control {cache:?}",
            r.status
        )
    })
}

/// The answers of `app` to `requests` (method, uri, peer) that lack a safety header.
async fn without_safety_headers(
    app: &Router,
    requests: &[(Method, &str, Option<&str>)],
) -> Vec<String> {
    let mut missing = Vec::new();
    for (method, uri, peer) in requests {
        let r = send(app, method.clone(), uri, *peer, &[], None).await;
        if let Some(m) = lacks_safety_headers(&r) {
            missing.push(format!("{method} {uri}: {m}"));
        }
    }
    missing
}

#[tokio::test]
async fn every_answer_says_nosniff_and_no_store() {
    // Issue 24 item 10: a caching proxy that serves one ID twice breaks uniqueness, and a
    // browser that sniffs a type may run an error body that echoes a tag.
    let f = fixture().await;
    let mut missing = without_safety_headers(
        &f.app,
        &[
            // IDs, plain and JSON, and ranges.
            (Method::GET, "/api/segment/get/t", LOCAL),
            (Method::POST, "/api/segment/get/t", LOCAL),
            (Method::GET, "/api/snowflake/get/x", LOCAL),
            (Method::GET, "/v1/segment/t?count=2", LOCAL),
            (Method::GET, "/v1/snowflake", LOCAL),
            (Method::POST, "/v1/segment/t/allocate", LOCAL),
            // Pages.
            (Method::GET, "/", LOCAL),
            (Method::GET, "/cache", LOCAL),
            (Method::GET, "/db", LOCAL),
            (Method::GET, "/snowflake", LOCAL),
            // JSON errors: 400, 403, 404 (route and tag), 405.
            (Method::GET, "/api/segment/get/%zz", LOCAL),
            (Method::GET, "/v1/tags", REMOTE),
            (Method::GET, "/cache", REMOTE),
            (Method::GET, "/nowhere", LOCAL),
            (Method::GET, "/v1/segment/nope", LOCAL),
            (Method::DELETE, "/v1/tags/t", LOCAL),
            // The rest.
            (Method::GET, "/v1/tags/t", LOCAL),
            (Method::GET, "/v1/tags", LOCAL),
            (Method::GET, "/v1/snowflake/1/decode", LOCAL),
            (Method::GET, "/decodeSnowflakeId?snowflakeId=1", LOCAL),
            (Method::GET, "/healthz", LOCAL),
            (Method::GET, "/readyz", LOCAL),
            (Method::GET, "/metrics", LOCAL),
            (Method::GET, "/v1/time", LOCAL),
        ],
    )
    .await;
    // 401 and 503.
    let mut s = Setup::default();
    s.config.server.client_token = "t0ken".into();
    let f = s.build().await;
    f.store.fail(true);
    missing.extend(
        without_safety_headers(
            &f.app,
            &[
                (Method::GET, "/api/segment/get/t", LOCAL),
                (Method::GET, "/api/segment/get/nope", LOCAL),
            ],
        )
        .await,
    );
    let down = send(
        &f.app,
        Method::POST,
        "/v1/segment/t/allocate",
        LOCAL,
        &[("authorization", "Bearer t0ken")],
        None,
    )
    .await;
    down.error(503, -3);
    missing.extend(lacks_safety_headers(&down).map(|m| format!("POST allocate: {m}")));
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

/// The rebinding page's request of issue 24 item 7: same-origin, to a name of the attacker's
/// that now resolves to the node, as a browser sends it (with `Sec-Fetch-*` where the browser
/// sends them, on a secure context, and without).
fn rebound_requests() -> [Vec<(&'static str, &'static str)>; 3] {
    let host = ("host", "rebind.attacker.example:8080");
    let origin = ("origin", "http://rebind.attacker.example:8080");
    [
        vec![host, origin],
        vec![host, origin, ("content-type", "text/plain;charset=UTF-8")],
        vec![
            host,
            origin,
            ("sec-fetch-site", "same-origin"),
            ("sec-fetch-mode", "cors"),
            ("sec-fetch-dest", "empty"),
        ],
    ]
}

#[tokio::test]
async fn a_rebound_page_cannot_allocate_even_without_allowed_hosts() {
    let f = fixture().await;
    let t = leaf_core::Tag::new("t").unwrap();
    let max_id = f.store.get(&t).await.unwrap().unwrap().max_id;
    let allocations = f.store.allocations();
    for headers in rebound_requests() {
        for peer in [LOCAL, REMOTE] {
            let r = send(
                &f.app,
                Method::POST,
                "/v1/segment/t/allocate?step=1000000",
                peer,
                &headers,
                Some(""),
            )
            .await;
            r.error(403, 403);
        }
    }
    assert_eq!(f.store.get(&t).await.unwrap().unwrap().max_id, max_id);
    assert_eq!(
        f.store.allocations(),
        allocations,
        "nothing reached the store"
    );
    // A request that names no origin is a leasing client's, and is served.
    let r = allocate(&f.app, "/v1/segment/t/allocate", &[], None).await;
    assert_eq!(range_of(&r, "t", 10, 10).0, max_id);
}

#[tokio::test]
async fn metrics_need_the_metrics_token_else_the_client_token() {
    // Issue 24 item 9: /metrics names every tag (in effect the admin list) and stayed open
    // with server.client_token set. Each case: client_token, metrics_token, the Authorization
    // values that open /metrics (None: no header), and those refused with a 401.
    let bearer = |t: &str| Some(format!("Bearer {t}"));
    let cases = [
        ("", "", vec![None, bearer("anything")], vec![]),
        (
            "t0ken",
            "",
            vec![bearer("t0ken"), Some("bearer   t0ken".into())],
            vec![
                None,
                bearer("t0ke"),
                bearer("s3cret"),
                Some(basic(":t0ken")),
            ],
        ),
        (
            "",
            "m3trics",
            vec![bearer("m3trics")],
            vec![
                None,
                bearer("t0ken"),
                bearer("s3cret"),
                Some(basic(":m3trics")),
            ],
        ),
        (
            "t0ken",
            "m3trics",
            vec![bearer("m3trics")],
            vec![None, bearer("t0ken"), bearer("s3cret"), bearer("m3tric")],
        ),
    ];
    for (client, metrics, opening, refused) in cases {
        let mut s = Setup::default();
        s.config.server.admin_token = "s3cret".into();
        s.config.server.client_token = client.into();
        s.config.server.metrics_token = metrics.into();
        let f = s.build().await;
        let id_auth = (!client.is_empty()).then(|| format!("Bearer {client}"));
        let id_headers: Vec<(&str, &str)> = id_auth
            .iter()
            .map(|a| ("authorization", a.as_str()))
            .collect();
        plain_id(
            &send(
                &f.app,
                Method::GET,
                "/api/segment/get/t",
                LOCAL,
                &id_headers,
                None,
            )
            .await,
        );
        let case = format!("client_token {client:?}, metrics_token {metrics:?}");
        for peer in [LOCAL, REMOTE] {
            for auth in &opening {
                let headers: Vec<(&str, &str)> =
                    auth.iter().map(|a| ("authorization", a.as_str())).collect();
                let r = send(&f.app, Method::GET, "/metrics", peer, &headers, None).await;
                assert_eq!(r.status, 200, "{case}, {auth:?}: {}", r.text());
                assert!(
                    r.text().contains("leaf_segment_loaded{tag=\"t\"} 1"),
                    "{case}"
                );
            }
            for auth in &refused {
                let headers: Vec<(&str, &str)> =
                    auth.iter().map(|a| ("authorization", a.as_str())).collect();
                let r = send(&f.app, Method::GET, "/metrics", peer, &headers, None).await;
                let m = r.error(401, 401);
                assert_eq!(r.headers[header::WWW_AUTHENTICATE], "Bearer", "{case}");
                let key = if metrics.is_empty() {
                    "server.client_token"
                } else {
                    "server.metrics_token"
                };
                assert!(
                    auth.is_some() || m.contains(key),
                    "{case}: the message names {key}: {m}"
                );
                assert!(!r.text().contains("leaf_segment"), "{case}, {auth:?}");
            }
        }
        // The metrics token opens nothing else; GET /v1/tags/{tag} stays a client route.
        if !metrics.is_empty() {
            let m3 = [("authorization", "Bearer m3trics")];
            for uri in ["/api/segment/get/t", "/v1/tags/t", "/v1/snowflake"] {
                let r = send(&f.app, Method::GET, uri, REMOTE, &m3, None).await;
                if client.is_empty() {
                    assert_eq!(r.status, 200, "{case}: {uri}: {}", r.text());
                } else {
                    r.error(401, 401);
                }
            }
            send(&f.app, Method::GET, "/v1/tags", REMOTE, &m3, None)
                .await
                .error(401, 401);
        }
    }
}

#[tokio::test]
async fn with_allowed_hosts_a_rebound_name_is_refused_on_every_route() {
    let mut s = Setup::default();
    s.config.server.allowed_hosts = vec!["leaf.internal".into(), "LEAF2.internal:8080".into()];
    let f = s.build().await;
    let t = leaf_core::Tag::new("t").unwrap();
    let max_id = f.store.get(&t).await.unwrap().unwrap().max_id;
    let allocations = f.store.allocations();
    // The exact request of the issue, from the operator's machine and from afar.
    for headers in rebound_requests() {
        for peer in [LOCAL, REMOTE] {
            let r = send(
                &f.app,
                Method::POST,
                "/v1/segment/t/allocate?step=1000000",
                peer,
                &headers,
                Some(""),
            )
            .await;
            r.error(403, 403);
        }
    }
    // Every route, read or write, by the rebound name.
    let rebound = [("host", "rebind.attacker.example:8080")];
    let mut served = Vec::new();
    for (method, uri) in [
        (Method::GET, "/api/segment/get/t"),
        (Method::POST, "/api/segment/get/t"),
        (Method::GET, "/api/snowflake/get/x"),
        (Method::GET, "/v1/segment/t?count=5"),
        (Method::GET, "/v1/snowflake"),
        (Method::GET, "/v1/tags/t"),
        (Method::GET, "/metrics"),
        (Method::GET, "/v1/tags"),
        (Method::POST, "/v1/tags"),
        (Method::GET, "/"),
        (Method::GET, "/cache"),
        (Method::GET, "/db"),
        (Method::GET, "/snowflake"),
        (Method::GET, "/healthz"),
        (Method::GET, "/readyz"),
        (Method::GET, "/v1/time"),
        (Method::GET, "/decodeSnowflakeId?snowflakeId=1"),
        (Method::GET, "/v1/snowflake/1/decode"),
        (Method::GET, "/nowhere"),
    ] {
        let r = send(&f.app, method.clone(), uri, LOCAL, &rebound, None).await;
        if r.status != StatusCode::FORBIDDEN || !r.text().contains("server.allowed_hosts") {
            let body: String = r.text().chars().take(60).collect();
            served.push(format!("{method} {uri}: {} {body}", r.status));
        } else {
            r.error(403, 403);
        }
    }
    assert!(served.is_empty(), "{}", served.join("\n"));
    assert_eq!(f.store.get(&t).await.unwrap().unwrap().max_id, max_id);
    assert_eq!(
        f.store.allocations(),
        allocations,
        "nothing reached the store"
    );
    // Listed names in any letter case (a name alone: any port), IP addresses and localhost
    // pass; other names, other ports of a name listed with one, and no name do not.
    for host in [
        "leaf.internal",
        "LEAF.Internal:8080",
        "leaf.internal:1234",
        "leaf.internal.",
        "leaf2.internal:8080",
        "127.0.0.1:8080",
        "10.1.2.3",
        "[::1]:8080",
        "[2001:db8::1]",
        "localhost:8080",
    ] {
        let r = send(
            &f.app,
            Method::GET,
            "/v1/segment/t",
            LOCAL,
            &[("host", host)],
            None,
        )
        .await;
        assert_eq!(r.status, 200, "{host}: {}", r.text());
    }
    for host in [
        "leaf2.internal",
        "leaf2.internal:8081",
        "leaf.internal.attacker.example",
        "attacker.leaf.internal",
        "127.0.0.1.nip.io:8080",
        "localhost.attacker.example",
        "leaf.internal:x",
        "",
    ] {
        send(
            &f.app,
            Method::GET,
            "/v1/segment/t",
            LOCAL,
            &[("host", host)],
            None,
        )
        .await
        .error(403, 403);
    }
    get(&f.app, "/v1/segment/t").await.error(403, 403);
}

#[tokio::test]
async fn only_a_page_of_a_listed_host_may_allocate_from_a_browser() {
    let same = [
        ("host", "leaf.internal:8080"),
        ("origin", "http://leaf.internal:8080"),
        ("sec-fetch-site", "same-origin"),
    ];
    // Nothing listed: no page is the node's own.
    let f = fixture().await;
    allocate(&f.app, "/v1/segment/t/allocate", &same, None)
        .await
        .error(403, 403);
    let mut s = Setup::default();
    s.config.server.allowed_hosts = vec!["leaf.internal".into()];
    let f = s.build().await;
    let r = allocate(&f.app, "/v1/segment/t/allocate", &same, None).await;
    range_of(&r, "t", 10, 10);
    // An address passes the Host rule, but is not a listed origin; and the origin must still
    // be the request's own.
    for headers in [
        vec![
            ("host", "10.0.0.1:8080"),
            ("origin", "http://10.0.0.1:8080"),
        ],
        vec![
            ("host", "10.0.0.1:8080"),
            ("origin", "http://leaf.internal:8080"),
        ],
        vec![
            ("host", "leaf.internal:8080"),
            ("sec-fetch-site", "cross-site"),
        ],
        vec![
            ("host", "leaf.internal:8080"),
            ("sec-fetch-mode", "navigate"),
        ],
    ] {
        allocate(&f.app, "/v1/segment/t/allocate", &headers, None)
            .await
            .error(403, 403);
    }
}
