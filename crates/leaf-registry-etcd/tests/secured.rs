//! The etcd backend on a cluster secured as a Kubernetes-style etcd is: TLS only on the client
//! port (`https://`, the server's certificate verified against a CA made at test time, host
//! name included), client certificates required (`--client-cert-auth`), and authentication
//! enabled with a user whose role grants `readwrite` on the project's key prefix only. The
//! conformance suite runs whole as that user; then each misconfiguration is a start-up error
//! naming its key, and a password rotated while running is taken from its file.

mod common;

use std::sync::Arc;

use common::{EtcdFix, NAME, now_ms, request};
use etcd_client::{Certificate, Client, ConnectOptions, Identity, Permission, TlsOptions};
use leaf_core::{Error, NewTag, SegmentStore, Tag, WorkerIdRegistry};
use leaf_registry_etcd::{EtcdClaims, EtcdConfig, EtcdStore};
use leaf_testkit::pki::{Pki, put};
use leaf_testkit::provision::{self, Dedicated};
use tokio::sync::OnceCell;

/// The project's user and its password; its role grants `readwrite` on [`PREFIX`] only.
const USER: &str = "leaf";
const PASSWORD: &str = "leaf-etcd-secret";
/// Every test's keys are under this prefix (`/leaftest-PID-RANDOM`).
const PREFIX: &str = "/leaftest-";
/// A user whose role grants another prefix only.
const OTHER_USER: &str = "other";
const OTHER_PASSWORD: &str = "other-secret";
const ROOT_PASSWORD: &str = "root-secret";

/// A secured etcd, its certificates, and its root client (for changing users).
struct Secured {
    pki: Pki,
    endpoint: String,
    _server: Dedicated,
}

/// A TLS client with the client certificate of `pki`, as `user` (none: by the certificate).
async fn client(pki: &Pki, endpoint: &str, user: Option<(&str, &str)>) -> Client {
    let tls = TlsOptions::new()
        .ca_certificate(Certificate::from_pem(
            std::fs::read(pki.path("ca.pem")).unwrap(),
        ))
        .identity(Identity::from_pem(
            std::fs::read(pki.path("client.pem")).unwrap(),
            std::fs::read(pki.path("client.key")).unwrap(),
        ));
    let mut options = ConnectOptions::new().with_tls(tls);
    if let Some((name, password)) = user {
        options = options.with_user(name, password);
    }
    let mut last = None;
    for _ in 0..50 {
        match Client::connect([endpoint], Some(options.clone())).await {
            Ok(mut c) => match c.status().await {
                Ok(_) => return c,
                Err(e) => last = Some(e.to_string()),
            },
            Err(e) => last = Some(e.to_string()),
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    panic!("no TLS client of {endpoint}: {last:?}");
}

/// A secured server with the users and roles set up and authentication on.
async fn start() -> Secured {
    // The client certificate's CN is not a user: etcd's common-name authentication (with
    // `--client-cert-auth`) gives it nothing, so a client's rights come from its user alone.
    let pki = Pki::localhost_only("no-such-user");
    let server = provision::etcd_secured(&pki)
        .await
        .unwrap_or_else(|e| panic!("no secured etcd for the tests: {e}"));
    let endpoint = server.endpoint().url.clone();
    let mut root = client(&pki, &endpoint, None).await;
    root.user_add("root", ROOT_PASSWORD, None).await.unwrap();
    root.role_add("root").await.ok();
    root.user_grant_role("root", "root").await.unwrap();
    for (user, password, prefix) in [
        (USER, PASSWORD, PREFIX),
        (OTHER_USER, OTHER_PASSWORD, "/other/"),
    ] {
        root.role_add(user).await.unwrap();
        root.role_grant_permission(user, Permission::read_write(prefix).with_prefix())
            .await
            .unwrap();
        root.user_add(user, password, None).await.unwrap();
        root.user_grant_role(user, user).await.unwrap();
    }
    root.auth_enable().await.unwrap();
    put(pki.dir(), "password", &format!("{PASSWORD}\n"));
    Secured {
        pki,
        endpoint,
        _server: server,
    }
}

/// The secured server of this test process.
async fn secured() -> &'static Secured {
    static SERVER: OnceCell<Secured> = OnceCell::const_new();
    SERVER.get_or_init(start).await
}

/// A fixture under a prefix of its own on `server`, connecting as the project's user: TLS with
/// the CA and the client certificate, the password from a file.
fn fixture_on(server: &Secured) -> EtcdFix {
    let ns = provision::etcd_namespace_on(std::slice::from_ref(&server.endpoint));
    let password_file = server.pki.path("password");
    let mut fix = EtcdFix::on(&ns.endpoints, &ns.prefix);
    fix.config = EtcdConfig {
        ca_file: Some(server.pki.path("ca.pem")),
        cert_file: Some(server.pki.path("client.pem")),
        key_file: Some(server.pki.path("client.key")),
        username: Some(USER.into()),
        password_file: Some(password_file),
        ..fix.config
    };
    // Nothing to delete afterwards: the prefix is the test's own, the server the process's.
    std::mem::forget(ns);
    fix
}

async fn fixture() -> EtcdFix {
    fixture_on(secured().await)
}

leaf_testkit::store_conformance!(
    etcd_store_secured,
    async { fixture().await },
    durable = true,
    multi_process = true,
);

leaf_testkit::registry_conformance!(
    etcd_registry_secured,
    async { fixture().await },
    recycles = true,
    assigns_distinct_ids = true,
    exclusive_identity = false,
    confirms_marks = true,
);

/// A store started with `change` made to the secured fixture's configuration: its error.
async fn start_error(change: impl FnOnce(&mut EtcdConfig)) -> Error {
    let mut config = fixture().await.config;
    change(&mut config);
    match EtcdStore::connect(&config, NAME).await {
        Ok(_) => panic!("a store started with {config:?}"),
        Err(e) => e,
    }
}

fn assert_config_naming(e: &Error, key: &str) {
    assert!(
        matches!(e, Error::Config(m) if m.starts_with(key)),
        "{e:?} is not a Config error naming {key}"
    );
    for secret in [PASSWORD, OTHER_PASSWORD, "not-the-password"] {
        assert!(!e.to_string().contains(secret), "{e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_project_user_claims_and_allocates_over_verified_tls() {
    let fix = fixture().await;
    let store = fix.new_store().await;
    let tag = Tag::new("secured").unwrap();
    store.create(&NewTag::new(tag.clone())).await.unwrap();
    let a = store.allocate(&tag, None).await.unwrap();
    let b = store.allocate(&tag, None).await.unwrap();
    assert!(b.max_id > a.max_id);
    let node = fix.registry();
    let lease = node.acquire(&request(fix_identity(1), 1023)).await.unwrap();
    node.renew(&lease, now_ms()).await.unwrap();
    node.release(&lease, now_ms()).await.unwrap();
}

fn fix_identity(i: u16) -> leaf_core::NodeIdentity {
    leaf_core::NodeIdentity::new("10.0.0.1", 8000 + i)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_ca_is_refused_at_start_naming_ca_file() {
    let other = secured().await.pki.path("other-ca.pem");
    let e = start_error(|c| c.ca_file = Some(other)).await;
    assert_config_naming(&e, "ca_file");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_not_in_the_certificate_is_refused_at_start() {
    let e = start_error(|c| {
        c.endpoints = c
            .endpoints
            .iter()
            .map(|e| e.replace("//localhost:", "//127.0.0.1:"))
            .collect();
    })
    .await;
    assert_config_naming(&e, "ca_file");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_client_certificate_the_start_is_refused() {
    let e = start_error(|c| {
        c.cert_file = None;
        c.key_file = None;
    })
    .await;
    // The member's alert reaches the client as a TLS failure, or (by the moment it lands) as a
    // closed connection: either way the message names the certificate.
    assert!(e.to_string().contains("cert_file"), "{e:?}");
    assert!(!e.to_string().contains(PASSWORD), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_is_refused_at_start_naming_it() {
    let e = start_error(|c| {
        c.password_file = None;
        c.password = Some("not-the-password".into());
    })
    .await;
    assert_config_naming(&e, "password");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_the_prefix_is_refused_at_start_naming_username() {
    let e = start_error(|c| {
        c.password_file = None;
        c.username = Some(OTHER_USER.into());
        c.password = Some(OTHER_PASSWORD.into());
    })
    .await;
    assert_config_naming(&e, "username");
    // The workerId mode too, at its first claim.
    let mut config = fixture().await.config;
    config.password_file = None;
    config.username = Some(OTHER_USER.into());
    config.password = Some(OTHER_PASSWORD.into());
    let dir = tempfile::tempdir().unwrap();
    let node = EtcdClaims::connect(&config, NAME)
        .unwrap()
        .registry(dir.path());
    let e = node
        .acquire(&request(fix_identity(3), 1023))
        .await
        .unwrap_err();
    assert_config_naming(&e, "username");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_url_to_the_tls_port_is_refused_at_start() {
    let started = std::time::Instant::now();
    let e = start_error(|c| {
        c.endpoints = c
            .endpoints
            .iter()
            .map(|e| e.replace("https://", "http://"))
            .collect();
        c.ca_file = None;
        c.cert_file = None;
        c.key_file = None;
    })
    .await;
    assert!(
        !e.to_string().contains(PASSWORD) && started.elapsed().as_secs() < 10,
        "{e:?} after {:?}",
        started.elapsed()
    );
    assert!(
        matches!(e, Error::Unavailable(_) | Error::Config(_)),
        "{e:?}"
    );
}

/// The user's password changed on the cluster, then in the file, while a store runs: its next
/// call authenticates with the file's new text; no restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_password_file_is_used_without_a_restart() {
    // A server of the test's own: the others' user keeps its password.
    let server = start().await;
    let fix = fixture_on(&server);
    let store: Arc<dyn SegmentStore> = fix.new_store().await;
    let tag = Tag::new("rotated").unwrap();
    store.create(&NewTag::new(tag.clone())).await.unwrap();
    store.allocate(&tag, None).await.unwrap();

    let rotated = format!("{PASSWORD}-2");
    let mut root = client(&server.pki, &server.endpoint, Some(("root", ROOT_PASSWORD))).await;
    root.user_change_password(USER, &rotated).await.unwrap();
    put(server.pki.dir(), "password", &format!("{rotated}\n"));
    store
        .allocate(&tag, None)
        .await
        .unwrap_or_else(|e| panic!("the rotated password was not used: {e:?}"));
    // And a handle started now reads the file as it is.
    fix.new_store().await.allocate(&tag, None).await.unwrap();
}
