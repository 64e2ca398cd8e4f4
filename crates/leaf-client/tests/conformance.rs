//! The conformance suite's store cases against `HttpStore`, in front of real servers on one
//! SQLite file: every case gets a file of its own, and `another_handle` is a client of a second
//! server on the same file, as a second service would have.

mod common;

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use common::{Cluster, client};
use leaf_core::SegmentStore;
use leaf_testkit::StoreFixture;

struct HttpFixture {
    cluster: Mutex<Cluster>,
    store: Arc<dyn SegmentStore>,
}

impl HttpFixture {
    fn new() -> Self {
        let cluster = Cluster::start(1, &[]);
        let store = store_of(cluster.urls());
        HttpFixture {
            cluster: Mutex::new(cluster),
            store,
        }
    }
}

fn store_of(urls: Vec<String>) -> Arc<dyn SegmentStore> {
    let c = client(urls).build().expect("client");
    Arc::new(c.store().clone())
}

#[async_trait]
impl StoreFixture for HttpFixture {
    async fn store(&self) -> Arc<dyn SegmentStore> {
        self.store.clone()
    }

    async fn another_handle(&self) -> Arc<dyn SegmentStore> {
        let url = self.cluster.lock().unwrap().add(&[]).url();
        store_of(vec![url])
    }
}

leaf_testkit::store_conformance!(
    http,
    async { HttpFixture::new() },
    durable = true,
    multi_process = true,
);
