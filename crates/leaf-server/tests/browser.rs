//! The console in a real browser: headless Chromium (Debian's `chromium`, or the one
//! `LEAFTEST_CHROMIUM` names) loads every page of the real binary, as an operator would. Pages
//! load and link to each other, hostile tag names stay text, a page of another origin on this
//! machine cannot create tags, and with a token the pages open with it as the HTTP Basic
//! password; over HTTPS (`[server.tls]`, certificates made at test time) the same login and the
//! same refusal of other origins hold. Screenshots of each page, wide and phone-sized, go to
//! `target/console/`.
//!
//! Chromium is driven by its command line (`--dump-dom`: the DOM after the page's scripts ran;
//! `--screenshot`), which needs no crate beyond the standard library. Without Chromium the test
//! fails, naming what to install.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use common::certs::{Ca, Pair, client_config, put};
use common::{Reply, Server, free_port, http, http_with, parse_reply};
use rustls::pki_types::pem::PemObject as _;

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
    /// Extra flags: the certificate it trusts.
    flags: Vec<String>,
}

impl Browser {
    fn new() -> Browser {
        Browser {
            bin: chromium(),
            profile: tempfile::tempdir().unwrap(),
            flags: Vec::new(),
        }
    }

    /// A browser that trusts a server certificate of `pair`'s key, and no other certificate
    /// beyond the system's: Chromium takes the SHA-256 of the key's SubjectPublicKeyInfo
    /// (`--ignore-certificate-errors-spki-list`, which needs `--user-data-dir`), so the test's
    /// authority never enters a trust store.
    fn trusting(pair: &Pair) -> Browser {
        let spki = rcgen::KeyPair::from_pem(&pair.key)
            .unwrap()
            .public_key_der();
        let pin = base64::engine::general_purpose::STANDARD.encode(sha256(&spki));
        let mut b = Browser::new();
        b.flags
            .push(format!("--ignore-certificate-errors-spki-list={pin}"));
        b
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
            .args(&self.flags)
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
/// The challenge a browser answers with its prompt.
fn assert_basic_challenge(r: &Reply) {
    let challenge = r
        .headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("www-authenticate"))
        .map(|(_, v)| v.as_str());
    assert_eq!(challenge, Some(r#"Basic realm="leaf", charset="UTF-8""#));
}

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
    serve_page_on(html, None)
}

/// [`serve_page`], over TLS with `tls` when given. A connection each on a thread of its own,
/// so that one the browser opens ahead and never uses holds up no other.
fn serve_page_on(html: String, tls: Option<Arc<rustls::ServerConfig>>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let answer = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{html}",
        html.len()
    );
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
            let (answer, tls) = (answer.clone(), tls.clone());
            std::thread::spawn(move || match tls {
                None => answer_once(stream, &answer),
                Some(config) => {
                    let Ok(conn) = rustls::ServerConnection::new(config) else {
                        return;
                    };
                    let mut tls = rustls::StreamOwned::new(conn, stream);
                    answer_once(&mut tls, &answer);
                    tls.conn.send_close_notify();
                    let _ = tls.flush();
                }
            });
        }
    });
    port
}

/// Reads a request's head and writes `answer`.
fn answer_once(mut stream: impl Read + Write, answer: &str) {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf) {
            Ok(n) if n > 0 => head.extend_from_slice(&buf[..n]),
            _ => return,
        }
    }
    let _ = stream.write_all(answer.as_bytes());
    let _ = stream.flush();
}

/// The attack page: the three ways a page can send a POST to `target` without the server's
/// consent, a no-cors fetch with a text/plain body (the attack of issue 18), one without a
/// content type, a form; and a JSON fetch, which the browser must preflight first. Its title
/// lists what settled.
fn attack_page(target: &str) -> String {
    format!(
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
    )
}

/// The `/v1/tags` answers of `status` counted in a metrics page.
fn tag_writes_answered(metrics: &str, status: u16) -> f64 {
    let line = format!("leaf_requests_total{{route=\"/v1/tags\",status=\"{status}\"}}");
    metrics
        .lines()
        .filter(|l| l.starts_with(&line))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn a_page_of_another_origin_cannot_create_tags() {
    let dir = tempfile::tempdir().unwrap();
    // No token: the admin routes trust loopback peers, and the browser runs on this machine.
    let s = start(dir.path(), &[]);
    let target = format!("http://127.0.0.1:{}/v1/tags", s.port);
    let attacker = serve_page(attack_page(&target));
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
    let refused = tag_writes_answered(&metrics, 403);
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
    assert_basic_challenge(&r);

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

/// The SHA-256 of `data`, by the TLS 1.3 suite's hash of rustls with ring (already the server's
/// TLS): no hashing crate for one call.
fn sha256(data: &[u8]) -> Vec<u8> {
    let rustls::SupportedCipherSuite::Tls13(suite) =
        rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256
    else {
        unreachable!("a TLS 1.3 suite")
    };
    suite.common.hash_provider.hash(data).as_ref().to_vec()
}

/// One HTTP/1.1 request over TLS to the server on `port`, trusting `ca` (PEM):
/// [`http_with`] over HTTPS.
fn https_with(
    port: u16,
    ca: &str,
    method: &str,
    path: &str,
    headers: &[&str],
    body: &str,
) -> std::io::Result<Reply> {
    let config = client_config(ca, None, &[b"http/1.1"]);
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let conn = rustls::ClientConnection::new(config, name).map_err(std::io::Error::other)?;
    let tcp = TcpStream::connect(("127.0.0.1", port))?;
    tcp.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    let extra: String = headers.iter().map(|h| format!("{h}\r\n")).collect();
    write!(
        tls,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n{extra}\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    tls.flush()?;
    let mut raw = Vec::new();
    match tls.read_to_end(&mut raw) {
        Ok(_) => {}
        // A peer that closes without close_notify after a whole answer.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => {}
        Err(e) => return Err(e),
    }
    parse_reply(&raw)
}

/// The server with TLS from a certificate `ca` issued for 127.0.0.1 and `localhost`, and
/// `env`; waits until `/healthz` answers over HTTPS. Also the certificate's pair.
fn start_tls(dir: &Path, ca: &Ca, env: &[(&str, &str)]) -> (Server, Pair) {
    let pair = ca.server("leaf-server");
    let cert = put(dir, "server.pem", &pair.cert);
    let key = put(dir, "server.key", &pair.key);
    let mut all = vec![
        ("LEAF_SERVER__TLS__CERT_FILE", cert.to_str().unwrap()),
        ("LEAF_SERVER__TLS__KEY_FILE", key.to_str().unwrap()),
    ];
    all.extend_from_slice(env);
    let mut s = Server::spawn(dir, free_port(), 0, &all);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = s.child.try_wait().unwrap() {
            panic!("the server exited ({status}):\n{}", s.log_text());
        }
        if https_with(s.port, &ca.pem(), "GET", "/healthz", &[], "").is_ok_and(|r| r.status == 200)
        {
            return (s, pair);
        }
        assert!(
            Instant::now() < deadline,
            "/healthz did not answer 200 over HTTPS within 30 s:\n{}",
            s.log_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn over_https_the_basic_login_and_the_origin_rule_hold() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("leaf browser test CA");
    let (s, pair) = start_tls(dir.path(), &ca, &[("LEAF_SERVER__ADMIN_TOKEN", "s3cret")]);
    let port = s.port;
    let https = |method: &str, path: &str| {
        https_with(port, &ca.pem(), method, path, &[], "")
            .unwrap_or_else(|e| panic!("{method} {path} over HTTPS: {e}\n{}", s.log_text()))
    };
    // The challenge a browser answers with its prompt, over TLS as over plain HTTP.
    let r = https("GET", "/cache");
    assert_eq!(r.status, 401, "{}", r.body);
    assert_basic_challenge(&r);

    let browser = Browser::trusting(&pair);
    for (page, heading) in [
        ("/", "Node"),
        ("/cache", "Segment cache"),
        ("/db", "Segment table"),
        ("/snowflake", "Snowflake"),
    ] {
        let h1 = format!("<h1>{heading}</h1>");
        let dom = browser.dom(&format!("https://operator:s3cret@127.0.0.1:{port}{page}"));
        assert!(dom.contains(&h1), "{page} over HTTPS with the token: {dom}");
        assert!(dom.contains("href=\"/cache\""), "{page}: {dom}");
        let dom =
            Browser::trusting(&pair).dom(&format!("https://operator:wrong@127.0.0.1:{port}{page}"));
        assert!(!dom.contains("<h1>"), "{page} with a wrong token: {dom}");
        let dom = Browser::trusting(&pair).dom(&format!("https://127.0.0.1:{port}{page}"));
        assert!(!dom.contains("<h1>"), "{page} without the token: {dom}");
    }
    // The page loads because the browser trusts that one key, not because it trusts anything:
    // without the pin it stops at the certificate.
    let dom = Browser::new().dom(&format!("https://operator:s3cret@127.0.0.1:{port}/"));
    assert!(
        !dom.contains("<h1>Node</h1>"),
        "an untrusted certificate was accepted: {dom}"
    );
    // A browser that speaks plain HTTP to the port is told so, in words.
    let dom = Browser::new().dom(&format!("http://127.0.0.1:{port}/"));
    assert!(dom.contains("this port speaks TLS"), "plain HTTP: {dom}");
    let shots = screenshot_dir();
    browser.screenshot(
        &format!("https://operator:s3cret@127.0.0.1:{port}/"),
        1280,
        &shots.join("index-https.png"),
    );

    // Pages of other origins: the same scheme, host and certificate on another port (the
    // closest a page can come to the console's origin without being it), and a plain-HTTP
    // page. The operator's token is no help to them, and the writes never get as far as
    // asking for it: the origin rule answers 403 before the admin rule's 401.
    let target = format!("https://127.0.0.1:{port}/v1/tags");
    let page_tls = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        rustls::pki_types::CertificateDer::pem_slice_iter(pair.cert.as_bytes())
            .map(Result::unwrap)
            .collect(),
        rustls::pki_types::PrivateKeyDer::from_pem_slice(pair.key.as_bytes()).unwrap(),
    )
    .unwrap();
    let attackers = [
        format!(
            "https://127.0.0.1:{}/",
            serve_page_on(attack_page(&target), Some(Arc::new(page_tls)))
        ),
        format!("http://127.0.0.1:{}/", serve_page(attack_page(&target))),
    ];
    for attacker in &attackers {
        let dom = Browser::trusting(&pair).dom(attacker);
        assert!(
            dom.contains("<title>bare,json-refused,plain</title>"),
            "the attack page {attacker} did not run as expected: {dom}"
        );
    }
    let tags = https_with(
        port,
        &ca.pem(),
        "GET",
        "/v1/tags",
        &["Authorization: Bearer s3cret"],
        "",
    )
    .unwrap();
    assert_eq!(tags.status, 200, "{}", tags.body);
    assert!(
        !tags.body.contains("csrf-"),
        "a page of another origin created a tag over HTTPS: {}",
        tags.body
    );
    let metrics = https("GET", "/metrics").body;
    let refused = tag_writes_answered(&metrics, 403);
    assert!(
        refused >= 6.0,
        "the browser's six POSTs (three a page) were not refused with 403 ({refused}):\n{metrics}"
    );
}
