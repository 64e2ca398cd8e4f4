//! Containers of a test's own ([`Dedicated`]): on a fixed loopback port, so that a test may stop,
//! kill, pause and start its server again at one address.

use std::fmt;
use std::time::Duration;

use testcontainers::{ContainerAsync, GenericImage};

use super::{
    Endpoint, PROBE_TIMEOUT, ProvisionError, ServerKind, docker, free_port, image_of,
    launch_container, launch_container_cmd, on_runtime, probe_until_ready, runtime,
};

/// A container of one's own, published on a fixed loopback port so that it keeps its address
/// across [`stop`](Dedicated::stop) and [`start`](Dedicated::start). Always a container, even
/// with the URL variable set: a test that stops a server must own it.
pub async fn dedicated(kind: &'static ServerKind) -> Result<Dedicated, ProvisionError> {
    let d = Dedicated::launch(kind, Launch::default()).await?;
    d.wait_ready().await?;
    Ok(d)
}

/// As [`dedicated`], with `args` as the container's command: passed on to the server by the
/// testbed images' entrypoints, as by the official images' (`--wsrep-on=ON` to `mariadbd`).
pub async fn dedicated_with(
    kind: &'static ServerKind,
    args: &[&str],
) -> Result<Dedicated, ProvisionError> {
    dedicated_with_files(kind, args, Vec::new(), Vec::new()).await
}

/// As [`dedicated_with`], with `files` (a path in the container, its mode, its bytes) copied
/// into the container before it starts, and `env` beyond the kind's variables: a secured
/// server's certificates and settings.
pub async fn dedicated_with_files(
    kind: &'static ServerKind,
    args: &[&str],
    files: Vec<(String, u32, Vec<u8>)>,
    env: Vec<(String, String)>,
) -> Result<Dedicated, ProvisionError> {
    let cmd = args.iter().map(|a| a.to_string()).collect();
    let launch = Launch {
        host_port: Some(free_port()?),
        files,
        env,
        ..Launch::default()
    };
    let (container, endpoint) = on_runtime(launch_container_cmd(kind, launch, cmd)).await?;
    let d = Dedicated {
        kind,
        endpoint,
        container: Some(container),
    };
    d.wait_ready().await?;
    Ok(d)
}

/// How one container departs from its kind's defaults.
#[derive(Clone, Debug, Default)]
pub(crate) struct Launch {
    /// The loopback port its server is published on (an ephemeral one when `None`).
    pub(crate) host_port: Option<u16>,
    /// A Docker network of its own to join (testcontainers creates it on first use and removes
    /// it with its last container).
    pub(crate) network: Option<String>,
    /// The container's name, by which the other containers of its network reach it.
    pub(crate) name: Option<String>,
    /// Variables beyond the kind's.
    pub(crate) env: Vec<(String, String)>,
    /// Files copied into the container before it starts: its path, its mode and its bytes
    /// (the certificates of a secured server).
    pub(crate) files: Vec<(String, u32, Vec<u8>)>,
}

/// A container owned by one test; removed by [`remove`](Dedicated::remove), or in the
/// background when dropped.
pub struct Dedicated {
    pub(super) kind: &'static ServerKind,
    pub(super) endpoint: Endpoint,
    pub(super) container: Option<ContainerAsync<GenericImage>>,
}

impl fmt::Debug for Dedicated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dedicated")
            .field("kind", &self.kind.name)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl Dedicated {
    /// Starts the container on a fixed loopback port (the one of `launch`, else a free one)
    /// without waiting for more than its readiness line: the members of an ensemble answer
    /// only once enough of them run.
    pub(crate) async fn launch(
        kind: &'static ServerKind,
        mut launch: Launch,
    ) -> Result<Dedicated, ProvisionError> {
        if launch.host_port.is_none() {
            launch.host_port = Some(free_port()?);
        }
        let (container, endpoint) = on_runtime(launch_container(kind, launch)).await?;
        Ok(Dedicated {
            kind,
            endpoint,
            container: Some(container),
        })
    }

    /// Waits until the server answers.
    pub(crate) async fn wait_ready(&self) -> Result<(), ProvisionError> {
        probe_until_ready(self.kind, &self.endpoint, PROBE_TIMEOUT)
            .await
            .map_err(|e| {
                ProvisionError(format!(
                    "{} in {} does not answer: {e}",
                    self.kind.name,
                    image_of(self.kind)
                ))
            })
    }

    /// Where the server answers (the same before and after a restart).
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    fn container(&self) -> Result<&ContainerAsync<GenericImage>, ProvisionError> {
        self.container
            .as_ref()
            .ok_or_else(|| ProvisionError("the container was removed".into()))
    }

    /// Stops the server (SIGTERM, then SIGKILL after `grace`).
    pub async fn stop(&self, grace: Duration) -> Result<(), ProvisionError> {
        let id = self.container()?.id().to_string();
        let secs = i32::try_from(grace.as_secs()).unwrap_or(i32::MAX);
        on_runtime(async move {
            let docker = testcontainers::core::client::docker_client_instance()
                .await
                .map_err(|e| ProvisionError(format!("docker: {e}")))?;
            docker
                .stop_container(
                    &id,
                    Some(
                        testcontainers::bollard::query_parameters::StopContainerOptions {
                            t: Some(secs),
                            signal: None,
                        },
                    ),
                )
                .await
                .map_err(|e| ProvisionError(format!("cannot stop container {id}: {e}")))
        })
        .await
    }

    /// Kills the container's process with SIGKILL, as `docker kill` does (no shutdown), and
    /// waits until it has stopped; [`start`](Self::start) brings it back on its filesystem and
    /// volumes.
    pub async fn kill(&self) -> Result<(), ProvisionError> {
        let id = self.container()?.id().to_string();
        on_runtime(async move {
            let docker = docker().await?;
            docker
                .kill_container(
                    &id,
                    Some(
                        testcontainers::bollard::query_parameters::KillContainerOptions {
                            signal: "SIGKILL".into(),
                        },
                    ),
                )
                .await
                .map_err(|e| ProvisionError(format!("cannot kill container {id}: {e}")))?;
            // `docker kill` returns before the container has stopped; `start` needs it stopped.
            for _ in 0..100 {
                let info = docker
                    .inspect_container(&id, None)
                    .await
                    .map_err(|e| ProvisionError(format!("cannot inspect container {id}: {e}")))?;
                if !info.state.and_then(|s| s.running).unwrap_or(false) {
                    return Ok(());
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(ProvisionError(format!(
                "container {id} still runs after SIGKILL"
            )))
        })
        .await
    }

    /// Runs `cmd` in the container (`docker exec`, as its default user: root in the test
    /// images) and waits for it to end; fails, with its output, unless it exits 0.
    pub async fn exec(&self, cmd: &[&str]) -> Result<(), ProvisionError> {
        let id = self.container()?.id().to_string();
        let args: Vec<String> = ["exec", id.as_str()]
            .iter()
            .chain(cmd)
            .map(|a| a.to_string())
            .collect();
        let shown = cmd.join(" ");
        let out = tokio::task::spawn_blocking(move || {
            std::process::Command::new("docker").args(&args).output()
        })
        .await
        .map_err(|e| ProvisionError(format!("{shown:?}: {e}")))?
        .map_err(|e| ProvisionError(format!("cannot run docker exec {shown:?}: {e}")))?;
        if out.status.success() {
            return Ok(());
        }
        Err(ProvisionError(format!(
            "{shown:?} in container {id}: {}: {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )))
    }

    /// Freezes every process of the container, as `docker pause` does (an orchestrator's
    /// frozen node: no signal, no chance to react); [`unpause`](Self::unpause) thaws it.
    pub async fn pause(&self) -> Result<(), ProvisionError> {
        let id = self.container()?.id().to_string();
        on_runtime(async move {
            docker()
                .await?
                .pause_container(&id)
                .await
                .map_err(|e| ProvisionError(format!("cannot pause container {id}: {e}")))
        })
        .await
    }

    /// Thaws a paused container.
    pub async fn unpause(&self) -> Result<(), ProvisionError> {
        let id = self.container()?.id().to_string();
        on_runtime(async move {
            docker()
                .await?
                .unpause_container(&id)
                .await
                .map_err(|e| ProvisionError(format!("cannot unpause container {id}: {e}")))
        })
        .await
    }

    /// Starts the stopped server again and waits until it answers.
    pub async fn start(&self) -> Result<(), ProvisionError> {
        let id = self.container()?.id().to_string();
        on_runtime(async move {
            let docker = testcontainers::core::client::docker_client_instance()
                .await
                .map_err(|e| ProvisionError(format!("docker: {e}")))?;
            docker
                .start_container(&id, None)
                .await
                .map_err(|e| ProvisionError(format!("cannot start container {id}: {e}")))
        })
        .await?;
        probe_until_ready(self.kind, &self.endpoint, PROBE_TIMEOUT)
            .await
            .map_err(|e| ProvisionError(format!("{} did not come back: {e}", self.kind.name)))
    }

    /// Removes the container and waits until it is gone.
    pub async fn remove(mut self) -> Result<(), ProvisionError> {
        match self.container.take() {
            Some(c) => {
                on_runtime(async move {
                    c.rm()
                        .await
                        .map_err(|e| ProvisionError(format!("cannot remove the container: {e}")))
                })
                .await
            }
            None => Ok(()),
        }
    }
}

impl Drop for Dedicated {
    fn drop(&mut self) {
        if let Some(c) = self.container.take() {
            runtime().spawn(async move {
                let _ = c.rm().await;
            });
        }
    }
}
