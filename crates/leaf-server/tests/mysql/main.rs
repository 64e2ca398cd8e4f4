//! `leaf-server` on a real MySQL-compatible server (MariaDB, provisioned by `leaf-testkit`: the
//! server of `LEAFTEST_MYSQL_URL`, else a container of `LEAFTEST_MYSQL_IMAGE`). The router on
//! MySQL through `server::start`, then the built binary: two processes sharing one `leaf_alloc`
//! under concurrent load, two processes taking worker ids from one `leaf_workerid_alloc`, and a
//! refused password. A server that cannot be provisioned fails these tests; nothing is skipped.

#![cfg(feature = "mysql")]

#[path = "../common/mod.rs"]
mod common;

use std::collections::{BTreeMap, HashSet};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use leaf_core::SnowflakeLayout;
use leaf_registry_mysql::LEAF_ALLOC_DDL;
use leaf_testkit::provision::{self, MysqlDatabase};
use sqlx::mysql::MySqlPool;
use sqlx::{AssertSqlSafe, Executor, Row};

use common::router::ok;
use common::sql::router_on;
use common::{Server, free_port, http};

// ---- The database --------------------------------------------------------------------------

/// A database of one's own on the provisioned server; fails the test loudly without one.
async fn database() -> (MysqlDatabase, MySqlPool) {
    let db = provision::mysql_database()
        .await
        .unwrap_or_else(|e| panic!("no MySQL server for the leaf-server tests: {e}"));
    let root = MySqlPool::connect(&db.url)
        .await
        .unwrap_or_else(|e| panic!("connect to {db:?}: {e}"));
    (db, root)
}

async fn exec(pool: &MySqlPool, sql: String) {
    pool.execute(AssertSqlSafe(sql.clone()))
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// A MySQL user with a password, allowed everything on the test's database: the servers log in
/// as such users, so that the logs can be searched for the password, and so that a trigger can
/// tell which server made an allocation (`USER()`). Dropped by [`User::drop_on`].
struct User {
    name: String,
    password: String,
}

impl User {
    async fn create(root: &MySqlPool, db: &MysqlDatabase, role: &str) -> User {
        let suffix = format!("{:010x}", fastrand::u64(..) >> 24);
        let user = User {
            name: format!("lt{role}{suffix}"),
            password: format!("pw{:016x}{suffix}", fastrand::u64(..)),
        };
        // Names and passwords are made above of letters and digits only.
        exec(
            root,
            format!(
                "CREATE USER '{}'@'%' IDENTIFIED BY '{}'",
                user.name, user.password
            ),
        )
        .await;
        exec(
            root,
            format!(
                "GRANT ALL PRIVILEGES ON `{}`.* TO '{}'@'%'",
                db.name, user.name
            ),
        )
        .await;
        user
    }

    /// The database's URL with this user's credentials.
    fn url(&self, db: &MysqlDatabase) -> String {
        let (scheme, rest) = db.url.split_once("://").expect("a url");
        let at = rest.find('/').map_or(rest.len(), |slash| slash);
        let host_start = rest[..at].rfind('@').map_or(0, |i| i + 1);
        format!(
            "{scheme}://{}:{}@{}",
            self.name,
            self.password,
            &rest[host_start..]
        )
    }

    async fn drop_on(self, root: &MySqlPool) {
        exec(root, format!("DROP USER IF EXISTS '{}'@'%'", self.name)).await;
    }
}

/// Leaf's table with one tag, and a trigger recording every change of `max_id` with the user
/// who made it: the allocation log the load test checks the served IDs against.
async fn table_with_allocation_log(root: &MySqlPool, tag: &str, step: i64) {
    exec(root, LEAF_ALLOC_DDL.to_string()).await;
    exec(
        root,
        "CREATE TABLE alloc_log (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, \
         who VARCHAR(80) NOT NULL, old_max BIGINT NOT NULL, new_max BIGINT NOT NULL)"
            .into(),
    )
    .await;
    exec(
        root,
        "CREATE TRIGGER leaf_alloc_log AFTER UPDATE ON leaf_alloc FOR EACH ROW \
         INSERT INTO alloc_log (who, old_max, new_max) \
         VALUES (SUBSTRING_INDEX(USER(), '@', 1), OLD.max_id, NEW.max_id)"
            .into(),
    )
    .await;
    exec(
        root,
        format!(
            "INSERT INTO leaf_alloc (biz_tag, max_id, step, description) \
             VALUES ('{tag}', 1, {step}, 'two servers')"
        ),
    )
    .await;
}

/// One allocation as the trigger saw it: the range `old_max..new_max`, made by `who`.
#[derive(Debug)]
struct Allocated {
    who: String,
    old_max: i64,
    new_max: i64,
}

async fn allocation_log(root: &MySqlPool) -> Vec<Allocated> {
    sqlx::query("SELECT who, old_max, new_max FROM alloc_log ORDER BY id")
        .fetch_all(root)
        .await
        .expect("the allocation log")
        .iter()
        .map(|r| Allocated {
            who: r.get("who"),
            old_max: r.get("old_max"),
            new_max: r.get("new_max"),
        })
        .collect()
}

// ---- a) The router on MySQL ----------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn router_serves_both_modes_from_mysql_and_db_lists_the_table() {
    let (db, root) = database().await;
    let dir = tempfile::tempdir().unwrap();
    let (running, app) = router_on("mysql", &db.url, dir.path()).await;

    // A row written behind the server's back: /db reads the table, not the cache.
    exec(
        &root,
        "INSERT INTO leaf_alloc (biz_tag, max_id, step, description) \
         VALUES ('direct', 77, 7, 'inserted <by> sql')"
            .into(),
    )
    .await;
    let page = ok(&app, "/db").await;
    let rows = sqlx::query("SELECT biz_tag, max_id, step FROM leaf_alloc ORDER BY biz_tag")
        .fetch_all(&root)
        .await
        .unwrap();
    assert_eq!(rows.len(), 3);
    for row in &rows {
        let (tag, max_id, step): (String, i64, i32) =
            (row.get("biz_tag"), row.get("max_id"), row.get("step"));
        // The console shows numbers with separators.
        let cells = format!(
            "data-label=\"biz_tag\">{tag}</td><td class=\"num\" data-label=\"max_id\">{}</td>\
             <td class=\"num\" data-label=\"step\">{}</td>",
            group(max_id),
            group(i64::from(step))
        );
        assert!(page.contains(&cells), "{cells} in {page}");
    }
    assert!(page.contains(">2,001</td>"), "{page}");
    assert!(page.contains(">150</td>"), "{page}");
    assert!(page.contains("inserted &lt;by&gt; sql"), "{page}");

    // Snowflake mode: the worker id is this node's row of leaf_workerid_alloc.
    let id: i64 = ok(&app, "/api/snowflake/get/x").await.parse().unwrap();
    let worker: u32 =
        sqlx::query_scalar("SELECT id FROM leaf_workerid_alloc WHERE ip_port = '10.0.0.7:8080'")
            .fetch_one(&root)
            .await
            .expect("the node's row");
    let decoded = SnowflakeLayout::default().decode(id).unwrap();
    assert_eq!(decoded.worker_id, u64::from(worker));
    let batch: serde_json::Value =
        serde_json::from_str(&ok(&app, "/v1/snowflake?count=100").await).unwrap();
    let ids: Vec<i64> = batch["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    assert_eq!(ids.len(), 100);
    assert!(ids.windows(2).all(|w| w[0] < w[1]) && ids[0] > id);

    running.stop().await;
}

// ---- The built binary ----------------------------------------------------------------------

impl Server {
    /// Starts the binary on `port` and waits until `/readyz` says 200.
    fn start(dir: &Path, port: u16, n: u32, env: &[(&str, String)]) -> Server {
        std::fs::create_dir_all(dir).unwrap();
        let mut s = Server::spawn(dir, port, n, env);
        s.wait_for("/readyz", Duration::from_secs(60));
        s
    }
}

/// The password must not appear; the URL must, redacted, so that the check is not vacuous.
fn assert_log_hides(log: &str, url: &str, password: &str) {
    assert!(url.contains(password));
    assert!(
        !log.contains(password),
        "the password is in the log:\n{log}"
    );
    let shown = leaf_server::config::redact_url(url);
    assert!(log.contains(&shown), "the log shows {shown}:\n{log}");
}

// ---- b) Two servers, one leaf_alloc, concurrent load ---------------------------------------

const LOAD_TAG: &str = "load";
const FIRST_STEP: i64 = 10;
const MAX_STEP: i64 = 40;
const CLIENTS_PER_SERVER: usize = 3;
const IDS_PER_CLIENT: usize = 3000;

/// One client: single IDs (GET and POST) and `count=` batches, alternately, until it has
/// `IDS_PER_CLIENT` IDs. A 503 (both segments spent and the next not loaded in time) is
/// retried; any other answer fails the test.
fn client(port: u16, seed: u64) -> Vec<i64> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut ids = Vec::with_capacity(IDS_PER_CLIENT + 64);
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut i = 0u64;
    while ids.len() < IDS_PER_CLIENT {
        assert!(Instant::now() < deadline, "the load did not finish in 90 s");
        i += 1;
        let (method, path) = match i % 3 {
            0 => ("GET", format!("/api/segment/get/{LOAD_TAG}")),
            1 => ("POST", format!("/api/segment/get/{LOAD_TAG}")),
            _ => (
                "GET",
                format!("/v1/segment/{LOAD_TAG}?count={}", rng.u32(2..=60)),
            ),
        };
        let r = http(port, method, &path).unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        match r.status {
            200 if path.starts_with("/v1/") => {
                let batch = r.ids();
                assert!(
                    batch.windows(2).all(|w| w[0] < w[1]),
                    "a batch ascends: {batch:?}"
                );
                ids.extend(batch);
            }
            200 => ids.push(r.body.parse().expect("a decimal id")),
            503 => std::thread::sleep(Duration::from_millis(2)),
            other => panic!("{method} {path}: {other} {}", r.body),
        }
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_on_one_table_under_load_issue_each_allocated_id_once() {
    let (db, root) = database().await;
    table_with_allocation_log(&root, LOAD_TAG, FIRST_STEP).await;
    let users = [
        User::create(&root, &db, "a").await,
        User::create(&root, &db, "b").await,
    ];
    let urls: Vec<String> = users.iter().map(|u| u.url(&db)).collect();
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().to_path_buf();

    let (served, logs) = tokio::task::spawn_blocking(move || {
        let servers: Vec<Server> = urls
            .iter()
            .enumerate()
            .map(|(n, url)| {
                let env = [
                    ("LEAF_SEGMENT__STORE", "mysql".to_string()),
                    ("LEAF_SEGMENT__URL", url.clone()),
                    ("LEAF_SEGMENT__MAX_CONNECTIONS", "2".to_string()),
                    ("LEAF_SEGMENT__SEED_TAGS", "[]".to_string()),
                    ("LEAF_SEGMENT__MAX_STEP", MAX_STEP.to_string()),
                    ("LEAF_SEGMENT__SWITCH_WAIT_MS", "1000".to_string()),
                    ("LEAF_SNOWFLAKE__ENABLED", "false".to_string()),
                    // Debug for the server itself: its configuration is logged, URL included.
                    ("LEAF_LOG__LEVEL", "info,leaf_server=debug".to_string()),
                ];
                Server::start(&base.join(format!("s{n}")), free_port(), 1, &env)
            })
            .collect();
        let served: Vec<Vec<i64>> = std::thread::scope(|scope| {
            let handles: Vec<_> = servers
                .iter()
                .enumerate()
                .map(|(n, s)| {
                    let port = s.port;
                    scope.spawn(move || {
                        let clients: Vec<_> = (0..CLIENTS_PER_SERVER)
                            .map(|c| {
                                let seed = (n * CLIENTS_PER_SERVER + c) as u64;
                                std::thread::spawn(move || client(port, seed))
                            })
                            .collect();
                        clients
                            .into_iter()
                            .flat_map(|h| h.join().expect("a client thread"))
                            .collect::<Vec<i64>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("a server's clients"))
                .collect()
        });
        // Stopped before the log is read: no allocation can land afterwards.
        let logs: Vec<String> = servers
            .into_iter()
            .map(|s| {
                let (status, log) = s.sigterm();
                assert!(status.success(), "graceful exit: {status}\n{log}");
                log
            })
            .collect();
        (served, logs)
    })
    .await
    .expect("the load");

    // No ID twice, across both servers.
    let mut seen = HashSet::new();
    for (n, ids) in served.iter().enumerate() {
        assert!(ids.len() >= CLIENTS_PER_SERVER * IDS_PER_CLIENT);
        for id in ids {
            assert!(seen.insert(*id), "id {id} was issued twice (server {n})");
        }
    }

    // The allocations, in commit order: contiguous, so no two ever overlapped; each within the
    // step bounds; both servers reloaded many times.
    let log = allocation_log(&root).await;
    let mut per_server: BTreeMap<&str, Vec<(i64, i64)>> = BTreeMap::new();
    let mut end = 1;
    for a in &log {
        assert_eq!(a.old_max, end, "allocations follow each other: {a:?}");
        let step = a.new_max - a.old_max;
        assert!((FIRST_STEP..=MAX_STEP).contains(&step), "{a:?}");
        end = a.new_max;
        per_server
            .entry(&a.who)
            .or_default()
            .push((a.old_max, a.new_max));
    }
    let steps: HashSet<i64> = log.iter().map(|a| a.new_max - a.old_max).collect();
    assert!(
        steps.contains(&MAX_STEP),
        "the dynamic step grew to segment.max_step: {steps:?}"
    );
    let final_max: i64 = sqlx::query_scalar("SELECT max_id FROM leaf_alloc WHERE biz_tag = ?")
        .bind(LOAD_TAG)
        .fetch_one(&root)
        .await
        .unwrap();
    assert_eq!(final_max, end, "every change of max_id is in the log");

    // Every ID lies in a range that the server which served it allocated.
    for (n, (ids, user)) in served.iter().zip(&users).enumerate() {
        let ranges = per_server
            .get(user.name.as_str())
            .unwrap_or_else(|| panic!("server {n} allocated nothing"));
        assert!(
            ranges.len() >= 10,
            "server {n} reloaded only {} times",
            ranges.len()
        );
        for id in ids {
            let i = ranges.partition_point(|(start, _)| start <= id);
            assert!(
                i > 0 && *id < ranges[i - 1].1,
                "server {n} served {id}, outside every range it allocated"
            );
        }
    }

    for (log, user) in logs.iter().zip(&users) {
        assert_log_hides(log, &user.url(&db), &user.password);
    }
    for u in users {
        u.drop_on(&root).await;
    }
}

// ---- c) Two servers, worker ids from one leaf_workerid_alloc -------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_in_mysql_mode_get_distinct_worker_ids() {
    let (db, root) = database().await;
    let user = User::create(&root, &db, "c").await;
    let url = user.url(&db);
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().to_path_buf();
    let ports = [free_port(), free_port()];
    let layout = SnowflakeLayout::default();

    let (served, restarted, logs) = tokio::task::spawn_blocking(move || {
        let env = [
            ("LEAF_SEGMENT__ENABLED", "false".to_string()),
            ("LEAF_SNOWFLAKE__MODE", "mysql".to_string()),
            ("LEAF_SNOWFLAKE__MYSQL__URL", url.clone()),
            ("LEAF_SNOWFLAKE__IP", "127.0.0.1".to_string()),
            // Everything at debug, the mysql client's own lines included.
            ("LEAF_LOG__LEVEL", "debug".to_string()),
        ];
        let take = |s: &Server| {
            let mut ids = Vec::new();
            for _ in 0..20 {
                ids.push(s.get("/api/snowflake/get/any").body.parse::<i64>().unwrap());
            }
            for _ in 0..3 {
                ids.extend(s.get("/v1/snowflake?count=1000").ids());
            }
            ids
        };
        let servers: Vec<Server> = ports
            .iter()
            .enumerate()
            .map(|(n, port)| Server::start(&base.join(format!("s{n}")), *port, 1, &env))
            .collect();
        let served: Vec<Vec<i64>> = servers.iter().map(take).collect();
        let mut logs = Vec::new();
        for s in servers {
            let (status, log) = s.sigterm();
            assert!(status.success(), "graceful exit: {status}\n{log}");
            logs.push(log);
        }
        // The first server again, same identity (ip:port): its row, its worker id.
        let again = Server::start(&base.join("s0"), ports[0], 2, &env);
        let restarted = take(&again);
        let (status, log) = again.sigterm();
        assert!(status.success(), "graceful exit: {status}\n{log}");
        logs.push(log);
        (served, restarted, logs)
    })
    .await
    .expect("the servers");

    let worker_of = |ids: &[i64]| -> u64 {
        let workers: HashSet<u64> = ids
            .iter()
            .map(|id| layout.decode(*id).unwrap().worker_id)
            .collect();
        assert_eq!(workers.len(), 1, "one worker id per server: {workers:?}");
        workers.into_iter().next().unwrap()
    };
    let workers = [worker_of(&served[0]), worker_of(&served[1])];
    assert_ne!(workers[0], workers[1], "two servers, two worker ids");
    let mut seen = HashSet::new();
    for id in served.iter().flatten().chain(&restarted) {
        assert!(seen.insert(*id), "snowflake id {id} was issued twice");
    }

    // The worker ids are the servers' rows of leaf_workerid_alloc, keyed by ip:port.
    let rows: BTreeMap<String, u64> = sqlx::query("SELECT id, ip_port FROM leaf_workerid_alloc")
        .fetch_all(&root)
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get("ip_port"), u64::from(r.get::<u32, _>("id"))))
        .collect();
    assert_eq!(rows.len(), 2, "{rows:?}");
    for (port, worker) in ports.iter().zip(workers) {
        assert_eq!(rows.get(&format!("127.0.0.1:{port}")), Some(&worker));
    }
    assert_eq!(worker_of(&restarted), workers[0], "a restart keeps its row");
    assert!(
        restarted.iter().min() > served[0].iter().max(),
        "after the restart, later IDs"
    );

    for log in &logs {
        assert_log_hides(log, &user.url(&db), &user.password);
    }
    user.drop_on(&root).await;
}

// ---- A refused password --------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_password_fails_start_up_without_showing_it() {
    let (db, root) = database().await;
    let user = User::create(&root, &db, "d").await;
    let wrong = format!("wrong{:016x}", fastrand::u64(..));
    let url = user.url(&db).replace(&user.password, &wrong);
    common::sql::a_refused_password_fails_start_up_without_showing_it("mysql", url, &wrong).await;
    user.drop_on(&root).await;
}

// ---- MySQL down at start-up ----------------------------------------------------------------

/// A TCP port that refuses connections until [`Gate::open`], then forwards them to `target`.
struct Gate {
    port: u16,
    target: String,
}

impl Gate {
    fn open(&self) {
        let listener = TcpListener::bind(("127.0.0.1", self.port)).expect("the gate's port");
        let target = self.target.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = TcpStream::connect(&target) else {
                    continue;
                };
                let (mut c2, mut s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let (mut c, mut s) = (client, server);
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut c, &mut s);
                    let _ = s.shutdown(std::net::Shutdown::Write);
                });
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut s2, &mut c2);
                    let _ = c2.shutdown(std::net::Shutdown::Write);
                });
            }
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn segment_mode_waits_for_an_unreachable_mysql_while_snowflake_serves() {
    let (db, _root) = database().await;
    let (scheme, rest) = db.url.split_once("://").unwrap();
    let authority = &rest[..rest.find('/').unwrap()];
    let (userinfo, host_port) = authority.rsplit_once('@').unwrap();
    let gate = Gate {
        port: free_port(),
        target: host_port.to_string(),
    };
    let url = format!(
        "{scheme}://{userinfo}@127.0.0.1:{}{}",
        gate.port,
        &rest[rest.find('/').unwrap()..]
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();

    tokio::task::spawn_blocking(move || {
        let port = free_port();
        let env = [
            ("LEAF_SEGMENT__STORE", "mysql".to_string()),
            ("LEAF_SEGMENT__URL", url),
            ("LEAF_SEGMENT__CONNECT_TIMEOUT_MS", "500".to_string()),
        ];
        let s = Server::spawn(&path, port, 1, &env);
        let deadline = Instant::now() + Duration::from_secs(30);
        while http(port, "GET", "/healthz").map_or(true, |r| r.status != 200) {
            assert!(Instant::now() < deadline, "not serving:\n{}", s.log_text());
            std::thread::sleep(Duration::from_millis(20));
        }
        let ready = s.get("/readyz");
        assert_eq!(ready.status, 503, "{}", ready.body);
        assert_eq!(ready.json()["segment"]["ready"], false, "{}", ready.body);
        assert_eq!(ready.json()["snowflake"]["ready"], true, "{}", ready.body);
        let r = s.get("/api/segment/get/leaf-segment-test");
        assert_eq!(
            (r.status, r.json()["code"].as_i64()),
            (503, Some(-3)),
            "{}",
            r.body
        );
        assert_eq!(s.get("/api/snowflake/get/x").status, 200);

        // The server comes up: segment mode starts by itself, seed tag included.
        gate.open();
        let deadline = Instant::now() + Duration::from_secs(30);
        while s.get("/readyz").status != 200 {
            assert!(
                Instant::now() < deadline,
                "segment mode did not start after the server came up:\n{}",
                s.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(s.get("/api/segment/get/leaf-segment-test").body, "1");
        let (status, log) = s.sigterm();
        assert!(status.success(), "{status}\n{log}");
        assert!(log.contains("segment mode started"), "{log}");
    })
    .await
    .unwrap();
}

/// `n` with thousands separators, as the console shows it.
fn group(n: i64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

// ---- Monotonic IDs on mysql -------------------------------------------------------------

/// The monotonic mode on three nodes with `fence_on_disconnect` and a 4 s lease (the leader's
/// claim a row of `leaf_workerid_lease`): the leader killed, the next frozen past its lease,
/// the third stopped; the clients' history holds (`common::monotonic`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_monotonic_cluster_keeps_order_through_a_kill_a_freeze_and_a_release() {
    let (db, _root) = database().await;
    common::sql::monotonic_faults("mysql", &db.url).await;
}

/// The monotonic mode on three nodes, each reaching the server through a proxy: the leader's
/// link stalled then delivered late, the next leader's cut, then every link cut; the clients'
/// history holds (`common::monotonic`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_monotonic_cluster_keeps_order_through_partitions() {
    let (db, _root) = database().await;
    common::sql::monotonic_partitions("mysql", &db.url).await;
}

mod readme;
mod upgrade;
