//! `https://` endpoints on real TLS servers (`server.tls`, certificates made at test time): IDs
//! over TLS from the async and the blocking client, `http://` and `https://` endpoints mixed, a
//! client certificate where the servers ask for one, endpoints whose certificate is not to be
//! trusted passed over for the next, and the TLS settings' errors.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{ADMIN_TOKEN, Cluster, create_tag};
use leaf_client::{ClientConfig, LeafClient};
use leaf_core::{Error, NewTag, SegmentStore, Tag};
use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use tempfile::TempDir;

/// A certificate authority of the test's own.
struct Ca {
    cert: Certificate,
    key: KeyPair,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.self_signed(&key).unwrap();
        Ca { cert, key }
    }

    /// A certificate for `names` (DNS names or IP addresses) and `usage`, signed by this CA:
    /// its PEM and its key's.
    fn issue(&self, names: &[&str], usage: ExtendedKeyUsagePurpose) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names).unwrap();
        params.extended_key_usages = vec![usage];
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

/// The files of one test: two authorities (the trusted one and another), and certificates.
struct Pki {
    dir: TempDir,
    ca: Ca,
    other_ca: Ca,
}

impl Pki {
    fn new() -> Pki {
        let pki = Pki {
            dir: tempfile::tempdir().unwrap(),
            ca: Ca::new("leaf test CA"),
            other_ca: Ca::new("another CA"),
        };
        pki.write("ca.pem", &pki.ca.cert.pem());
        pki.write("other-ca.pem", &pki.other_ca.cert.pem());
        pki
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Writes `{name}.pem` and `{name}.key`, issued by `ca`.
    fn issue(&self, ca: &Ca, name: &str, names: &[&str], usage: ExtendedKeyUsagePurpose) {
        let (cert, key) = ca.issue(names, usage);
        self.write(&format!("{name}.pem"), &cert);
        self.write(&format!("{name}.key"), &key);
    }

    /// The server keys of a TLS port with the certificate `{name}.pem`.
    fn server_env(&self, name: &str) -> Vec<(String, String)> {
        vec![
            (
                "LEAF_SERVER__TLS__CERT_FILE".into(),
                self.path(&format!("{name}.pem")).display().to_string(),
            ),
            (
                "LEAF_SERVER__TLS__KEY_FILE".into(),
                self.path(&format!("{name}.key")).display().to_string(),
            ),
        ]
    }
}

/// `env` as `Cluster::add` takes it.
fn keys(env: &[(String, String)]) -> Vec<(&str, &str)> {
    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

/// A PKI with a server certificate `server` for `localhost` and `127.0.0.1`, by the trusted CA.
/// [`pki_with_server`] and a client certificate `client` of the trusted CA.
fn pki_with_client() -> Pki {
    let pki = pki_with_server();
    pki.issue(
        &pki.ca,
        "client",
        &["leaf-client"],
        ExtendedKeyUsagePurpose::ClientAuth,
    );
    pki
}

fn pki_with_server() -> Pki {
    let pki = Pki::new();
    pki.issue(
        &pki.ca,
        "server",
        &["localhost", "127.0.0.1"],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    pki
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_async_client_gets_ids_over_https_trusting_its_ca_file() {
    let pki = pki_with_server();
    let cluster = Cluster::start(1, &keys(&pki.server_env("server")));
    let c = LeafClient::builder()
        .endpoints([cluster.servers[0].https_url()])
        .admin_token(ADMIN_TOKEN)
        .ca_file(pki.path("ca.pem"))
        .build()
        .expect("the client");
    create_tag(&c, "t", 10).await;
    let mut ids = c.segment().next_ids("t", 25).await.expect("ids over https");
    ids.push(c.segment().next_id("t").await.unwrap());
    assert_eq!(ids, (1..=26).collect::<Vec<_>>());
    assert_eq!(c.snowflake_ids(3).await.unwrap().len(), 3);
    let status = c.endpoints();
    assert!(
        status[0].answered > 0 && status[0].failed == 0,
        "{status:?}"
    );
}

/// One server speaks TLS and one plain HTTP, on one store: a client of both gets its IDs from
/// the first, then from the second once the first is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_and_https_endpoints_mix() {
    let pki = pki_with_server();
    let mut cluster = Cluster::start(0, &[]);
    cluster.add(&keys(&pki.server_env("server")));
    cluster.add(&[]);
    let urls = vec![cluster.servers[0].https_url(), cluster.servers[1].url()];
    let c = common::client(urls)
        .ca_file(pki.path("ca.pem"))
        .build()
        .unwrap();
    create_tag(&c, "t", 10).await;
    let tag = Tag::new("t").unwrap();
    let first = c.store().allocate(&tag, None).await.unwrap();
    assert_eq!(first.range(), 1..11);
    cluster.servers[0].kill();
    let second = c
        .store()
        .allocate(&tag, None)
        .await
        .expect("from the http:// server");
    assert_eq!(second.range(), 11..21);
    let status = c.endpoints();
    assert!(status[1].preferred && status[0].failed > 0, "{status:?}");
}

#[test]
fn the_blocking_client_gets_ids_over_https() {
    let pki = pki_with_server();
    let cluster = Cluster::start(1, &keys(&pki.server_env("server")));
    let c = leaf_client::blocking::LeafClient::builder()
        .endpoints([cluster.servers[0].https_url()])
        .admin_token(ADMIN_TOKEN)
        .ca_file(pki.path("ca.pem"))
        .build_blocking()
        .expect("the blocking client");
    let new = NewTag {
        step: 10,
        ..NewTag::new(Tag::new("t").unwrap())
    };
    c.create(&new).expect("create the tag over https");
    let ids: Vec<i64> = (0..15).map(|_| c.next_id("t").unwrap()).collect();
    assert_eq!(ids, (1..=15).collect::<Vec<_>>());
    assert_eq!(c.snowflake_ids(2).unwrap().len(), 2);
}

/// Servers with `server.tls.client_ca_file`: a client without a certificate is told at once,
/// by the first server, that the route needs one (a final `Config`, not a retry until the
/// call's time is up); one with a certificate of that CA is served; one with a certificate of
/// another CA fails the handshake everywhere, which is no server's answer: `Unavailable`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_where_the_servers_ask_for_one() {
    let pki = pki_with_client();
    pki.issue(
        &pki.other_ca,
        "stranger",
        &["leaf-client"],
        ExtendedKeyUsagePurpose::ClientAuth,
    );
    let mut env = pki.server_env("server");
    env.push((
        "LEAF_SERVER__TLS__CLIENT_CA_FILE".into(),
        pki.path("ca.pem").display().to_string(),
    ));
    let cluster = Cluster::start(2, &keys(&env));
    let urls: Vec<String> = cluster.servers.iter().map(|s| s.https_url()).collect();
    let builder = || {
        common::client(urls.clone())
            .ca_file(pki.path("ca.pem"))
            .call_timeout(Duration::from_secs(3))
    };

    let with_cert = builder()
        .client_cert(pki.path("client.pem"), pki.path("client.key"))
        .build()
        .unwrap();
    create_tag(&with_cert, "t", 10).await;
    assert_eq!(with_cert.segment().next_id("t").await.unwrap(), 1);

    let without = builder().build().unwrap();
    let started = Instant::now();
    let e = without.segment().next_id("t").await.unwrap_err();
    let took = started.elapsed();
    println!("without a client certificate: {e}");
    assert!(matches!(&e, Error::Config(_)), "{e}");
    let text = e.to_string();
    assert!(text.contains("needs a client certificate"), "{text}");
    assert!(text.contains("set cert_file and key_file"), "{text}");
    assert!(text.contains(&urls[0]), "names the endpoint: {text}");
    assert!(
        took < Duration::from_secs(1),
        "final, not retried: {took:?}"
    );
    let status = without.endpoints();
    assert_eq!(status[1].answered + status[1].failed, 0, "{status:?}");

    let stranger = builder()
        .client_cert(pki.path("stranger.pem"), pki.path("stranger.key"))
        .build()
        .unwrap();
    let e = stranger.snowflake_ids(1).await.unwrap_err();
    println!("with another CA's client certificate: {e}");
    assert!(matches!(&e, Error::Unavailable(_)), "{e}");
    for url in &urls {
        assert!(e.to_string().contains(url.as_str()), "{e}");
    }
}

/// Endpoints whose certificate is not to be trusted (another CA's; the trusted CA's for another
/// name), and a plain-HTTP URL of a TLS port, fail as a refused connection does: each is
/// skipped, and the next, good, endpoint serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_endpoint_is_skipped_for_the_next() {
    let pki = pki_with_server();
    pki.issue(
        &pki.other_ca,
        "foreign",
        &["localhost", "127.0.0.1"],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    pki.issue(
        &pki.ca,
        "misnamed",
        &["leaf.invalid"],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    let mut cluster = Cluster::start(0, &[]);
    for name in ["foreign", "misnamed", "server"] {
        cluster.add(&keys(&pki.server_env(name)));
    }
    let s = &cluster.servers;
    let urls = vec![
        s[0].https_url(),
        s[1].https_url(),
        s[2].url(),
        s[2].https_url(),
    ];
    let c = common::client(urls)
        .ca_file(pki.path("ca.pem"))
        .build()
        .unwrap();
    create_tag(&c, "t", 10).await;
    assert_eq!(c.segment().next_id("t").await.unwrap(), 1);
    let status = c.endpoints();
    for (i, expect) in [
        (0, "invalid peer certificate"),
        (1, "invalid peer certificate"),
        (2, "not from leaf-server"),
    ] {
        let why = status[i].last_error.as_deref().unwrap_or_default();
        println!("endpoint {i}: {why}");
        assert!(status[i].failed > 0 && why.contains(expect), "{status:?}");
        assert_eq!(status[i].answered, 0, "{status:?}");
    }
    assert!(
        status[0]
            .last_error
            .as_deref()
            .unwrap()
            .contains("UnknownIssuer")
    );
    assert!(
        status[1]
            .last_error
            .as_deref()
            .unwrap()
            .contains("not valid for name")
    );
    assert!(status[3].preferred && status[3].answered > 0, "{status:?}");
}

/// A bad TLS setting fails `build()`, `build_blocking()` and `validate()` alike with `Config`
/// naming the field and the file; nothing panics.
#[test]
fn tls_settings_errors_name_the_field_and_the_file() {
    let pki = pki_with_client();
    let garbage = pki.write("garbage.pem", "not a certificate\n");
    let broken = pki.write(
        "broken.pem",
        "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n",
    );
    let missing = pki.path("missing.pem");
    let https = || ClientConfig {
        endpoints: vec!["https://127.0.0.1:1".into()],
        ca_file: Some(pki.path("ca.pem")),
        ..ClientConfig::default()
    };
    let check = |config: ClientConfig, field: &str, file: Option<&Path>, says: &str| {
        let errors = [
            config.validate().map(drop),
            LeafClient::builder()
                .config(config.clone())
                .build()
                .map(drop),
            leaf_client::blocking::LeafClient::builder()
                .config(config.clone())
                .build_blocking()
                .map(drop),
        ];
        for e in errors {
            let Err(e) = e else {
                panic!("{field}: accepted; expected an error saying {says:?}");
            };
            assert!(matches!(&e, Error::Config(_)), "{e}");
            let text = e.to_string();
            assert!(
                text.starts_with(field) || text.contains(&format!(" {field}")),
                "{text}"
            );
            assert!(text.contains(says), "{says:?}: {text}");
            if let Some(file) = file {
                assert!(text.contains(&file.display().to_string()), "{text}");
            }
        }
        println!("{}", config.validate().unwrap_err());
    };
    let with = |f: &dyn Fn(&mut ClientConfig)| {
        let mut c = https();
        f(&mut c);
        c
    };
    check(
        with(&|c| c.ca_file = None),
        "ca_file",
        None,
        "is https and ca_file is not set",
    );
    check(
        with(&|c| c.ca_file = Some(missing.clone())),
        "ca_file",
        Some(&missing),
        "cannot read",
    );
    check(
        with(&|c| c.ca_file = Some(garbage.clone())),
        "ca_file",
        Some(&garbage),
        "no CERTIFICATE block",
    );
    check(
        with(&|c| c.ca_file = Some(broken.clone())),
        "ca_file",
        Some(&broken),
        "not PEM certificates",
    );
    check(
        with(&|c| c.cert_file = Some(pki.path("client.pem"))),
        "cert_file",
        None,
        "key_file is not",
    );
    check(
        with(&|c| c.key_file = Some(pki.path("client.key"))),
        "key_file",
        None,
        "cert_file is not",
    );
    let pair = |cert: &Path, key: &Path| {
        with(&|c| {
            c.cert_file = Some(cert.to_owned());
            c.key_file = Some(key.to_owned());
        })
    };
    check(
        pair(&garbage, &pki.path("client.key")),
        "cert_file",
        Some(&garbage),
        "no CERTIFICATE block",
    );
    check(
        pair(&pki.path("client.pem"), &missing),
        "key_file",
        Some(&missing),
        "cannot read",
    );
    check(
        pair(&pki.path("client.pem"), &garbage),
        "key_file",
        Some(&garbage),
        "not a PEM private key",
    );
    // The server's key is a key, but not the client certificate's.
    check(
        pair(&pki.path("client.pem"), &pki.path("server.key")),
        "key_file",
        Some(&pki.path("server.key")),
        "does not go with cert_file",
    );
    // The same settings, whole, are valid.
    pair(&pki.path("client.pem"), &pki.path("client.key"))
        .validate()
        .expect("a certificate and its key");
}
