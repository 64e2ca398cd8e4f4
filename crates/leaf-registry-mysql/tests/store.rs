//! The MySQL segment store on a real server: what every SQL store runs
//! (`leaf_testkit::sql_cases::store`), Leaf's table used as it is, created only when missing,
//! and credentials revoked while serving.

mod common;

use leaf_core::{SegmentStore, Tag};
use leaf_registry_mysql::{LEAF_ALLOC_DDL, MysqlConfig, MysqlStore};
use leaf_testkit::sql::database;
use sqlx::{AssertSqlSafe, Connection, MySqlConnection, Row};

use common::Backend;

leaf_testkit::sql_store_tests!(Backend);

async fn raw(url: &str) -> MySqlConnection {
    MySqlConnection::connect(url).await.expect("raw connection")
}

async fn show_create(conn: &mut MySqlConnection, table: &str) -> String {
    let row = sqlx::query(AssertSqlSafe(format!("SHOW CREATE TABLE {table}")))
        .fetch_one(conn)
        .await
        .expect("show create table");
    row.try_get::<String, _>(1).expect("ddl text")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_existing_leaf_table_is_used_as_it_is() {
    let db = database::<Backend>().await;
    let mut conn = raw(&db.url).await;
    // A Leaf database that someone changed a little: it must stay exactly as it is.
    sqlx::query(
        "CREATE TABLE leaf_alloc (biz_tag varchar(128) NOT NULL DEFAULT '', max_id bigint(20) \
         NOT NULL DEFAULT '1', step int(11) NOT NULL, description varchar(512) DEFAULT NULL, \
         update_time timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP, \
         owner varchar(32) DEFAULT NULL, PRIMARY KEY (biz_tag)) ENGINE=InnoDB",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO leaf_alloc (biz_tag, max_id, step, description) \
         VALUES ('leaf-segment-test', 1, 2000, 'Test leaf Segment Mode Get Id')",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let before = show_create(&mut conn, "leaf_alloc").await;

    let store = MysqlStore::connect(&MysqlConfig::with_url(&db.url))
        .await
        .unwrap();
    leaf_testkit::sql_cases::store::leafs_seed_row_allocates_as_leaf_does(&store).await;

    assert_eq!(
        show_create(&mut conn, "leaf_alloc").await,
        before,
        "the table was altered"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_table_is_created_with_leafs_ddl() {
    let db = database::<Backend>().await;
    MysqlStore::connect(&MysqlConfig::with_url(&db.url))
        .await
        .unwrap();
    // The same DDL run by hand in a second database gives the same table.
    let reference = database::<Backend>().await;
    let mut conn = raw(&reference.url).await;
    sqlx::query(LEAF_ALLOC_DDL)
        .execute(&mut conn)
        .await
        .unwrap();
    let expected = show_create(&mut conn, "leaf_alloc").await;
    let mut conn = raw(&db.url).await;
    assert_eq!(show_create(&mut conn, "leaf_alloc").await, expected);
    assert!(expected.contains("`update_time` timestamp NOT NULL DEFAULT current_timestamp() ON UPDATE current_timestamp()")
        || expected.contains("`update_time` timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP"),
        "{expected}");
    // A second start finds the table and leaves it.
    MysqlStore::connect(&MysqlConfig::with_url(&db.url))
        .await
        .unwrap();
}

/// Credentials revoked while serving are an outage (503, retryable), not a server error, and
/// the client-facing message carries none of the server's text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_refused_while_serving_are_unavailable() {
    let db = database::<Backend>().await;
    let mut admin = raw(&db.url).await;
    let user = format!("rt{}", fastrand::u32(..));
    for sql in [
        format!("CREATE USER '{user}'@'%' IDENTIFIED BY 'first'"),
        format!("GRANT ALL PRIVILEGES ON {}.* TO '{user}'@'%'", db.name),
    ] {
        sqlx::query(AssertSqlSafe(sql))
            .execute(&mut admin)
            .await
            .unwrap();
    }
    let (host, path) = db.url.rsplit_once('@').unwrap().1.split_once('/').unwrap();
    let url = format!("mysql://{user}:first@{host}/{path}");
    let store = MysqlStore::connect_url(&url).await.expect("connect");
    let tag = Tag::new("rt").unwrap();
    store
        .create(&leaf_core::NewTag::new(tag.clone()))
        .await
        .unwrap();
    store.allocate(&tag, None).await.expect("allocate");
    sqlx::query(AssertSqlSafe(format!(
        "ALTER USER '{user}'@'%' IDENTIFIED BY 'second'"
    )))
    .execute(&mut admin)
    .await
    .unwrap();
    let ids: Vec<i64> = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT ID FROM information_schema.PROCESSLIST WHERE USER = '{user}'"
    )))
    .fetch_all(&mut admin)
    .await
    .unwrap();
    for id in ids {
        sqlx::query(AssertSqlSafe(format!("KILL CONNECTION {id}")))
            .execute(&mut admin)
            .await
            .unwrap();
    }
    leaf_testkit::sql_cases::store::refused_credentials_while_serving_are_unavailable(
        &store,
        &tag,
        "Access denied",
        &user,
    )
    .await;
}
