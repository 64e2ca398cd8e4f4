//! TLS on the one port (issue 33): the built binary with `[server.tls]`, spoken to over real
//! TLS on loopback with certificates made at test time: HTTP/1.1 and gRPC (HTTP/2) by ALPN, a
//! plain client refused in words it can read, a rotated certificate picked up while open
//! connections keep theirs, a bad new pair kept out, and client certificates on the routes of
//! `server.tls.client_auth` (an unknown or expired one refused at the handshake).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leaf_server::grpc::pb::NextSnowflakeIdsRequest;
use leaf_server::grpc::pb::snowflake_client::SnowflakeClient;
use leaf_server::peer_clock;

use super::common::certs::{Ca, Pair, Tls, client_config, https, put};
use super::common::{Reply, Server, command, free_port, parse_reply, wait_exit};

impl Reply {
    fn headers_named(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// The files of a server's TLS, in `dir`.
struct Files {
    cert: PathBuf,
    key: PathBuf,
}

fn files(dir: &Path, pair: &Pair) -> Files {
    Files {
        cert: put(dir, "server.pem", &pair.cert),
        key: put(dir, "server.key", &pair.key),
    }
}

/// The binary with TLS from `files` and `env`; waits until `/healthz` answers over TLS.
fn start(dir: &Path, files: &Files, ca: &Ca, env: &[(&str, &str)]) -> Server {
    let mut all = vec![
        ("LEAF_SERVER__TLS__CERT_FILE", files.cert.to_str().unwrap()),
        ("LEAF_SERVER__TLS__KEY_FILE", files.key.to_str().unwrap()),
    ];
    all.extend_from_slice(env);
    let mut s = Server::spawn(dir, free_port(), 1, &all);
    let config = client_config(&ca.pem(), None, &[b"http/1.1"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = s.child.try_wait().unwrap() {
            panic!("the server exited ({status}):\n{}", s.log_text());
        }
        if https(s.port, &config, "/healthz").is_ok_and(|r| r.status == 200) {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "no /healthz over TLS:\n{}",
            s.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A gRPC channel over TLS to `port`, trusting `ca`, presenting `identity`, if any.
async fn grpc_channel(
    port: u16,
    ca: &str,
    identity: Option<&Pair>,
) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    let mut tls = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(ca))
        .domain_name("localhost");
    if let Some(p) = identity {
        tls = tls.identity(tonic::transport::Identity::from_pem(&p.cert, &p.key));
    }
    tonic::transport::Channel::from_shared(format!("https://127.0.0.1:{port}"))
        .unwrap()
        .tls_config(tls)?
        .connect()
        .await
}

/// The value of `name{labels}` in the server's `/metrics`.
fn metric(port: u16, config: &Arc<rustls::ClientConfig>, series: &str) -> f64 {
    let text = https(port, config, "/metrics").unwrap().body;
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {series} in /metrics:\n{text}"))
        .parse()
        .unwrap()
}

/// Bytes a plain client reads back from the TLS port after sending `hello`, within 10 s.
fn plain_answer(port: u16, hello: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(hello).unwrap();
    let mut answer = Vec::new();
    s.read_to_end(&mut answer)
        .expect("the TLS port answers a plain client and closes, within 10 s");
    answer
}

#[test]
fn one_tls_port_serves_http1_and_grpc_by_alpn_and_refuses_plain_clients_in_their_words() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("leaftest CA");
    let files = files(dir.path(), &ca.server("node-1"));
    let s = start(
        dir.path(),
        &files,
        &ca,
        &[("LEAF_SERVER__IDLE_TIMEOUT_S", "2")],
    );

    // HTTP/1.1 by ALPN.
    let h1 = client_config(&ca.pem(), None, &[b"http/1.1"]);
    let mut conn = Tls::connect(s.port, Arc::clone(&h1)).unwrap();
    assert_eq!(conn.alpn().as_deref(), Some(&b"http/1.1"[..]));
    let r = conn.get("/v1/snowflake?count=3").unwrap();
    assert_eq!(r.ids().len(), 3, "{}", r.body);
    let r = conn.get("/api/segment/get/leaf-segment-test").unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    // Without client certificates a session resumes (the tickets came with the answers).
    let again = Tls::connect(s.port, Arc::clone(&h1)).unwrap();
    assert_eq!(again.handshake(), Some(rustls::HandshakeKind::Resumed));
    // HTTP/2 is chosen when offered.
    let h2 = client_config(&ca.pem(), None, &[b"h2", b"http/1.1"]);
    assert_eq!(
        Tls::connect(s.port, h2).unwrap().alpn().as_deref(),
        Some(&b"h2"[..])
    );
    // gRPC over TLS (HTTP/2), verified against the CA.
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let channel = grpc_channel(s.port, &ca.pem(), None).await.unwrap();
        let ids = SnowflakeClient::new(channel)
            .next_snowflake_ids(NextSnowflakeIdsRequest {
                count: 5,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .ids;
        assert_eq!(ids.len(), 5);
        // A client of another CA does not get through the handshake.
        let other = Ca::new("leaftest other CA");
        let refused = grpc_channel(s.port, &other.pem(), None).await;
        assert!(refused.is_err(), "a server of an unknown CA is not trusted");
    });

    // Plain HTTP/1.1 to the TLS port: a 400 that says why, then the end.
    let answer = plain_answer(s.port, b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n");
    let reply = parse_reply(&answer).unwrap();
    assert_eq!(reply.status, 400);
    assert!(
        reply.body.contains("this port speaks TLS"),
        "{}",
        reply.body
    );
    // A plaintext HTTP/2 client (h2c, a plaintext gRPC channel): its request is answered,
    // UNAVAILABLE saying why (a bare GOAWAY would have a gRPC channel reconnect until its
    // deadline), or a 400 to a plain HTTP/2 request.
    rt.block_on(async {
        for grpc in [true, false] {
            let tcp = tokio::net::TcpStream::connect(("127.0.0.1", s.port))
                .await
                .unwrap();
            let (mut client, conn) = h2::client::handshake(tcp).await.unwrap();
            tokio::spawn(conn);
            let mut req = axum::http::Request::post("/leaf.v1.Snowflake/NextSnowflakeIds");
            if grpc {
                req = req.header("content-type", "application/grpc");
            }
            let (resp, _) = client.send_request(req.body(()).unwrap(), true).unwrap();
            let resp = tokio::time::timeout(Duration::from_secs(5), resp)
                .await
                .expect("an answer within 5 s")
                .unwrap();
            let (head, mut body) = resp.into_parts();
            if grpc {
                assert_eq!(head.headers["grpc-status"], "14", "{head:?}");
                // Percent-encoded, as gRPC sends it.
                let message = head.headers["grpc-message"].to_str().unwrap();
                let message = message.replace("%20", " ");
                assert!(message.contains("this port speaks TLS"), "{message}");
            } else {
                assert_eq!(head.status, 400);
                let chunk = body.data().await.unwrap().unwrap();
                assert!(
                    String::from_utf8_lossy(&chunk).contains("this port speaks TLS"),
                    "{chunk:?}"
                );
            }
        }
    });
    // Silent, or a handshake begun and left: closed at server.idle_timeout_s, not held.
    for hello in [&b""[..], &[0x16, 0x03, 0x01][..]] {
        let started = Instant::now();
        let mut c = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        c.write_all(hello).unwrap();
        let mut rest = Vec::new();
        let _ = c.read_to_end(&mut rest);
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(1500) && took < Duration::from_secs(6),
            "{hello:?}: closed after {took:?}"
        );
    }
    assert!(metric(s.port, &h1, "leaf_tls_handshake_failures_total") >= 4.0);

    // A peer's clock over TLS, and from a plain node, which is told the port speaks TLS and
    // asks again over TLS.
    for tls in [true, false] {
        let peer = format!("127.0.0.1:{}", s.port);
        let t = rt
            .block_on(peer_clock::http_time(peer, peer_clock::PEER_TIMEOUT, tls))
            .unwrap_or_else(|e| panic!("tls {tls}: {e}"));
        assert!(t > 1_700_000_000_000, "{t}");
    }

    // The container's probe speaks TLS to its own port.
    let mut probe = command(
        dir.path(),
        s.port,
        &[
            ("LEAF_SERVER__TLS__CERT_FILE", files.cert.to_str().unwrap()),
            ("LEAF_SERVER__TLS__KEY_FILE", files.key.to_str().unwrap()),
        ],
    );
    let out = probe.args(["probe", "--ready"]).output().unwrap();
    assert!(
        out.status.success(),
        "probe: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_rotated_certificate_serves_new_connections_while_open_ones_keep_theirs() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("leaftest CA");
    let first = ca.server("first");
    let files = files(dir.path(), &first);
    let mut s = start(dir.path(), &files, &ca, &[]);
    let config = client_config(&ca.pem(), None, &[b"http/1.1"]);
    let mut open = Tls::connect(s.port, Arc::clone(&config)).unwrap();
    assert_eq!(open.get("/v1/snowflake?count=1").unwrap().status, 200);
    let first_der = open.server_cert();

    // cert-manager writes a new pair: new connections get it within a few seconds.
    let second = ca.server("second");
    put(dir.path(), "server.key", &second.key);
    put(dir.path(), "server.pem", &second.cert);
    let deadline = Instant::now() + Duration::from_secs(10);
    let second_der = loop {
        let der = Tls::connect(s.port, Arc::clone(&config))
            .map(|c| c.server_cert())
            .unwrap_or_default();
        if !der.is_empty() && der != first_der {
            break der;
        }
        assert!(
            Instant::now() < deadline,
            "the new certificate not served 10 s after it was written:\n{}",
            s.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    // The connection opened before keeps serving, on its certificate.
    assert_eq!(open.get("/v1/snowflake?count=1").unwrap().status, 200);
    assert_eq!(open.server_cert(), first_der);

    // A bad pair (the key of another certificate, then garbage): the pair before stays.
    let other = ca.server("other");
    put(dir.path(), "server.key", &other.key);
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric(s.port, &config, "leaf_tls_reloads_total{result=\"error\"}") < 1.0 {
        assert!(Instant::now() < deadline, "{}", s.log_text());
        std::thread::sleep(Duration::from_millis(100));
    }
    put(dir.path(), "server.pem", "not a certificate\n");
    std::thread::sleep(Duration::from_millis(2500));
    let c = Tls::connect(s.port, Arc::clone(&config)).unwrap();
    assert_eq!(c.server_cert(), second_der, "the good pair stays in use");
    assert_eq!(
        metric(s.port, &config, "leaf_tls_reloads_total{result=\"ok\"}"),
        1.0
    );
    assert!(metric(s.port, &config, "leaf_tls_reloads_total{result=\"error\"}") >= 2.0);
    let log = s.log_text();
    assert!(
        log.contains("do not load; the certificate before stays in use"),
        "{log}"
    );
    assert!(
        log.contains("does not go with server.tls.cert_file"),
        "{log}"
    );

    // SIGHUP reads the files at once; the pair put back loads.
    put(dir.path(), "server.key", &second.key);
    put(dir.path(), "server.pem", &second.cert);
    let ok = std::process::Command::new("kill")
        .args(["-HUP", &s.child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        s.child.try_wait().unwrap().is_none(),
        "SIGHUP ended the server"
    );
    assert!(s.log_text().contains("SIGHUP: reading the TLS files again"));
    assert_eq!(https(s.port, &config, "/healthz").unwrap().status, 200);
    let expiry = metric(
        s.port,
        &config,
        "leaf_tls_certificate_expiry_timestamp_seconds",
    );
    assert!(expiry > 1.9e9, "rcgen's default notAfter is 4096: {expiry}");
    s.wait_for_exit_on_term();
}

impl Server {
    fn wait_for_exit_on_term(self) {
        let (status, log) = self.sigterm();
        assert!(status.success(), "{log}");
    }
}

#[test]
fn client_certificates_guard_the_routes_of_client_auth_and_bad_ones_fail_the_handshake() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("leaftest CA");
    let files = files(dir.path(), &ca.server("node"));
    let client_ca = Ca::new("leaftest client CA");
    let ca_file = put(dir.path(), "clients.pem", &client_ca.pem());
    let good = client_ca.client("service-a", false);
    let expired = client_ca.client("service-old", true);
    let stranger = Ca::new("leaftest stranger CA").client("service-x", false);
    let none = client_config(&ca.pem(), None, &[b"http/1.1"]);
    let with = |p: &Pair| client_config(&ca.pem(), Some(p), &[b"http/1.1"]);

    // `all` (the default once a client CA is set).
    let s = start(
        dir.path(),
        &files,
        &ca,
        &[(
            "LEAF_SERVER__TLS__CLIENT_CA_FILE",
            ca_file.to_str().unwrap(),
        )],
    );
    for probe in ["/healthz", "/readyz", "/metrics", "/v1/time"] {
        assert_eq!(https(s.port, &none, probe).unwrap().status, 200, "{probe}");
    }
    for guarded in [
        "/v1/snowflake?count=1",
        "/api/segment/get/leaf-segment-test",
        "/v1/decode/leaf-segment-test?id=1",
        "/",
    ] {
        let r = https(s.port, &none, guarded).unwrap();
        assert_eq!(r.status, 403, "{guarded}: {}", r.body);
        assert!(r.body.contains("needs a client certificate"), "{}", r.body);
    }
    let good_config = with(&good);
    let mut first = Tls::connect(s.port, Arc::clone(&good_config)).unwrap();
    assert_eq!(first.get("/v1/snowflake?count=2").unwrap().ids().len(), 2);
    // With client certificates no session resumes: a resumed one would carry the certificate
    // of its first handshake unverified (expired since, or of a CA removed since).
    let again = Tls::connect(s.port, Arc::clone(&good_config)).unwrap();
    assert_eq!(again.handshake(), Some(rustls::HandshakeKind::Full));
    let refused = https(s.port, &none, "/v1/snowflake?count=1").unwrap();
    assert_eq!(refused.headers_named("cache-control"), Some("no-store"));
    assert_eq!(
        refused.headers_named("x-content-type-options"),
        Some("nosniff")
    );
    for (name, bad) in [("expired", &expired), ("unknown", &stranger)] {
        let refused = https(s.port, &with(bad), "/healthz");
        assert!(refused.is_err(), "an {name} client certificate got through");
    }
    // gRPC: UNAUTHENTICATED without a certificate, served with one.
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let call = |identity: Option<&Pair>| {
            let (ca, identity) = (ca.pem(), identity.cloned());
            async move {
                let channel = grpc_channel(s.port, &ca, identity.as_ref()).await.unwrap();
                SnowflakeClient::new(channel)
                    .next_snowflake_ids(NextSnowflakeIdsRequest {
                        count: 1,
                        ..Default::default()
                    })
                    .await
            }
        };
        let e = call(None).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated, "{e:?}");
        assert_eq!(call(Some(&good)).await.unwrap().into_inner().ids.len(), 1);
    });
    assert!(metric(s.port, &none, "leaf_tls_handshake_failures_total") >= 2.0);
    drop(s);

    // `admin`: decoding and the probes open, IDs and the console need a certificate.
    let s = start(
        dir.path(),
        &files,
        &ca,
        &[
            (
                "LEAF_SERVER__TLS__CLIENT_CA_FILE",
                ca_file.to_str().unwrap(),
            ),
            ("LEAF_SERVER__TLS__CLIENT_AUTH", "admin"),
        ],
    );
    let id = https(s.port, &with(&good), "/v1/snowflake?count=1")
        .unwrap()
        .ids()[0];
    let r = https(s.port, &none, &format!("/v1/snowflake/{id}/decode")).unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    for guarded in ["/v1/snowflake?count=1", "/v1/tags", "/cache"] {
        assert_eq!(
            https(s.port, &none, guarded).unwrap().status,
            403,
            "{guarded}"
        );
    }
}

#[test]
fn a_start_with_tls_files_that_do_not_load_exits_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("leaftest CA");
    let pair = ca.server("node");
    let other = ca.server("other");
    let cert = put(dir.path(), "server.pem", &pair.cert);
    let key = put(dir.path(), "server.key", &pair.key);
    let wrong_key = put(dir.path(), "other.key", &other.key);
    let garbage = put(dir.path(), "garbage.pem", "hello\n");
    let expired = ca.expired_server("old");
    let expired_cert = put(dir.path(), "expired.pem", &expired.cert);
    let expired_key = put(dir.path(), "expired.key", &expired.key);
    let missing = dir.path().join("missing.pem");
    let path = |p: &Path| p.to_str().unwrap().to_owned();
    let files = |c: &Path, k: &Path, extra: &[(&'static str, String)]| {
        let mut env = vec![
            ("LEAF_SERVER__TLS__CERT_FILE", path(c)),
            ("LEAF_SERVER__TLS__KEY_FILE", path(k)),
        ];
        env.extend_from_slice(extra);
        env
    };
    let cases: Vec<(Vec<(&str, String)>, &str)> = vec![
        (
            vec![("LEAF_SERVER__TLS__CERT_FILE", path(&cert))],
            "server.tls.key_file",
        ),
        (
            files(&cert, &wrong_key, &[]),
            "does not go with server.tls.cert_file",
        ),
        (files(&garbage, &key, &[]), "server.tls.cert_file"),
        (
            files(&expired_cert, &expired_key, &[]),
            "the certificate expired at 2021-01-01T00:00:00Z",
        ),
        (
            files(
                &cert,
                &key,
                &[("LEAF_SERVER__TLS__CLIENT_CA_FILE", path(&missing))],
            ),
            "server.tls.client_ca_file",
        ),
        (
            files(
                &cert,
                &key,
                &[("LEAF_SERVER__TLS__CLIENT_AUTH", "admin".into())],
            ),
            "server.tls.client_auth",
        ),
    ];
    for (env, expect) in cases {
        // A server that starts in spite of the files would serve for ever: killed after 10 s.
        let log = dir.path().join("start.log");
        let mut child = command(dir.path(), free_port(), &env)
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let status = wait_exit(&mut child, Duration::from_secs(10));
        if status.is_none() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let err = std::fs::read_to_string(&log).unwrap();
        assert_eq!(
            status.and_then(|s| s.code()),
            Some(2),
            "{env:?}: still serving after 10 s, or another exit: {err}"
        );
        assert!(err.contains(expect), "{env:?}: {err}");
    }
}
