//! The local registry beyond the conformance suite: the `ip:port` map, configuration errors,
//! and the mark across restarts.

use std::collections::BTreeMap;
use std::path::Path;

use leaf_core::{
    AcquireRequest, CacheFile, CacheRecord, Error, Lease, NodeIdentity, Renewal, WorkerIdRegistry,
};
use leaf_registry_local::{LocalClaims, LocalRegistry, LocalRegistryConfig, WorkerIdFrom};

fn req(ip: &str, port: u16, max_worker_id: u64) -> AcquireRequest {
    AcquireRequest::new(
        NodeIdentity::new(ip, port),
        max_worker_id,
        1_700_000_000_000,
    )
}

fn mapped(dir: &Path, entries: &[(&str, u64)]) -> LocalRegistry {
    let work_id_map: BTreeMap<String, u64> =
        entries.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    LocalClaims::new(
        LocalRegistryConfig {
            worker_id: 0,
            work_id_map,
            ..Default::default()
        },
        "leaf",
    )
    .registry(dir)
}

fn fixed(dir: &Path, worker_id: u64) -> LocalRegistry {
    LocalClaims::new(
        LocalRegistryConfig {
            worker_id,
            ..Default::default()
        },
        "leaf",
    )
    .registry(dir)
}

#[tokio::test]
async fn the_map_picks_the_id_by_ip_and_port() {
    let map = [
        ("10.0.0.1:8080", 1),
        ("10.0.0.1:8081", 2),
        ("10.0.0.2:8080", 9),
    ];
    for (ip, port, expect) in [
        ("10.0.0.1", 8080, 1),
        ("10.0.0.1", 8081, 2),
        ("10.0.0.2", 8080, 9),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let r = mapped(dir.path(), &map);
        let lease = r.acquire(&req(ip, port, 1023)).await.unwrap();
        assert_eq!(lease.worker_id, expect, "{ip}:{port}");
        assert_eq!((lease.prev_mark_ms, lease.ttl), (None, None));
    }
    assert_eq!(fixed(Path::new("unused"), 0).mode(), "local");
    let caps = fixed(Path::new("unused"), 0).capabilities();
    assert!(!caps.recycles && !caps.assigns_distinct_ids);
}

#[tokio::test]
async fn without_a_map_every_identity_gets_worker_id() {
    for ip in ["10.0.0.1", "192.168.1.7"] {
        let dir = tempfile::tempdir().unwrap();
        let lease = fixed(dir.path(), 17)
            .acquire(&req(ip, 1, 1023))
            .await
            .unwrap();
        assert_eq!(lease.worker_id, 17);
    }
}

#[tokio::test]
async fn an_identity_missing_from_the_map_is_config_naming_it_and_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let r = mapped(dir.path(), &[("10.0.0.1:8080", 1)]);
    let e = r.acquire(&req("10.0.0.1", 9090, 1023)).await.unwrap_err();
    let Error::Config(msg) = &e else {
        panic!("expected a config error, got {e}")
    };
    assert!(msg.contains("10.0.0.1:9090"), "{msg}");
    assert!(
        msg.contains("work_id_map") && !msg.contains("snowflake."),
        "{msg}"
    );
    assert!(
        !dir.path().join("worker-leaf.lock").exists(),
        "a refused node touched the cache directory"
    );
}

#[tokio::test]
async fn one_id_for_two_nodes_in_the_map_is_config() {
    let dir = tempfile::tempdir().unwrap();
    let r = mapped(dir.path(), &[("10.0.0.1:8080", 4), ("10.0.0.2:8080", 4)]);
    let e = r.acquire(&req("10.0.0.1", 8080, 1023)).await.unwrap_err();
    assert!(
        matches!(&e, Error::Config(m) if m.contains("worker id 4") && m.contains("10.0.0.2:8080")),
        "{e}"
    );
}

#[tokio::test]
async fn an_id_beyond_the_layout_is_config() {
    let dir = tempfile::tempdir().unwrap();
    let e = fixed(dir.path(), 32)
        .acquire(&req("10.0.0.1", 1, 31))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::Config(m) if m.starts_with("worker_id")
            && m.contains("32") && m.contains("31")),
        "{e}"
    );
    let e = mapped(dir.path(), &[("10.0.0.1:1", 8)])
        .acquire(&req("10.0.0.1", 1, 7))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::Config(m) if m.starts_with("work_id_map")),
        "{e}"
    );
    // The largest id that fits is fine.
    let lease = fixed(dir.path(), 31)
        .acquire(&req("10.0.0.1", 1, 31))
        .await
        .unwrap();
    assert_eq!(lease.worker_id, 31);
}

#[tokio::test]
async fn restart_keeps_the_mark_after_release_and_after_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let r = fixed(dir.path(), 3);
    let lease = r.acquire(&req("10.0.0.1", 1, 1023)).await.unwrap();
    assert_eq!(r.renew(&lease, 5_000).await.unwrap(), Renewal::OK);
    r.release(&lease, 4_000).await.unwrap();
    drop(r);

    let r = fixed(dir.path(), 3);
    let lease = r.acquire(&req("10.0.0.1", 1, 1023)).await.unwrap();
    assert_eq!(
        lease.prev_mark_ms,
        Some(4_000),
        "the final mark of a clean shutdown"
    );
    assert_eq!(r.renew(&lease, 9_000).await.unwrap(), Renewal::OK);
    drop(r); // a crash: no release

    let r = fixed(dir.path(), 3);
    let lease = r.acquire(&req("10.0.0.1", 1, 1023)).await.unwrap();
    assert_eq!(lease.prev_mark_ms, Some(9_000), "the last renewed mark");

    let cache = dir.path().join("worker-leaf.properties");
    let text = std::fs::read_to_string(cache).unwrap();
    assert!(
        text.contains("workerID=3") && text.contains("markMs=9000"),
        "{text}"
    );
}

#[tokio::test]
async fn a_cache_file_of_another_worker_id_gives_no_mark() {
    let dir = tempfile::tempdir().unwrap();
    let r = fixed(dir.path(), 3);
    let lease = r.acquire(&req("10.0.0.1", 1, 1023)).await.unwrap();
    r.release(&lease, 8_000).await.unwrap();
    let r = fixed(dir.path(), 4);
    let lease = r.acquire(&req("10.0.0.1", 1, 1023)).await.unwrap();
    assert_eq!((lease.worker_id, lease.prev_mark_ms), (4, None));
    r.renew(&lease, 100).await.unwrap();
    r.release(&lease, 100).await.unwrap();
    let cache = CacheFile::open(dir.path(), "worker-leaf").unwrap();
    let expect = CacheRecord {
        worker_id: 4,
        mark_ms: 100,
    };
    assert_eq!(cache.read().unwrap(), Some(expect));
}

#[tokio::test]
async fn a_lease_not_held_is_lost_and_its_release_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let r = fixed(dir.path(), 3);
    let stranger = Lease::new(3, None);
    assert_eq!(r.renew(&stranger, 10).await.unwrap(), Renewal::LeaseLost);
    let lease = r.acquire(&req("10.0.0.1", 1, 1023)).await.unwrap();
    r.renew(&lease, 500).await.unwrap();
    let other = Lease::new(4, lease.prev_mark_ms);
    assert_eq!(r.renew(&other, 10).await.unwrap(), Renewal::LeaseLost);
    r.release(&other, 10).await.unwrap();
    r.release(&lease, 600).await.unwrap();
    r.release(&lease, 1).await.unwrap();
    let cache = CacheFile::open(dir.path(), "worker-leaf").unwrap();
    assert_eq!(
        cache.read().unwrap(),
        Some(CacheRecord {
            worker_id: 3,
            mark_ms: 600
        }),
        "only the held lease's calls reached the file"
    );
}

#[tokio::test]
async fn the_cache_directory_is_locked_while_held_and_freed_by_release() {
    let dir = tempfile::tempdir().unwrap();
    let first = fixed(dir.path(), 1);
    let lease = first.acquire(&req("10.0.0.1", 1, 1023)).await.unwrap();
    // Acquiring again on the same registry hands back the same lease, with the latest mark.
    first.renew(&lease, 70).await.unwrap();
    let again = first.acquire(&req("10.0.0.1", 1, 1023)).await.unwrap();
    assert_eq!((again.worker_id, again.prev_mark_ms), (1, Some(70)));

    let second = fixed(dir.path(), 1);
    let e = second.acquire(&req("10.0.0.1", 1, 1023)).await.unwrap_err();
    assert!(
        matches!(&e, Error::Config(m) if m.contains("in use by another process")),
        "{e}"
    );
    first.release(&lease, 80).await.unwrap();
    let lease = second.acquire(&req("10.0.0.1", 1, 1023)).await.unwrap();
    assert_eq!(lease.prev_mark_ms, Some(80));
}

fn from_hostname(dir: &Path, hostname: &str, offset: u64) -> LocalRegistry {
    LocalClaims::new(
        LocalRegistryConfig {
            worker_id_from: WorkerIdFrom::HostnameOrdinal,
            worker_id_offset: offset,
            hostname: hostname.into(),
            ..Default::default()
        },
        "leaf",
    )
    .registry(dir)
}

#[tokio::test]
async fn a_statefulset_ordinal_plus_the_offset_is_the_worker_id() {
    for (host, offset, expect) in [("leaf-0", 0, 0), ("leaf-2", 0, 2), ("leaf-2", 512, 514)] {
        let dir = tempfile::tempdir().unwrap();
        let r = from_hostname(dir.path(), host, offset);
        let lease = r.acquire(&req("10.0.0.1", 8080, 1023)).await.unwrap();
        assert_eq!(lease.worker_id, expect, "{host} + {offset}");
        r.release(&lease, 1_700_000_000_000).await.unwrap();
        // The cache file records it like any other worker id.
        let again = from_hostname(dir.path(), host, offset);
        let lease = again.acquire(&req("10.0.0.1", 8080, 1023)).await.unwrap();
        assert_eq!(lease.prev_mark_ms, Some(1_700_000_000_000));
    }
}

#[tokio::test]
async fn a_host_name_without_an_ordinal_or_past_the_layout_is_config_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let e = from_hostname(dir.path(), "leaf", 0)
        .acquire(&req("10.0.0.1", 8080, 1023))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::Config(m) if m.starts_with("worker_id_from") && m.contains("\"leaf\"")),
        "{e}"
    );
    let e = from_hostname(dir.path(), "leaf-6", 1020)
        .acquire(&req("10.0.0.1", 8080, 1023))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::Config(m) if m.starts_with("worker_id_from") && m.contains("1026")
            && m.contains("1023")),
        "{e}"
    );
    // Refused before the cache directory is touched.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[tokio::test]
async fn with_no_host_name_set_the_machines_own_is_read() {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .expect("the kernel's host name")
        .trim()
        .to_owned();
    let dir = tempfile::tempdir().unwrap();
    let r = from_hostname(dir.path(), "", 0);
    let got = r.acquire(&req("10.0.0.1", 8080, u64::MAX >> 1)).await;
    match leaf_registry_local::hostname_ordinal(&host) {
        Ok(n) => assert_eq!(got.unwrap().worker_id, n, "{host}"),
        Err(_) => assert!(
            matches!(&got, Err(Error::Config(m)) if m.contains(&format!("{host:?}"))),
            "{host}: {got:?}"
        ),
    }
}
