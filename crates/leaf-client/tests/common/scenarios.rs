//! The scenarios of many clients and servers on one store, run on SQLite (`tests/blackbox.rs`)
//! and on MariaDB (`tests/mariadb.rs`): IDs taken from the clients' memory, a server killed
//! mid-run, every server down.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use leaf_client::{LeafClient, LeafClientBuilder};
use leaf_core::Error;
use leaf_segment::SegmentConfig;

use super::{Cluster, assert_unique, client, create_tag, get};

/// The tag of every scenario.
pub(crate) const TAG: &str = "orders";
/// The servers hand IDs out of their own buffers too, from the same busy store: their requests
/// wait for a lease as long as the clients' do (see [`small_segments`]).
pub(crate) const PATIENT_SERVERS: &[(&str, &str)] = &[("LEAF_SEGMENT__SWITCH_WAIT_MS", "5000")];
const PER_CLIENT: usize = 100_000;
/// Each client pauses this long after every thousand IDs, so that the run lasts long enough
/// for a server to be killed in its middle.
const PACE: Duration = Duration::from_millis(2);

/// Small segments: hundreds of leases in a run, many after the kill. Clients this hungry keep
/// the store busy (one lease every few milliseconds each; on SQLite, servers whose pools
/// contend for one file's lock): a lease now and then waits near a second, so a request whose
/// buffers are spent waits up to 5 s for it rather than the default 500 ms.
fn small_segments() -> SegmentConfig {
    SegmentConfig {
        max_step: 1000,
        switch_wait: Duration::from_secs(5),
        ..LeafClientBuilder::default_segment_config()
    }
}

/// `count` IDs of [`TAG`] from the own buffers of the server on `port` (`/v1/segment`).
async fn served_by(port: u16, count: usize) -> Vec<i64> {
    let (status, body) = get(port, &format!("/v1/segment/{TAG}?count={count}")).await;
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let ids = v["ids"].as_array().expect("ids");
    ids.iter().map(|x| x.as_i64().expect("an id")).collect()
}

/// `n` IDs of [`TAG`] from `client`, through a handle or by name; each error's text too.
async fn take(
    client: LeafClient,
    n: usize,
    by_handle: bool,
    count: Arc<AtomicUsize>,
) -> (Vec<i64>, Vec<String>) {
    let handle = client.segment().handle(TAG).await.expect("handle");
    let (mut ids, mut errors) = (Vec::with_capacity(n), Vec::new());
    while ids.len() < n && errors.len() < 100 {
        let got = if by_handle {
            handle.next_id().await
        } else {
            client.segment().next_id(TAG).await
        };
        match got {
            Ok(id) => ids.push(id),
            Err(e) => errors.push(e.to_string()),
        }
        if count.fetch_add(1, Ordering::Relaxed) % 1000 == 999 {
            tokio::time::sleep(PACE).await;
        }
    }
    (ids, errors)
}

/// Two clients of two servers (in opposite orders), 100,000 IDs each from one tag, while the
/// second server hands out 50,000 from its own buffers; the first server is killed when the
/// first client is halfway: no error, no duplicate. `cluster` has two servers started with
/// [`PATIENT_SERVERS`].
pub(crate) async fn killed_mid_run(mut cluster: Cluster) {
    let urls = cluster.urls();
    let c1 = client(urls.clone())
        .segment_config(small_segments())
        .build()
        .unwrap();
    let reversed: Vec<String> = urls.iter().rev().cloned().collect();
    let c2 = client(reversed)
        .segment_config(small_segments())
        .build()
        .unwrap();
    create_tag(&c1, TAG, 100).await;
    let (n1, n2) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let first = tokio::spawn(take(c1.clone(), PER_CLIENT, true, n1.clone()));
    let second = tokio::spawn(take(c2.clone(), PER_CLIENT, false, n2.clone()));
    // The survivor also hands IDs out from its own buffers meanwhile.
    let survivor = cluster.servers[1].port;
    let served = tokio::spawn(async move {
        let mut ids = Vec::new();
        for _ in 0..100 {
            ids.extend(served_by(survivor, 500).await);
            tokio::time::sleep(PACE).await;
        }
        ids
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    while n1.load(Ordering::Relaxed) < PER_CLIENT / 2 {
        assert!(
            Instant::now() < deadline,
            "the first client does not progress"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let killed_at = n1.load(Ordering::Relaxed);
    let leases_at_kill = c1.segment().snapshot()[0].loads_ok;
    tokio::task::block_in_place(|| cluster.servers[0].kill());
    let (ids1, errors1) = first.await.unwrap();
    let (ids2, errors2) = second.await.unwrap();
    let server_ids = served.await.unwrap();
    assert!(errors1.is_empty(), "first client: {errors1:?}");
    assert!(errors2.is_empty(), "second client: {errors2:?}");
    assert_eq!((ids1.len(), ids2.len()), (PER_CLIENT, PER_CLIENT));
    assert!(
        killed_at < PER_CLIENT * 3 / 4,
        "the kill came too late to matter: after {killed_at} ids"
    );
    // The first client used the killed server, then the survivor.
    let status = c1.endpoints();
    assert!(status[0].failed >= 1, "{status:?}");
    assert!(status[1].preferred && status[1].answered >= 1, "{status:?}");
    let leases = c1.segment().snapshot()[0].loads_ok;
    assert!(
        leases - leases_at_kill >= 10,
        "{leases} leases, {leases_at_kill} before the kill: many must come after it"
    );
    let mut all: Vec<i64> = ids1.into_iter().chain(ids2).chain(server_ids).collect();
    assert_eq!(all.len(), 2 * PER_CLIENT + 50_000);
    assert_unique(&mut all);
    eprintln!(
        "killed_mid_run: server 1 killed after {killed_at} of the first client's IDs; its \
         leases {leases_at_kill} before, {} after; {} failed requests on the killed server; \
         {} unique IDs, 0 errors",
        leases - leases_at_kill,
        status[0].failed,
        all.len()
    );
}

/// Six clients of the servers of `cluster` (three, started with [`PATIENT_SERVERS`]), each
/// preferring another, 50,000 IDs each, and 10,000 of each server's own: no duplicate.
pub(crate) async fn many_clients(cluster: Cluster) {
    const CLIENTS: usize = 6;
    const EACH: usize = 50_000;
    let urls = cluster.urls();
    let clients: Vec<LeafClient> = (0..CLIENTS)
        .map(|i| {
            // Each client prefers another server.
            let mut mine = urls.clone();
            mine.rotate_left(i % urls.len());
            client(mine)
                .segment_config(small_segments())
                .build()
                .unwrap()
        })
        .collect();
    create_tag(&clients[0], TAG, 100).await;
    let tasks: Vec<_> = clients
        .iter()
        .enumerate()
        .map(|(i, c)| tokio::spawn(take(c.clone(), EACH, i % 2 == 0, Arc::default())))
        .collect();
    let mut all = Vec::new();
    for server in &cluster.servers {
        all.extend(served_by(server.port, 10_000).await);
    }
    for t in tasks {
        let (ids, errors) = t.await.unwrap();
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(ids.len(), EACH);
        all.extend(ids);
    }
    assert_eq!(all.len(), CLIENTS * EACH + 3 * 10_000);
    assert_unique(&mut all);
    eprintln!("many_clients: {} unique IDs, 0 errors", all.len());
    for server in &cluster.servers {
        let leases = server
            .metric(&format!(
                "leaf_client_allocations_total{{tag=\"{TAG}\",family=\"ipv4\"}}"
            ))
            .await;
        assert!(leases >= 1.0, "every server leased ranges to its clients");
    }
}

/// One client of the two servers of `cluster`: with both killed, every buffered ID is still
/// issued, then `Unavailable`; the second server restarted, IDs again, above the earlier ones.
pub(crate) async fn every_server_down(mut cluster: Cluster) {
    let c = client(cluster.urls())
        .request_timeout(Duration::from_millis(300))
        .call_timeout(Duration::from_millis(1000))
        .backoff(Duration::from_millis(50), Duration::from_millis(500))
        .segment_config(SegmentConfig {
            switch_wait: Duration::from_millis(200),
            retry_backoff_max: Duration::from_millis(500),
            ..LeafClientBuilder::default_segment_config()
        })
        .build()
        .unwrap();
    create_tag(&c, TAG, 1000).await;
    let handle = c.segment().handle(TAG).await.unwrap();
    let mut before = Vec::new();
    for _ in 0..200 {
        before.push(handle.next_id().await.unwrap());
    }
    // Past 10% of the first segment the second is loaded in the background.
    let deadline = Instant::now() + Duration::from_secs(10);
    let buffered = loop {
        let s = &c.segment().snapshot()[0];
        if s.next_ready {
            break s.remaining;
        }
        assert!(
            Instant::now() < deadline,
            "the next segment never loaded: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert!(buffered >= 1000, "{buffered}");
    for s in &mut cluster.servers {
        s.kill();
    }
    let mut after = Vec::new();
    let error = loop {
        match handle.next_id().await {
            Ok(id) => after.push(id),
            Err(e) => break e,
        }
        assert!(
            after.len() as i64 <= buffered,
            "more IDs than were buffered"
        );
    };
    assert_eq!(
        after.len() as i64,
        buffered,
        "every buffered ID, then the error"
    );
    assert!(matches!(error, Error::Unavailable(_)), "{error}");
    // Still unavailable, and quickly so, while the servers are down.
    let started = Instant::now();
    let e = handle.next_id().await.unwrap_err();
    assert!(matches!(e, Error::Unavailable(_)), "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    cluster.servers[1].restart();
    let restarted = Instant::now();
    let deadline = restarted + Duration::from_secs(20);
    let recovered = loop {
        match handle.next_id().await {
            Ok(id) => break id,
            Err(e) => {
                assert!(matches!(e, Error::Unavailable(_)), "{e}");
                assert!(Instant::now() < deadline, "no recovery: {e}");
            }
        }
    };
    let recovered_after = restarted.elapsed();
    let issued_while_down = after.len();
    let last = *after.last().unwrap();
    assert!(recovered > last, "{recovered} after {last}");
    let mut all: Vec<i64> = before.into_iter().chain(after).collect();
    all.push(recovered);
    for _ in 0..5000 {
        all.push(handle.next_id().await.unwrap());
    }
    assert_unique(&mut all);
    eprintln!(
        "every_server_down: {} buffered IDs issued after the kill, then {error}; recovered \
         with {recovered} {:?} after the restart; {} unique IDs",
        issued_while_down,
        recovered_after,
        all.len()
    );
}
