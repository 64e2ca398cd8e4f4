//! ZooKeeper secured as production runs it (issue 34): digest authentication (`auth`,
//! `auth_file`) and ACLs on every node the server creates. The conformance suite as an
//! authenticated user in both modes; every node (and its parents) closed to a client without
//! auth and to another digest user; a Java Leaf tree of open nodes still taken over; clear
//! start-up errors naming the key; a rotated `auth_file` used by the next session.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{ZkFix, now_ms, request, zk_url};
use leaf_core::{Error, NodeIdentity, Renewal, WorkerIdRegistry};
use leaf_registry_zk::{ZkClaims, ZkConfig, ZkMode};
use zookeeper_client::{self as zk, Acl, Acls, AuthId, CreateMode, Permission};

/// The server's digest identity, and its id in an ACL (`user:BASE64(SHA1(user:password))`, as
/// `echo -n leaf:secret | openssl dgst -binary -sha1 | base64` prints it).
const LEAF: &str = "leaf:secret";
const LEAF_ID: &str = "leaf:+QYe9mkRDQ/1juhQ33od91njJWM=";
/// The identity a rotated secret holds.
const ROTATED: &str = "leaf2:secret2";
const ROTATED_ID: &str = "leaf2:SSy0cnqUlHDku7CTM+9FodYP6ds=";
/// Another user of the ensemble.
const OTHER: &str = "mallory:guess";

/// `text` written to `dir/name` as a secret volume does (a new file moved over the old one).
fn put(dir: &Path, name: &str, text: &str) -> PathBuf {
    let (path, tmp) = (dir.join(name), dir.join(format!(".{name}.tmp")));
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    path
}

/// A fixture of `mode` whose registries authenticate as [`LEAF`] from an `auth_file`, their
/// nodes creator-only (the default with auth).
async fn with_auth_file(mode: ZkMode) -> ZkFix {
    let mut fix = ZkFix::new(mode).await;
    let file = put(&fix.new_dir(), "zk-auth", &format!("{LEAF}\n"));
    fix.config.auth_file = Some(file);
    fix
}

/// A fixture of `mode` whose registries authenticate as [`LEAF`] (inline `auth`), their nodes
/// with an explicit ACL: all rights to [`LEAF_ID`], read to anyone.
async fn with_acl_list(mode: ZkMode) -> ZkFix {
    ZkFix::with_config(mode, |c| {
        c.auth = Some(LEAF.into());
        c.acl = vec![format!("digest:{LEAF_ID}:cdrwa"), "world:anyone:r".into()];
    })
    .await
}

leaf_testkit::registry_conformance!(
    zk_normal_secured,
    async { with_auth_file(ZkMode::Normal).await },
    recycles = false,
    assigns_distinct_ids = true,
    exclusive_identity = true,
    confirms_marks = false,
);

leaf_testkit::registry_conformance!(
    zk_recycle_secured,
    async { with_acl_list(ZkMode::Recycle).await },
    recycles = true,
    assigns_distinct_ids = true,
    exclusive_identity = false,
    confirms_marks = true,
);

/// A client of the test server, authenticated as `auth` (digest) if given.
async fn client_as(auth: Option<&str>) -> zk::Client {
    let mut connector = zk::Client::connector();
    if let Some(auth) = auth {
        connector = connector.with_auth("digest", auth.as_bytes());
    }
    let url = zk_url().await;
    let connect = connector
        .with_session_timeout(Duration::from_secs(10))
        .with_fail_eagerly()
        .connect(&url);
    tokio::time::timeout(Duration::from_secs(10), connect)
        .await
        .expect("zookeeper answers")
        .expect("zookeeper answers")
}

/// `path` and every node under it, parents first.
async fn tree(client: &zk::Client, path: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![path.to_owned()];
    while let Some(node) = stack.pop() {
        let children = client.list_children(&node).await.unwrap();
        stack.extend(children.iter().map(|c| format!("{node}/{c}")));
        out.push(node);
    }
    out
}

fn digest(id: &str, permission: Permission) -> Acl {
    Acl::new(permission, AuthId::new("digest", id))
}

/// Who the registry's current session is as a digest user (`whoami`, less the `ip` entry every
/// session has).
async fn digest_users(claims: &ZkClaims) -> Vec<String> {
    let users = claims.auth_users().await.unwrap();
    users
        .into_iter()
        .filter(|u| u.starts_with("digest:"))
        .collect()
}

/// The message of a `Config` error.
fn config_message(e: Error) -> String {
    match e {
        Error::Config(m) => m,
        other => panic!("not a configuration error: {other}"),
    }
}

/// A registry of `fix` holding a lease for identity 1, listed among the peers, its mark
/// written: every kind of node the mode creates exists.
async fn holding(
    fix: &ZkFix,
) -> (
    std::sync::Arc<leaf_registry_zk::ZkRegistry>,
    leaf_core::Lease,
) {
    let registry = fix.registry();
    let identity = NodeIdentity::new("10.0.0.1", 8001);
    let lease = registry
        .acquire(&request(identity.clone(), 31))
        .await
        .unwrap();
    registry
        .backend()
        .register_temporary(&identity)
        .await
        .unwrap();
    let renewed = registry.renew(&lease, now_ms()).await.unwrap();
    assert!(renewed.is_ok(), "{renewed:?}");
    (registry, lease)
}

/// Every node the server created under the root (the root itself, the directories, the lock,
/// the `forever` node or the pool's nodes, the `temporary` entry) carries `expected`, and a
/// client without auth and a client of another digest user can neither read, overwrite,
/// delete, re-ACL nor add a child to any of them. The root's parent is `/`, open to anyone:
/// deleting the root is refused as not empty (and its children cannot be deleted).
async fn closed_to_others(fix: ZkFix, expected: Vec<Acl>, world_reads: bool) {
    let (registry, lease) = holding(&fix).await;
    let admin = client_as(Some(LEAF)).await;
    let nodes = tree(&admin, &fix.config.root).await;
    let kinds: &[&str] = match fix.mode {
        ZkMode::Normal => &[
            "/forever-lock/10.0.0.1:8001",
            "/forever/10.0.0.1:8001-",
            "/temporary/10.0.0.1:8001",
        ],
        ZkMode::Recycle => &[
            "/recycle/inuse/",
            "/recycle/notuse/",
            "/recycle/epoch/",
            "/temporary/10.0.0.1:8001",
        ],
    };
    for kind in kinds {
        assert!(
            nodes.iter().any(|n| n.contains(kind)),
            "no {kind} node in {nodes:?}"
        );
    }
    let mut refused = 0;
    for (who, client) in [
        ("a client without auth", client_as(None).await),
        ("another digest user", client_as(Some(OTHER)).await),
    ] {
        // Children first: each delete is checked against its parent's ACL.
        for node in nodes.iter().rev() {
            let deleted = client.delete(node, None).await.err();
            let ctx = format!("{who}, {node}");
            if *node == fix.config.root {
                assert_eq!(deleted, Some(zk::Error::NotEmpty), "delete: {ctx}");
            } else {
                assert_eq!(deleted, Some(zk::Error::NoAuth), "delete: {ctx}");
            }
        }
        for node in &nodes {
            let stat = admin.check_stat(node).await.unwrap().unwrap();
            let ctx = format!("{who}, {node}");
            assert_eq!(
                client.set_data(node, b"taken", None).await.err(),
                Some(zk::Error::NoAuth),
                "overwrite: {ctx}"
            );
            assert_eq!(
                client.set_acl(node, &Acls::anyone_all(), None).await.err(),
                Some(zk::Error::NoAuth),
                "setAcl: {ctx}"
            );
            if stat.ephemeral_owner == 0 {
                let child = format!("{node}/squatter");
                let created = client
                    .create(
                        &child,
                        b"",
                        &CreateMode::Persistent.with_acls(Acls::anyone_all()),
                    )
                    .await;
                assert_eq!(
                    created.err(),
                    Some(zk::Error::NoAuth),
                    "create a child: {ctx}"
                );
            }
            let read = client.get_data(node).await;
            if world_reads {
                assert!(read.is_ok(), "read: {ctx}: {read:?}");
            } else {
                assert_eq!(read.err(), Some(zk::Error::NoAuth), "read: {ctx}");
            }
            refused += 1;
        }
    }
    for node in &nodes {
        let (acl, _) = admin.get_acl(node).await.unwrap();
        assert_eq!(acl, expected, "{node}");
    }
    println!(
        "{:?}: {} nodes, {refused} (client, node) pairs refused every write",
        fix.mode,
        nodes.len()
    );
    // The owner goes on as before.
    let renewed = registry.renew(&lease, now_ms()).await.unwrap();
    assert!(renewed.is_ok(), "{renewed:?}");
    registry.release(&lease, now_ms()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn zk_normal_nodes_are_creator_only_and_closed_to_other_clients() {
    let fix = with_auth_file(ZkMode::Normal).await;
    closed_to_others(fix, vec![digest(LEAF_ID, Permission::ALL)], false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn zk_recycle_nodes_are_creator_only_and_closed_to_other_clients() {
    let fix = with_auth_file(ZkMode::Recycle).await;
    closed_to_others(fix, vec![digest(LEAF_ID, Permission::ALL)], false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_configured_acl_list_is_what_every_node_gets() {
    for mode in [ZkMode::Normal, ZkMode::Recycle] {
        let fix = with_acl_list(mode).await;
        let expected = vec![
            digest(LEAF_ID, Permission::ALL),
            Acl::new(Permission::READ, AuthId::anyone()),
        ];
        closed_to_others(fix, expected, true).await;
    }
}

/// Java Leaf's `forever` data: "now", the port a string.
fn java_data(identity: &NodeIdentity, ts: u64) -> Vec<u8> {
    format!(
        r#"{{"ip":"{}","port":"{}","timestamp":{ts}}}"#,
        identity.ip, identity.port
    )
    .into_bytes()
}

/// A Java Leaf tree (Curator's open ACLs, no auth) is taken over by a server configured with
/// auth: the identity keeps its worker id, the mark is written to Java Leaf's node (whose ACL
/// stays as it was), and the nodes the server adds (the live lock's) are creator-only.
#[tokio::test(flavor = "multi_thread")]
async fn zk_normal_with_auth_takes_over_java_leaf_open_nodes() {
    let fix = ZkFix::with_config(ZkMode::Normal, |c| {
        c.auth = Some(LEAF.into());
        c.fence_on_disconnect = true;
    })
    .await;
    let java = client_as(None).await;
    let dir = format!("{}/forever", fix.base());
    let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
    java.mkdir(&dir, &open).await.unwrap();
    let sequential = CreateMode::PersistentSequential.with_acls(Acls::anyone_all());
    let java_ts = now_ms() - 60_000;
    let mut seq = None;
    for port in [8101, 8102, 8103] {
        let identity = NodeIdentity::new("10.0.0.7", port);
        let (_, s) = java
            .create(
                &format!("{dir}/{identity}-"),
                &java_data(&identity, java_ts),
                &sequential,
            )
            .await
            .unwrap();
        seq = Some((identity, s));
    }
    let (identity, seq) = seq.unwrap();
    let java_node = format!("{dir}/{identity}-{seq}");
    let worker_id = seq.into_i64() as u64;
    assert_eq!(worker_id, 2);

    let registry = fix.registry();
    let lease = registry
        .acquire(&request(identity.clone(), 31))
        .await
        .unwrap();
    assert_eq!(lease.worker_id, worker_id, "Java Leaf's worker id kept");
    assert_eq!(lease.prev_mark_ms, Some(java_ts + 3000));
    let mark = now_ms();
    let renewed = registry.renew(&lease, mark).await.unwrap();
    assert!(renewed.is_ok(), "{renewed:?}");
    let (data, _) = java.get_data(&java_node).await.unwrap();
    let data: serde_json::Value = serde_json::from_slice(&data).unwrap();
    assert_eq!(data["timestamp"], mark, "{data}");
    assert_eq!(data["leafRs"], true, "{data}");
    // Java Leaf's nodes keep their open ACL; the live lock (and its new directory) are the
    // server's only.
    let (acl, _) = java.get_acl(&java_node).await.unwrap();
    assert_eq!(acl, vec![Acl::new(Permission::ALL, AuthId::anyone())]);
    let lock = format!("{}/forever-lock/{identity}", fix.base());
    let admin = client_as(Some(LEAF)).await;
    for path in [lock.as_str(), &format!("{}/forever-lock", fix.base())] {
        let (acl, _) = admin.get_acl(path).await.unwrap();
        assert_eq!(acl, vec![digest(LEAF_ID, Permission::ALL)], "{path}");
    }
    assert_eq!(
        java.delete(&lock, None).await.unwrap_err(),
        zk::Error::NoAuth
    );
    registry.release(&lease, now_ms()).await.unwrap();
    // And again after a restart.
    drop(registry);
    let again = fix.registry();
    let lease = again.acquire(&request(identity, 31)).await.unwrap();
    assert_eq!(lease.worker_id, worker_id);
    again.release(&lease, now_ms()).await.unwrap();
}

/// A malformed `auth`, an unreadable `auth_file` and an `acl` entry that cannot be one stop
/// the registry from being made (the server's start-up), naming the key, never the secret.
#[tokio::test]
async fn misconfigured_auth_and_acl_are_start_up_errors_naming_the_key() {
    let base = ZkConfig::with_address(zk_url().await);
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            ZkConfig {
                auth: Some("leafhunter2".into()),
                ..base.clone()
            },
            "auth must be \"user:password\"",
        ),
        (
            ZkConfig {
                auth_file: Some(dir.path().join("missing")),
                ..base.clone()
            },
            "auth_file: cannot read",
        ),
        (
            ZkConfig {
                auth_file: Some(put(dir.path(), "bad", "hunter2\n")),
                ..base.clone()
            },
            "auth_file: ",
        ),
        (
            ZkConfig {
                auth: Some(LEAF.into()),
                acl: vec!["digest:leaf:hunter2:cdrwa".into()],
                ..base.clone()
            },
            "acl[0]: a digest id is user:BASE64(SHA1(user:password))",
        ),
        (
            ZkConfig {
                acl: vec!["world:anyone:all".into()],
                ..base.clone()
            },
            "acl[0]: the permissions",
        ),
        (
            ZkConfig {
                acl: vec!["auth::cdrwa".into()],
                ..base.clone()
            },
            "acl[0]: the auth scheme needs auth",
        ),
    ];
    for (config, expect) in cases {
        for mode in [ZkMode::Normal, ZkMode::Recycle] {
            let e = config_message(ZkClaims::connect(&config, mode, "leaf").unwrap_err());
            assert!(e.starts_with(expect), "{expect}: {e}");
            assert!(!e.contains("hunter2"), "{e}");
        }
    }
}

/// A tree created earlier by another user (creator-only) denies this one: the start is a
/// configuration error naming `auth` and the node, within a session timeout, neither a hang
/// nor a start from the cache file. The same for a client without auth.
#[tokio::test(flavor = "multi_thread")]
async fn another_users_nodes_are_a_start_up_error_naming_auth_and_the_path() {
    for mode in [ZkMode::Normal, ZkMode::Recycle] {
        let fix = ZkFix::with_config(mode, |c| c.auth = Some(OTHER.into())).await;
        let (owner, lease) = holding(&fix).await;
        owner.release(&lease, now_ms()).await.unwrap();
        for auth in [Some(LEAF), None] {
            let config = ZkConfig {
                auth: auth.map(Into::into),
                ..fix.config.clone()
            };
            let registry = ZkClaims::connect(&config, mode, common::NAME)
                .unwrap()
                .registry(fix.new_dir());
            let identity = NodeIdentity::new("10.0.0.1", 8002);
            let start = tokio::time::timeout(
                Duration::from_secs(20),
                registry.acquire(&request(identity, 31)),
            )
            .await
            .expect("a start-up error, not a hang");
            let e = config_message(start.unwrap_err());
            println!("{mode:?}, auth {auth:?}: {e}");
            assert!(e.starts_with("auth: zookeeper refused"), "{e}");
            assert!(e.contains(&fix.base()), "names the node: {e}");
        }
    }
}

/// `auth_file` is read again for each new session: rotated to another user the `acl` also
/// grants, the next session (after the last one ended) authenticates as that user, re-creates
/// what it keeps and renews; rotated to a user the ACL does not grant, the renewal fails
/// naming `auth`.
#[tokio::test(flavor = "multi_thread")]
async fn a_rotated_auth_file_is_used_by_the_next_session() {
    for mode in [ZkMode::Normal, ZkMode::Recycle] {
        let mut fix = ZkFix::with_config(mode, |c| {
            c.fence_on_disconnect = true;
            c.acl = vec![
                format!("digest:{LEAF_ID}:cdrwa"),
                format!("digest:{ROTATED_ID}:cdrwa"),
            ];
        })
        .await;
        let secrets = fix.new_dir();
        fix.config.auth_file = Some(put(&secrets, "zk-auth", &format!("{LEAF}\n")));
        let registry = fix.registry();
        let identity = NodeIdentity::new("10.0.0.1", 8003);
        let lease = registry.acquire(&request(identity, 31)).await.unwrap();
        let claims = registry.backend();
        assert_eq!(digest_users(claims).await, ["digest:leaf"]);

        put(&secrets, "zk-auth", &format!("{ROTATED}\n"));
        // The open session keeps its identity until it ends.
        assert_eq!(digest_users(claims).await, ["digest:leaf"]);
        claims.end_session().await.unwrap();
        let renewed = registry.renew(&lease, now_ms()).await.unwrap();
        assert!(
            matches!(renewed, Renewal::Ok { .. }),
            "{mode:?}: {renewed:?}"
        );
        assert_eq!(digest_users(claims).await, ["digest:leaf2"]);
        if mode == ZkMode::Normal {
            // The live lock, re-created by the new session as leaf2.
            let admin = client_as(Some(ROTATED)).await;
            let lock = format!("{}/forever-lock/10.0.0.1:8003", fix.base());
            let stat = admin
                .check_stat(&lock)
                .await
                .unwrap()
                .expect("the lock is back");
            assert_ne!(stat.ephemeral_owner, 0);
        }

        put(&secrets, "zk-auth", &format!("{OTHER}\n"));
        claims.end_session().await.unwrap();
        let e = config_message(registry.renew(&lease, now_ms()).await.unwrap_err());
        println!("{mode:?}, rotated to a user without rights: {e}");
        assert!(e.starts_with("auth: zookeeper refused"), "{e}");
    }
}
