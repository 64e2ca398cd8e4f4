//! The keys the store and the registry write, read back raw from a real Redis: the documented
//! layout, the marks' rules, and rows the store did not write itself.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{RegFix, StoreFix, now_ms, request};
use leaf_core::{
    Error, NewTag, NodeIdentity, Renewal, SegmentStore, Tag, TagUpdate, WorkerIdClaims,
    WorkerIdRegistry,
};

async fn raw(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("a raw connection")
}

async fn hash(c: &mut redis::aio::MultiplexedConnection, key: &str) -> HashMap<String, String> {
    redis::cmd("HGETALL").arg(key).query_async(c).await.unwrap()
}

async fn get(c: &mut redis::aio::MultiplexedConnection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query_async(c).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tag_is_one_hash_listed_in_the_tag_set() {
    let fix = StoreFix::new().await;
    let store = fix.connect().await;
    let mut c = raw(&fix.config.url).await;
    let prefix = &fix.config.key_prefix;
    let t = Tag::new("order").unwrap();
    store
        .create(&NewTag {
            step: 100,
            description: Some(String::new()),
            ..NewTag::new(t.clone())
        })
        .await
        .unwrap();
    store.allocate(&t, None).await.unwrap();
    let row = hash(&mut c, &format!("{prefix}:tag:order")).await;
    assert_eq!(row.get("max_id").map(String::as_str), Some("101"));
    assert_eq!(row.get("step").map(String::as_str), Some("100"));
    assert_eq!(row.get("description").map(String::as_str), Some(""));
    let stamped: i64 = row["update_time"].parse().expect("update_time in ms");
    assert!(
        (stamped - now_ms() as i64).abs() < 60_000,
        "update_time {stamped} is the server's clock in ms"
    );
    let tags: Vec<String> = redis::cmd("SMEMBERS")
        .arg(format!("{prefix}:tags"))
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(tags, ["order"]);
    // An empty description stays empty, a missing one stays missing.
    assert_eq!(
        store.get(&t).await.unwrap().unwrap().description.as_deref(),
        Some("")
    );
    let u = Tag::new("plain").unwrap();
    store.create(&NewTag::new(u.clone())).await.unwrap();
    assert_eq!(store.get(&u).await.unwrap().unwrap().description, None);
    let updated = store
        .update(
            &u,
            &TagUpdate {
                step: None,
                description: Some("d".into()),
            },
        )
        .await
        .unwrap();
    assert_eq!(
        (updated.step, updated.description.as_deref()),
        (2000, Some("d"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_written_by_others_are_checked() {
    let fix = StoreFix::new().await;
    let store = fix.connect().await;
    let mut c = raw(&fix.config.url).await;
    let prefix = &fix.config.key_prefix;
    // A stored step below 1: refused with the step named, and nothing changes.
    let _: () = redis::cmd("HSET")
        .arg(format!("{prefix}:tag:zero"))
        .arg(&["max_id", "1", "step", "0"])
        .query_async(&mut c)
        .await
        .unwrap();
    let _: () = redis::cmd("SADD")
        .arg(format!("{prefix}:tags"))
        .arg(&["zero", "gone", "not a tag!"])
        .query_async(&mut c)
        .await
        .unwrap();
    let zero = Tag::new("zero").unwrap();
    let e = store.allocate(&zero, None).await.expect_err("step 0");
    assert!(
        matches!(&e, Error::InvalidInput(m) if m.contains("step 0")),
        "{e}"
    );
    assert_eq!(
        hash(&mut c, &format!("{prefix}:tag:zero")).await["max_id"],
        "1"
    );
    // A dynamic step still works on it.
    let a = store.allocate(&zero, Some(5)).await.unwrap();
    assert_eq!(a.range(), 1..6);
    // The listing skips a set member without a hash, and one that is not a tag.
    let listed: Vec<String> = store
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.tag.to_string())
        .collect();
    assert_eq!(listed, ["zero"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_is_a_token_with_a_ttl_and_the_mark_only_rises_until_release() {
    let fix = RegFix::new().await;
    let mut c = raw(&fix.config.url).await;
    let node = fix.registry();
    let lease = node
        .acquire(&request(NodeIdentity::new("10.0.0.9", 1), 0))
        .await
        .unwrap();
    let worker = node.backend().worker_key(0);
    let mark = node.backend().mark_key(0);
    assert_eq!(worker, format!("{}:leaf:workers:0", fix.config.key_prefix));
    assert_eq!(mark, format!("{}:leaf:marks:0", fix.config.key_prefix));
    assert_eq!(
        get(&mut c, &worker).await,
        Some(lease.token.get().to_string())
    );
    let pttl: i64 = redis::cmd("PTTL")
        .arg(&worker)
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(pttl > 0 && pttl <= 4000, "pttl {pttl}");

    let m = now_ms() + 3000;
    assert_eq!(
        node.renew(&lease, m).await.unwrap(),
        Renewal::Ok {
            ttl: Some(Duration::from_millis(4000))
        }
    );
    assert_eq!(get(&mut c, &mark).await, Some(m.to_string()));
    // Straight to the backend: the registry's cache-file half would raise the mark first, and
    // the renew script's own guard (`>`) is what this checks.
    let lower = WorkerIdClaims::renew(node.backend(), &lease, m - 1000).await;
    assert!(lower.unwrap().is_ok());
    assert_eq!(
        get(&mut c, &mark).await,
        Some(m.to_string()),
        "a renewal lowered the mark"
    );

    let f = m - 2000;
    node.release(&lease, f).await.unwrap();
    assert_eq!(
        get(&mut c, &mark).await,
        Some(f.to_string()),
        "the final mark"
    );
    assert_eq!(
        get(&mut c, &worker).await,
        None,
        "released: the claim is gone"
    );

    // An abandoned lease's claim stays until it expires; the id is not free meanwhile.
    let again = node
        .acquire(&request(NodeIdentity::new("10.0.0.9", 1), 1))
        .await
        .unwrap();
    node.abandon(&again).await;
    assert_eq!(
        get(&mut c, &node.backend().worker_key(again.worker_id)).await,
        Some(again.token.get().to_string())
    );
    let other = fix.registry();
    let next = other
        .acquire(&request(NodeIdentity::new("10.0.0.9", 2), 1))
        .await
        .unwrap();
    assert_ne!(next.worker_id, again.worker_id);
    other.release(&next, now_ms()).await.unwrap();
}
