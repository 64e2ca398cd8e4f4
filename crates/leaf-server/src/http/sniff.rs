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

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// HTTP/2's connection preface.
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The requests in flight on one connection, and since when it has had none.
#[derive(Debug)]
pub(crate) struct Activity(Mutex<(usize, Instant)>);

impl Activity {
    /// A connection that starts now, with no request.
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Activity(Mutex::new((0, Instant::now()))))
    }

    /// A request starts; it ends when the returned guard is dropped (with its answer's body).
    pub(crate) fn begin(self: &Arc<Self>) -> InFlight {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).0 += 1;
        InFlight(Arc::clone(self))
    }

    /// Since when the connection has had no request in flight; `None` while it has one.
    fn idle_since(&self) -> Option<Instant> {
        let (n, since) = *self.0.lock().unwrap_or_else(|p| p.into_inner());
        (n == 0).then_some(since)
    }
}

/// A request in flight; dropping it ends the request.
#[derive(Debug)]
pub(crate) struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut state = self.0.0.lock().unwrap_or_else(|p| p.into_inner());
        state.0 = state.0.saturating_sub(1);
        state.1 = Instant::now();
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
                    None => Instant::now() + self.limit,
                },
            };
            if deadline <= Instant::now() {
                let what = match self.sniffed {
                    Sniffed::Http2 => "had no request",
                    _ => "did not show its protocol",
                };
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "the connection {what} for {} s (server.idle_timeout_s)",
                        self.limit.as_secs()
                    ),
                )));
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
        let mut s = SniffTimeout::new((), Duration::from_secs(1), Activity::new());
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
