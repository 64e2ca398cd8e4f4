//! `leaf-server` on a real PostgreSQL (provisioned by `leaf-testkit`: the server of
//! `LEAFTEST_POSTGRES_URL`, else a container of `LEAFTEST_POSTGRES_IMAGE`), a database of its own
//! per test: the router on PostgreSQL through `server::start`, then the built binary: two
//! processes sharing the tag's segments and taking distinct worker ids from one
//! `leaf_workerid_alloc`, a second process with a running one's identity refused, a crash and
//! an immediate restart, PostgreSQL stopped while a node serves, and a refused password. A
//! server that cannot be provisioned fails these tests; nothing is skipped.

#![cfg(feature = "postgres")]

mod common;

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use leaf_core::SnowflakeLayout;
use leaf_testkit::provision::{self, POSTGRES, PostgresDatabase};
use sqlx::postgres::PgPool;
use sqlx::{AssertSqlSafe, Executor, Row};

use common::nodes::{self, WhileDown};
use common::router::ok;
use common::sql::router_on;
use common::{Server, free_port, wait_exit};

const TAG: &str = "leaf-segment-test";

/// A database of one's own on the provisioned server; fails the test loudly without one.
async fn database() -> (PostgresDatabase, PgPool) {
    let db = provision::postgres_database()
        .await
        .unwrap_or_else(|e| panic!("no PostgreSQL server for the leaf-server tests: {e}"));
    let root = PgPool::connect(&db.url)
        .await
        .unwrap_or_else(|e| panic!("connect to {db:?}: {e}"));
    (db, root)
}

/// Starts the binary with both modes on the database at `url`, its identity
/// `127.0.0.1:{snowflake_port}`, plus `extra`; does not wait for it to serve.
fn spawn(dir: &Path, n: u32, url: &str, snowflake_port: u16, extra: &[(&str, &str)]) -> Server {
    let port = snowflake_port.to_string();
    let mut env = vec![
        ("LEAF_SEGMENT__STORE", "postgres"),
        ("LEAF_SEGMENT__URL", url),
        ("LEAF_SNOWFLAKE__MODE", "postgres"),
        ("LEAF_SNOWFLAKE__IP", "127.0.0.1"),
        ("LEAF_SNOWFLAKE__PORT", &port),
        ("LEAF_SNOWFLAKE__POSTGRES__URL", url),
    ];
    env.extend_from_slice(extra);
    Server::spawn(dir, free_port(), n, &env)
}

// ---- The router on PostgreSQL --------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn router_serves_both_modes_from_postgres_and_db_lists_the_table() {
    let (db, root) = database().await;
    let dir = tempfile::tempdir().unwrap();
    let (running, app) = router_on("postgres", &db.url, dir.path()).await;

    // A row written behind the server's back: /db reads the table, not the cache.
    root.execute(
        "INSERT INTO leaf_alloc (biz_tag, max_id, step, description) \
         VALUES ('direct', 77, 7, 'inserted <by> sql')",
    )
    .await
    .unwrap();
    let page = ok(&app, "/db").await;
    let rows = sqlx::query("SELECT biz_tag, max_id FROM leaf_alloc ORDER BY biz_tag")
        .fetch_all(&root)
        .await
        .unwrap();
    assert_eq!(rows.len(), 3);
    for row in &rows {
        let tag: String = row.get("biz_tag");
        assert!(
            page.contains(&format!("data-label=\"biz_tag\">{tag}</td>")),
            "{tag} in {page}"
        );
    }
    assert!(page.contains(">2,001</td>"), "{page}");
    assert!(page.contains("inserted &lt;by&gt; sql"), "{page}");

    // Snowflake mode: the worker id is this node's row of leaf_workerid_alloc.
    let id: i64 = ok(&app, "/api/snowflake/get/x").await.parse().unwrap();
    let worker: i32 =
        sqlx::query_scalar("SELECT id FROM leaf_workerid_alloc WHERE ip_port = '10.0.0.7:8080'")
            .fetch_one(&root)
            .await
            .expect("the node's row");
    let decoded = SnowflakeLayout::default().decode(id).unwrap();
    assert_eq!(decoded.worker_id, worker as u64);

    running.stop().await;
    let mark: Option<i64> =
        sqlx::query_scalar("SELECT max_timestamp FROM leaf_workerid_alloc WHERE id = $1")
            .bind(worker)
            .fetch_one(&root)
            .await
            .unwrap();
    let issued_ms = decoded.timestamp_ms;
    assert!(
        mark.is_some_and(|m| m as u64 >= issued_ms),
        "the final mark {mark:?} covers the last ID issued ({issued_ms})"
    );
}

// ---- The built binary ----------------------------------------------------------------------

/// Two servers on one database: batches of the seed tag taken in turns never repeat, and their
/// worker ids differ: the rows of their identities.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_share_the_tags_segments_and_take_distinct_worker_ids() {
    let (db, root) = database().await;
    let (da, db_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (pa, pb) = (free_port(), free_port());
    let url = db.url.clone();
    let (a_worker, b_worker) = tokio::task::spawn_blocking(move || {
        let mut a = spawn(da.path(), 1, &url, pa, &[]);
        a.wait_for("/readyz", Duration::from_secs(60));
        let mut b = spawn(db_dir.path(), 2, &url, pb, &[]);
        b.wait_for("/readyz", Duration::from_secs(60));
        // The row's copy of the mark, which deploy/monitoring's LeafMarkLagging watches
        // (tests/blackbox/monitoring.rs counts on this scrape).
        let scrape = common::http(a.port, "GET", "/metrics").unwrap().body;
        assert!(
            scrape.contains("# TYPE leaf_snowflake_registry_mark_lag_seconds gauge")
                && scrape.contains("\nleaf_snowflake_registry_mark_lag_seconds "),
            "{scrape}"
        );
        // Without fence_on_disconnect a leader could not stop when cut off: monotonic IDs are
        // refused with why, and the leader table is never made.
        let refused = common::http(a.port, "GET", "/v1/monotonic").unwrap();
        assert_eq!(refused.status, 503, "{}", refused.body);
        assert!(
            refused
                .body
                .contains("[snowflake.postgres] fence_on_disconnect = true"),
            "{}",
            refused.body
        );
        let workers = (nodes::worker_id(&a), nodes::worker_id(&b));
        nodes::two_servers_share_segments_with_distinct_worker_ids(a, b, TAG);
        workers
    })
    .await
    .unwrap();
    let rows: Vec<(String, i32)> =
        sqlx::query_as("SELECT ip_port, id FROM leaf_workerid_alloc ORDER BY id")
            .fetch_all(&root)
            .await
            .unwrap();
    let mut expected = vec![
        (format!("127.0.0.1:{pa}"), a_worker as i32),
        (format!("127.0.0.1:{pb}"), b_worker as i32),
    ];
    expected.sort_by_key(|(_, id)| *id);
    assert_eq!(rows, expected);
    let lease_table: Option<String> =
        sqlx::query_scalar("SELECT to_regclass('leaf_workerid_lease')::text")
            .fetch_one(&root)
            .await
            .unwrap();
    assert_eq!(lease_table, None);
}

/// A second process with the identity of a running one (two containers that both see one
/// address, say) does not start: it would issue the same IDs. The first keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_process_with_a_running_ones_identity_is_refused() {
    let (db, _root) = database().await;
    let url = db.url.clone();
    tokio::task::spawn_blocking(move || {
        let (da, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let identity_port = free_port();
        let mut a = spawn(da.path(), 1, &url, identity_port, &[]);
        a.wait_for("/readyz", Duration::from_secs(60));
        let mut b = spawn(dir_b.path(), 2, &url, identity_port, &[]);
        let status = wait_exit(&mut b.child, Duration::from_secs(30))
            .unwrap_or_else(|| panic!("the second process runs:\n{}", b.log_text()));
        let log = b.log_text();
        assert!(!status.success(), "{log}");
        assert!(
            log.contains(&format!(
                "node identity 127.0.0.1:{identity_port} is in use"
            )),
            "the refusal names the identity:\n{log}"
        );
        assert!(nodes::take(&a, 10).is_some(), "the first one still serves");
        let (status, log) = a.sigterm();
        assert!(status.success(), "{log}");
    })
    .await
    .unwrap();
}

/// A node killed (SIGKILL: no release, no final mark) and started again at once with the same
/// identity and cache directory: PostgreSQL ends the dead session and its identity lock, the
/// node gets its worker id back and issues only IDs after the ones it issued before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_and_an_immediate_restart_keep_the_worker_id_and_repeat_nothing() {
    let (db, _root) = database().await;
    let url = db.url.clone();
    tokio::task::spawn_blocking(move || {
        let dir = tempfile::tempdir().unwrap();
        let identity_port = free_port();
        let mut a = spawn(dir.path(), 1, &url, identity_port, &[]);
        a.wait_for("/readyz", Duration::from_secs(60));
        let mut seen = HashSet::new();
        for _ in 0..10 {
            nodes::record(&mut seen, &nodes::take(&a, 1000).expect("serves"), "before");
        }
        let worker = nodes::worker_id(&a);
        let before_max = *seen.iter().max().unwrap();
        nodes::signal(&a, "-KILL");
        wait_exit(&mut a.child, Duration::from_secs(10)).expect("killed");

        let mut again = spawn(dir.path(), 2, &url, identity_port, &[]);
        again.wait_for("/readyz", Duration::from_secs(60));
        assert_eq!(
            nodes::worker_id(&again),
            worker,
            "the same row, the same id"
        );
        let after = nodes::take(&again, 1000).expect("serves after the restart");
        assert!(
            after.iter().min().unwrap() > &before_max,
            "IDs after the crash's"
        );
        nodes::record(&mut seen, &after, "after the restart");
        let (status, log) = again.sigterm();
        assert!(status.success(), "{log}");
    })
    .await
    .unwrap();
}

/// PostgreSQL stopped while a node serves: segment IDs keep coming from the buffers, snowflake
/// keeps serving (its worker id is never recycled; the marks go to the cache file), and both
/// serve on once PostgreSQL is back. Nothing repeats.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_stopped_while_serving_segments_serve_from_buffers_and_snowflake_goes_on() {
    let pg = provision::dedicated(&POSTGRES)
        .await
        .unwrap_or_else(|e| panic!("no PostgreSQL container for the fault tests: {e}"));
    let db = provision::postgres_database_on(pg.endpoint())
        .await
        .expect("a database");
    let dir = tempfile::tempdir().unwrap();
    let fast = [
        ("LEAF_SEGMENT__CONNECT_TIMEOUT_MS", "500"),
        ("LEAF_SEGMENT__TIMEOUT_MS", "1000"),
        ("LEAF_SNOWFLAKE__POSTGRES__CONNECT_TIMEOUT_MS", "500"),
        ("LEAF_SNOWFLAKE__POSTGRES__TIMEOUT_MS", "1000"),
    ];
    let mut s = spawn(dir.path(), 1, &db.url, free_port(), &fast);
    s.wait_for("/readyz", Duration::from_secs(60));
    let snowflake = WhileDown::KeepsServingFor(Duration::from_secs(4));
    nodes::backend_stopped_while_serving(&s, &pg, TAG, snowflake).await;
    let (status, log) = s.sigterm();
    assert!(status.success(), "{log}");
    drop(db);
    pg.remove().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_password_fails_start_up_without_showing_it() {
    let (db, root) = database().await;
    let role = format!("ltd{:010x}", fastrand::u64(..) >> 24);
    let password = format!("pw{:016x}", fastrand::u64(..));
    root.execute(AssertSqlSafe(format!(
        "CREATE ROLE {role} LOGIN PASSWORD '{password}'"
    )))
    .await
    .unwrap();
    let wrong = format!("wrong{:016x}", fastrand::u64(..));
    let (host, path) = db.url.rsplit_once('@').unwrap().1.split_once('/').unwrap();
    let url = format!("postgres://{role}:{wrong}@{host}/{path}");
    common::sql::a_refused_password_fails_start_up_without_showing_it("postgres", url, &wrong)
        .await;
    root.execute(AssertSqlSafe(format!("DROP ROLE {role}")))
        .await
        .unwrap();
}

// ---- The README's "Running on PostgreSQL", followed as written -----------------------------

/// The README's section, whitespace squeezed, and its blocks of `lang`.
fn readme_postgres(lang: &str) -> (String, Vec<String>) {
    let readme = include_str!("../../../README.md");
    let start = readme
        .find("## Running on PostgreSQL")
        .expect("the section");
    let end = readme[start + 1..]
        .find("\n## ")
        .map_or(readme.len(), |e| start + 1 + e);
    let section = &readme[start..end];
    let blocks = section
        .split(&format!("```{lang}\n"))
        .skip(1)
        .map(|b| b.split("```").next().unwrap().to_owned())
        .collect();
    (
        section.split_whitespace().collect::<Vec<_>>().join(" "),
        blocks,
    )
}

/// The role and database of the README, made by its statements (as a superuser), the
/// server started on its `leaf.toml`, the tag added by its `INSERT` and the sequence moved by
/// its `setval`, both as that role: IDs of both modes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readmes_postgresql_section_runs_as_written() {
    let (db, root) = database().await;
    let (text, sql) = readme_postgres("sql");
    let (_, tomls) = readme_postgres("toml");
    // The second of each is the secured recipe (TLS only, a client certificate), which
    // leaf-registry-postgres's tests/secured.rs runs on a TLS-only server.
    assert_eq!((sql.len(), tomls.len()), (2, 2));
    assert!(sql[1].contains("OWNER leaf"), "{}", sql[1]);
    assert!(tomls[1].contains("verify-full"), "{}", tomls[1]);
    let suffix = format!("{:010x}", fastrand::u64(..) >> 24);
    let (role, database, password) = (
        format!("ltreadme{suffix}"),
        format!("ltreadme{suffix}"),
        format!("pw{:016x}", fastrand::u64(..)),
    );
    for statement in sql[0].split(';').map(str::trim).filter(|s| !s.is_empty()) {
        let statement = statement
            .replace("ROLE leaf ", &format!("ROLE {role} "))
            .replace(
                "DATABASE leaf OWNER leaf",
                &format!("DATABASE {database} OWNER {role}"),
            )
            .replace("'change-me'", &format!("'{password}'"));
        root.execute(AssertSqlSafe(statement.clone()))
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
    }
    let (scheme, rest) = db.url.split_once("://").unwrap();
    let host = rest[rest.rfind('@').map_or(0, |i| i + 1)..]
        .split('/')
        .next()
        .unwrap();
    let url = format!("{scheme}://{role}:{password}@{host}/{database}");
    // The testbed's server has no TLS: `sslmode=require` would refuse it, as it should.
    let shown = "postgres://leaf:change-me@db.internal:5432/leaf?sslmode=require";
    assert!(tomls[0].contains(shown), "{}", tomls[0]);
    let toml = tomls[0]
        .replace(shown, &format!("{url}?sslmode=prefer"))
        .replace("ip = \"10.0.0.5\"", "ip = \"127.0.0.1\"")
        .replace("cache_dir = \"/var/lib/leaf\"", "cache_dir = \"state\"");
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().to_path_buf();
    let node = tokio::task::spawn_blocking(move || {
        std::fs::write(base.join("leaf.toml"), toml).unwrap();
        let mut s = Server::spawn(&base, free_port(), 1, &[] as &[(&str, &str)]);
        s.wait_for("/readyz", Duration::from_secs(60));
        s
    })
    .await
    .unwrap();

    let as_role = PgPool::connect(&url).await.unwrap();
    let insert = "INSERT INTO leaf_alloc (biz_tag, max_id, step) VALUES ('order', 1, 2000)";
    let setval = "SELECT setval(pg_get_serial_sequence('leaf_workerid_alloc', 'id'), max(id)) \
                  FROM leaf_workerid_alloc";
    for statement in [insert, setval] {
        assert!(text.contains(statement), "the README shows {statement}");
        as_role
            .execute(statement)
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
    }
    common::sql::serves_the_readmes_order_tag_then_stops(node).await;
    as_role.close().await;
    for cleanup in [
        format!("DROP DATABASE {database}"),
        format!("DROP ROLE {role}"),
    ] {
        root.execute(AssertSqlSafe(cleanup)).await.unwrap();
    }
}

// ---- Monotonic IDs on postgres -------------------------------------------------------------

/// The monotonic mode on three nodes with `fence_on_disconnect` and a 4 s lease (the leader's
/// claim a row of `leaf_workerid_lease`): the leader killed, the next frozen past its lease,
/// the third stopped; the clients' history holds (`common::monotonic`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_monotonic_cluster_keeps_order_through_a_kill_a_freeze_and_a_release() {
    let (db, _root) = database().await;
    common::sql::monotonic_faults("postgres", &db.url).await;
}

/// The monotonic mode on three nodes, each reaching the server through a proxy: the leader's
/// link stalled then delivered late, the next leader's cut, then every link cut; the clients'
/// history holds (`common::monotonic`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_monotonic_cluster_keeps_order_through_partitions() {
    let (db, _root) = database().await;
    common::sql::monotonic_partitions("postgres", &db.url).await;
}

/// A leader claim the configuration can never grant refuses the monotonic mode with why (a 503
/// naming the key) while the node serves everything else: a lease too short for the renewals,
/// and a leaf name too long for `leaf_workerid_lease`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_claim_that_cannot_be_granted_refuses_monotonic_ids_naming_why() {
    let (db, _root) = database().await;
    let url = db.url.clone();
    tokio::task::spawn_blocking(move || {
        let long_name = "n".repeat(120);
        let cases = [
            (
                vec![("LEAF_SNOWFLAKE__POSTGRES__LEASE_TTL_MS", "1000")],
                "lease_ttl_ms",
            ),
            (vec![("LEAF_NAME", long_name.as_str())], "128 bytes"),
        ];
        for (n, (extra, named)) in cases.into_iter().enumerate() {
            let dir = tempfile::tempdir().unwrap();
            let mut env = vec![("LEAF_SNOWFLAKE__POSTGRES__FENCE_ON_DISCONNECT", "true")];
            env.extend(extra);
            let mut s = spawn(dir.path(), n as u32, &url, free_port(), &env);
            s.wait_for("/readyz", Duration::from_secs(60));
            let r = s.get("/v1/monotonic");
            assert_eq!(r.status, 503, "{}", r.body);
            assert!(
                r.body.contains("monotonic IDs are not served") && r.body.contains(named),
                "{named}: {}",
                r.body
            );
            assert_eq!(s.get("/v1/snowflake").status, 200);
            assert!(s.log_text().contains("monotonic IDs are not served"));
        }
    })
    .await
    .unwrap();
}
