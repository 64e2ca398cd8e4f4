//! The blocking client, from plain threads (no runtime of the caller's), on real servers.

mod common;

use std::collections::HashSet;

use common::{ADMIN_TOKEN, Cluster};
use leaf_client::blocking::LeafClient;
use leaf_core::{Error, NewTag, Tag};

fn blocking(cluster: &Cluster) -> LeafClient {
    LeafClient::builder()
        .endpoints(cluster.urls())
        .admin_token(ADMIN_TOKEN)
        .build_blocking()
        .expect("the blocking client")
}

#[test]
fn ids_from_threads_without_a_runtime_are_unique() {
    let cluster = Cluster::start(2, &[]);
    let c = blocking(&cluster);
    let new = NewTag {
        step: 50,
        ..NewTag::new(Tag::new("t").unwrap())
    };
    c.create(&new).expect("create the tag");
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let c = c.clone();
            std::thread::spawn(move || {
                let mut ids = Vec::new();
                for i in 0..500 {
                    if i % 5 == 0 {
                        ids.extend(c.next_ids("t", 3).unwrap());
                    } else {
                        ids.push(c.next_id("t").unwrap());
                    }
                }
                ids
            })
        })
        .collect();
    let mut all = HashSet::new();
    for t in threads {
        for id in t.join().unwrap() {
            assert!(all.insert(id), "id {id} twice");
        }
    }
    assert_eq!(all.len(), 4 * (400 + 100 * 3));
    let ids = c.snowflake_ids(5).unwrap();
    assert_eq!(ids.len(), 5);
    let d = c.decode(ids[0]).unwrap();
    assert!(d.worker_id == 1 || d.worker_id == 2, "{d:?}");
    assert_eq!(c.get(&Tag::new("t").unwrap()).unwrap().unwrap().step, 50);
    assert!(c.endpoints().iter().any(|e| e.answered > 0));
}

/// Inside a runtime the blocking client would stall the runtime's thread: it says so, and
/// neither a call nor dropping it there panics.
#[test]
fn inside_a_runtime_it_refuses_plainly_and_drops_quietly() {
    let cluster = Cluster::start(1, &[]);
    let c = blocking(&cluster);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let e = c.next_id("t").unwrap_err();
        assert!(
            matches!(&e, Error::Config(m) if m.contains("inside a Tokio runtime")),
            "{e}"
        );
        drop(c);
    });
}
