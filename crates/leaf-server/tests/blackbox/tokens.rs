//! Tokens that rotate (issue 33): a list in the configuration, and token files the running
//! binary re-reads when they change, with no restart; a bad file keeps the tokens before; no
//! token ever reaches the log.

use std::path::Path;
use std::time::{Duration, Instant};

use super::common::{Reply, Server, command, free_port, http_with};

/// Distinctive tokens, so that a log line that held one would be found.
const OLD: &str = "leaftest-rotation-old-7f3a";
const NEW: &str = "leaftest-rotation-new-91c2";
const ADMIN_A: &str = "leaftest-admin-a-55e0";
const ADMIN_B: &str = "leaftest-admin-b-0d4b";

fn get_as(s: &Server, path: &str, token: &str) -> Reply {
    let auth = format!("Authorization: Bearer {token}");
    http_with(s.port, "GET", path, &[&auth], "").unwrap()
}

/// Waits until `GET path` with `token` answers `status` (the file is looked at every second).
fn eventually(s: &Server, path: &str, token: &str, status: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = get_as(s, path, token).status;
        if got == status {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{path} with the token still {got}, not {status}, 10 s after the file changed:\n{}",
            s.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn write(path: &Path, text: &str) {
    // As an editor or a secret volume does: a new file moved over the old one.
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[test]
fn a_client_token_rotates_through_its_file_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("client-tokens");
    write(&file, &format!("{OLD}\n"));
    // A list in the file (an environment variable's value is one token, taken as written).
    std::fs::write(
        dir.path().join("leaf.toml"),
        format!("[server]\nadmin_token = [\"{ADMIN_A}\", \"{ADMIN_B}\"]\n"),
    )
    .unwrap();
    let mut s = Server::spawn(
        dir.path(),
        free_port(),
        1,
        &[("LEAF_SERVER__CLIENT_TOKEN_FILE", file.to_str().unwrap())],
    );
    s.wait_for("/healthz", Duration::from_secs(30));
    let ids = "/v1/snowflake?count=1";
    assert_eq!(get_as(&s, ids, OLD).status, 200);
    assert_eq!(get_as(&s, ids, NEW).status, 401);
    assert_eq!(s.get(ids).status, 401);
    // Both admin tokens of the list pass, anything else does not.
    for (token, status) in [(ADMIN_A, 200), (ADMIN_B, 200), (OLD, 401)] {
        assert_eq!(get_as(&s, "/v1/tags", token).status, status, "{token}");
    }

    // The rotation: the new token beside the old, clients move, the old one goes.
    write(&file, &format!("# rotating\n{OLD}\n{NEW}\n"));
    eventually(&s, ids, NEW, 200);
    assert_eq!(get_as(&s, ids, OLD).status, 200);
    write(&file, &format!("{NEW}\n"));
    eventually(&s, ids, OLD, 401);
    assert_eq!(get_as(&s, ids, NEW).status, 200);

    // A file emptied or garbled by mistake keeps the tokens before: nothing opens.
    for bad in ["", "\n", "caf\u{e9}\n"] {
        write(&file, bad);
        std::thread::sleep(Duration::from_millis(2500));
        assert_eq!(get_as(&s, ids, NEW).status, 200, "{bad:?}");
        assert_eq!(s.get(ids).status, 401, "{bad:?}: open without a token");
    }
    let metrics = get_as(&s, "/metrics", NEW).body;
    assert!(
        metrics.contains("leaf_token_file_reads_total{token=\"client\",result=\"ok\"} 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains("leaf_token_file_reads_total{token=\"client\",result=\"error\"} 3"),
        "{metrics}"
    );
    let log = s.log_text();
    assert!(log.contains("token file read again"), "{log}");
    assert!(log.contains("token file not taken"), "{log}");
    for token in [OLD, NEW, ADMIN_A, ADMIN_B] {
        assert!(!log.contains(token), "the log shows a token:\n{log}");
    }
}

#[test]
fn a_token_file_that_cannot_be_read_or_holds_no_token_stops_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty");
    std::fs::write(&empty, "# nothing yet\n").unwrap();
    let missing = dir.path().join("missing");
    for (key, path, says) in [
        ("LEAF_SERVER__ADMIN_TOKEN_FILE", &missing, "cannot read"),
        ("LEAF_SERVER__METRICS_TOKEN_FILE", &empty, "holds no token"),
    ] {
        let out = command(dir.path(), free_port(), &[(key, path.to_str().unwrap())])
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{key}: {err}");
        let setting = key.trim_start_matches("LEAF_SERVER__").to_ascii_lowercase();
        assert!(err.contains(&format!("server.{setting}")), "{err}");
        assert!(err.contains(says), "{err}");
    }
}
