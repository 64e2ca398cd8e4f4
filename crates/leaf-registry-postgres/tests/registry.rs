//! The `postgres` workerId mode on a real server: what every SQL mode runs
//! (`leaf_testkit::sql_cases::registry`: ids never burnt by a restart, the race of first
//! starts, the layout's range, the marks, a lost lock, the cache-file fallback), and what is
//! PostgreSQL's own: the race to create the table, rows copied in with their ids, the identity
//! lock through a crash and a lost session, another mode's cache file, the server's own
//! refusals of a claim (53300, a session setup it refuses), and PgBouncer in transaction mode.

mod common;

use std::time::Duration;

use leaf_core::{Error, NodeIdentity, Renewal};
use leaf_registry_postgres::LEAF_WORKERID_ALLOC_DDL;
use leaf_testkit::RegistryFixture;
use leaf_testkit::identity_cases::through;
use leaf_testkit::provision::{self, POSTGRES};
use leaf_testkit::sql::{config_of, unreachable_registry};
use leaf_testkit::sql_cases::hold::{
    a_claim_that_reached_the_server_never_starts_from_the_cache_file as never_offline,
    a_server_that_answered_and_is_gone_was_reached as answered_and_gone, earlier_run, tight,
};
use leaf_testkit::sql_cases::{now_ms, request};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use common::{Backend, Fix};

leaf_testkit::sql_registry_tests!(Backend, lock_freed_at_release = true);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarts_burn_no_sequence_values() {
    let first = leaf_testkit::sql_cases::registry::restarts_burn_no_ids::<Backend>().await;
    assert_eq!(first, 1, "ids start at 1, as the fork's auto-increment");
}

/// The first starts of a fleet on an empty database race to create `leaf_workerid_alloc`
/// (racing `CREATE TABLE`s of a table with an identity column were seen to fail with "type
/// already exists"): every node starts, each with its own id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_first_starts_on_an_empty_database_all_start() {
    for _ in 0..5 {
        let fix = Fix::new().await;
        let mut tasks = Vec::new();
        for i in 1..=8 {
            let (node, me) = (fix.node().await, fix.identity(i));
            tasks.push(tokio::spawn(async move {
                node.acquire(&request(me, 1023)).await.map(|l| l.worker_id)
            }));
        }
        let mut ids = std::collections::BTreeSet::new();
        for t in tasks {
            ids.insert(t.await.unwrap().expect("every node starts"));
        }
        assert_eq!(ids, (1..=8).collect());
    }
}

/// The fork's rows copied in from MySQL with their ids: each node keeps its id and mark; the
/// id sequence, left behind the rows, is reported with the statement that moves it, and once
/// moved a new node gets the next id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_copied_in_with_their_ids_keep_them() {
    let fix = Fix::new().await;
    let mark = now_ms() as i64 - 60_000;
    fix.db.exec(LEAF_WORKERID_ALLOC_DDL).await;
    fix.db
        .exec(&format!(
            "INSERT INTO leaf_workerid_alloc (id, ip_port, ip, port, max_timestamp) VALUES \
             (1, '10.0.0.9:8080', '10.0.0.9', '8080', NULL), \
             (42, '10.0.0.1:8001', '10.0.0.1', '8001', {mark})"
        ))
        .await;
    let node = fix.node().await;
    let lease = node.acquire(&request(fix.identity(1), 1023)).await.unwrap();
    assert_eq!(lease.worker_id, 42, "the fork's id is the worker id");
    assert_eq!(lease.prev_mark_ms, Some(mark as u64));

    let fresh = fix.node().await;
    let e = fresh
        .acquire(&request(fix.identity(2), 1023))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::Config(m) if m.contains("setval(")),
        "{e}"
    );
    fix.db
        .exec(
            "SELECT setval(pg_get_serial_sequence('leaf_workerid_alloc', 'id'), max(id)) \
             FROM leaf_workerid_alloc",
        )
        .await;
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

/// A process that dies without a release (its connections closed by the kernel, as at a
/// crash) and is started again at once: the server ends the dead session and its advisory
/// lock, and the new process gets the identity's worker id, with the cache file's mark.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_right_after_a_crash_gets_the_identity_back() {
    let fix = Fix::new().await;
    let me = fix.identity(3);
    let dir = fix.new_dir();
    let node = fix.registry_in(dir.clone());
    let lease = node.acquire(&request(me.clone(), 1023)).await.unwrap();
    let m = now_ms() + 3000;
    node.renew(&lease, m).await.unwrap();
    let holder = fix.lock_holder(&me).await;
    assert!(holder.is_some(), "the node holds its identity lock");
    drop(node); // a crash: no release, the lock's socket just closes

    let again = fix.registry_in(dir);
    let lease2 = again
        .acquire(&request(me.clone(), 1023))
        .await
        .expect("the restart gets its identity back");
    assert_eq!(lease2.worker_id, lease.worker_id);
    assert!(lease2.prev_mark_ms >= Some(m), "{:?}", lease2.prev_mark_ms);
    let now_holder = fix.lock_holder(&me).await;
    assert!(
        now_holder.is_some() && now_holder != holder,
        "a new session holds the lock: {holder:?} then {now_holder:?}"
    );
}

/// The identity lock's session dies and nobody takes the identity: the next renewals take the
/// lock again on a new connection, and the marks reach the table again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_session_with_nobody_waiting_takes_the_lock_again() {
    let fix = Fix::new().await;
    let me = fix.identity(4);
    let node = fix.node().await;
    let lease = node.acquire(&request(me.clone(), 1023)).await.unwrap();
    let holder = fix.lock_holder(&me).await.expect("held");
    fix.db
        .exec(&format!("SELECT pg_terminate_backend({holder})"))
        .await;
    let mut mark = now_ms() + 3000;
    for _ in 0..100 {
        mark += 1;
        assert_eq!(node.renew(&lease, mark).await.unwrap(), Renewal::OK);
        if node.confirmed_mark_ms() >= Some(mark - 1)
            && fix.stored_mark(lease.worker_id).await >= Some(mark as i64 - 1)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        fix.stored_mark(lease.worker_id).await >= Some(mark as i64 - 1),
        "the marks reach the table again"
    );
    let again = fix.lock_holder(&me).await;
    assert!(
        again.is_some() && again != Some(holder),
        "a new session holds the lock: {again:?}"
    );
}

/// The mysql mode's cache file is not this mode's: a node moved from one to the other never
/// starts from the other's worker id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_modes_cache_file_is_never_used() {
    let dir = tempfile::tempdir().unwrap();
    let other = leaf_core::CacheFile::open(dir.path(), "worker-leaf").unwrap();
    other
        .write(&leaf_core::CacheRecord {
            worker_id: 9,
            mark_ms: now_ms(),
        })
        .unwrap();
    drop(other);
    let down = unreachable_registry::<Backend>(dir.path());
    let e = down
        .acquire(&request(NodeIdentity::new("10.0.0.1", 8001), 1023))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::Unavailable(m) if m.contains("holds no worker id")),
        "{e}"
    );
}

/// A login role of the test's own (`options`: `CONNECTION LIMIT 0`, say) on the test's
/// database: its URL. Dropped by [`drop_role`].
async fn role(fix: &Fix, name: &str, options: &str) -> String {
    fix.db
        .exec(&format!("CREATE ROLE {name} LOGIN PASSWORD 'pw' {options}"))
        .await;
    fix.db
        .exec(&format!("GRANT ALL ON SCHEMA public TO {name}"))
        .await;
    let (scheme, rest) = fix.db.url.split_once("://").expect("a URL");
    let (_, host) = rest.rsplit_once('@').expect("credentials");
    format!("{scheme}://{name}:pw@{host}")
}

async fn drop_role(fix: &Fix, name: &str) {
    fix.db
        .exec(&format!("REVOKE ALL ON SCHEMA public FROM {name}"))
        .await;
    fix.db.exec(&format!("DROP ROLE {name}")).await;
}

/// A role name of the test's own (roles belong to the whole server).
fn role_name(fix: &Fix, what: &str) -> String {
    format!("{what}_{}", &fix.db.name[fix.db.name.len() - 8..])
}

/// PostgreSQL's 53300 (too many connections, here for B's role, whose limit is 0): the server
/// answered, so B does not start from its cache file (issue 32).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_connections_53300_is_a_server_reached() {
    let fix = Fix::new().await;
    let name = role_name(&fix, "full");
    let url = role(&fix, &name, "CONNECTION LIMIT 0").await;
    let e = never_offline(&fix, &url, tight(), async || {}).await;
    let text = e.to_string();
    assert!(
        text.contains("refuses connections") && text.contains("could be opened"),
        "{text}"
    );
    drop_role(&fix, &name).await;
}

/// A server that answers the startup with its own 53300 (an ErrorResponse: as PostgreSQL's
/// answer to a connection over `max_connections`) and is gone at once, so that no connection
/// opens to it afterwards: the answer alone says it was reached, so B does not start from its
/// cache file (issue 32).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_answered_53300_and_is_gone_was_reached() {
    answered_and_gone::<Backend, _, _>(async |mut stream: TcpStream| {
        // The client's first message (its length, big-endian, counts itself): an SSLRequest,
        // declined, and then the StartupMessage; or the StartupMessage at once.
        let mut first = [0; 8];
        stream
            .read_exact(&mut first)
            .await
            .expect("the first message");
        let mut length = u32::from_be_bytes(first[..4].try_into().expect("4 bytes"));
        if first[4..] == 80_877_103_u32.to_be_bytes() {
            stream.write_all(b"N").await.expect("no TLS");
            let mut prefix = [0; 4];
            stream
                .read_exact(&mut prefix)
                .await
                .expect("the startup's length");
            length = u32::from_be_bytes(prefix) - 4;
        } else {
            length -= 8;
        }
        let mut rest = vec![0; usize::try_from(length).expect("a short message")];
        stream
            .read_exact(&mut rest)
            .await
            .expect("the startup message");
        // 'E', its length (counting itself), the fields (a type byte, a NUL-terminated text),
        // a NUL.
        let fields: Vec<u8> = [
            (b'S', "FATAL"),
            (b'V', "FATAL"),
            (b'C', "53300"),
            (b'M', "sorry, too many clients already"),
        ]
        .iter()
        .flat_map(|(kind, text)| [&[*kind][..], text.as_bytes(), &[0]].concat())
        .chain([0])
        .collect();
        let length = u32::try_from(fields.len() + 4).expect("a short message");
        let message = [&[b'E'][..], &length.to_be_bytes(), &fields].concat();
        stream.write_all(&message).await.expect("the ErrorResponse");
        stream.shutdown().await.expect("the end of the answer");
    })
    .await;
}

/// A session setup the server refuses (`set_config`, which sets the lock session's idle limit,
/// revoked from B's role in the test's database: 42501): reached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_setup_the_server_refuses_is_a_server_reached() {
    let fix = Fix::new().await;
    let name = role_name(&fix, "nosetup");
    let url = role(&fix, &name, "").await;
    fix.db
        .exec("REVOKE EXECUTE ON FUNCTION pg_catalog.set_config(text, text, boolean) FROM PUBLIC")
        .await;
    let e = never_offline(&fix, &url, tight(), async || {}).await;
    assert!(
        matches!(&e, Error::Config(m) if m.contains("refused")),
        "{e}"
    );
    drop_role(&fix, &name).await;
}

/// Two processes of one identity through a real PgBouncer in transaction mode (issue 32): an
/// advisory lock belongs to a server session, which the pooler hands to whichever client runs
/// a transaction, so "the" lock could be held by both (`pg_try_advisory_lock` answers true
/// again on the session that holds it). They never both start, and the lock's own reads say
/// why. With PgBouncer's defaults the first starts and the second is refused: its server
/// session held the lock before it asked (or another session holds it). With
/// `server_reset_query_always = 1` every transaction ends with `DISCARD ALL`, which frees the
/// lock at once: each claim's next statement does not hold it, and both are refused. Each has
/// a cache file from an earlier run: a claim whose statements PgBouncer broke was taken for a
/// server that cannot be reached, and both started from their files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_pgbouncer_in_transaction_mode_one_identity_is_never_held_twice() {
    let server = provision::shared(&POSTGRES)
        .await
        .unwrap_or_else(|e| panic!("no postgres server for the tests: {e}"));
    let reset_always: &[&str] = &[
        "server_reset_query = DISCARD ALL",
        "server_reset_query_always = 1",
    ];
    for settings in [&[][..], reset_always] {
        let fix = Fix::new().await;
        let bouncer = provision::pgbouncer(&server, "transaction", settings)
            .await
            .unwrap_or_else(|e| panic!("no pgbouncer: {e}"));
        let url = through(&fix.db.url, &bouncer.address);
        // One pooled connection: sqlx's pool may open a second while the first is on its way
        // back, and PgBouncer may hand a statement's two round trips to two server sessions.
        let changes =
            json!({ "connect_timeout_ms": 3000, "timeout_ms": 3000, "max_connections": 1 });
        let config = config_of::<Backend>(&url, changes);
        let me = fix.identity(9);
        // Each has run before, so that each could start from its cache file.
        let (dir_a, _) = earlier_run(&fix, &me).await;
        let (dir_b, _) = earlier_run(&fix, &me).await;
        let a = fix.registry_with(dir_a, &config);
        let first = a.acquire(&request(me.clone(), 1023)).await;
        let b = fix.registry_with(dir_b, &config);
        let second = b.acquire(&request(me.clone(), 1023)).await;
        eprintln!("through PgBouncer {settings:?}: the first {first:?}, the second {second:?}");
        assert!(
            !(first.is_ok() && second.is_ok()),
            "{settings:?}: both processes hold {me} through PgBouncer\n{}",
            bouncer.log()
        );
        let refused = second.expect_err("the second process").to_string();
        match first {
            Ok(lease) => {
                assert!(settings.is_empty(), "{settings:?}: the first started");
                assert!(
                    refused.contains("held it before it asked")
                        || refused.contains("in use by another live process"),
                    "{refused}"
                );
                a.release(&lease, now_ms()).await.expect("the release");
            }
            Err(e) => {
                assert!(
                    !settings.is_empty(),
                    "the first was refused: {e}\n{}",
                    bouncer.log()
                );
                for e in [e.to_string(), refused] {
                    assert!(e.contains("did not hold it in its next statement"), "{e}");
                }
            }
        }
    }
}

/// A holds its identity through PgBouncer in transaction mode, alone, so that its claim passes
/// (PgBouncer hands it the same server session each time). That server session ends (an
/// administrator, a crash, PgBouncer's `server_lifetime`) while A's connection to PgBouncer
/// stays up, and B takes the identity on another server session, which PgBouncer then hands to
/// A too. A's statements there find B's lock held by the session running them: only the
/// server session's id, recorded when A took the lock, tells them apart. A loses its lease;
/// never both renew (found by a review of issue 32).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_pgbouncer_a_lock_on_a_replaced_server_session_proves_nothing() {
    let server = provision::shared(&POSTGRES)
        .await
        .unwrap_or_else(|e| panic!("no postgres server for the tests: {e}"));
    let fix = Fix::new().await;
    let bouncer = provision::pgbouncer(&server, "transaction", &[])
        .await
        .unwrap_or_else(|e| panic!("no pgbouncer: {e}"));
    let url = through(&fix.db.url, &bouncer.address);
    let changes = json!({
        "connect_timeout_ms": 3000,
        "timeout_ms": 3000,
        "max_connections": 1,
        "fence_on_disconnect": true,
    });
    let config = config_of::<Backend>(&url, changes);
    let me = fix.identity(10);
    let a = fix.registry_with(fix.new_dir(), &config);
    let lease = a
        .acquire(&request(me.clone(), 1023))
        .await
        .expect("A starts");
    let renewed = a.renew(&lease, now_ms() + 3000).await;
    assert!(renewed.as_ref().is_ok_and(|r| r.is_ok()), "{renewed:?}");
    let s1 = fix
        .lock_holder(&me)
        .await
        .expect("A's lock is on a server session");
    fix.db
        .exec(&format!("SELECT pg_terminate_backend({s1})"))
        .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while fix.lock_holder(&me).await.is_some() {
        assert!(
            std::time::Instant::now() < deadline,
            "the ended session kept its lock"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let b = fix.registry_with(fix.new_dir(), &config);
    let theirs = b
        .acquire(&request(me.clone(), 1023))
        .await
        .expect("B starts");
    let mut answers = Vec::new();
    for _ in 0..5 {
        let ra = a.renew(&lease, now_ms() + 3000).await;
        let rb = b.renew(&theirs, now_ms() + 3000).await;
        answers.push(format!("A {ra:?} / B {rb:?}"));
        assert!(
            !(matches!(ra, Ok(Renewal::OK)) && matches!(rb, Ok(Renewal::OK))),
            "A and B both renewed worker id {}: {answers:?}",
            lease.worker_id
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        a.renew(&lease, now_ms() + 3000).await.unwrap(),
        Renewal::LeaseLost,
        "{answers:?}"
    );
    assert!(b.renew(&theirs, now_ms() + 3000).await.unwrap().is_ok());
}
