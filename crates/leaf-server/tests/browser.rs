//! The console in a real browser: headless Chromium (Debian's `chromium`, or the one
//! `LEAFTEST_CHROMIUM` names) loads every page of the real binary, as an operator would. Pages
//! load and link to each other, hostile tag names stay text, a page of another origin on this
//! machine cannot create tags, and with a token the pages open with it as the HTTP Basic
//! password. Screenshots of each page, wide and phone-sized, go to `target/console/`.
//!
//! Chromium is driven by its command line (`--dump-dom`: the DOM after the page's scripts ran;
//! `--screenshot`), which needs no crate beyond the standard library. Without Chromium the test
//! fails, naming what to install.

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Server, free_port, http, http_with};

/// The browser: `LEAFTEST_CHROMIUM`, or the first of Debian's and Google's names on `PATH`.
fn chromium() -> PathBuf {
    if let Some(p) = std::env::var_os("LEAFTEST_CHROMIUM") {
        return PathBuf::from(p);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for name in ["chromium", "chromium-browser", "google-chrome", "chrome"] {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    panic!(
        "no Chromium for the browser test: install Debian's chromium (apt-get install chromium; \
         .ci/run does) or set LEAFTEST_CHROMIUM to a Chromium or Chrome binary"
    );
}

/// A headless browser with a profile of its own (no remembered credentials between runs).
struct Browser {
    bin: PathBuf,
    profile: tempfile::TempDir,
}

impl Browser {
    fn new() -> Browser {
        Browser {
            bin: chromium(),
            profile: tempfile::tempdir().unwrap(),
        }
    }

    /// Runs the browser on `url` with `args`; its stdout.
    fn run(&self, args: &[&str], url: &str) -> String {
        let mut child = Command::new(&self.bin)
            .args([
                "--headless",
                // Root in a container has no user namespace for the sandbox.
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--hide-scrollbars",
            ])
            .arg(format!("--user-data-dir={}", self.profile.path().display()))
            .args(args)
            .arg(url)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", self.bin.display()));
        let mut out = String::new();
        let mut stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let _ = stdout.read_to_string(&mut out);
            out
        });
        let deadline = Instant::now() + Duration::from_secs(90);
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("{} on {url} did not finish within 90 s", self.bin.display());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        reader.join().unwrap()
    }

    /// The DOM of `url` once its scripts ran (and up to 5 s of their timers and requests).
    fn dom(&self, url: &str) -> String {
        self.run(&["--virtual-time-budget=5000", "--dump-dom"], url)
    }

    /// A screenshot of `url`, `width` CSS pixels wide, into `file`.
    fn screenshot(&self, url: &str, width: u32, file: &Path) {
        let shot = format!("--screenshot={}", file.display());
        let size = format!("--window-size={width},1000");
        self.run(&[&shot, &size], url);
        let png = std::fs::read(file)
            .unwrap_or_else(|e| panic!("no screenshot of {url} at {}: {e}", file.display()));
        assert!(
            png.starts_with(b"\x89PNG") && png.len() > 5000,
            "{} is not a picture of a page ({} bytes)",
            file.display(),
            png.len()
        );
    }
}

/// Where the screenshots go: `target/console/`.
fn screenshot_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("target/tmp has a parent")
        .join("console");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn start(dir: &Path, env: &[(&str, &str)]) -> Server {
    let mut s = Server::spawn(dir, free_port(), 0, env);
    s.wait_for("/healthz", Duration::from_secs(30));
    s
}

fn create_tag(s: &Server, body: &str, auth: Option<&str>) {
    let mut headers = vec!["Content-Type: application/json".to_owned()];
    if let Some(a) = auth {
        headers.push(format!("Authorization: {a}"));
    }
    let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
    let r = http_with(s.port, "POST", "/v1/tags", &headers, body).unwrap();
    assert_eq!(r.status, 201, "{body}: {}", r.body);
}

/// The local links of a page's DOM (`href="/..."`).
fn links(dom: &str) -> Vec<String> {
    dom.split("href=\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .filter(|href| href.starts_with('/'))
        .map(str::to_owned)
        .collect()
}

const HOSTILE_TAG: &str = "<img src=x onerror=document.title='pwned'>";
const HOSTILE_DESCRIPTION: &str = "<script>document.title='pwned'</script>";

#[test]
fn every_page_loads_links_resolve_and_hostile_names_stay_text() {
    let dir = tempfile::tempdir().unwrap();
    // A segment switch may wait for the next segment (SQLite commits in the background) longer
    // than the default 10 ms on a busy machine; the pages, not that wait, are under test here.
    let s = start(dir.path(), &[("LEAF_SEGMENT__SWITCH_WAIT_MS", "5000")]);
    let body = serde_json::json!({
        "tag": HOSTILE_TAG,
        "step": 1000,
        "description": HOSTILE_DESCRIPTION,
    })
    .to_string();
    create_tag(&s, &body, None);
    create_tag(
        &s,
        r#"{"tag":"order","step":1000,"description":"orders"}"#,
        None,
    );
    for _ in 0..20 {
        assert_eq!(s.get("/v1/segment/order?count=500").status, 200);
    }
    let browser = Browser::new();
    let base = format!("http://127.0.0.1:{}", s.port);
    let shots = screenshot_dir();
    let mut seen = Vec::new();
    for (page, heading) in [
        ("/", "Node"),
        ("/cache", "Segment cache"),
        ("/db", "Segment table"),
        ("/snowflake", "Snowflake"),
    ] {
        let dom = browser.dom(&format!("{base}{page}"));
        assert!(
            dom.contains(&format!("<h1>{heading}</h1>")),
            "{page} did not render: {dom}"
        );
        // A script or handler that ran would have set the title.
        assert!(!dom.contains("<title>pwned"), "{page} ran a tag's markup");
        assert!(!dom.contains("<img"), "{page} has an image element: {dom}");
        if page == "/cache" || page == "/db" {
            assert!(
                dom.contains("&lt;img src=x onerror=document.title='pwned'&gt;"),
                "{page} does not show the hostile tag as text: {dom}"
            );
        }
        if page == "/db" {
            assert!(
                dom.contains("&lt;script&gt;document.title='pwned'&lt;/script&gt;"),
                "{page} does not show the hostile description as text: {dom}"
            );
        }
        for link in links(&dom) {
            if !seen.contains(&link) {
                seen.push(link);
            }
        }
        let name = if page == "/" { "index" } else { &page[1..] };
        browser.screenshot(
            &format!("{base}{page}"),
            1280,
            &shots.join(format!("{name}.png")),
        );
        browser.screenshot(
            &format!("{base}{page}"),
            400,
            &shots.join(format!("{name}-phone.png")),
        );
    }
    for page in ["/", "/cache", "/db", "/snowflake", "/metrics", "/readyz"] {
        assert!(seen.iter().any(|l| l == page), "no page links to {page}");
    }
    // Every link, followed in the browser, leads to a page, not to an error.
    for link in &seen {
        let dom = browser.dom(&format!("{base}{link}"));
        assert!(
            !dom.contains("\"code\":4") && !dom.contains("\"code\":5"),
            "{link}: {dom}"
        );
        assert!(dom.len() > 100, "{link} is empty: {dom}");
    }
}

/// Serves `html` to every request on a port of its own, as another site on this machine would.
fn serve_page(html: String) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n{html}",
                html.len()
            );
        }
    });
    port
}

#[test]
fn a_page_of_another_origin_cannot_create_tags() {
    let dir = tempfile::tempdir().unwrap();
    // No token: the admin routes trust loopback peers, and the browser runs on this machine.
    let s = start(dir.path(), &[]);
    let target = format!("http://127.0.0.1:{}/v1/tags", s.port);
    // The three ways a page can send a POST without the server's consent: a no-cors fetch with
    // a text/plain body (the attack of issue 18), one without a content type, a form; and a
    // JSON fetch, which the browser must preflight first.
    let attack = format!(
        r#"<!DOCTYPE html><html><head><title>attack</title></head><body>
<iframe name="sink" style="display:none"></iframe>
<form id="f" method="POST" action="{target}" enctype="text/plain" target="sink"><input name='{{"tag":"csrf-form","x":"' value='"}}'></form>
<script>
const done = [];
const note = (what) => {{ done.push(what); document.title = done.sort().join(','); }};
fetch('{target}', {{method: 'POST', mode: 'no-cors', headers: {{'content-type': 'text/plain'}}, body: '{{"tag":"csrf-plain"}}'}}).then(() => note('plain'), () => note('plain-refused'));
fetch('{target}', {{method: 'POST', mode: 'no-cors', body: '{{"tag":"csrf-bare"}}'}}).then(() => note('bare'), () => note('bare-refused'));
fetch('{target}', {{method: 'POST', headers: {{'content-type': 'application/json'}}, body: '{{"tag":"csrf-json"}}'}}).then(() => note('json'), () => note('json-refused'));
document.getElementById('f').submit();
</script></body></html>"#
    );
    let attacker = serve_page(attack);
    let dom = Browser::new().dom(&format!("http://127.0.0.1:{attacker}/"));
    // The page ran: every fetch settled (a no-cors answer is opaque to the page either way).
    assert!(
        dom.contains("<title>bare,json-refused,plain</title>"),
        "the attack page did not run as expected: {dom}"
    );
    let tags = s.get("/v1/tags");
    assert_eq!(tags.status, 200);
    assert!(
        !tags.body.contains("csrf-"),
        "a page of another origin created a tag: {}",
        tags.body
    );
    // The requests did reach the server, and were refused there.
    let metrics = s.get("/metrics").body;
    let refused: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("leaf_requests_total{route=\"/v1/tags\",status=\"403\"}"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(
        refused >= 3.0,
        "the browser's three POSTs were not refused with 403 ({refused}):\n{metrics}"
    );
}

#[test]
fn with_a_token_the_pages_open_with_it_as_the_basic_password() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &[("LEAF_SERVER__ADMIN_TOKEN", "s3cret")]);
    // The challenge a browser answers with its prompt.
    let r = http(s.port, "GET", "/cache").unwrap();
    assert_eq!(r.status, 401);
    let challenge = r
        .headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("www-authenticate"))
        .map(|(_, v)| v.as_str());
    assert_eq!(challenge, Some(r#"Basic realm="leaf", charset="UTF-8""#));

    let browser = Browser::new();
    let port = s.port;
    for page in ["/", "/cache", "/db", "/snowflake"] {
        // What the prompt answers: user name and password in the request.
        let dom = browser.dom(&format!("http://operator:s3cret@127.0.0.1:{port}{page}"));
        assert!(dom.contains("<h1>"), "{page} with the token: {dom}");
        assert!(dom.contains("href=\"/cache\""), "{page}: {dom}");
        let dom = Browser::new().dom(&format!("http://operator:wrong@127.0.0.1:{port}{page}"));
        assert!(!dom.contains("<h1>"), "{page} with a wrong token: {dom}");
        let dom = Browser::new().dom(&format!("http://127.0.0.1:{port}{page}"));
        assert!(!dom.contains("<h1>"), "{page} without the token: {dom}");
    }
}
