//! Docker housekeeping: the names of the networks made here, and the removal of the containers
//! and networks that test processes of this host left behind when they ended.

use std::collections::HashMap;

use testcontainers::bollard::query_parameters::{
    ListContainersOptions, ListNetworksOptions, RemoveContainerOptions,
};
use tokio::sync::OnceCell;

use super::{LABEL_HOST, LABEL_PID, hostname};

/// Removes, once per process, the containers of this host's test processes that have ended.
pub(super) async fn reap_once() {
    static REAPED: OnceCell<()> = OnceCell::const_new();
    REAPED
        .get_or_init(|| async {
            let Ok(docker) = testcontainers::core::client::docker_client_instance().await else {
                return;
            };
            let filters = HashMap::from([("label".to_string(), vec![LABEL_PID.to_string()])]);
            let Ok(list) = docker
                .list_containers(Some(ListContainersOptions {
                    all: true,
                    filters: Some(filters),
                    ..Default::default()
                }))
                .await
            else {
                return;
            };
            let host = hostname();
            for c in list {
                let labels = c.labels.unwrap_or_default();
                let owner_gone = labels.get(LABEL_HOST) == Some(&host)
                    && labels
                        .get(LABEL_PID)
                        .is_some_and(|pid| !std::path::Path::new("/proc").join(pid).exists());
                if let (true, Some(id)) = (owner_gone, c.id) {
                    let _ = docker
                        .remove_container(
                            &id,
                            Some(RemoveContainerOptions {
                                force: true,
                                v: true,
                                ..Default::default()
                            }),
                        )
                        .await;
                }
            }
            // The networks of ensembles whose process has ended (testcontainers removes one
            // with its last container, unless the process died first). Docker refuses to
            // remove a network that a container still uses.
            let filters = HashMap::from([("name".to_string(), vec![NETWORK_PREFIX.to_string()])]);
            let Ok(networks) = docker
                .list_networks(Some(ListNetworksOptions {
                    filters: Some(filters),
                }))
                .await
            else {
                return;
            };
            for name in networks.into_iter().filter_map(|n| n.name) {
                if network_pid(&name).is_some_and(|pid| {
                    !std::path::Path::new("/proc").join(pid.to_string()).exists()
                }) {
                    let _ = docker.remove_network(&name).await;
                }
            }
        })
        .await;
}

/// How the names of the Docker networks created here begin.
const NETWORK_PREFIX: &str = "leaftest-net-";

/// A name for a new Docker network of this process (`leaftest-net-PID-RANDOM`).
pub(crate) fn network_name() -> String {
    format!(
        "{NETWORK_PREFIX}{}-{:08x}",
        std::process::id(),
        fastrand::u32(..)
    )
}

/// The process id in a network name made by [`network_name`].
fn network_pid(name: &str) -> Option<u32> {
    name.strip_prefix(NETWORK_PREFIX)?
        .split('-')
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_names_carry_the_process_id() {
        let name = network_name();
        assert_eq!(network_pid(&name), Some(std::process::id()), "{name}");
        assert_eq!(network_pid("leaftest-net-x-1"), None);
        assert_eq!(network_pid("bridge"), None);
    }
}
