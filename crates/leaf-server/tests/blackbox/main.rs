//! Black-box tests of the built binary: started with no configuration in a temporary working
//! directory, spoken to over real HTTP on loopback, stopped with SIGTERM and SIGKILL; and the
//! peer clock check with the binary as the peer.

#![cfg(all(feature = "local", feature = "sqlite"))]

#[path = "../common/mod.rs"]
mod common;

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{Reply, Server, command, free_port, http, now_ms, wait_exit};
use leaf_core::{Clock, ManualClock, SystemClock};
use leaf_server::peer_clock;
use leaf_snowflake::peers::PeerClock;

const TAG: &str = "leaf-segment-test";

impl Server {
    fn start(dir: &Path, n: u32) -> Server {
        Self::start_with(dir, n, &[])
    }

    /// Starts the binary on a free port and waits until `/healthz` says 200.
    fn start_with(dir: &Path, n: u32, env: &[(&str, &str)]) -> Server {
        let mut s = Server::spawn(dir, free_port(), n, env);
        s.wait_for("/healthz", Duration::from_secs(30));
        s
    }

    fn post(&self, path: &str) -> Reply {
        http(self.port, "POST", path)
            .unwrap_or_else(|e| panic!("POST {path}: {e}\n{}", self.log_text()))
    }

    fn sigkill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// Takes IDs of both modes through every ID route.
    fn take_ids(&self, segment: &mut Vec<i64>, snowflake: &mut Vec<i64>) {
        for _ in 0..20 {
            segment.push(self.served("GET", &format!("/api/segment/get/{TAG}")).id());
            segment.push(self.served("POST", &format!("/api/segment/get/{TAG}")).id());
            snowflake.push(self.served("GET", "/api/snowflake/get/any").id());
            snowflake.push(self.served("POST", "/api/snowflake/get/any").id());
        }
        // Enough to span segments of Leaf's step 2000.
        for _ in 0..3 {
            segment.extend(
                self.served("GET", &format!("/v1/segment/{TAG}?count=1500"))
                    .ids(),
            );
            snowflake.extend(self.served("GET", "/v1/snowflake?count=5000").ids());
        }
    }

    /// A request as a Leaf client makes it: a 503 with `Retry-After` (the next segment still
    /// loading on a busy machine) is asked again a little later; any other answer is returned.
    fn served(&self, method: &str, path: &str) -> Reply {
        for _ in 0..100 {
            let r = match method {
                "POST" => self.post(path),
                _ => self.get(path),
            };
            if r.status != 503 || r.header("retry-after").is_none() {
                return r;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!(
            "{method} {path}: still 503 after 100 tries\n{}",
            self.log_text()
        );
    }
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn id(&self) -> i64 {
        assert_eq!(self.status, 200, "{}", self.body);
        assert!(
            self.header("content-type")
                .unwrap()
                .starts_with("text/plain"),
            "{:?}",
            self.headers
        );
        self.body.parse().expect("a decimal id")
    }
}

fn assert_unique(what: &str, ids: &[i64]) {
    let mut seen = HashSet::with_capacity(ids.len());
    for id in ids {
        assert!(seen.insert(*id), "{what}: id {id} was issued twice");
    }
}

#[test]
fn default_config_serves_both_modes_and_restarts_without_repeats() {
    let dir = tempfile::tempdir().unwrap();
    let (mut segment, mut snowflake) = (Vec::new(), Vec::new());

    // First run: the embedded default, from nothing.
    let s = Server::start(dir.path(), 1);
    let ready = s.get("/readyz");
    assert_eq!(ready.status, 200, "{}", ready.body);
    s.take_ids(&mut segment, &mut snowflake);
    assert!(dir.path().join("leaf-data/leaf.db").exists());
    // The admin pages answer a real loopback peer.
    let cache = s.get("/cache");
    assert_eq!(cache.status, 200, "{}", cache.body);
    assert!(cache.body.contains(TAG));
    assert_eq!(s.get("/v1/tags").json()["tags"][0]["tag"], TAG);
    let metrics = s.get("/metrics");
    assert!(
        metrics
            .body
            .contains("leaf_ids_issued_total{mode=\"segment\",tag=\"leaf-segment-test\"}")
    );
    let e = s.get("/api/segment/get/unknown-tag");
    assert_eq!((e.status, e.json()["code"].as_i64()), (404, Some(-2)));

    // A second process on the same cache directory refuses to start.
    let second = command::<&str>(dir.path(), free_port(), &[])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = second.wait_with_output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("in use by another process"), "{err}");

    let (status, _) = s.sigterm();
    assert!(status.success(), "graceful shutdown exits 0: {status}");
    let warm = std::fs::read_to_string(dir.path().join("leaf-data/leaf.segment-tags")).unwrap();
    assert_eq!(
        warm.trim(),
        TAG,
        "the used tag is remembered for a warm restart"
    );

    // After SIGTERM: the final mark is the last issued timestamp, so snowflake is ready at once.
    let s = Server::start(dir.path(), 2);
    let ready = s.get("/readyz");
    assert_eq!(
        ready.status, 200,
        "no wait after a graceful stop: {}",
        ready.body
    );
    assert_eq!(ready.json()["snowflake"]["ready"], true);
    assert!(
        s.log_text()
            .contains("warming the tags used before the restart")
    );
    let before = (segment.len(), snowflake.len());
    s.take_ids(&mut segment, &mut snowflake);
    assert!(
        segment[before.0..].iter().min() > segment[..before.0].iter().max(),
        "segment IDs keep increasing across a restart"
    );
    assert_unique("segment after SIGTERM", &segment);
    assert_unique("snowflake after SIGTERM", &snowflake);

    // SIGKILL: no final mark, no warm list; an immediate restart must still not repeat.
    s.sigkill();
    let s = Server::start(dir.path(), 3);
    s.take_ids(&mut segment, &mut snowflake);
    assert_unique("segment after SIGKILL", &segment);
    assert_unique("snowflake after SIGKILL", &snowflake);
    assert!(s.sigterm().0.success());
}

fn run_expecting_failure(dir: &Path, extra: &[(&str, &str)], args: &[&str]) -> String {
    let mut child = command(dir, free_port(), extra)
        .args(args)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = match wait_exit(&mut child, Duration::from_secs(20)) {
        Some(s) => s,
        None => {
            let _ = child.kill();
            panic!("the server started instead of failing");
        }
    };
    assert!(!status.success(), "{status}");
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    err
}

/// The embedded default warns at start-up that it is for one node, naming what to set; and a
/// node restarted with another snowflake layout than the one it issued with stops start-up,
/// naming each key, until the recorded layout is set again.
#[test]
fn the_one_node_default_is_logged_and_a_changed_layout_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), 1);
    let first = s.served("GET", "/api/snowflake/get/x").id();
    let (status, log) = s.sigterm();
    assert!(status.success(), "{log}");
    for named in ["segment.store", "snowflake.local.worker_id"] {
        assert!(
            log.lines().any(|l| l.contains("WARN") && l.contains(named)),
            "a start-up warning names {named}:\n{log}"
        );
    }
    let recorded = dir.path().join("leaf-data/leaf.layout");
    assert!(
        recorded.is_file(),
        "the layout is recorded beside the cache file"
    );

    for (changed, named) in [
        (
            vec![("LEAF_SNOWFLAKE__EPOCH_MS", "1500000000000")],
            "snowflake.epoch_ms is 1500000000000, recorded 1288834974657",
        ),
        (
            vec![
                ("LEAF_SNOWFLAKE__WORKER_BITS", "8"),
                ("LEAF_SNOWFLAKE__SEQUENCE_BITS", "14"),
            ],
            "snowflake.worker_bits is 8, recorded 10, snowflake.sequence_bits is 14, recorded 12",
        ),
    ] {
        let err = run_expecting_failure(dir.path(), &changed, &[]);
        assert!(err.contains(named), "{named}: {err}");
        assert!(err.contains("leaf.layout"), "names the record: {err}");
    }

    // The recorded layout starts again, and goes on past the IDs it issued.
    let s = Server::start(dir.path(), 2);
    let next = s.served("GET", "/api/snowflake/get/x").id();
    assert!(next > first, "{next} after {first}");
    assert!(s.sigterm().0.success());
}

#[test]
fn a_typo_in_a_config_key_fails_start_up_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("leaf.toml"),
        "[server]\nlisen = \"127.0.0.1:1\"\n",
    )
    .unwrap();
    let err = run_expecting_failure(dir.path(), &[], &[]);
    assert!(err.contains("server.lisen"), "{err}");
    assert!(
        !dir.path().join("leaf-data").exists(),
        "nothing was started"
    );

    std::fs::write(
        dir.path().join("other.toml"),
        "[snowflake.local]\nworkerid = 3\n",
    )
    .unwrap();
    let err = run_expecting_failure(dir.path(), &[], &["--config", "other.toml"]);
    assert!(err.contains("snowflake.local.workerid"), "{err}");
}

#[test]
fn a_bad_config_value_fails_start_up_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("leaf.toml"),
        "[server]\nmax_batch = \"x\"\n",
    )
    .unwrap();
    let err = run_expecting_failure(dir.path(), &[], &[]);
    assert!(err.contains("server.max_batch"), "{err}");
    std::fs::remove_file(dir.path().join("leaf.toml")).unwrap();

    let err = run_expecting_failure(dir.path(), &[("LEAF_SEGMENT__PRELOAD_THRESHOLD", "7")], &[]);
    assert!(err.contains("segment.preload_threshold"), "{err}");

    // A backend that is not compiled in names the cargo feature to enable: every mode this
    // build leaves out is asked for (each feature set the tests run with leaves some out).
    let missing = [
        ("etcd", "`etcd`", cfg!(feature = "etcd")),
        ("redis", "`redis`", cfg!(feature = "redis")),
        ("mysql", "`mysql`", cfg!(feature = "mysql")),
        ("zk_normal", "`zk-normal`", cfg!(feature = "zk-normal")),
    ];
    for (mode, feature, _) in missing.into_iter().filter(|(_, _, built)| !built) {
        let err = run_expecting_failure(dir.path(), &[("LEAF_SNOWFLAKE__MODE", mode)], &[]);
        assert!(err.contains(feature), "{mode}: {err}");
    }
}

#[test]
fn connection_limits_and_json_logs() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start_with(
        dir.path(),
        1,
        &[
            ("LEAF_SERVER__IDLE_TIMEOUT_S", "1"),
            ("LEAF_SERVER__MAX_BODY_BYTES", "100"),
            ("LEAF_LOG__FORMAT", "json"),
            ("LEAF_NOT_A_KEY", "1"),
        ],
    );

    // An idle connection is closed by the server.
    let mut idle = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let start = Instant::now();
    let mut buf = [0u8; 64];
    let n = idle.read(&mut buf).unwrap_or(0);
    assert_eq!(n, 0, "closed without an answer");
    assert!(
        start.elapsed() < Duration::from_secs(8),
        "{:?}",
        start.elapsed()
    );

    // An oversized request head is refused, and so is an oversized body.
    let mut big = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    big.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let pad = "x".repeat(40 * 1024);
    let _ = write!(
        big,
        "GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Pad: {pad}\r\n\r\n"
    );
    let mut answer = Vec::new();
    let _ = big.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 431"),
        "{answer}"
    );

    let mut post = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    post.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let body = format!("{{\"tag\":\"t\",\"description\":\"{}\"}}", "d".repeat(500));
    write!(
        post,
        "POST /v1/tags HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    let _ = post.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("\"code\":413"), "{answer}");

    // A body that stops arriving is answered 408 once the timeout passes.
    let mut slow = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        slow,
        "POST /v1/tags HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: 50\r\n\r\n{{\"tag\""
    )
    .unwrap();
    let start = Instant::now();
    let mut answer = String::new();
    let _ = slow.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("\"code\":408"), "{answer}");
    assert!(
        start.elapsed() < Duration::from_secs(8),
        "{:?}",
        start.elapsed()
    );

    // Logs are JSON lines, and the unknown variable was warned about.
    let log = s.log_text();
    let first = log.lines().next().expect("a log line");
    let v: serde_json::Value =
        serde_json::from_str(first).unwrap_or_else(|e| panic!("{e}: {first}"));
    assert!(v["level"].is_string(), "{v}");
    assert!(log.contains("LEAF_NOT_A_KEY"), "{log}");
    assert!(s.sigterm().0.success());
}

#[test]
fn a_time_mark_far_ahead_keeps_snowflake_unavailable_while_segment_serves() {
    let dir = tempfile::tempdir().unwrap();
    // The worker id's cache file says IDs were issued up to an hour from now (a clock that was
    // set back by an hour since).
    let ahead = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        + 3_600_000;
    std::fs::create_dir_all(dir.path().join("leaf-data")).unwrap();
    std::fs::write(
        dir.path().join("leaf-data/worker-leaf.properties"),
        format!("workerID=0\nmarkMs={ahead}\n"),
    )
    .unwrap();
    let s = Server::start(dir.path(), 1);
    let r = s.get("/api/snowflake/get/x");
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(r.header("retry-after").is_some());
    assert_eq!(r.json()["code"], 503);
    let ready = s.get("/readyz");
    assert_eq!(ready.status, 503, "{}", ready.body);
    assert_eq!(ready.json()["snowflake"]["ready"], false);
    assert_eq!(ready.json()["segment"]["ready"], true);
    assert_eq!(s.get(&format!("/api/segment/get/{TAG}")).id(), 1);
    assert!(s.sigterm().0.success());
}

#[test]
fn a_locked_sqlite_file_at_start_up_is_retried_while_snowflake_serves() {
    use sqlx::{Connection, SqliteConnection};

    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("leaf-data");
    std::fs::create_dir_all(&data).unwrap();
    let url = format!("sqlite://{}?mode=rwc", data.join("leaf.db").display());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // Another program holds the server's file exclusively, in SQLite's default (rollback)
    // journal mode: the server cannot even read it.
    let mut other = rt.block_on(SqliteConnection::connect(&url)).unwrap();
    for sql in ["CREATE TABLE other (x INTEGER)", "BEGIN EXCLUSIVE"] {
        rt.block_on(sqlx::query(sql).execute(&mut other)).unwrap();
    }
    let mut s = Server::spawn(
        dir.path(),
        free_port(),
        1,
        &[("LEAF_SEGMENT__BUSY_TIMEOUT_MS", "100")],
    );
    s.wait_for("/api/snowflake/get/x", Duration::from_secs(30));
    let r = s.get(&format!("/api/segment/get/{TAG}"));
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.json()["code"], -3);
    assert!(r.header("retry-after").is_some());
    let ready = s.get("/readyz");
    assert_eq!(ready.status, 503, "{}", ready.body);
    let ready = ready.json();
    assert_eq!(ready["snowflake"]["ready"], true);
    assert_eq!(ready["segment"]["ready"], false);
    assert!(
        ready["segment"]["reason"]
            .as_str()
            .is_some_and(|why| !why.is_empty()),
        "{ready}"
    );

    rt.block_on(sqlx::query("ROLLBACK").execute(&mut other))
        .unwrap();
    rt.block_on(other.close()).unwrap();
    // The background start-up gets the file now: segment serves, and the node is ready.
    s.wait_for(&format!("/api/segment/get/{TAG}"), Duration::from_secs(30));
    s.wait_for("/readyz", Duration::from_secs(10));
    assert!(s.sigterm().0.success());
}

#[test]
fn a_corrupt_sqlite_file_stops_start_up_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("leaf-data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(
        data.join("leaf.db"),
        "this is not a sqlite database ".repeat(200),
    )
    .unwrap();
    let err = run_expecting_failure(dir.path(), &[], &[]);
    assert!(err.contains("segment.url"), "{err}");
    assert!(err.contains("leaf.db"), "{err}");
    assert!(err.contains("not a usable sqlite database"), "{err}");
}

#[test]
fn snowflake_ids_in_a_format_round_trip_through_the_decode_route() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), 1);
    let before = now_ms();
    let plain = s.get("/v1/snowflake").ids()[0];
    let decoded = |path: &str| {
        let r = s.get(path);
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        r.json()
    };
    let worker = decoded(&format!("/v1/snowflake/{plain}/decode"))["worker_id"].clone();
    for format in ["base36", "base62", "friendly"] {
        let r = s.get(&format!("/v1/snowflake?format={format}&count=2"));
        assert_eq!(r.status, 200, "{format}: {}", r.body);
        let texts = r.json()["ids"].as_array().unwrap().clone();
        assert_eq!(texts.len(), 2, "{format}: {}", r.body);
        for text in texts {
            let text = text.as_str().expect("a formatted ID is a string");
            let d = decoded(&format!("/v1/snowflake/{text}/decode?format={format}"));
            assert_eq!(d["worker_id"], worker, "{format} {text}");
            let at = d["timestamp_ms"].as_u64().unwrap();
            assert!((before..=now_ms()).contains(&at), "{format} {text}: {d}");
            let id = d["id"].as_i64().unwrap();
            assert!(id > plain, "{format} {text}: issued after {plain}");
            assert_eq!(decoded(&format!("/v1/snowflake/{id}/decode")), d);
        }
    }
    let r = s.get("/v1/snowflake?format=hex");
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.json()["code"], 400, "{}", r.body);
    let r = s.get("/v1/snowflake/not-an-id/decode?format=friendly");
    assert_eq!(r.status, 400, "{}", r.body);
}

mod borrow;
mod monitoring;
mod monotonic;
mod operations;
mod tls;
mod tokens;
mod upgrade;
