//! The SQL segment stores on a real server: Leaf's seed row allocated as Leaf does, a table
//! without Leaf's columns, credentials refused at start-up, a server that is not there, and
//! `Debug`.

use std::time::{Duration, Instant};

use leaf_core::Error;
use serde_json::json;

use crate::sql::{SqlBackend, SqlFix, config_of, database, store_of, unreachable_url};

/// A `leaf_alloc` without Leaf's columns stops start-up with `Config` naming the URL's key.
pub async fn a_table_without_leafs_columns_is_a_config_error<B: SqlBackend>() {
    let db = database::<B>().await;
    db.exec("CREATE TABLE leaf_alloc (biz_tag varchar(128) PRIMARY KEY, max_id bigint)")
        .await;
    let e = store_of::<B>(&config_of::<B>(&db.url, json!({})))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::Config(m) if m.starts_with("url")),
        "{e}"
    );
}

/// A password the server refuses at start-up is `Config`, and the message does not show it.
pub async fn a_wrong_password_is_a_config_error_that_does_not_show_it<B: SqlBackend>() {
    let db = database::<B>().await;
    let config = config_of::<B>(&db.url, json!({ "password": "not-the-password" }));
    let e = store_of::<B>(&config).await.unwrap_err();
    assert!(
        matches!(&e, Error::Config(m) if m.starts_with("url")),
        "{e}"
    );
    assert!(!e.to_string().contains("not-the-password"), "{e}");
}

/// A server that is not there: `Unavailable` (retryable), within the timeouts.
pub async fn an_unreachable_server_is_unavailable_quickly<B: SqlBackend>() {
    let changes = json!({ "connect_timeout_ms": 300, "timeout_ms": 1000 });
    let config = config_of::<B>(&unreachable_url::<B>(), changes);
    let started = Instant::now();
    let e = store_of::<B>(&config).await.unwrap_err();
    assert!(
        matches!(e, Error::Unavailable(_)) && e.is_retryable(),
        "{e}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

/// A store's `Debug` shows the URL without its password.
pub async fn debug_output_hides_the_password<B: SqlBackend>() {
    let fix = SqlFix::<B>::new().await;
    let store = crate::StoreFixture::store(&fix).await;
    let shown = format!("{store:?}");
    assert!(!shown.contains(":leaftest@"), "{shown}");
    assert!(shown.contains(&fix.hidden_password()), "{shown}");
}

/// Leaf's seed row (`leaf-segment-test`, `max_id` 1, step 2000, its description), inserted as
/// Leaf's DDL and data have it: the store allocates from it as Leaf does (the stored step, then
/// a dynamic one), leaves its step and description alone, and sets its `update_time`.
pub async fn leafs_seed_row_allocates_as_leaf_does(store: &dyn leaf_core::SegmentStore) {
    let tag = leaf_core::Tag::new("leaf-segment-test").unwrap();
    assert_eq!(store.allocate(&tag, None).await.unwrap().range(), 1..2001);
    assert_eq!(
        store.allocate(&tag, Some(500)).await.unwrap().range(),
        2001..2501
    );
    let rec = store.get(&tag).await.unwrap().expect("the row");
    assert_eq!((rec.max_id, rec.step), (2501, 2000));
    assert_eq!(
        rec.description.as_deref(),
        Some("Test leaf Segment Mode Get Id")
    );
    assert!(
        rec.updated_at_ms.is_some_and(|ms| ms > 1_600_000_000_000),
        "an allocation sets update_time: {rec:?}"
    );
}

/// Credentials the server refuses once `store` served (changed or revoked while serving):
/// allocating `tag` is a retryable `Unavailable`, whose text shows neither the server's own
/// words (`server_text`) nor the user's name.
pub async fn refused_credentials_while_serving_are_unavailable(
    store: &dyn leaf_core::SegmentStore,
    tag: &leaf_core::Tag,
    server_text: &str,
    user: &str,
) {
    let e = store
        .allocate(tag, None)
        .await
        .expect_err("refused credentials");
    assert!(
        matches!(&e, Error::Unavailable(_)) && e.is_retryable(),
        "refused credentials while serving: {e:?}"
    );
    let text = e.to_string();
    assert!(
        !text.contains(server_text) && !text.contains(user),
        "the server's text reached the message: {text}"
    );
}
