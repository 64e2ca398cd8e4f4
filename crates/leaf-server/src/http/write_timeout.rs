//! `WriteTimeout`: a connection whose writes make no progress for `server.write_timeout_s` fails
//! with `TimedOut`, so that hyper drops it. hyper's own timeouts cover reading a request head
//! only; a client that pipelines requests and never reads the responses would otherwise hold
//! its connection, its buffers and a response forever.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// An I/O stream whose write side times out when it stalls. Reads pass through unchanged.
#[derive(Debug)]
pub(crate) struct WriteTimeout<T> {
    inner: T,
    timeout: Duration,
    /// Armed when a write or flush returns `Pending`; disarmed by any progress.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<T> WriteTimeout<T> {
    /// `inner` whose writes may stall for at most `timeout`.
    pub(crate) fn new(inner: T, timeout: Duration) -> Self {
        WriteTimeout {
            inner,
            timeout,
            stalled: None,
        }
    }

    /// The outcome of one write-side poll: progress disarms the timer, a stall arms it (once),
    /// and a stall that outlives it is an error.
    fn watch<R>(&mut self, cx: &mut Context<'_>, poll: Poll<io::Result<R>>) -> Poll<io::Result<R>> {
        if poll.is_ready() {
            self.stalled = None;
            return poll;
        }
        let timeout = self.timeout;
        let sleep = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        ready!(sleep.as_mut().poll(cx));
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "the peer took no response bytes for {} s (server.write_timeout_s)",
                timeout.as_secs()
            ),
        )))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for WriteTimeout<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WriteTimeout<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.watch(cx, poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.watch(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_flush(cx);
        self.watch(cx, poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.watch(cx, poll)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test(start_paused = true)]
    async fn a_stalled_write_times_out_and_progress_resets_the_timer() {
        // A pipe with 16 bytes of room whose far end reads only when told to.
        let (near, mut far) = tokio::io::duplex(16);
        let mut w = WriteTimeout::new(near, Duration::from_secs(5));
        w.write_all(&[0; 16]).await.unwrap();
        // Full: the next write stalls. 4 s in, some bytes are taken; the stall then starts over.
        let reader = async {
            tokio::time::sleep(Duration::from_secs(4)).await;
            let mut buf = [0u8; 8];
            tokio::io::AsyncReadExt::read_exact(&mut far, &mut buf)
                .await
                .unwrap();
            far
        };
        let start = tokio::time::Instant::now();
        let (wrote, far) = tokio::join!(w.write_all(&[1; 8]), reader);
        wrote.unwrap();
        assert_eq!(start.elapsed(), Duration::from_secs(4));
        // Full again, and nobody reads: the write fails once the timeout has passed.
        let start = tokio::time::Instant::now();
        let e = w.write_all(&[2; 8]).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert_eq!(start.elapsed(), Duration::from_secs(5));
        drop(far);
    }
}
