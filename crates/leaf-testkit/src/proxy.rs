//! A TCP proxy in front of a test server, for the faults a client meets on a network: every
//! connection cut (a partition, a server that went away), connections held open with nothing
//! forwarded (a stalled server), and a slow link (each answer delayed).

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What the proxy does with connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    /// Forwards both ways.
    Up,
    /// Closes every connection at once and every new one as it arrives.
    Cut,
    /// Keeps connections open and forwards nothing, until the link is up (forwarding resumes)
    /// or cut.
    Stalled,
}

#[derive(Clone, Copy, Debug)]
struct State {
    link: Link,
    /// Added before each chunk the server sends is passed on.
    delay: Duration,
}

/// A proxy to one `host:port`, up until told otherwise; see the module docs. Dropping it stops
/// it.
pub struct Proxy {
    /// `127.0.0.1:{port}`, the address to give the client.
    pub address: String,
    state: watch::Sender<State>,
    task: JoinHandle<()>,
}

impl Proxy {
    /// A proxy, up, to `target` (`host:port`).
    pub async fn start(target: &str) -> Proxy {
        let target = target.to_owned();
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let address = listener.local_addr().expect("proxy address").to_string();
        let (state, rx) = watch::channel(State {
            link: Link::Up,
            delay: Duration::ZERO,
        });
        let task = tokio::spawn(async move {
            loop {
                let Ok((inbound, _)) = listener.accept().await else {
                    continue;
                };
                tokio::spawn(serve(inbound, target.clone(), rx.clone()));
            }
        });
        Proxy {
            address,
            state,
            task,
        }
    }

    /// Sets what the proxy does with connections, open ones included.
    pub fn set_link(&self, link: Link) {
        self.state.send_modify(|s| s.link = link);
    }

    /// Cuts every connection and refuses new ones (`false`), or lets them through (`true`).
    pub fn set_up(&self, up: bool) {
        self.set_link(if up { Link::Up } else { Link::Cut });
    }

    /// Delays each chunk the server sends by `delay` (a slow link); zero by default.
    pub fn set_delay(&self, delay: Duration) {
        self.state.send_modify(|s| s.delay = delay);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One connection, until either side closes it or the link is cut.
async fn serve(inbound: TcpStream, target: String, mut rx: watch::Receiver<State>) {
    let link = rx.borrow().link;
    if link == Link::Cut {
        return; // closed at once
    }
    if link == Link::Stalled && wait_link(&mut rx, |l| l != Link::Stalled).await != Link::Up {
        return;
    }
    let Ok(outbound) = TcpStream::connect(&target).await else {
        return;
    };
    let (client_read, client_write) = inbound.into_split();
    let (server_read, server_write) = outbound.into_split();
    tokio::select! {
        () = pump(client_read, server_write, rx.clone(), false) => {}
        () = pump(server_read, client_write, rx.clone(), true) => {}
        _ = rx.wait_for(|s| s.link == Link::Cut) => {}
    }
}

/// Waits until `done(link)`, and returns the link then (`Cut` if the proxy went away).
async fn wait_link(rx: &mut watch::Receiver<State>, done: impl Fn(Link) -> bool) -> Link {
    match rx.wait_for(|s| done(s.link)).await {
        Ok(s) => s.link,
        Err(_) => Link::Cut,
    }
}

/// Copies `from` to `to` while the link is up, pausing while it is stalled; `delayed` chunks
/// wait the configured delay first.
async fn pump(
    mut from: impl AsyncReadExt + Unpin,
    mut to: impl AsyncWriteExt + Unpin,
    mut rx: watch::Receiver<State>,
    delayed: bool,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let state = *rx.borrow();
        if delayed && !state.delay.is_zero() {
            tokio::time::sleep(state.delay).await;
        }
        if rx.borrow().link == Link::Stalled
            && wait_link(&mut rx, |l| l != Link::Stalled).await != Link::Up
        {
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
