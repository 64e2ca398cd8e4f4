//! Clients and servers together on one SQLite file, IDs taken from the clients' memory: a server
//! killed mid-run is failed over without one error, IDs from every client and server never
//! collide, and with every server down the buffers last, then `Unavailable`, then recovery.

mod common;

use common::Cluster;
use common::scenarios::{self, PATIENT_SERVERS};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_mid_run_is_failed_over_without_an_error_and_no_id_repeats() {
    scenarios::killed_mid_run(Cluster::start(2, PATIENT_SERVERS)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_clients_of_many_servers_never_collide() {
    scenarios::many_clients(Cluster::start(3, PATIENT_SERVERS)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_every_server_down_the_buffers_last_then_unavailable_then_recovery() {
    scenarios::every_server_down(Cluster::start(2, &[])).await;
}
