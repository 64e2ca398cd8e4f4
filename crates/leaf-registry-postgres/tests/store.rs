//! The PostgreSQL segment store on a real server: what every SQL store runs
//! (`leaf_testkit::sql_cases::store`), Leaf's table used as it is, created only when missing
//! (also by racing servers, or by someone else at the same moment), the end of the bigint
//! column, and errors by kind.

mod common;

use std::time::Duration;

use leaf_core::{Error, NewTag, SegmentStore, Tag};
use leaf_registry_postgres::{LEAF_ALLOC_DDL, PostgresConfig, PostgresStore};
use leaf_testkit::sql::database;
use sqlx::{AssertSqlSafe, Connection, PgConnection, Row};

use common::Backend;

leaf_testkit::sql_store_tests!(Backend);

fn config(db: &leaf_testkit::provision::SqlDatabase) -> PostgresConfig {
    PostgresConfig::with_url(&db.url)
}

async fn raw(url: &str) -> PgConnection {
    PgConnection::connect(url).await.expect("raw connection")
}

async fn exec(conn: &mut PgConnection, sql: &str) {
    sqlx::raw_sql(AssertSqlSafe(sql.to_owned()))
        .execute(conn)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// Everything that describes `table`: its columns (type, length, nullability, default), its
/// indexes and constraints, and the catalog row's version (`xmin`), which any `ALTER TABLE`
/// changes.
async fn definition(conn: &mut PgConnection, table: &str) -> Vec<String> {
    let rows = sqlx::query(
        "SELECT format('%s %s %s %s %s', column_name, data_type, character_maximum_length, \
         is_nullable, column_default) FROM information_schema.columns \
         WHERE table_schema = current_schema() AND table_name = $1 \
         UNION ALL SELECT indexdef FROM pg_indexes \
         WHERE schemaname = current_schema() AND tablename = $1 \
         UNION ALL SELECT pg_get_constraintdef(oid) FROM pg_constraint \
         WHERE conrelid = to_regclass($1) \
         UNION ALL SELECT 'xmin ' || xmin::text FROM pg_class WHERE oid = to_regclass($1) \
         ORDER BY 1",
    )
    .bind(table)
    .fetch_all(conn)
    .await
    .expect("the table's definition");
    rows.iter().map(|r| r.get::<String, _>(0)).collect()
}

/// Every row of `leaf_alloc`, every column as text, in `biz_tag` order.
async fn rows(conn: &mut PgConnection) -> Vec<String> {
    sqlx::query_scalar("SELECT t::text FROM leaf_alloc t ORDER BY biz_tag")
        .fetch_all(conn)
        .await
        .expect("the rows")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_existing_leaf_table_and_its_rows_are_left_exactly_as_they_were() {
    let db = database::<Backend>().await;
    let mut conn = raw(&db.url).await;
    // A Leaf database moved to PostgreSQL by hand and changed a little: a `bigint` step, a
    // longer description, a `timestamp` without time zone that may be null, a column of its
    // own. It must stay exactly as it is.
    exec(
        &mut conn,
        "CREATE TABLE leaf_alloc (biz_tag varchar(128) NOT NULL DEFAULT '', max_id bigint \
         NOT NULL DEFAULT 1, step bigint NOT NULL, description varchar(512) DEFAULT NULL, \
         update_time timestamp DEFAULT NULL, owner varchar(32) DEFAULT NULL, \
         PRIMARY KEY (biz_tag)); \
         INSERT INTO leaf_alloc (biz_tag, max_id, step, description, update_time, owner) VALUES \
         ('leaf-segment-test', 1, 2000, 'Test leaf Segment Mode Get Id', \
          '2019-01-02 03:04:05', 'ops'), \
         ('other', 5000, 100, NULL, NULL, NULL)",
    )
    .await;
    let (before, rows_before) = (
        definition(&mut conn, "leaf_alloc").await,
        rows(&mut conn).await,
    );

    let store = PostgresStore::connect(&config(&db)).await.unwrap();
    assert_eq!(
        rows(&mut conn).await,
        rows_before,
        "opening the store changed a row"
    );
    let listed = store.list().await.unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[1].updated_at_ms, None, "a null update_time");
    assert_eq!(
        listed[0].updated_at_ms,
        Some(1_546_398_245_000),
        "2019-01-02 03:04:05 as Unix ms"
    );

    leaf_testkit::sql_cases::store::leafs_seed_row_allocates_as_leaf_does(&store).await;
    let owner: Option<String> =
        sqlx::query_scalar("SELECT owner FROM leaf_alloc WHERE biz_tag = 'leaf-segment-test'")
            .fetch_one(&mut conn)
            .await
            .unwrap();
    assert_eq!(owner.as_deref(), Some("ops"), "a column of its own kept");
    // The row of the other tag, not allocated from, is exactly as it was.
    assert_eq!(rows(&mut conn).await[1], rows_before[1]);

    assert_eq!(
        definition(&mut conn, "leaf_alloc").await,
        before,
        "the table was altered"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_table_is_created_with_leafs_columns() {
    let db = database::<Backend>().await;
    PostgresStore::connect(&config(&db)).await.unwrap();
    // The same DDL run by hand in a second database gives the same table.
    let reference = database::<Backend>().await;
    let mut conn = raw(&reference.url).await;
    exec(&mut conn, LEAF_ALLOC_DDL).await;
    let strip_xmin = |mut d: Vec<String>| {
        d.retain(|l| !l.starts_with("xmin "));
        d
    };
    let expected = strip_xmin(definition(&mut conn, "leaf_alloc").await);
    let mut conn = raw(&db.url).await;
    let created = definition(&mut conn, "leaf_alloc").await;
    assert_eq!(strip_xmin(created.clone()), expected);
    for column in [
        "biz_tag character varying 128 NO ''::character varying",
        "max_id bigint  NO 1",
        "step integer  NO ",
        "description character varying 256 YES NULL::character varying",
        "update_time timestamp with time zone  NO CURRENT_TIMESTAMP",
    ] {
        assert!(
            expected.iter().any(|l| l == column),
            "{column} in {expected:?}"
        );
    }
    // A second start finds the table and leaves it.
    PostgresStore::connect(&config(&db)).await.unwrap();
    assert_eq!(definition(&mut conn, "leaf_alloc").await, created);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_first_starts_create_the_table_once() {
    // Racing `CREATE TABLE`s fail in several ways (seen: the row type "already exists"); a few
    // rounds of eight racers meet them.
    for _ in 0..4 {
        let db = database::<Backend>().await;
        let starts: Vec<_> = (0..8)
            .map(|_| {
                let config = config(&db);
                tokio::spawn(async move { PostgresStore::connect(&config).await.map(drop) })
            })
            .collect();
        for s in starts {
            s.await.unwrap().expect("every racer starts");
        }
    }
}

/// The end of the bigint column: the last IDs are handed out (the step cut to what is left),
/// then `Exhausted`; a row with a step that is not positive is refused, and neither near the
/// end makes the guarded statement overflow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_near_i64_max_hands_out_its_last_ids_then_is_exhausted() {
    let db = database::<Backend>().await;
    let store = PostgresStore::connect(&config(&db)).await.unwrap();
    let mut conn = raw(&db.url).await;
    exec(
        &mut conn,
        "INSERT INTO leaf_alloc (biz_tag, max_id, step) VALUES \
         ('end', 9223372036854775797, 2000), ('end-dynamic', 9223372036854775000, 10), \
         ('bad-step', 9223372036854775800, -5), ('zero-step', 1, 0)",
    )
    .await;
    let end = Tag::new("end").unwrap();
    let a = store.allocate(&end, None).await.unwrap();
    assert_eq!(a.range(), i64::MAX - 10..i64::MAX);
    assert_eq!((a.used_step, a.step), (10, 2000));
    let e = store.allocate(&end, None).await.unwrap_err();
    assert!(matches!(e, Error::Exhausted(_)), "{e}");
    assert!(!e.is_retryable());

    // The dynamic step, cut the same way.
    let dynamic = Tag::new("end-dynamic").unwrap();
    let a = store.allocate(&dynamic, Some(500)).await.unwrap();
    assert_eq!(a.range(), 9223372036854775000..9223372036854775500);
    let a = store.allocate(&dynamic, Some(500)).await.unwrap();
    assert_eq!(a.range(), 9223372036854775500..i64::MAX);
    let e = store.allocate(&dynamic, Some(500)).await.unwrap_err();
    assert!(matches!(e, Error::Exhausted(_)), "{e}");

    for tag in ["bad-step", "zero-step"] {
        let e = store
            .allocate(&Tag::new(tag).unwrap(), None)
            .await
            .unwrap_err();
        assert!(
            matches!(&e, Error::InvalidInput(m) if m.contains("step")),
            "{tag}: {e}"
        );
    }
    let max: i64 = sqlx::query_scalar("SELECT max_id FROM leaf_alloc WHERE biz_tag = 'bad-step'")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(max, 9223372036854775800, "a refused row is left as it was");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn created_and_updated_rows_come_back_as_stored() {
    let db = database::<Backend>().await;
    let store = PostgresStore::connect(&config(&db)).await.unwrap();
    let tag = Tag::new("order").unwrap();
    let created = store
        .create(&NewTag {
            max_id: 100,
            step: 50,
            description: Some("made here".into()),
            ..NewTag::new(tag.clone())
        })
        .await
        .unwrap();
    assert_eq!(
        (created.max_id, created.step, created.description.as_deref()),
        (100, 50, Some("made here"))
    );
    let e = store.create(&NewTag::new(tag.clone())).await.unwrap_err();
    assert!(matches!(e, Error::AlreadyExists(_)), "{e}");
    let updated = store
        .update(
            &tag,
            &leaf_core::TagUpdate {
                step: Some(70),
                description: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(
        (updated.max_id, updated.step, updated.description.as_deref()),
        (100, 70, Some("made here"))
    );
    let e = store
        .update(
            &Tag::new("absent").unwrap(),
            &leaf_core::TagUpdate::default(),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, Error::NotFound(_)), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_database_is_a_config_error() {
    let db = database::<Backend>().await;
    let url = db.url.replace(&db.name, "leaftest_no_such_database");
    let e = PostgresStore::connect_url(&url).await.unwrap_err();
    assert!(
        matches!(&e, Error::Config(m) if m.starts_with("url") && m.contains("does not exist")),
        "{e}"
    );
}

/// Credentials revoked while serving are an outage (503, retryable), not a server error, and
/// the client-facing message carries none of the server's text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_refused_while_serving_are_unavailable() {
    let db = database::<Backend>().await;
    let mut admin = raw(&db.url).await;
    let role = format!("rt{}", fastrand::u32(..));
    // The database's owner may create the table in its public schema.
    exec(
        &mut admin,
        &format!(
            "CREATE ROLE {role} LOGIN PASSWORD 'first'; ALTER DATABASE {} OWNER TO {role}",
            db.name
        ),
    )
    .await;
    let (host, path) = db.url.rsplit_once('@').unwrap().1.split_once('/').unwrap();
    let url = format!("postgres://{role}:first@{host}/{path}");
    let store = PostgresStore::connect_url(&url).await.expect("connect");
    let tag = Tag::new("rt").unwrap();
    store.create(&NewTag::new(tag.clone())).await.unwrap();
    store.allocate(&tag, None).await.expect("allocate");
    exec(
        &mut admin,
        &format!(
            "ALTER ROLE {role} PASSWORD 'second'; \
             SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{role}'"
        ),
    )
    .await;
    leaf_testkit::sql_cases::store::refused_credentials_while_serving_are_unavailable(
        &store,
        &tag,
        "password authentication",
        &role,
    )
    .await;
    drop(store);
    // Roles belong to the whole server: this one goes with the test.
    exec(
        &mut admin,
        &format!(
            "ALTER DATABASE {} OWNER TO CURRENT_USER; REASSIGN OWNED BY {role} TO CURRENT_USER; \
             DROP OWNED BY {role}; DROP ROLE {role}",
            db.name
        ),
    )
    .await;
}

/// Someone else (a DBA, a migration tool) creates `leaf_alloc` at the very moment a server
/// starts: the server's own `CREATE TABLE` waits for that transaction, finds the table made
/// when it commits, and takes it as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_created_by_someone_else_at_the_same_moment_is_taken() {
    let db = database::<Backend>().await;
    let mut other = raw(&db.url).await;
    exec(&mut other, "BEGIN").await;
    exec(
        &mut other,
        "CREATE TABLE leaf_alloc (biz_tag varchar(128) PRIMARY KEY, max_id bigint NOT NULL \
         DEFAULT 1, step integer NOT NULL, description varchar(256), \
         update_time timestamptz DEFAULT now(), made_by text DEFAULT 'dba')",
    )
    .await;
    let config = config(&db);
    let start = tokio::spawn(async move { PostgresStore::connect(&config).await });
    // The start is waiting on the uncommitted table, not done.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !start.is_finished(),
        "the start did not wait for the other creator"
    );
    exec(&mut other, "COMMIT").await;
    let store = start
        .await
        .unwrap()
        .expect("the start takes the table made meanwhile");
    let tag = Tag::new("t").unwrap();
    store.create(&NewTag::new(tag.clone())).await.unwrap();
    assert_eq!(store.allocate(&tag, None).await.unwrap().range(), 1..2001);
    let made_by: String = sqlx::query_scalar("SELECT made_by FROM leaf_alloc")
        .fetch_one(&mut other)
        .await
        .unwrap();
    assert_eq!(
        made_by, "dba",
        "the other creator's table is the one in use"
    );
}
