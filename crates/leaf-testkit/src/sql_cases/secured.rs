//! What every SQL backend shows on a secured server ([`SqlFix::secured`]): TLS that verifies
//! the server's certificate and host name, a client certificate the server requires, and a
//! password read from a file that can change while the node runs. Each misconfiguration stops
//! the start with a `Config` error naming the key to fix, and none shows a secret.

use std::sync::Arc;

use leaf_core::{Error, NewTag, SegmentStore, Tag, WorkerIdRegistry};
use serde_json::{Value, json};

use crate::fixture::NodeDirs;
use crate::provision::SECURED_PASSWORD;
use crate::sql::{SqlBackend, SqlFix, registry_of, store_of};
use crate::sql_cases::{now_ms, request};

/// A secured store's start with `changes` to its settings: the error it fails with.
async fn store_error<B: SqlBackend>(fix: &SqlFix<B>, changes: Value) -> Error {
    let config = fix.config(changes.clone());
    match store_of::<B>(&config).await {
        Ok(_) => panic!("a store started with {changes}"),
        Err(e) => e,
    }
}

fn assert_config_naming(e: &Error, key: &str, what: &str) {
    assert!(
        matches!(e, Error::Config(m) if m.contains(key)),
        "{what}: {e:?} is not a Config error naming {key}"
    );
    assert!(!e.to_string().contains(SECURED_PASSWORD), "{what}: {e}");
}

/// The store and the workerId mode work as the project's user: over TLS verified against the
/// CA and the host name, with the client certificate, the password from its file.
pub async fn the_project_user_allocates_and_claims_over_verified_tls<B: SqlBackend>() {
    let fix = SqlFix::<B>::secured().await;
    let store = fix.store_with(&fix.config(json!({}))).await;
    let tag = Tag::new("secured").unwrap();
    store.create(&NewTag::new(tag.clone())).await.unwrap();
    let a = store.allocate(&tag, None).await.unwrap();
    let b = store.allocate(&tag, None).await.unwrap();
    assert!(b.max_id > a.max_id, "{a:?} {b:?}");
    let dirs = NodeDirs::default();
    let node = registry_of::<B>(&fix.config(json!({})), dirs.new_dir());
    let lease = node
        .acquire(&request(fix.identity_of(1), 1023))
        .await
        .unwrap();
    node.release(&lease, now_ms()).await.unwrap();
}

/// A CA that did not sign the server's certificate: `Config` naming `ca_file`.
pub async fn a_wrong_ca_is_refused_at_start_naming_ca_file<B: SqlBackend>() {
    let fix = SqlFix::<B>::secured().await;
    let other = fix.secured_file("other-ca.pem");
    let e = store_error(&fix, json!({ "ca_file": other })).await;
    assert_config_naming(&e, "ca_file", "a wrong CA");
}

/// The server at a name its certificate does not have (`127.0.0.1`, the certificate names
/// `localhost`): refused by the mode that verifies the host name, naming `ca_file` and
/// `ssl_mode` among what to check; the mode that checks only the CA accepts it.
pub async fn a_wrong_host_name_is_refused_at_start<B: SqlBackend>() {
    let fix = SqlFix::<B>::secured().await;
    let url = fix.config_url().replace("@localhost:", "@127.0.0.1:");
    let e = store_error(&fix, json!({ "url": url })).await;
    assert_config_naming(&e, "ssl_mode", "a wrong host name");
    let verify_ca = match B::SERVER.name {
        "mysql" => "verify_ca",
        _ => "verify-ca",
    };
    let config = fix.config(json!({ "url": url, "ssl_mode": verify_ca }));
    store_of::<B>(&config).await.unwrap();
}

/// Without the client certificate the server requires: refused, a `Config` error (the server
/// refused the user) that stops the start.
pub async fn without_the_client_certificate_the_start_is_refused<B: SqlBackend>() {
    let fix = SqlFix::<B>::secured().await;
    let e = store_error(&fix, json!({ "cert_file": null, "key_file": null })).await;
    assert!(matches!(e, Error::Config(_)), "{e:?}");
    assert!(!e.to_string().contains(SECURED_PASSWORD), "{e}");
}

/// A plain connection to the TLS-only server: refused at start, a `Config` error.
pub async fn a_plain_connection_to_a_tls_only_server_is_refused<B: SqlBackend>() {
    let fix = SqlFix::<B>::secured().await;
    let disabled = match B::SERVER.name {
        "mysql" => "disabled",
        _ => "disable",
    };
    let e = store_error(&fix, json!({ "ssl_mode": disabled })).await;
    assert!(matches!(e, Error::Config(_)), "{e:?}");
}

/// A wrong password in the file, a file that is not there, a certificate without its key:
/// each `Config` naming its key, none showing a password.
pub async fn bad_secrets_are_refused_naming_the_key<B: SqlBackend>() {
    let fix = SqlFix::<B>::secured().await;
    let dir = tempfile::tempdir().unwrap();
    let wrong = crate::pki::put(dir.path(), "wrong", "not-the-password\n");
    let e = store_error(&fix, json!({ "password_file": wrong })).await;
    assert!(matches!(&e, Error::Config(_)), "{e:?}");
    assert!(!e.to_string().contains("not-the-password"), "{e}");
    let missing = dir.path().join("missing");
    let e = store_error(&fix, json!({ "password_file": missing })).await;
    assert_config_naming(&e, "password_file", "a missing password file");
    let e = store_error(&fix, json!({ "key_file": null })).await;
    assert_config_naming(&e, "key_file", "a certificate without its key");
    let e = store_error(&fix, json!({ "ca_file": dir.path().join("no-ca.pem") })).await;
    assert_config_naming(&e, "ca_file", "a CA file that is not there");
    let e = store_error(&fix, json!({ "password": "x" })).await;
    assert_config_naming(&e, "password_file", "password and password_file both");
}

/// The password rotated on the server and in the file while a store and a node run: once the
/// server ends their sessions, they connect again with the file's new text, no restart. On a
/// secured server of the test's own: the others' user keeps its password.
pub async fn a_rotated_password_file_is_used_at_reconnect<B: SqlBackend>() {
    let server = crate::provision::secured_sql_own(B::SERVER)
        .await
        .unwrap_or_else(|e| panic!("a secured server of the test's own: {e}"));
    let fix = SqlFix::<B>::secured_on(&server).await;
    let dir = tempfile::tempdir().unwrap();
    let file = crate::pki::put(dir.path(), "password", SECURED_PASSWORD);
    let config = fix.config(json!({ "password_file": file }));
    let store: Arc<dyn SegmentStore> = fix.store_with(&config).await;
    let tag = Tag::new("rotated").unwrap();
    store.create(&NewTag::new(tag.clone())).await.unwrap();
    store.allocate(&tag, None).await.unwrap();
    let dirs = NodeDirs::default();
    let node: Arc<dyn WorkerIdRegistry> = registry_of::<B>(&config, dirs.new_dir());
    let lease = node
        .acquire(&request(fix.identity_of(2), 1023))
        .await
        .unwrap();

    let rotated = format!("{SECURED_PASSWORD}-2");
    fix.set_user_password(&rotated).await;
    crate::pki::put(dir.path(), "password", &format!("{rotated}\n"));
    fix.end_user_sessions().await;
    let before = fix.user_sessions().await;
    assert_eq!(before, 0, "the user's sessions were ended");

    // The store's pool opens a new connection with the new password.
    let mut last = None;
    for _ in 0..20 {
        match store.allocate(&tag, None).await {
            Ok(_) => {
                last = None;
                break;
            }
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    assert!(last.is_none(), "the store never reconnected: {last:?}");
    // So does the node's identity lock: released (its session is gone) and claimed again, the
    // claim opens the lock's connection anew, with the new password.
    node.release(&lease, now_ms()).await.ok();
    let lease = node
        .acquire(&request(fix.identity_of(2), 1023))
        .await
        .unwrap_or_else(|e| panic!("the identity lock did not reconnect: {e:?}"));
    assert!(fix.user_sessions().await >= 1);
    node.release(&lease, now_ms()).await.ok();
}
