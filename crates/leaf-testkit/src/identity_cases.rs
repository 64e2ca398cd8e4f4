//! Scenarios of the workerId modes that hold each node identity under a lock on their server
//! (`mysql`, `postgres`): two live processes of one identity, driven as the server drives its
//! generator. Each takes closures that make a registry on a cache directory, so that a backend
//! crate runs it on its real server with its own settings.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use leaf_core::{Lease, NodeIdentity, SystemClock, WorkerIdRegistry};
use leaf_snowflake::{Snowflake, SnowflakeConfig};
use tokio::task::JoinHandle;

use crate::fixture::{NodeDirs, now_ms};

/// A generator on `registry` for `identity` with the default settings, its renewer running.
pub async fn start(
    registry: Arc<dyn WorkerIdRegistry>,
    identity: &NodeIdentity,
) -> leaf_core::Result<Snowflake> {
    let sf = Snowflake::start(
        registry,
        identity.clone(),
        Arc::new(SystemClock::new()),
        SnowflakeConfig::default(),
    )
    .await?;
    sf.spawn_renewer();
    Ok(sf)
}

/// Process A holds identity X and issues. Process B, whose cache directory holds X's worker id
/// from an earlier run, starts with `tight` settings (short timeouts, which its lock wait may
/// outlast) and retries for `patience` as the server's start-up loop does, on one registry.
/// B reaches the server at `url` through a proxy, and its first attempt finds the link stalled
/// once it has connected (`stall_after` into the attempt), until that attempt has given up: a
/// wait that ran out, whatever bounds it. B must issue no ID with A's worker id while A runs:
/// its server was reached, so a lock held by another session, or a wait that ran out, is never
/// a start from the cache file.
pub async fn a_second_process_never_starts_from_its_cache_file(
    url: &str,
    normal: MakeRegistryAt<'_>,
    tight: MakeRegistryAt<'_>,
    patience: Duration,
    stall_after: Duration,
) {
    let dirs = NodeDirs::default();
    let identity = NodeIdentity::new("10.0.0.3", 8080);
    // An earlier run of B's process leaves X's worker id in its cache directory.
    let b_dir = dirs.new_dir();
    let lease = earlier_run(normal(b_dir.clone(), url).as_ref(), &identity).await;

    let a = start(normal(dirs.new_dir(), url), &identity)
        .await
        .expect("A starts");
    a.next_id().await.expect("A issues");
    assert_eq!(
        a.worker_id(),
        lease.worker_id,
        "one identity, one worker id"
    );

    let link = crate::proxy::Proxy::start(authority(url)).await;
    let b = tight(b_dir, &through(url, &link.address));
    let mut attempts = Vec::new();
    let first = start(Arc::clone(&b), &identity);
    let stall = async {
        tokio::time::sleep(stall_after).await;
        link.set_link(crate::proxy::Link::Stalled);
    };
    let (started, ()) = tokio::join!(first, stall);
    link.set_up(true);
    let seen = b_issues_nothing(started, &attempts).await;
    attempts.push(seen);
    let deadline = Instant::now() + patience;
    while Instant::now() < deadline {
        let seen = b_issues_nothing(start(Arc::clone(&b), &identity).await, &attempts).await;
        attempts.push(seen);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    a.next_id().await.expect("A still issues");
    a.shutdown().await.expect("A's release");
}

/// An earlier run of a process on `registry`: it held `identity`, renewed its mark and
/// released it, so that the registry's cache directory holds the identity's worker id and a
/// mark to start from. The lease it had.
pub async fn earlier_run(registry: &dyn WorkerIdRegistry, identity: &NodeIdentity) -> Lease {
    let req = crate::registry_cases::request(identity.clone(), 1023);
    let lease = registry.acquire(&req).await.expect("the earlier run");
    let renewed = registry.renew(&lease, now_ms() + 3000).await;
    assert!(renewed.as_ref().is_ok_and(|r| r.is_ok()), "{renewed:?}");
    registry
        .release(&lease, now_ms())
        .await
        .expect("the earlier run's release");
    lease
}

/// What a start of B came to, for the log; panics if B issued an ID.
async fn b_issues_nothing(started: leaf_core::Result<Snowflake>, before: &[String]) -> String {
    match started {
        Ok(sf) => {
            // Give the started generator a moment, as a request would.
            let issued = tokio::time::timeout(Duration::from_secs(2), sf.next_id()).await;
            if let Ok(Ok(id)) = issued {
                panic!(
                    "B issued {id} with worker id {} while A held it (after these refused \
                     starts: {before:?})",
                    sf.worker_id(),
                );
            }
            let _ = sf.shutdown().await;
            format!("started, issued nothing: {issued:?}")
        }
        Err(e) => e.to_string(),
    }
}

/// Makes a registry on a cache directory whose server is at the URL given.
pub type MakeRegistryAt<'a> = &'a (dyn Fn(PathBuf, &str) -> Arc<dyn WorkerIdRegistry> + Sync);

/// Where the `host:port` of `url` (`scheme://user:password@host:port/db`) is.
fn authority_range(url: &str) -> std::ops::Range<usize> {
    let start = url
        .find('@')
        .map(|i| i + 1)
        .or_else(|| url.find("://").map(|i| i + 3))
        .unwrap_or(0);
    let end = url[start..]
        .find(['/', '?'])
        .map_or(url.len(), |i| start + i);
    start..end
}

/// The `host:port` of `url`.
pub fn authority(url: &str) -> &str {
    &url[authority_range(url)]
}

/// `url` with its `host:port` replaced by `address` (a proxy's).
pub fn through(url: &str, address: &str) -> String {
    let r = authority_range(url);
    format!("{}{address}{}", &url[..r.start], &url[r.end..])
}

/// The IDs one generator issued, each batch with the instant it came back.
pub type Issued = Vec<(Instant, Vec<i64>)>;

/// Issues batches from `sf` until `stop`, about one batch a millisecond; errors (a fenced
/// generator) are not recorded.
pub fn drive(sf: Snowflake, stop: Arc<std::sync::atomic::AtomicBool>) -> JoinHandle<Issued> {
    tokio::spawn(async move {
        let mut issued = Vec::new();
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            if let Ok(ids) = sf.next_ids(64).await {
                issued.push((Instant::now(), ids));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        issued
    })
}

/// What [`an_outage_with_a_partitioned_holder`] saw.
#[derive(Debug)]
pub struct Outage {
    /// When the server stopped (and A's link was cut).
    pub stopped: Instant,
    /// When B's generator started, if it did.
    pub b_started: Option<Instant>,
    /// What A issued.
    pub a: Issued,
    /// What B issued.
    pub b: Issued,
    /// A's and B's worker ids (B's if it started).
    pub worker_ids: (u64, Option<u64>),
}

impl Outage {
    /// How many IDs A issued after B started.
    pub fn a_while_b_ran(&self) -> usize {
        let Some(b) = self.b_started else { return 0 };
        self.a
            .iter()
            .filter(|(t, _)| *t >= b)
            .map(|(_, ids)| ids.len())
            .sum()
    }

    /// How many IDs both issued.
    pub fn duplicates(&self) -> usize {
        let a: std::collections::BTreeSet<i64> = self
            .a
            .iter()
            .flat_map(|(_, ids)| ids.iter().copied())
            .collect();
        self.b
            .iter()
            .flat_map(|(_, ids)| ids.iter())
            .filter(|id| a.contains(id))
            .count()
    }

    /// Whether every ID A issued is below every ID B issued: with one worker id, A's
    /// timestamps all below B's.
    pub fn a_below_b(&self) -> bool {
        let a = self.a.iter().flat_map(|(_, ids)| ids.iter()).max();
        let b = self.b.iter().flat_map(|(_, ids)| ids.iter()).min();
        match (a, b) {
            (Some(a), Some(b)) => a < b,
            _ => true,
        }
    }

    /// How long after the server stopped A issued its last ID.
    pub fn a_issued_for(&self) -> Duration {
        self.a
            .last()
            .map(|(t, _)| t.saturating_duration_since(self.stopped))
            .unwrap_or_default()
    }
}

/// Generators A and B of one identity on one database `server` (at `url`): A holds the
/// identity and issues, through a proxy; B retries its start as the server's start-up loop
/// does. The database stops for 5 s; A's proxy is cut once it has stopped and stays cut 2 s
/// after the database is back, so B takes the lock (A's session ended with the stop) and
/// issues; then A's link comes back. Both generators are driven the whole time; the outcome says who issued what
/// and when.
pub async fn an_outage_with_a_partitioned_holder(
    server: &crate::provision::Dedicated,
    url: &str,
    make: MakeRegistryAt<'_>,
) -> Outage {
    use std::sync::atomic::{AtomicBool, Ordering};

    let dirs = NodeDirs::default();
    let identity = NodeIdentity::new("10.0.0.4", 8080);
    let target = authority(url).to_owned();
    let proxy = crate::proxy::Proxy::start(&target).await;
    let stop = Arc::new(AtomicBool::new(false));

    let a = start(
        make(dirs.new_dir(), &through(url, &proxy.address)),
        &identity,
    )
    .await
    .expect("A starts");
    let a_task = drive(a.clone(), stop.clone());

    // B: the server's start-up loop, on a cache directory of its own.
    let b_registry = make(dirs.new_dir(), url);
    let b_started = Arc::new(std::sync::Mutex::new(None));
    let b_task = {
        let (stop, b_started, identity) = (stop.clone(), b_started.clone(), identity.clone());
        tokio::spawn(async move {
            loop {
                if stop.load(Ordering::Relaxed) {
                    return (None, Vec::new());
                }
                match start(Arc::clone(&b_registry), &identity).await {
                    Ok(sf) => {
                        *b_started.lock().expect("b_started") = Some(Instant::now());
                        let worker_id = sf.worker_id();
                        let issued = drive(sf, stop).await.expect("B's driver");
                        return (Some(worker_id), issued);
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                }
            }
        })
    };

    tokio::time::sleep(Duration::from_millis(1500)).await;
    let stopped = Instant::now();
    server
        .stop(Duration::from_secs(10))
        .await
        .expect("stop the database");
    proxy.set_up(false);
    tokio::time::sleep(Duration::from_secs(5)).await;
    server.start().await.expect("start the database again");
    tokio::time::sleep(Duration::from_secs(2)).await;
    proxy.set_up(true);
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::Relaxed);
    let a_issued = a_task.await.expect("A's driver");
    let (b_worker_id, b_issued) = b_task.await.expect("B's loop");
    let b_started = *b_started.lock().expect("b_started");
    Outage {
        stopped,
        b_started,
        a: a_issued,
        b: b_issued,
        worker_ids: (a.worker_id(), b_worker_id),
    }
}

/// Checks [`an_outage_with_a_partitioned_holder`] with `fence_on_disconnect` on: B started with
/// A's worker id, no ID was issued by both, every ID of A is below every ID of B (B started
/// above the last mark the database confirmed for A, and A never issued past it), and A stopped
/// once its clock passed that mark (the mark window, 3 s, after its last renewal).
pub fn assert_fenced(o: &Outage) {
    assert!(o.b_started.is_some(), "B never started");
    assert_eq!(
        Some(o.worker_ids.0),
        o.worker_ids.1,
        "one identity, one worker id"
    );
    assert!(!o.b.is_empty(), "B issued nothing");
    assert_eq!(o.duplicates(), 0, "IDs issued by both A and B");
    assert!(o.a_below_b(), "A issued an ID above one of B's");
    assert!(
        o.a_issued_for() < Duration::from_secs(4),
        "A issued for {:?} after the database stopped",
        o.a_issued_for()
    );
}

/// Reports [`an_outage_with_a_partitioned_holder`] without the fence (Leaf's availability): A
/// serves from its cache file through the outage and until its link returns and it finds the
/// lock taken, so both issue with one worker id meanwhile, and IDs of one millisecond can
/// repeat: the documented risk of the default. Checks that B started and that A did issue
/// beside it.
pub fn report_unfenced(o: &Outage) {
    assert!(o.b_started.is_some(), "B never started");
    assert_eq!(
        Some(o.worker_ids.0),
        o.worker_ids.1,
        "one identity, one worker id"
    );
    eprintln!(
        "without fence_on_disconnect: A issued for {:?} after the database stopped, {} IDs \
         while B ran with the same worker id; {} IDs were issued by both",
        o.a_issued_for(),
        o.a_while_b_ran(),
        o.duplicates()
    );
    assert!(o.a_while_b_ran() > 0, "A stopped by itself");
}
