//! The binary as its peers and operators meet it: the time route and the peer clock check, the probe subcommand, `store raise` after a restore, a StatefulSet's ordinal, and what a rebound host name is answered.

use super::*;

// The peer clock check of the ZooKeeper modes, against this binary as the peer.

const PEER_TIMEOUT: Duration = Duration::from_secs(5);

/// A running peer for the clock check, with its working directory.
fn peer() -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), 1);
    (dir, s)
}

#[tokio::test]
async fn the_time_route_answers_the_wall_clock() {
    let (_dir, server) = peer();
    let before = SystemClock::new().now_ms();
    let reply = server.get("/v1/time");
    let after = SystemClock::new().now_ms();
    assert_eq!(reply.status, 200, "{}", reply.body);
    let now_ms = reply.json()["now_ms"].as_u64().unwrap_or_else(|| {
        panic!("no now_ms in {}", reply.body);
    });
    assert!(
        (before..=after).contains(&now_ms),
        "{before} <= {now_ms} <= {after}"
    );
    let by_getter =
        peer_clock::http_time(format!("127.0.0.1:{}", server.port), PEER_TIMEOUT, false)
            .await
            .unwrap();
    assert!(by_getter >= now_ms);
    // A node whose port speaks TLS asks this plain one in plain text after its handshake fails.
    let from_tls_node =
        peer_clock::http_time(format!("127.0.0.1:{}", server.port), PEER_TIMEOUT, true)
            .await
            .unwrap();
    assert!(from_tls_node >= by_getter);
}

#[tokio::test]
async fn a_node_on_the_peers_clock_passes_and_one_a_minute_ahead_is_refused() {
    let (_dir, server) = peer();
    let peers = vec![format!("127.0.0.1:{}", server.port)];
    let get = |p: String| peer_clock::http_time(p, PEER_TIMEOUT, false);

    // The same machine's clock: well within 5 s.
    let r = leaf_snowflake::peers::check(&peers, &SystemClock::new(), 5000, get).await;
    match r {
        PeerClock::Agrees { skew_ms, peers: 1 } => assert!(skew_ms.abs() < 1000, "{skew_ms}"),
        other => panic!("{other:?}"),
    }

    // A clock a minute ahead of the peer's.
    let ahead = ManualClock::new(SystemClock::new().now_ms() + 60_000);
    let r = leaf_snowflake::peers::check(&peers, &ahead, 5000, get).await;
    match &r {
        PeerClock::Off {
            skew_ms,
            peers: 1,
            max_skew_ms: 5000,
        } => assert!((55_000..=61_000).contains(skew_ms), "{skew_ms}"),
        other => panic!("{other:?}"),
    }
    assert!(r.refusal().is_some());

    // The peer gone: nobody to compare with, which passes.
    drop(server);
    let r = leaf_snowflake::peers::check(&peers, &ahead, 5000, get).await;
    assert_eq!(r, PeerClock::NoPeers { asked: 1 });
}

/// `leaf-server probe` as a container's health check runs it: found by the configuration's
/// `server.listen` (the same `LEAF_` variables as the server), or by `--url`.
fn probe(dir: &Path, port: u16, args: &[&str]) -> (bool, String) {
    let out = command(dir, port, &[] as &[(&str, &str)])
        .arg("probe")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn the_probe_subcommand_answers_for_a_running_server_and_fails_without_one() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let (ok, text) = probe(dir.path(), port, &[]);
    assert!(!ok, "no server yet: {text}");
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");

    // Snowflake waits on a mark far ahead: alive, not ready.
    std::fs::create_dir_all(dir.path().join("leaf-data")).unwrap();
    std::fs::write(
        dir.path().join("leaf-data/worker-leaf.properties"),
        format!("workerID=0\nmarkMs={}\n", now_ms() + 3_600_000),
    )
    .unwrap();
    let mut server = Server::spawn(dir.path(), port, 0, &[] as &[(&str, &str)]);
    server.wait_for("/healthz", Duration::from_secs(20));
    let (ok, text) = probe(dir.path(), port, &[]);
    assert!(ok, "{text}");
    assert!(text.contains("/healthz") && text.contains("200"), "{text}");
    let (ok, text) = probe(dir.path(), port, &["--ready"]);
    assert!(!ok, "snowflake is not ready: {text}");
    assert!(text.contains("503"), "{text}");
    let url = format!("http://127.0.0.1:{port}");
    let (ok, text) = probe(dir.path(), free_port(), &["--url", &url]);
    assert!(ok, "--url wins over server.listen: {text}");
    let (ok, text) = probe(dir.path(), port, &["--url", "localhost:1"]);
    assert!(
        !ok && text.contains("not an http:// or https:// URL"),
        "{text}"
    );
    drop(server);
}

#[test]
fn a_statefulset_ordinal_gives_the_worker_id_and_a_host_without_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::spawn(
        dir.path(),
        free_port(),
        0,
        &[
            ("LEAF_SNOWFLAKE__LOCAL__WORKER_ID_FROM", "hostname_ordinal"),
            ("LEAF_SNOWFLAKE__LOCAL__HOSTNAME", "leaf-2"),
            ("LEAF_SNOWFLAKE__LOCAL__WORKER_ID_OFFSET", "5"),
        ],
    );
    server.wait_for("/readyz", Duration::from_secs(20));
    let id: i64 = server
        .get("/api/snowflake/get/x")
        .body
        .trim()
        .parse()
        .unwrap();
    let decoded = server.get(&format!("/v1/snowflake/{id}/decode")).json();
    assert_eq!(decoded["worker_id"], 7, "{decoded}");
    drop(server);

    let other = tempfile::tempdir().unwrap();
    let err = run_expecting_failure(
        other.path(),
        &[
            ("LEAF_SNOWFLAKE__LOCAL__WORKER_ID_FROM", "hostname_ordinal"),
            ("LEAF_SNOWFLAKE__LOCAL__HOSTNAME", "leaf"),
            ("LEAF_SEGMENT__ENABLED", "false"),
        ],
        &[],
    );
    assert!(
        err.contains("snowflake.local.worker_id_from") && err.contains("\"leaf\""),
        "{err}"
    );
}

/// `request` (a whole HTTP/1.1 request head, `Connection: close`) on a fresh connection: the
/// status, the head and the body.
fn raw(port: u16, request: &str) -> (u16, String, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, head.to_ascii_lowercase(), body.to_string())
}

#[test]
fn over_a_socket_rebound_names_heads_and_caches_are_kept_out() {
    // Issue 24 items 7, 8 and 10 on the real binary: the list from the environment (one string
    // of comma-separated entries), the Host as hyper reads it, HEAD as hyper answers it.
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(
        dir.path(),
        0,
        &[(
            "LEAF_SERVER__ALLOWED_HOSTS",
            "leaf.internal, leaf2.internal:8080",
        )],
    );
    let port = server.port;
    let max_id = || server.get(&format!("/v1/tags/{TAG}")).json()["max_id"].as_i64();
    let before = max_id();
    // The rebinding page's same-origin POST, then a read of an ID by the rebound name.
    let (status, head, body) = raw(
        port,
        &format!(
            "POST /v1/segment/{TAG}/allocate?step=1000000 HTTP/1.1\r\nHost: \
             rebind.attacker.example:{port}\r\nOrigin: http://rebind.attacker.example:{port}\r\n\
             Content-Length: 0\r\nConnection: close\r\n\r\n"
        ),
    );
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("server.allowed_hosts"), "{body}");
    for header in ["cache-control: no-store", "x-content-type-options: nosniff"] {
        assert!(head.contains(header), "{header}: {head}");
    }
    let (status, _, body) = raw(
        port,
        &format!(
            "GET /api/segment/get/{TAG} HTTP/1.1\r\nHost: rebind.attacker.example:{port}\r\n\
             Connection: close\r\n\r\n"
        ),
    );
    assert_eq!(status, 403, "{body}");
    assert_eq!(max_id(), before, "the store's allocations are unchanged");
    // A listed name is served; HEAD takes no ID.
    let get = |host: &str| {
        raw(
            port,
            &format!(
                "GET /api/segment/get/{TAG} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
            ),
        )
    };
    let (status, head, first) = get("LEAF.internal");
    assert_eq!(status, 200, "{first}");
    assert!(head.contains("cache-control: no-store"), "{head}");
    let (status, head, body) = raw(
        port,
        &format!(
            "HEAD /api/segment/get/{TAG} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        ),
    );
    assert_eq!(status, 405, "{head}");
    assert!(head.contains("allow: get, post"), "{head}");
    assert!(body.is_empty(), "{body}");
    let (status, _, next) = get("leaf2.internal:8080");
    assert_eq!(status, 200, "{next}");
    let (first, next): (i64, i64) = (first.parse().unwrap(), next.parse().unwrap());
    assert_eq!(next, first + 1, "the HEAD took no ID");
    // The probe asks by address, which the list never stops.
    let (ok, text) = probe(dir.path(), port, &[]);
    assert!(ok, "{text}");
}

/// `--version` names the version, the git revision the binary was built from (the checkout's
/// HEAD when built in one) and the backends compiled in.
#[test]
fn the_version_names_the_revision_and_the_backends() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_leaf-server"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let prefix = format!("leaf-server {} (git ", env!("CARGO_PKG_VERSION"));
    let rest = text
        .trim()
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("{text}"));
    let (revision, backends) = rest
        .split_once("; backends: ")
        .unwrap_or_else(|| panic!("{text}"));
    let head = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    match head {
        Some(head) => assert_eq!(revision, head, "{text}"),
        None => assert_eq!(revision, "unknown", "{text}"),
    }
    let backends: Vec<&str> = backends.trim_end_matches(')').split(", ").collect();
    for default in ["sqlite", "local"] {
        assert!(backends.contains(&default), "{text}");
    }
    assert_eq!(
        backends.contains(&"mysql"),
        cfg!(feature = "mysql"),
        "{text}"
    );
}

/// The README's Backup and restore on the embedded default: IDs of a plain and a business
/// tag, a copy of the SQLite file (the server stopped), more IDs, the copy put back, `store
/// raise`; the next server repeats none of them, the business tag's claim and definition are
/// left alone, and a raise the day's width cannot take is refused with nothing changed.
#[test]
fn a_sqlite_file_restored_from_an_older_copy_and_raised_repeats_no_id() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let data = dir.path().join("leaf-data");
    let backup = dir.path().join("backup");
    let start = |n: u32| {
        let mut s = Server::spawn(dir.path(), port, n, &[] as &[(&str, &str)]);
        s.wait_for("/readyz", Duration::from_secs(20));
        s
    };
    let ids = |s: &Server, path: &str| -> Vec<String> {
        let r = s.get(path);
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        let json = r.json();
        let ids = json["ids"]
            .as_array()
            .unwrap_or_else(|| panic!("{}", r.body));
        ids.iter().map(|v| v.to_string()).collect()
    };
    let take = |s: &Server, issued: &mut HashSet<String>| {
        for path in [
            "/v1/segment/leaf-segment-test?count=1500",
            "/v1/segment/order?count=150",
        ] {
            for id in ids(s, path) {
                assert!(issued.insert(id.clone()), "{id} issued twice");
            }
        }
    };
    // The database's files only: the data folder also holds the cache files and the
    // monotonic claim's folder, which a restore of the database leaves as they are.
    let db_files = |dir: &Path| -> Vec<std::path::PathBuf> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("leaf.db")
            })
            .collect()
    };
    let files = |from: &Path, to: &Path| {
        std::fs::create_dir_all(to).unwrap();
        for path in db_files(to) {
            std::fs::remove_file(path).unwrap();
        }
        for path in db_files(from) {
            std::fs::copy(&path, to.join(path.file_name().unwrap())).unwrap();
        }
    };
    let raise = |args: &[&str]| -> (bool, String) {
        let out = command(dir.path(), port, &[] as &[(&str, &str)])
            .args(["store", "raise"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text)
    };

    let mut issued = HashSet::new();
    let s = start(0);
    let body = r#"{"tag":"order","format":"O{date:%Y%m%d}{seq:06}","reset":"day"}"#;
    let created = common::post_json(port, "/v1/tags", body);
    assert_eq!(created.status, 201, "{}", created.body);
    take(&s, &mut issued);
    assert!(s.sigterm().0.success());
    files(&data, &backup);

    let s = start(1);
    take(&s, &mut issued);
    take(&s, &mut issued);
    assert!(s.sigterm().0.success());
    files(&backup, &data);

    // The copy is behind what was issued: unraised, it would hand those IDs out again.
    let (ok, plan) = raise(&["--by", "100000", "--dry-run"]);
    assert!(ok, "{plan}");
    let restored: i64 = plan
        .lines()
        .find_map(|l| l.trim().strip_prefix("leaf-segment-test  plain  max_id "))
        .and_then(|rest| rest.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("{plan}"));
    let plain_max: i64 = issued
        .iter()
        .filter_map(|id| id.parse().ok())
        .max()
        .unwrap();
    assert!(
        restored <= plain_max,
        "{restored} > {plain_max}: not an older copy"
    );
    assert!(plan.contains("order  claim of order  left alone"), "{plan}");
    assert!(
        plan.contains("order@  definition of order  left alone"),
        "{plan}"
    );
    assert!(
        plan.contains("dry run: 2 rows would be raised, 2 left alone"),
        "{plan}"
    );

    // More than the day's six digits can print: refused by name, nothing changed.
    let (ok, refused) = raise(&["--by", "100000", "--period-by", "1000000"]);
    assert!(!ok, "{refused}");
    assert!(refused.contains("nothing was changed"), "{refused}");
    assert!(refused.contains("(period of order)"), "{refused}");
    let (_, again) = raise(&["--by", "100000", "--dry-run"]);
    assert_eq!(again, plan, "the refused raise changed the store");

    let (ok, done) = raise(&["--by", "100000", "--period-by", "10000"]);
    assert!(ok, "{done}");
    assert!(done.contains("raised 2 rows, left 2 alone"), "{done}");

    let s = start(2);
    let mut after = HashSet::new();
    take(&s, &mut after);
    assert!(s.sigterm().0.success());
    let repeated: Vec<&String> = after.intersection(&issued).collect();
    assert!(
        repeated.is_empty(),
        "issued again after the raise: {repeated:?}"
    );
}
