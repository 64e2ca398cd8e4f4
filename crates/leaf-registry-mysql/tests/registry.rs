//! The `mysql` workerId mode on a real server: what every SQL mode runs
//! (`leaf_testkit::sql_cases::registry`: ids never burnt by a restart, the race on the unique
//! key, the layout's range, the marks, a lost lock, the cache-file fallback), and what is
//! MySQL's own: the fork's table, the cache files of the `local` mode and of older builds, the
//! final mark held up by a row lock, the server's own refusals of a claim (1040, 1226), and a
//! Galera node refused at the claim.

mod common;

use std::time::Duration;

use leaf_core::{Error, NodeIdentity, Renewal, WorkerIdRegistry};
use leaf_registry_local::{LocalClaims, LocalRegistryConfig};
use leaf_registry_mysql::LEAF_WORKERID_ALLOC_DDL;
use leaf_testkit::RegistryFixture;
use leaf_testkit::identity_cases::authority;
use leaf_testkit::provision::{self, MYSQL};
use leaf_testkit::sql::{database_on, unreachable_registry};
use leaf_testkit::sql_cases::hold::{
    a_claim_that_reached_the_server_never_starts_from_the_cache_file as never_offline,
    a_server_that_answered_and_is_gone_was_reached as answered_and_gone, tight,
};
use leaf_testkit::sql_cases::{now_ms, request};
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use common::{Backend, Fix};

leaf_testkit::sql_registry_tests!(Backend, lock_freed_at_release = false);
leaf_testkit::sql_tests!(Backend, registry; restarts_burn_no_auto_increment_values = restarts_burn_no_ids);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fork_table_is_used_as_it_is() {
    let fix = Fix::new().await;
    let mark = now_ms() as i64 - 60_000;
    fix.db.exec(LEAF_WORKERID_ALLOC_DDL).await;
    fix.db
        .exec(&format!(
            "INSERT INTO leaf_workerid_alloc (id, ip_port, ip, port, max_timestamp) \
             VALUES (42, '10.0.0.1:8001', '10.0.0.1', '8001', {mark})"
        ))
        .await;
    let node = fix.node().await;
    let lease = node.acquire(&request(fix.identity(1), 1023)).await.unwrap();
    assert_eq!(lease.worker_id, 42, "the fork's id is the worker id");
    assert_eq!(lease.prev_mark_ms, Some(mark as u64));
    let fresh = fix.node().await;
    assert_eq!(
        fresh
            .acquire(&request(fix.identity(2), 1023))
            .await
            .unwrap()
            .worker_id,
        43
    );
}

/// A node moved from the `local` mode to this one, with MySQL down at its first start here,
/// must not start as the worker id the `local` mode cached: MySQL may have given that id to
/// another identity.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_id_cached_by_the_local_mode_never_serves_a_start_here() {
    let dir = tempfile::tempdir().unwrap();
    let identity = NodeIdentity::new("10.0.0.1", 8001);
    let local = LocalClaims::new(
        LocalRegistryConfig {
            worker_id: 7,
            ..LocalRegistryConfig::default()
        },
        "leaf",
    )
    .registry(dir.path());
    let lease = local
        .acquire(&request(identity.clone(), 1023))
        .await
        .unwrap();
    assert_eq!(lease.worker_id, 7);
    local.renew(&lease, now_ms()).await.unwrap();
    local.release(&lease, now_ms()).await.unwrap();
    drop(local);

    let down = unreachable_registry::<Backend>(dir.path());
    let e = down.acquire(&request(identity, 1023)).await.unwrap_err();
    assert!(
        matches!(&e, Error::Unavailable(m) if m.contains("holds no worker id")),
        "the local mode's worker id was taken for this mode's: {e}"
    );
}

/// A mark that a build before `worker-mysql-{name}` kept in `worker-{name}` still counts after
/// the upgrade (the row's may lag it), for the worker id MySQL assigns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mark_in_the_cache_file_of_the_old_name_still_counts() {
    let fix = Fix::new().await;
    let node = fix.registry_in(fix.new_dir());
    let lease = node.acquire(&request(fix.identity(1), 1023)).await.unwrap();
    node.release(&lease, now_ms()).await.unwrap();
    drop(node);

    let dir = fix.new_dir();
    let ahead = now_ms() + 60_000;
    let old = |worker_id: u64, mark: u64| format!("workerID={worker_id}\nmarkMs={mark}\n");
    std::fs::write(
        dir.join("worker-leaf.properties"),
        old(lease.worker_id, ahead),
    )
    .unwrap();
    let upgraded = fix.registry_in(dir.clone());
    let again = upgraded
        .acquire(&request(fix.identity(1), 1023))
        .await
        .unwrap();
    assert_eq!(again.worker_id, lease.worker_id);
    assert_eq!(
        again.prev_mark_ms,
        Some(ahead),
        "the old file's mark was lost"
    );
    upgraded.release(&again, ahead).await.unwrap();
    drop(upgraded);

    // Of another worker id (the local mode's, say), its mark does not apply: the row's does.
    let dir = fix.new_dir();
    let other_id = old(lease.worker_id + 7, ahead + 60_000);
    std::fs::write(dir.join("worker-leaf.properties"), other_id).unwrap();
    let other = fix.registry_in(dir);
    let third = other
        .acquire(&request(fix.identity(1), 1023))
        .await
        .unwrap();
    assert_eq!(third.worker_id, lease.worker_id);
    assert_eq!(third.prev_mark_ms, Some(ahead));
}

/// The final mark goes on the lock's own session, so it never lands after the lock is free:
/// a final write held up by a row lock (and given up on by the release's timeout) must not
/// lower the row under the next holder of the identity (issue 23, item 4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_final_mark_never_lands_under_the_next_holder() {
    let fix = Fix::new().await;
    let me = fix.identity(6);
    let config = fix.config(json!({ "timeout_ms": 1000 }));
    let a = fix.registry_with(fix.new_dir(), &config);
    let lease = a.acquire(&request(me.clone(), 1023)).await.unwrap();
    let high = now_ms() + 60_000;
    assert_eq!(a.renew(&lease, high).await.unwrap(), Renewal::OK);
    for _ in 0..500 {
        if a.confirmed_mark_ms() == Some(high) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        a.confirmed_mark_ms(),
        Some(high),
        "the renewal never landed"
    );
    // Another transaction holds the worker's row: A's final write waits behind it, past the
    // release's timeout.
    let mut blocker = fix.db.session().await;
    blocker.exec("BEGIN").await;
    let id = lease.worker_id;
    let lock = format!("SELECT id FROM leaf_workerid_alloc WHERE id = {id} FOR UPDATE");
    blocker.exec(&lock).await;
    let low = now_ms();
    a.release(&lease, low).await.unwrap();
    drop(a);
    // B tries to take the identity while the final write is stuck, then after it went through.
    let b = fix.registry_with(fix.new_dir(), &config);
    let early = b.acquire(&request(me.clone(), 1023)).await;
    blocker.exec("COMMIT").await;
    let theirs = match early {
        Ok(lease) => lease,
        Err(_) => {
            let mut got = None;
            for _ in 0..50 {
                match b.acquire(&request(me.clone(), 1023)).await {
                    Ok(lease) => {
                        got = Some(lease);
                        break;
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                }
            }
            got.expect("B takes the identity once A's session is gone")
        }
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stored = fix.stored_mark(lease.worker_id).await;
    assert!(
        stored.map(|m| m as u64) >= theirs.prev_mark_ms,
        "B started from mark {:?}; the row went down to {stored:?} under it",
        theirs.prev_mark_ms
    );
}

/// With the fence a renewal counts once its row write matched the row: a mark left as it was
/// (`GREATEST` of an equal or lower mark changes nothing) still counts, and a missing row loses
/// the lease (the write proved nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_fence_an_unchanged_mark_counts_and_a_missing_row_does_not() {
    let fix = Fix::new().await;
    let config = fix.config(json!({ "fence_on_disconnect": true }));
    let node = fix.registry_with(fix.new_dir(), &config);
    let lease = node.acquire(&request(fix.identity(1), 1023)).await.unwrap();
    let m = now_ms() + 3000;
    for mark in [m, m, m - 1000] {
        assert_eq!(
            node.renew(&lease, mark).await.unwrap(),
            Renewal::OK,
            "{mark}"
        );
    }
    assert_eq!(fix.stored_mark(lease.worker_id).await, Some(m as i64));
    let id = lease.worker_id;
    fix.db
        .exec(&format!("DELETE FROM leaf_workerid_alloc WHERE id = {id}"))
        .await;
    assert_eq!(
        node.renew(&lease, m + 1000).await.unwrap(),
        Renewal::LeaseLost
    );
}

/// `url` with its credentials replaced by `user:password`.
fn as_user(url: &str, user: &str, password: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a URL");
    let (_, host) = rest.rsplit_once('@').expect("credentials");
    format!("{scheme}://{user}:{password}@{host}")
}

/// A user of the test's own, `WITH` the resource limits given (or none), allowed every
/// statement on the test's database: its URL. Dropped by [`drop_user`].
async fn user(fix: &Fix, name: &str, with: &str) -> String {
    fix.db
        .exec(&format!(
            "CREATE USER '{name}'@'%' IDENTIFIED BY 'pw' {with}"
        ))
        .await;
    fix.db
        .exec(&format!("GRANT ALL ON `{}`.* TO '{name}'@'%'", fix.db.name))
        .await;
    as_user(&fix.db.url, name, "pw")
}

async fn drop_user(fix: &Fix, name: &str) {
    fix.db.exec(&format!("DROP USER '{name}'@'%'")).await;
}

/// MariaDB's 1040 (too many connections: `max_connections` lowered once A holds its
/// connections, on a server of the test's own), met by B's user: the server answered, so B
/// does not start from its cache file (issue 32).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_connections_1040_is_a_server_reached() {
    let server = provision::dedicated(&MYSQL)
        .await
        .unwrap_or_else(|e| panic!("no container for the 1040 test: {e}"));
    let fix = Fix::on(database_on::<Backend>(server.endpoint()).await);
    let url = user(&fix, "b1040", "").await;
    let mut admin = fix.db.session().await;
    // MariaDB's least max_connections is 10: ten sessions more fill it whatever else is open.
    let mut filling = Vec::new();
    for _ in 0..10 {
        filling.push(fix.db.session().await);
    }
    let e = never_offline(&fix, &url, tight(), async || {
        // The connections open now stay; every new one is refused with 1040 (root's sessions
        // would get one extra).
        admin.exec("SET GLOBAL max_connections = 10").await;
    })
    .await;
    admin.exec("SET GLOBAL max_connections = 151").await;
    for session in filling {
        session.close().await;
    }
    let text = e.to_string();
    assert!(
        text.contains("refuses connections") && text.contains("could be opened"),
        "{text}"
    );
    drop_user(&fix, "b1040").await;
    drop(fix);
    server.remove().await.expect("remove the container");
}

/// A server whose greeting is its own 1040 (an ERR packet: as MariaDB's answer to a
/// connection over `max_connections`) and which is gone at once, so that no connection opens
/// to it afterwards: the answer alone says it was reached, so B does not start from its cache
/// file (issue 32).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_answered_1040_and_is_gone_was_reached() {
    answered_and_gone::<Backend, _, _>(async |mut stream: TcpStream| {
        // The packet: its payload's length (3 bytes, little-endian) and sequence id 0; the
        // payload: 0xFF, the error code (little-endian), `#` and the SQL state, the message.
        let payload = [
            &[0xff][..],
            &1040_u16.to_le_bytes(),
            b"#08004Too many connections",
        ]
        .concat();
        let length = u32::try_from(payload.len())
            .expect("a short packet")
            .to_le_bytes();
        let packet = [&length[..3], &[0], &payload].concat();
        stream.write_all(&packet).await.expect("the ERR packet");
        stream.shutdown().await.expect("the end of the answer");
    })
    .await;
}

/// Statements the server refuses once the connection opened (B's user may run one statement
/// an hour; the session's setup or the claim's next statement meets 1226): reached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_the_server_refuses_after_connecting_1226_are_a_server_reached() {
    let fix = Fix::new().await;
    let name = format!("q{}", &fix.db.name[fix.db.name.len() - 8..]);
    let url = user(&fix, &name, "WITH MAX_QUERIES_PER_HOUR 1").await;
    let e = never_offline(&fix, &url, tight(), async || {}).await;
    eprintln!("B's claim with one statement an hour: {e}");
    assert!(e.to_string().contains("1226"), "{e}");
    drop_user(&fix, &name).await;
}

/// A Galera node (a one-node cluster of the testbed's MariaDB with its galera-4 provider, as in
/// the official image): its `GET_LOCK` locks are its own, so the claim is refused, naming it
/// (issue 32).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_galera_node_is_refused_at_the_claim_naming_it() {
    let server = provision::dedicated_with(
        &MYSQL,
        &[
            "--wsrep-on=ON",
            "--wsrep-provider=/usr/lib/galera/libgalera_smm.so",
            "--wsrep-cluster-address=gcomm://",
            "--binlog-format=ROW",
            "--innodb-autoinc-lock-mode=2",
        ],
    )
    .await
    .unwrap_or_else(|e| panic!("no Galera container: {e}"));
    let fix = Fix::on(database_on::<Backend>(server.endpoint()).await);
    let node = fix.node().await;
    let e = node
        .acquire(&request(fix.identity(1), 1023))
        .await
        .expect_err(&format!(
            "a claim on the Galera node at {}",
            authority(&fix.db.url)
        ));
    assert!(
        matches!(&e, Error::Config(m) if m.contains("Galera") && m.contains("wsrep_on")),
        "{e}"
    );
    drop(fix);
    server.remove().await.expect("remove the container");
}

/// The fork's DDL names no character set, so `leaf_workerid_alloc` takes the database's
/// default collation: the identity lock's statements, which write the identity as a literal,
/// must compare with a column of any utf8mb4 collation (a literal of the character set's own
/// default collation met 1267, "illegal mix of collations", on every mark write).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_statements_work_on_a_table_of_any_utf8mb4_collation() {
    for collation in [
        "utf8mb4_unicode_ci",
        "utf8mb4_unicode_520_ci",
        "utf8mb4_bin",
        "utf8mb4_general_ci",
    ] {
        let fix = Fix::new().await;
        let db = &fix.db.name;
        fix.db
            .exec(&format!("ALTER DATABASE `{db}` COLLATE {collation}"))
            .await;
        let config = fix.config(json!({ "fence_on_disconnect": true }));
        let a = fix.registry_with(fix.new_dir(), &config);
        let me = fix.identity(4);
        let lease = a.acquire(&request(me.clone(), 1023)).await.unwrap();
        let m = now_ms() + 3000;
        let renewed = a.renew(&lease, m).await;
        assert!(
            renewed.as_ref().is_ok_and(|r| r.is_ok()),
            "{collation}: {renewed:?}"
        );
        assert_eq!(
            fix.stored_mark(lease.worker_id).await,
            Some(m as i64),
            "{collation}"
        );
        let b = fix.registry_with(fix.new_dir(), &config);
        let e = b.acquire(&request(me, 1023)).await.unwrap_err();
        assert!(matches!(e, Error::AlreadyExists(_)), "{collation}: {e}");
        a.release(&lease, m).await.unwrap();
    }
}
