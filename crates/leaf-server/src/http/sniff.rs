//! `SniffTimeout`: the first bytes of a connection must arrive within `server.idle_timeout_s`.
//!
//! One listener serves HTTP/1.1 and HTTP/2 (h2c, gRPC): the connection's first bytes tell
//! which, by whether they are HTTP/2's preface (`PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n`). hyper's
//! protocol detection waits for them without a timeout, and its HTTP/1 head timeout starts
//! only after it, so a client that sends nothing, or a few bytes of the preface and then
//! nothing (slowloris), would hold a connection for ever. Until the bytes read decide the
//! protocol (24 bytes, or one that leaves the preface), a read that has waited longer than the
//! limit fails with `TimedOut`, and hyper drops the connection. After that, an HTTP/1
//! connection's reads pass through (hyper's head timeout bounds its idle time); an HTTP/2
//! connection answers keep-alive pings for ever, so it gets the same bound here: once it has had
//! no request in flight for the limit ([`Activity`], kept by the server's service), a read that
//! waits fails with `TimedOut`. A request whose bytes have arrived is always read first.
//!
//! While requests are in flight, an HTTP/2 client can still hold the connection for ever by
//! never opening its flow-control window: hyper then never comes back for the next frame of an
//! answer (a stream of IDs pins the frame it holds). The server's service notes each frame an
//! answer's body gives and each time hyper comes back ([`InFlight::produced`],
//! [`InFlight::taken`]); an answer left unread for `server.write_timeout_s` ends the connection,
//! as a socket that takes no bytes for that long does (`crate::http::write_timeout`).

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// HTTP/2's connection preface.
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The requests in flight on one connection, since when it has had none, and which answers
/// wait for the client to take them.
#[derive(Debug)]
pub(crate) struct Activity {
    state: Mutex<State>,
    /// How long an answer may wait for its client to take it (`server.write_timeout_s`).
    unread_limit: Duration,
}

#[derive(Debug)]
struct State {
    in_flight: usize,
    idle_since: Instant,
    next: u64,
    /// The requests whose answer produced a frame that hyper has not come back for (the
    /// client's flow-control window is shut), by request, since when.
    unread: Vec<(u64, Instant)>,
}

impl Activity {
    /// A connection that starts now, with no request; an answer left unread for
    /// `unread_limit` ends it.
    pub(crate) fn new(unread_limit: Duration) -> Arc<Self> {
        Arc::new(Activity {
            state: Mutex::new(State {
                in_flight: 0,
                idle_since: Instant::now(),
                next: 0,
                unread: Vec::new(),
            }),
            unread_limit,
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A request starts; it ends when the returned guard is dropped (with its answer's body).
    pub(crate) fn begin(self: &Arc<Self>) -> InFlight {
        let mut state = self.state();
        state.in_flight += 1;
        state.next += 1;
        InFlight {
            activity: Arc::clone(self),
            id: state.next,
            waiting: false,
        }
    }

    /// Since when the connection has had no request in flight; `None` while it has one.
    fn idle_since(&self) -> Option<Instant> {
        let state = self.state();
        (state.in_flight == 0).then_some(state.idle_since)
    }

    /// When the answer left unread longest reaches the limit, if one is.
    fn unread_deadline(&self) -> Option<Instant> {
        let state = self.state();
        let oldest = state.unread.iter().map(|&(_, since)| since).min()?;
        Some(oldest + self.unread_limit)
    }
}

/// A request in flight; dropping it ends the request.
#[derive(Debug)]
pub(crate) struct InFlight {
    activity: Arc<Activity>,
    id: u64,
    /// Whether its answer's last frame waits to be taken.
    waiting: bool,
}

impl InFlight {
    /// The answer's body gave hyper a frame: until hyper comes back for the next one, the
    /// frame waits for the client's window.
    pub(crate) fn produced(&mut self) {
        if !self.waiting {
            self.waiting = true;
            let now = Instant::now();
            self.activity.state().unread.push((self.id, now));
        }
    }

    /// hyper came back for the next frame: the last one was taken.
    pub(crate) fn taken(&mut self) {
        if self.waiting {
            self.waiting = false;
            let id = self.id;
            self.activity.state().unread.retain(|&(i, _)| i != id);
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let id = self.id;
        let mut state = self.activity.state();
        state.in_flight = state.in_flight.saturating_sub(1);
        state.idle_since = Instant::now();
        if self.waiting {
            state.unread.retain(|&(i, _)| i != id);
        }
    }
}

/// Where a connection's protocol detection stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sniffed {
    /// This many bytes of the preface matched so far.
    Matching(usize),
    Http1,
    Http2,
}

/// An I/O stream whose first bytes must come within a time limit, and which, as HTTP/2, may
/// stay without a request for no longer than that.
#[derive(Debug)]
pub(crate) struct SniffTimeout<T> {
    inner: T,
    limit: Duration,
    sniffed: Sniffed,
    activity: Arc<Activity>,
    deadline: Pin<Box<Sleep>>,
}

impl<T> SniffTimeout<T> {
    /// `inner`, whose protocol must be decided within `limit` from now; `activity` is what the
    /// connection's service records of its requests.
    pub(crate) fn new(inner: T, limit: Duration, activity: Arc<Activity>) -> Self {
        SniffTimeout {
            inner,
            limit,
            sniffed: Sniffed::Matching(0),
            activity,
            deadline: Box::pin(tokio::time::sleep(limit)),
        }
    }

    /// Notes the bytes read: the protocol is decided once they fill the preface or leave it.
    fn saw(&mut self, bytes: &[u8]) {
        let Sniffed::Matching(matched) = self.sniffed else {
            return;
        };
        let end = (matched + bytes.len()).min(PREFACE.len());
        let n = end - matched;
        self.sniffed = if bytes[..n] != PREFACE[matched..end] {
            Sniffed::Http1
        } else if end == PREFACE.len() {
            Sniffed::Http2
        } else {
            Sniffed::Matching(end)
        };
    }

    /// A read that waits: an error once the connection's time is up, else `Pending` with the
    /// timer armed for the moment it will be.
    fn poll_wait(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            let deadline = match self.sniffed {
                Sniffed::Http1 => return Poll::Pending,
                // The deadline of the start, set when the connection was accepted.
                Sniffed::Matching(_) => self.deadline.deadline(),
                Sniffed::Http2 => match self.activity.idle_since() {
                    Some(since) => since + self.limit,
                    // Requests in flight: an answer left unread ends the connection at its
                    // limit; none, look again within the limits (a frame produced since then
                    // sets no timer of its own).
                    None => self.activity.unread_deadline().unwrap_or_else(|| {
                        Instant::now() + self.limit.min(self.activity.unread_limit)
                    }),
                },
            };
            if deadline <= Instant::now() {
                let why = match self.sniffed {
                    Sniffed::Http2 if self.activity.idle_since().is_none() => format!(
                        "the connection left an answer unread for {} s (server.write_timeout_s)",
                        self.activity.unread_limit.as_secs()
                    ),
                    Sniffed::Http2 => format!(
                        "the connection had no request for {} s (server.idle_timeout_s)",
                        self.limit.as_secs()
                    ),
                    _ => format!(
                        "the connection did not show its protocol for {} s \
                         (server.idle_timeout_s)",
                        self.limit.as_secs()
                    ),
                };
                return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, why)));
            }
            if self.deadline.deadline() != deadline {
                self.deadline.as_mut().reset(deadline);
            }
            if self.deadline.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for SniffTimeout<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let read = &buf.filled()[before..];
                if !read.is_empty() {
                    this.saw(read);
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => this.poll_wait(cx),
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for SniffTimeout<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decided_after(chunks: &[&[u8]]) -> Vec<bool> {
        let mut s = SniffTimeout::new(
            (),
            Duration::from_secs(1),
            Activity::new(Duration::from_secs(1)),
        );
        chunks
            .iter()
            .map(|c| {
                s.saw(c);
                !matches!(s.sniffed, Sniffed::Matching(_))
            })
            .collect()
    }

    #[tokio::test]
    async fn the_protocol_is_decided_by_the_preface_or_a_byte_off_it() {
        assert_eq!(decided_after(&[b"GET / HTTP/1.1\r\n"]), [true]);
        assert_eq!(decided_after(&[b"P", b"O"]), [false, true]);
        assert_eq!(
            decided_after(&[b"PRI * HTTP/2.0\r\n", b"\r\nSM\r\n", b"\r\n"]),
            [false, false, true]
        );
        assert_eq!(decided_after(&[&PREFACE[..], b"more"]), [true, true]);
        assert_eq!(
            decided_after(&[b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\x04"]),
            [true]
        );
    }
}
