//! Redis secured as production runs it: TLS only (`--port 0 --tls-port`), client certificates
//! required, `default` user off, and an ACL user limited to `~leaf:*` and the commands leaf's
//! calls and scripts run (the README's line). The conformance suites (claim, renew, release,
//! allocation) run over it; then each misconfiguration is a start-up error naming its key, and
//! a rotated `password_file` is taken at the next reconnection without a restart.

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use common::{NAME, request};
use leaf_core::{Error, NewTag, NodeIdentity, SegmentStore, Tag, WorkerIdRegistry};
use leaf_registry_redis::{RedisClaims, RedisConfig, RedisStore};
use leaf_testkit::StoreFixture;
use leaf_testkit::pki::{Pki, put};
use leaf_testkit::provision::{REDIS_ADMIN_PASSWORD, REDIS_ADMIN_USER, redis_secured};
use tokio::sync::OnceCell;

/// The commands of the README's ACL line: what leaf's calls and scripts run, nothing more.
const COMMANDS: &str = "-@all +evalsha +script|load +info +hgetall +smembers +hget +hincrby \
                        +hset +exists +sadd +get +set +pexpire +del +time";

/// The README's ACL line for `user` with `password` (keys `leaf:*`, no channels).
fn acl_line(user: &str, password: &str, keys: &str, commands: &str) -> String {
    format!("user {user} on >{password} resetkeys ~{keys} resetchannels {commands}")
}

const LEAF_PASSWORD: &str = "leaf-password";

/// The secured server every test of this binary shares, and its certificates.
struct Secured {
    pki: Pki,
    url: String,
    /// The password file of the `leaf` user.
    password_file: PathBuf,
}

async fn secured() -> &'static Secured {
    static SERVER: OnceCell<Secured> = OnceCell::const_new();
    SERVER
        .get_or_init(|| async {
            let pki = Pki::new(&[], "leaf");
            let users = [
                acl_line("leaf", LEAF_PASSWORD, "leaf:*", COMMANDS),
                acl_line("leaf-rotating", "rotate-1", "leaf:*", COMMANDS),
                acl_line(
                    "leaf-config",
                    "config-pw",
                    "leaf:*",
                    &format!("{COMMANDS} +config|get"),
                ),
                acl_line("leaf-nokeys", "nokeys-pw", "other:*", COMMANDS),
                acl_line(
                    "leaf-nocmds",
                    "nocmds-pw",
                    "leaf:*",
                    &COMMANDS.replace(" +hincrby", "").replace(" +pexpire", ""),
                ),
            ];
            let server = redis_secured(&pki, true, &users)
                .await
                .unwrap_or_else(|e| panic!("no secured Redis container: {e}"));
            let url = server.endpoint().url.clone();
            // Kept for the whole process, as the shared plain server is.
            std::mem::forget(server);
            let password_file = put(pki.dir(), "leaf.password", &format!("{LEAF_PASSWORD}\n"));
            Secured {
                pki,
                url,
                password_file,
            }
        })
        .await
}

/// A new key prefix under `leaf:` (what the ACL line grants).
fn prefix() -> String {
    format!(
        "leaf:t{}-{:012x}",
        std::process::id(),
        fastrand::u64(..) >> 16
    )
}

/// The production-like configuration: rediss, the CA, the client certificate, the `leaf` ACL
/// user with its password from a file, durability vouched for (the user has no `CONFIG`).
fn config(s: &Secured) -> RedisConfig {
    RedisConfig {
        ca_file: Some(s.pki.path("ca.pem")),
        cert_file: Some(s.pki.path("client.pem")),
        key_file: Some(s.pki.path("client.key")),
        username: Some("leaf".into()),
        password_file: Some(s.password_file.clone()),
        assume_durable: true,
        key_prefix: prefix(),
        lease_ttl_ms: 4000,
        timeout_ms: 2000,
        connect_timeout_ms: 1000,
        ..RedisConfig::with_url(s.url.clone())
    }
}

struct StoreFix(RedisConfig);

impl StoreFix {
    async fn new() -> Self {
        StoreFix(config(secured().await))
    }
}

#[async_trait]
impl StoreFixture for StoreFix {
    async fn store(&self) -> Arc<dyn SegmentStore> {
        Arc::new(RedisStore::connect(&self.0).await.expect("secured store"))
    }

    async fn another_handle(&self) -> Arc<dyn SegmentStore> {
        self.store().await
    }
}

leaf_testkit::store_conformance!(
    secured_store,
    async { StoreFix::new().await },
    durable = true,
    multi_process = true,
);

leaf_testkit::registry_conformance!(
    secured_registry,
    async { common::RegFix::with_config(config(secured().await)) },
    recycles = true,
    assigns_distinct_ids = true,
    exclusive_identity = false,
    confirms_marks = true,
);

/// The start-up error of `config`: `Config`, its message starting with `key`.
async fn refused(config: &RedisConfig, key: &str) -> String {
    let started = Instant::now();
    let e = RedisStore::connect(config)
        .await
        .expect_err("a misconfigured store must not start");
    let m = e.to_string();
    eprintln!("{key}: {m} (after {:?})", started.elapsed());
    assert!(
        matches!(&e, Error::Config(m) if m.starts_with(key)),
        "expected Config naming {key}: {e:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "failed only after {:?}",
        started.elapsed()
    );
    assert!(!m.contains(LEAF_PASSWORD), "{m}");
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ca_that_did_not_sign_the_server_is_refused_naming_ca_file() {
    let s = secured().await;
    let c = RedisConfig {
        ca_file: Some(s.pki.path("other-ca.pem")),
        ..config(s)
    };
    let m = refused(&c, "ca_file").await;
    assert!(m.contains("not trusted"), "{m}");
    // Without ca_file, the system's roots do not know the test CA either.
    let c = RedisConfig {
        ca_file: None,
        ..config(s)
    };
    refused(&c, "ca_file").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_is_refused_naming_its_key() {
    let s = secured().await;
    let c = RedisConfig {
        password_file: None,
        password: Some("not-the-password".into()),
        ..config(s)
    };
    let m = refused(&c, "password").await;
    assert!(m.contains("user \"leaf\""), "{m}");
    let dir = tempfile::tempdir().unwrap();
    let c = RedisConfig {
        password_file: Some(put(dir.path(), "pw", "wrong\n")),
        ..config(s)
    };
    refused(&c, "password_file").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_the_keys_or_the_commands_is_refused_naming_username() {
    let s = secured().await;
    let c = RedisConfig {
        username: Some("leaf-nokeys".into()),
        password_file: None,
        password: Some("nokeys-pw".into()),
        ..config(s)
    };
    let m = refused(&c, "username").await;
    assert!(m.contains("leaf-nokeys") && m.contains("HGET"), "{m}");
    let c = RedisConfig {
        username: Some("leaf-nocmds".into()),
        password_file: None,
        password: Some("nocmds-pw".into()),
        ..config(s)
    };
    let m = refused(&c, "username").await;
    assert!(m.contains("HINCRBY") && m.contains("PEXPIRE"), "{m}");
    assert!(!m.contains("HGET,"), "only what is denied: {m}");
    // The registry, which contacts Redis at its first claim, refuses there.
    let dir = tempfile::tempdir().unwrap();
    let r = RedisClaims::new(&c, NAME).unwrap().registry(dir.path());
    let e = r
        .acquire(&request(NodeIdentity::new("10.0.0.1", 1), 1023))
        .await
        .expect_err("no claim without the grants");
    assert!(e.to_string().contains("PEXPIRE"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_url_to_the_tls_port_fails_fast_naming_url() {
    let s = secured().await;
    let c = RedisConfig {
        url: s.url.replacen("rediss://", "redis://", 1),
        ca_file: None,
        cert_file: None,
        key_file: None,
        ..config(s)
    };
    let m = refused(&c, "url").await;
    assert!(m.contains("rediss://"), "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_client_certificate_is_refused_naming_cert_file() {
    let s = secured().await;
    let c = RedisConfig {
        cert_file: None,
        key_file: None,
        ..config(s)
    };
    let m = refused(&c, "cert_file").await;
    assert!(m.contains("requires a client certificate"), "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_denied_and_not_vouched_is_refused_naming_assume_durable() {
    let s = secured().await;
    let c = RedisConfig {
        assume_durable: false,
        ..config(s)
    };
    let e = RedisStore::connect(&c).await.expect_err("not vouched");
    eprintln!("{e}");
    assert!(
        matches!(&e, Error::Config(m) if m.contains("refuses CONFIG GET") && m.contains("assume_durable = true")),
        "{e}"
    );
    // A user granted CONFIG GET is checked, not trusted: no vouching needed.
    let c = RedisConfig {
        assume_durable: false,
        username: Some("leaf-config".into()),
        password_file: None,
        password: Some("config-pw".into()),
        ..config(s)
    };
    let store = RedisStore::connect(&c)
        .await
        .expect("checked by CONFIG GET");
    let t = Tag::new("checked").unwrap();
    store.create(&NewTag::new(t.clone())).await.unwrap();
    assert_eq!(store.allocate(&t, None).await.unwrap().range(), 1..2001);
}

/// A TLS connection of the administrator, for `ACL SETUSER` and `CLIENT KILL`.
async fn admin(s: &Secured) -> redis::aio::MultiplexedConnection {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let read = |name: &str| std::fs::read(s.pki.path(name)).unwrap();
    let url = s.url.replacen(
        "rediss://",
        &format!("rediss://{REDIS_ADMIN_USER}:{REDIS_ADMIN_PASSWORD}@"),
        1,
    );
    redis::Client::build_with_tls(
        url.as_str(),
        redis::TlsCertificates {
            client_tls: Some(redis::ClientTlsConfig {
                client_cert: read("client.pem"),
                client_key: read("client.key"),
            }),
            root_cert: Some(read("ca.pem")),
        },
    )
    .unwrap()
    .get_multiplexed_async_connection()
    .await
    .expect("an admin connection")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_password_file_is_read_at_the_next_connection() {
    let s = secured().await;
    let dir = tempfile::tempdir().unwrap();
    let file = put(dir.path(), "password", "rotate-1\n");
    let c = RedisConfig {
        username: Some("leaf-rotating".into()),
        password_file: Some(file),
        ..config(s)
    };
    let store = RedisStore::connect(&c).await.expect("connect");
    let t = Tag::new("rotated").unwrap();
    store
        .create(&NewTag {
            step: 10,
            ..NewTag::new(t.clone())
        })
        .await
        .unwrap();
    assert_eq!(store.allocate(&t, None).await.unwrap().range(), 1..11);

    // The secret rotates on the server, and the server drops the user's connections.
    let mut a = admin(s).await;
    let kill = |a: &mut redis::aio::MultiplexedConnection| {
        let mut a = a.clone();
        async move {
            let n: i64 = redis::cmd("CLIENT")
                .arg("KILL")
                .arg("USER")
                .arg("leaf-rotating")
                .query_async(&mut a)
                .await
                .unwrap();
            n
        }
    };
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("leaf-rotating")
        .arg("resetpass")
        .arg(">rotate-2")
        .query_async(&mut a)
        .await
        .unwrap();
    assert!(kill(&mut a).await >= 1, "the store's connection was killed");
    // Until the file changes, every new connection is refused: retryable, no restart.
    for _ in 0..2 {
        let e = store.allocate(&t, None).await.expect_err("old password");
        assert!(matches!(e, Error::Unavailable(_)), "{e}");
    }
    // The mounted secret is updated (a new file moved over the old one).
    put(dir.path(), "password", "rotate-2\n");
    let next = store.allocate(&t, None).await.expect("the new password");
    assert_eq!(next.range(), 11..21, "the same store, no restart");
    // And again after another forced reconnection.
    kill(&mut a).await;
    let mut got = None;
    for _ in 0..3 {
        if let Ok(a) = store.allocate(&t, None).await {
            got = Some(a.range());
            break;
        }
    }
    assert_eq!(got, Some(21..31));
}
