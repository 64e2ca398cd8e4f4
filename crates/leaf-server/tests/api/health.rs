//! Outages, clock trouble and what health, readiness and metrics say of them.

use super::*;

#[tokio::test]
async fn segment_store_down_is_503_with_retry_after() {
    let f = fixture().await;
    f.store.fail(true);
    let m = get(&f.app, "/api/segment/get/t").await.error(503, -3);
    assert!(
        !m.contains("injected"),
        "backend details stay in the log: {m}"
    );
    get(&f.app, "/v1/segment/t").await.error(503, -3);
    f.store.fail(false);
    plain_id(&get(&f.app, "/api/segment/get/t").await);
}

#[tokio::test]
async fn segment_not_started_is_503() {
    let store = Arc::new(MemoryStore::with_tags([("t", 10)]));
    let allocator = SegmentAllocator::new(
        store,
        Arc::new(SystemClock::new()),
        SegmentConfig::default(),
    );
    let service = SegmentService::starting(allocator, &Error::backend("sqlite", "locked"));
    let state = AppState::new(
        &Config::default(),
        SnowflakeLayout::default(),
        Some(service.clone()),
        None,
        Arc::new(Metrics::new()),
    );
    let app = app(state);
    let m = get(&app, "/api/segment/get/t").await.error(503, -3);
    assert!(m.contains("starting") && m.contains("sqlite"), "{m}");
    let r = get(&app, "/readyz").await;
    r.error(503, 503);
    assert_eq!(r.json()["segment"]["ready"], false);
    service.allocator().init().await.unwrap();
    service.mark_ready();
    assert_eq!(plain_id(&get(&app, "/api/segment/get/t").await), 1);
    assert_eq!(get(&app, "/readyz").await.status, 200);
}

#[tokio::test]
async fn snowflake_too_far_behind_its_mark_is_503_and_not_ready() {
    let now = SystemClock::new().now_ms();
    let f = Setup {
        prev_mark_ms: Some(now + 3_600_000),
        ..Setup::default()
    }
    .build()
    .await;
    get(&f.app, "/api/snowflake/get/x").await.error(503, 503);
    get(&f.app, "/v1/snowflake?count=2").await.error(503, 503);
    let r = get(&f.app, "/readyz").await;
    let m = r.error(503, 503);
    assert!(m.contains("snowflake"), "{m}");
    assert_eq!(r.json()["snowflake"]["ready"], false);
    assert_eq!(r.json()["segment"]["ready"], true);
    // Segment mode serves meanwhile.
    plain_id(&get(&f.app, "/api/segment/get/t").await);
}

#[tokio::test]
async fn snowflake_past_the_end_of_its_timestamp_field_is_503_and_not_ready() {
    // 16 timestamp bits: the field ends 65,535 ms after the epoch; the clock starts 1 s before.
    let t0 = 1_700_000_000_000;
    let clock = ManualClock::new(t0);
    let f = Setup {
        clock: Some(clock.clone()),
        generator: SnowflakeConfig {
            layout: SnowflakeLayout::new(16, 10, 12, t0 - 64_535).unwrap(),
            ..SnowflakeConfig::default()
        },
        ..Setup::default()
    }
    .build()
    .await;
    plain_id(&get(&f.app, "/api/snowflake/get/x").await);
    assert_eq!(get(&f.app, "/readyz").await.status, 200);
    clock.advance(std::time::Duration::from_millis(2000));
    let g = f.generator.as_ref().unwrap();
    assert!(g.renew_once().await.unwrap().is_ok());
    let m = get(&f.app, "/api/snowflake/get/x").await.error(503, -5);
    assert!(m.contains("exhausted"), "{m}");
    let r = get(&f.app, "/readyz").await;
    let m = r.error(503, 503);
    assert!(m.contains("ran out"), "{m}");
    assert_eq!(r.json()["snowflake"]["ready"], false);
}

#[tokio::test]
async fn wall_clock_jump_forward_is_503_minus_3_and_not_ready_until_undone() {
    let t0 = 1_700_000_000_000;
    let (f, clock) = serving_on_manual_clock(t0).await;
    let g = f.generator.as_ref().unwrap();
    clock.set_ms(t0 + 3_600_000);
    g.renew_once().await.ok();
    let m = get(&f.app, "/api/snowflake/get/x").await.error(503, -3);
    assert!(m.contains("jumped"), "{m}");
    let m = get(&f.app, "/readyz").await.error(503, 503);
    assert!(m.contains("jumped"), "{m}");
    let metrics = get(&f.app, "/metrics").await.text();
    assert!(
        metrics.contains("leaf_snowflake_clock_jumps_total 1"),
        "{metrics}"
    );
    clock.set_ms(t0);
    assert!(g.renew_once().await.unwrap().is_ok());
    assert_eq!(get(&f.app, "/readyz").await.status, 200);
    plain_id(&get(&f.app, "/api/snowflake/get/x").await);
}

#[tokio::test]
async fn snowflake_not_started_is_503() {
    let service = SnowflakeService::pending(&Error::Unavailable("the registry is down".into()));
    let state = AppState::new(
        &Config::default(),
        SnowflakeLayout::default(),
        None,
        Some(service),
        Arc::new(Metrics::new()),
    );
    let app = app(state);
    let m = get(&app, "/api/snowflake/get/x").await.error(503, 503);
    assert!(m.contains("not available"), "{m}");
    get(&app, "/readyz").await.error(503, 503);
}

#[tokio::test]
async fn backend_error_text_never_reaches_clients() {
    // A cache-file failure as the OS words it, and a driver's message with a host.
    let os = "cannot lock /srv/secret/leaf-data/worker-leaf.lock: Permission denied (os error 13)";
    let sql =
        "error returned from database: 1045 (28000): Access denied for user 'leaf'@'10.9.8.7'";
    let store = Arc::new(MemoryStore::with_tags([("t", 10)]));
    let allocator = SegmentAllocator::new(
        store,
        Arc::new(SystemClock::new()),
        SegmentConfig::default(),
    );
    let segment = SegmentService::starting(allocator, &Error::Unavailable(format!("mysql: {sql}")));
    let snowflake = SnowflakeService::pending(&Error::backend("cache-file", os));
    let app = app(AppState::new(
        &Config::default(),
        SnowflakeLayout::default(),
        Some(segment.clone()),
        Some(snowflake.clone()),
        Arc::new(Metrics::new()),
    ));
    let check = |what: &str, body: &str| {
        for secret in ["/srv/secret", "os error", "10.9.8.7", "Access denied"] {
            assert!(!body.contains(secret), "{what}: {body}");
        }
    };
    for uri in [
        "/api/snowflake/get/x",
        "/v1/snowflake",
        "/api/segment/get/t",
        "/v1/segment/t",
    ] {
        let r = get(&app, uri).await;
        assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{uri}");
        check(uri, &r.text());
    }
    let r = get(&app, "/readyz").await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    check("/readyz", &r.text());
    // The reasons a retrying start-up records later are cleaned the same way.
    segment.set_not_ready_reason(&Error::backend("sqlite", os));
    snowflake.set_pending_reason(&Error::Unavailable(format!("cache file: {os}")));
    check("/readyz", &get(&app, "/readyz").await.text());
    check("segment", &get(&app, "/api/segment/get/t").await.text());
    check("snowflake", &get(&app, "/api/snowflake/get/x").await.text());
}

#[tokio::test]
async fn lease_lost_is_503_with_code_minus_4() {
    let f = fixture().await;
    plain_id(&get(&f.app, "/api/snowflake/get/x").await);
    f.registry.lost.store(true, Ordering::SeqCst);
    let g = f.generator.as_ref().unwrap();
    assert_eq!(g.renew_once().await.unwrap(), Renewal::LeaseLost);
    get(&f.app, "/api/snowflake/get/x").await.error(503, -4);
    get(&f.app, "/readyz").await.error(503, 503);
}

#[tokio::test]
async fn clock_moved_back_is_503_with_code_minus_3_until_it_catches_up() {
    let (f, clock) = serving_on_manual_clock(1_700_000_000_000).await;
    clock.back(1500);
    let r = get(&f.app, "/api/snowflake/get/x").await;
    let m = r.error(503, -3);
    assert!(m.contains("1500"), "{m}");
    assert_eq!(r.headers[header::RETRY_AFTER], "2");
    let r = get(&f.app, "/readyz").await;
    r.error(503, 503);
    assert_eq!(r.headers[header::RETRY_AFTER], "2");
    clock.advance(std::time::Duration::from_millis(1501));
    assert_eq!(get(&f.app, "/readyz").await.status, 200);
    plain_id(&get(&f.app, "/api/snowflake/get/x").await);
}

#[tokio::test]
async fn registry_mark_lag_is_a_metric_where_the_registry_keeps_a_copy() {
    let f = fixture().await;
    let name = "leaf_snowflake_registry_mark_lag_seconds";
    let text = get(&f.app, "/metrics").await.text();
    assert!(!text.contains(name), "no copy, no metric:\n{text}");
    let durable = f.generator.as_ref().unwrap().status().durable_mark_ms;
    f.registry
        .confirmed_ms
        .store(durable - 2500, Ordering::SeqCst);
    let text = get(&f.app, "/metrics").await.text();
    assert!(
        text.lines().any(|l| l == format!("{name} 2.5")),
        "{name} 2.5 expected:\n{text}"
    );
}

#[tokio::test]
async fn health_ready_and_metrics() {
    let f = fixture().await;
    let r = get(&f.app, "/healthz").await;
    assert_eq!(
        (r.status.as_u16(), r.json()["status"].as_str()),
        (200, Some("ok"))
    );
    let r = get(&f.app, "/readyz").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["ready"], true);
    get(&f.app, "/api/segment/get/t").await;
    get(&f.app, "/v1/segment/t?count=4").await;
    get(&f.app, "/api/snowflake/get/x").await;
    get(&f.app, "/api/segment/get/nope").await;
    let r = get(&f.app, "/metrics").await;
    assert_eq!(r.status, 200);
    assert!(
        r.headers[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/plain; version=0.0.4")
    );
    let text = r.text();
    let has = |line: &str| assert!(text.lines().any(|l| l == line), "{line}\n{text}");
    has("leaf_ids_issued_total{mode=\"segment\",tag=\"t\"} 5");
    has("leaf_ids_issued_total{mode=\"snowflake\",tag=\"\"} 1");
    has("leaf_requests_total{route=\"/api/segment/get/{*key}\",status=\"200\"} 1");
    has("leaf_requests_total{route=\"/api/segment/get/{*key}\",status=\"404\"} 1");
    has("leaf_requests_total{route=\"/v1/segment/{*tag}\",status=\"200\"} 1");
    has("leaf_worker_lease_valid 1");
    has("leaf_snowflake_clock_backwards_total 0");
    for name in [
        "leaf_request_duration_seconds_bucket{route=\"/api/segment/get/{*key}\",le=\"+Inf\"} 2",
        "# TYPE leaf_segment_remaining gauge",
        "# TYPE leaf_segment_loads_total counter",
        "# TYPE leaf_segment_load_duration_seconds histogram",
        "# TYPE leaf_snowflake_mark_lag_seconds gauge",
    ] {
        has(name);
    }
    assert!(
        text.contains("leaf_segment_remaining{tag=\"t\"} "),
        "{text}"
    );
    // A tag nobody asked for is known but not loaded: no "remaining 0" to alert on.
    has("leaf_segment_loaded{tag=\"t\"} 1");
    has("leaf_segment_loaded{tag=\"leaf-segment-test\"} 0");
    assert!(
        !text.contains("leaf_segment_remaining{tag=\"leaf-segment-test\"}"),
        "{text}"
    );
    assert!(
        text.contains("leaf_segment_loads_total{tag=\"t\",result=\"ok\"} "),
        "{text}"
    );
    assert!(text.contains("leaf_snowflake_mark_lag_seconds "), "{text}");
    assert!(
        !text.contains("nope"),
        "an unknown tag never becomes a label"
    );
}

#[tokio::test]
async fn unknown_routes_and_methods_are_json_errors() {
    let f = fixture().await;
    get(&f.app, "/nowhere").await.error(404, 404);
    get(&f.app, "/api/segment").await.error(404, 404);
    send(&f.app, Method::DELETE, "/v1/tags/t", LOCAL, &[], None)
        .await
        .error(405, 405);
    send(
        &f.app,
        Method::DELETE,
        "/api/segment/get/t",
        LOCAL,
        &[],
        None,
    )
    .await
    .error(405, 405);
    send(&f.app, Method::POST, "/v1/snowflake", LOCAL, &[], None)
        .await
        .error(405, 405);
}
