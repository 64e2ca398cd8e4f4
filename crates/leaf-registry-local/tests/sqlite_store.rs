//! The SQLite store beyond the conformance suite: two stores on one file, the file and schema
//! it creates, a Leaf-shaped table made elsewhere, and its errors.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use leaf_core::{Error, NewTag, SegmentStore, Tag};
use leaf_registry_local::{LEAF_ALLOC_DDL, SqliteStore, SqliteStoreConfig};
use leaf_testkit::store_cases::assert_disjoint_and_contiguous;
use sqlx::{Connection, Row, SqliteConnection};

fn url(dir: &tempfile::TempDir, file: &str) -> String {
    format!("sqlite://{}", dir.path().join(file).display())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_on_one_file_never_overlap() {
    const TASKS: usize = 6;
    const EACH: usize = 40;
    const STEP: i64 = 3;
    let dir = tempfile::tempdir().unwrap();
    let u = url(&dir, "shared.db");
    let (a, b) = tokio::join!(SqliteStore::connect_url(&u), SqliteStore::connect_url(&u));
    let stores: [Arc<dyn SegmentStore>; 2] = [Arc::new(a.unwrap()), Arc::new(b.unwrap())];
    let tag = Tag::new("shared").unwrap();
    stores[0]
        .create(&NewTag {
            step: STEP,
            ..NewTag::new(tag.clone())
        })
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for i in 0..TASKS {
        let (store, tag) = (stores[i % 2].clone(), tag.clone());
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            for _ in 0..EACH {
                got.push(store.allocate(&tag, None).await.unwrap().range());
            }
            got
        }));
    }
    let mut ranges = Vec::new();
    for t in tasks {
        ranges.extend(t.await.unwrap());
    }
    let total = (TASKS * EACH) as i64;
    assert_eq!(ranges.len() as i64, total);
    assert_disjoint_and_contiguous(&ranges, 1, 1 + total * STEP);
}

#[tokio::test]
async fn connect_creates_the_file_its_directories_and_leafs_table_in_wal_mode() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a/b/leaf.db");
    assert!(!file.exists());
    let store = SqliteStore::connect(&SqliteStoreConfig {
        url: format!("sqlite://{}", file.display()),
        max_connections: 2,
        busy_timeout_ms: 1000,
    })
    .await
    .unwrap();
    assert!(file.exists());
    assert_eq!(store.kind(), "sqlite");
    let caps = store.capabilities();
    assert!(caps.durable && caps.multi_process);

    let mut c = SqliteConnection::connect(&format!("sqlite://{}", file.display()))
        .await
        .unwrap();
    let mode: String = sqlx::query("PRAGMA journal_mode")
        .fetch_one(&mut c)
        .await
        .unwrap()
        .get(0);
    assert_eq!(mode, "wal");
    let columns: Vec<(String, String, bool, Option<String>, i64)> =
        sqlx::query("PRAGMA table_info(leaf_alloc)")
            .fetch_all(&mut c)
            .await
            .unwrap()
            .iter()
            // SQLite spells some declared types in capitals.
            .map(|r| {
                let ty: String = r.get(2);
                (r.get(1), ty.to_lowercase(), r.get(3), r.get(4), r.get(5))
            })
            .collect();
    let expect = |n: &str, t: &str, notnull: bool, default: Option<&str>, pk: i64| {
        (
            n.to_string(),
            t.to_string(),
            notnull,
            default.map(String::from),
            pk,
        )
    };
    assert_eq!(
        columns,
        [
            expect("biz_tag", "varchar(128)", true, None, 1),
            expect("max_id", "bigint", true, Some("1"), 0),
            expect("step", "int", true, None, 0),
            expect("description", "varchar(256)", false, None, 0),
            expect(
                "update_time",
                "timestamp",
                true,
                Some("CURRENT_TIMESTAMP"),
                0
            ),
        ]
    );
}

#[tokio::test]
async fn a_leaf_table_made_elsewhere_is_used_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let u = format!("{}?mode=rwc", url(&dir, "leaf.db"));
    let mut c = SqliteConnection::connect(&u).await.unwrap();
    sqlx::query(LEAF_ALLOC_DDL).execute(&mut c).await.unwrap();
    // Leaf's quick-start row, inserted the way Leaf's README does it.
    sqlx::query(
        "INSERT INTO leaf_alloc(biz_tag, max_id, step, description) \
         VALUES('leaf-segment-test', 1, 2000, 'Test leaf Segment Mode Get Id')",
    )
    .execute(&mut c)
    .await
    .unwrap();
    c.close().await.unwrap();

    let store = SqliteStore::connect_url(&url(&dir, "leaf.db"))
        .await
        .unwrap();
    let tag = Tag::new("leaf-segment-test").unwrap();
    assert_eq!(store.allocate(&tag, None).await.unwrap().range(), 1..2001);
    let row = store.get(&tag).await.unwrap().unwrap();
    assert_eq!(
        row.description.as_deref(),
        Some("Test leaf Segment Mode Get Id")
    );
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let at = row.updated_at_ms.expect("update_time is read back");
    assert!(
        (now_ms - at).abs() < 60_000,
        "update_time {at} is not now ({now_ms})"
    );
    assert_eq!(at % 1000, 0, "CURRENT_TIMESTAMP has whole seconds");
}

#[tokio::test]
async fn a_write_lock_held_past_the_busy_timeout_is_a_retryable_backend_error() {
    let dir = tempfile::tempdir().unwrap();
    let u = url(&dir, "busy.db");
    let store = SqliteStore::connect(&SqliteStoreConfig {
        url: u.clone(),
        max_connections: 1,
        busy_timeout_ms: 100,
    })
    .await
    .unwrap();
    let tag = Tag::new("busy").unwrap();
    store.create(&NewTag::new(tag.clone())).await.unwrap();

    let mut other = SqliteConnection::connect(&u).await.unwrap();
    let tx = other.begin_with("BEGIN IMMEDIATE").await.unwrap();
    let e = store.allocate(&tag, None).await.unwrap_err();
    assert!(
        matches!(
            e,
            Error::Backend {
                backend: "sqlite",
                ..
            }
        ),
        "{e}"
    );
    assert!(e.is_retryable());
    tx.rollback().await.unwrap();
    // The refused allocation left nothing behind: the next one starts where the row was.
    assert_eq!(store.allocate(&tag, None).await.unwrap().range(), 1..2001);
}

#[tokio::test]
async fn opening_a_locked_file_is_retryable_and_a_corrupt_one_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let u = url(&dir, "locked.db");
    let config = SqliteStoreConfig {
        url: u.clone(),
        max_connections: 1,
        busy_timeout_ms: 100,
    };
    // A file another program holds exclusively, in SQLite's default (rollback) journal mode.
    let mut other = SqliteConnection::connect(&format!("{u}?mode=rwc"))
        .await
        .unwrap();
    sqlx::query("CREATE TABLE other (x INTEGER)")
        .execute(&mut other)
        .await
        .unwrap();
    let tx = other.begin_with("BEGIN EXCLUSIVE").await.unwrap();
    let e = SqliteStore::connect(&config).await.unwrap_err();
    assert!(e.is_retryable(), "{e}");
    tx.rollback().await.unwrap();
    let store = SqliteStore::connect(&config).await.unwrap();
    assert!(store.list().await.unwrap().is_empty());

    let bad = dir.path().join("corrupt.db");
    std::fs::write(&bad, "this is not a sqlite database ".repeat(200)).unwrap();
    let e = SqliteStore::connect_url(&url(&dir, "corrupt.db"))
        .await
        .unwrap_err();
    assert!(!e.is_retryable(), "{e}");
    let m = e.to_string();
    assert!(
        m.contains("configuration error: url: ") && m.contains("corrupt.db"),
        "{m}"
    );
    assert!(m.contains("not a usable sqlite database"), "{m}");
}

#[tokio::test]
async fn a_bad_url_is_a_config_error_naming_the_key() {
    let e = SqliteStore::connect_url("sqlite://x.db?mode=bogus")
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::Config(m) if m.starts_with("url")),
        "{e}"
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("file"), "").unwrap();
    let under_a_file = format!("sqlite://{}", dir.path().join("file/leaf.db").display());
    let e = SqliteStore::connect_url(&under_a_file).await.unwrap_err();
    assert!(
        matches!(&e, Error::Config(m) if m.starts_with("url")),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_memory_database_is_neither_durable_nor_shared_and_keeps_its_rows() {
    let store = SqliteStore::connect_url("sqlite::memory:").await.unwrap();
    let caps = store.capabilities();
    assert!(!caps.durable && !caps.multi_process);
    let tag = Tag::new("m").unwrap();
    store.create(&NewTag::new(tag.clone())).await.unwrap();
    // Concurrent calls take several pooled connections: each must see the same database.
    let store = Arc::new(store);
    let calls = (0..8).map(|_| {
        let (store, tag) = (store.clone(), tag.clone());
        tokio::spawn(async move { store.allocate(&tag, None).await.unwrap().range() })
    });
    let mut ranges = Vec::new();
    for c in calls.collect::<Vec<_>>() {
        ranges.push(c.await.unwrap());
    }
    assert_disjoint_and_contiguous(&ranges, 1, 1 + 8 * 2000);
}

#[tokio::test]
async fn a_row_with_an_unusable_tag_is_skipped_by_list_not_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let u = url(&dir, "odd.db");
    let store = SqliteStore::connect_url(&u).await.unwrap();
    store
        .create(&NewTag::new(Tag::new("good").unwrap()))
        .await
        .unwrap();
    let mut c = SqliteConnection::connect(&u).await.unwrap();
    sqlx::query("INSERT INTO leaf_alloc(biz_tag, max_id, step) VALUES('a/b', 1, 10)")
        .execute(&mut c)
        .await
        .unwrap();
    let tags = store.tags().await.unwrap();
    assert_eq!(tags, [Tag::new("good").unwrap()]);
}
