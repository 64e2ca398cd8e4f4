//! `SniffTimeout`: the first bytes of a connection must arrive within `server.idle_timeout_s`.
//!
//! One listener serves HTTP/1.1 and HTTP/2 (h2c, gRPC): the connection's first bytes tell
//! which, by whether they are HTTP/2's preface (`PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n`). hyper's
//! protocol detection waits for them without a timeout, and its HTTP/1 head timeout starts
//! only after it, so a client that sends nothing, or a few bytes of the preface and then
//! nothing (slowloris), would hold a connection for ever. Until the bytes read decide the
//! protocol (24 bytes, or one that leaves the preface), a read that has waited longer than the
//! limit fails with `TimedOut`, and hyper drops the connection. After that the reads pass
//! through: HTTP/1's head timeout and HTTP/2's keep-alive pings take over.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// HTTP/2's connection preface.
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// An I/O stream whose first bytes must come within a time limit.
#[derive(Debug)]
pub(crate) struct SniffTimeout<T> {
    inner: T,
    limit: Duration,
    /// How many bytes of the preface were matched; `None` once the protocol is decided.
    matched: Option<usize>,
    deadline: Pin<Box<Sleep>>,
}

impl<T> SniffTimeout<T> {
    /// `inner`, whose protocol must be decided within `limit` from now.
    pub(crate) fn new(inner: T, limit: Duration) -> Self {
        SniffTimeout {
            inner,
            limit,
            matched: Some(0),
            deadline: Box::pin(tokio::time::sleep(limit)),
        }
    }

    /// Notes the bytes read: the protocol is decided once they fill the preface or leave it.
    fn saw(&mut self, bytes: &[u8]) {
        let Some(matched) = self.matched else { return };
        let end = (matched + bytes.len()).min(PREFACE.len());
        let n = end - matched;
        self.matched = if bytes[..n] != PREFACE[matched..end] || end == PREFACE.len() {
            None
        } else {
            Some(end)
        };
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
            Poll::Pending if this.matched.is_some() => match this.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "the connection did not show its protocol within {} s \
                         (server.idle_timeout_s)",
                        this.limit.as_secs()
                    ),
                ))),
                Poll::Pending => Poll::Pending,
            },
            Poll::Pending => Poll::Pending,
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
        let mut s = SniffTimeout {
            inner: (),
            limit: Duration::from_secs(1),
            matched: Some(0),
            deadline: Box::pin(tokio::time::sleep(Duration::ZERO)),
        };
        chunks
            .iter()
            .map(|c| {
                s.saw(c);
                s.matched.is_none()
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
