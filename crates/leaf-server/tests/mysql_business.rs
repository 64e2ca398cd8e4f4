//! Business tags on a MySQL table that cannot hold every character of a definition (issue 32):
//! a `description` column in `latin1`, or in 3-byte `utf8`, on a server in non-strict mode,
//! where MySQL stores `?` for what the column lacks and only warns. The node that creates the
//! tag must read its definition back and refuse it, and no node may ever read the changed text
//! as a business tag (it would print other IDs than the creator's).
//!
//! `sql_mode` is a server-wide default (sqlx sets each session's from the global one), so the
//! test runs a MySQL-compatible server of its own: a container of `LEAFTEST_MYSQL_IMAGE`
//! (default the official `mariadb:11`).
#![cfg(feature = "mysql")]

#[path = "common/router.rs"]
mod router;

use axum::http::StatusCode;
use leaf_server::app;
use leaf_server::config::Config;
use leaf_testkit::provision::{self, MysqlDatabase};
use sqlx::mysql::MySqlPool;
use sqlx::{AssertSqlSafe, Executor, Row};

use router::call;

async fn exec(pool: &MySqlPool, sql: &str) {
    pool.execute(AssertSqlSafe(sql.to_owned()))
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// Leaf's table with its `description` column in `charset`.
fn leaf_alloc_with_description_in(charset: &str) -> String {
    format!(
        "CREATE TABLE leaf_alloc (biz_tag varchar(128) NOT NULL DEFAULT '', \
         max_id bigint(20) NOT NULL DEFAULT '1', step int(11) NOT NULL, \
         description varchar(256) CHARACTER SET {charset} DEFAULT NULL, \
         update_time timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP, \
         PRIMARY KEY (biz_tag)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
    )
}

/// A node on `db`'s MySQL store as `server::start` builds it, segment mode only.
async fn node(db: &MysqlDatabase) -> (leaf_server::server::Running, axum::Router) {
    let mut config = Config::default();
    config.snowflake.enabled = false;
    config.segment.store = "mysql".into();
    config.segment.stores.insert("url", &db.url);
    config.segment.stores.insert("max_connections", 2);
    config.validate().unwrap();
    let running = leaf_server::server::start(&config, "127.0.0.1:8080".parse().unwrap())
        .await
        .unwrap_or_else(|e| panic!("start on mysql: {e:#}"));
    let app = app(running.state.clone());
    (running, app)
}

async fn description(root: &MySqlPool, tag: &str) -> Option<String> {
    sqlx::query("SELECT description FROM leaf_alloc WHERE biz_tag = ?")
        .bind(tag)
        .fetch_optional(root)
        .await
        .unwrap()
        .and_then(|r| r.get::<Option<String>, _>(0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_definition_the_column_cannot_hold_is_refused_and_never_read() {
    let server = provision::dedicated(&provision::MYSQL)
        .await
        .unwrap_or_else(|e| panic!("a MySQL server of the test's own: {e}"));
    {
        let db = provision::mysql_database_on(server.endpoint())
            .await
            .unwrap();
        let root = MySqlPool::connect(&db.url).await.unwrap();
        // Every later session, the store's included, in non-strict mode.
        exec(&root, "SET GLOBAL sql_mode = ''").await;
        root.close().await;
    }
    for (charset, format) in [
        ("latin1", "订单{date:%Y%m%d}{seq:06}"),
        ("utf8mb3", "🎫{date:%Y%m%d}{seq:06}"),
    ] {
        let db = provision::mysql_database_on(server.endpoint())
            .await
            .unwrap();
        let root = MySqlPool::connect(&db.url).await.unwrap();
        let mode: String = sqlx::query("SELECT @@SESSION.sql_mode")
            .fetch_one(&root)
            .await
            .unwrap()
            .get(0);
        assert!(!mode.contains("STRICT"), "{mode}");
        exec(&root, &leaf_alloc_with_description_in(charset)).await;
        let (_a, a) = node(&db).await;
        let (_b, b) = node(&db).await;
        let body = serde_json::json!({
            "tag": "order", "reset": "day", "time_zone": "Asia/Shanghai", "format": format,
        });
        let (status, answer) = call(&a, "POST", "/v1/tags", &body.to_string()).await;
        let stored = description(&root, "order@").await;
        assert_eq!(
            status,
            StatusCode::BAD_REQUEST,
            "{charset}: {answer}; the store holds {stored:?}"
        );
        assert!(answer.contains("cannot hold"), "{charset}: {answer}");
        // Neither node, nor one started now, reads what the store holds as a business tag.
        let (_c, c) = node(&db).await;
        for (name, app) in [("a", &a), ("b", &b), ("c", &c)] {
            let (status, answer) = call(app, "GET", "/api/segment/get/order", "").await;
            assert_ne!(status, StatusCode::OK, "node {name} printed {answer}");
            let (status, answer) = call(app, "GET", "/v1/decode/order?id=x", "").await;
            assert_eq!(status, StatusCode::NOT_FOUND, "node {name}: {answer}");
        }
        let rows: Vec<String> = sqlx::query("SELECT biz_tag FROM leaf_alloc ORDER BY biz_tag")
            .fetch_all(&root)
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(
            rows,
            ["leaf-segment-test", "order", "order@"],
            "{charset}: no period row"
        );
        let left = description(&root, "order@").await.unwrap_or_default();
        assert!(!left.starts_with("leaf-props:"), "{charset}: {left}");
        // What the column holds works as ever.
        let body = r#"{"tag":"ticket","reset":"day","format":"T{date:%Y%m%d}{seq:06}"}"#;
        let (status, answer) = call(&a, "POST", "/v1/tags", body).await;
        assert_eq!(status, StatusCode::CREATED, "{charset}: {answer}");
        let (status, answer) = call(&b, "GET", "/api/segment/get/ticket", "").await;
        assert_eq!(status, StatusCode::OK, "{charset}: {answer}");
        assert!(
            answer.starts_with('T') && answer.ends_with("000001"),
            "{answer}"
        );
        root.close().await;
    }
}
