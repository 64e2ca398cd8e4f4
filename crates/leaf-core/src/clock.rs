//! `Clock`: every time source of Leaf, so that tests drive time by hand.

use std::fmt::Debug;
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::Notify;

/// A boxed future, as returned by [`Clock::sleep`] (keeps `Clock` dyn-compatible).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Runs `fut`, failing with `Unavailable` if it takes longer than `limit` (tokio's time): a
/// `backend` that stopped answering (paused, partitioned) never hangs a caller. `what` names
/// the call in the message.
pub async fn bounded<T>(
    backend: &str,
    limit: Duration,
    what: &str,
    fut: impl Future<Output = crate::Result<T>>,
) -> crate::Result<T> {
    match tokio::time::timeout(limit, fut).await {
        Ok(r) => r,
        Err(_) => Err(crate::Error::Unavailable(format!(
            "{backend} did not complete {what} within {} ms",
            limit.as_millis()
        ))),
    }
}

/// A wall clock, a monotonic clock, and a way to wait in that clock's time.
pub trait Clock: Send + Sync + Debug {
    /// Wall-clock time, Unix milliseconds. May jump, forwards or backwards.
    fn now_ms(&self) -> u64;

    /// Monotonic time since an arbitrary fixed origin. Never goes backwards.
    fn monotonic(&self) -> Duration;

    /// Waits `d` of this clock's monotonic time, without blocking a runtime thread.
    fn sleep(&self, d: Duration) -> BoxFuture<'_, ()>;
}

/// The operating system's clocks and tokio's timer.
///
/// The monotonic clock is `CLOCK_BOOTTIME` on Linux: it keeps counting while the machine is
/// suspended, which `Instant` (`CLOCK_MONOTONIC`) does not. Fencing a leased worker id needs
/// that: after a suspend longer than the lease's TTL the id may belong to another node, and a
/// clock that skipped the suspend would still call the lease valid. Elsewhere it is `Instant`.
#[derive(Debug, Clone, Copy)]
pub struct SystemClock {
    origin: Duration,
}

impl SystemClock {
    /// A system clock whose monotonic origin is now.
    pub fn new() -> Self {
        SystemClock { origin: boottime() }
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn boottime() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    // Both fields are non-negative for this clock; `try_from` keeps that an assumption checked.
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn boottime() -> Duration {
    use std::sync::OnceLock;
    use std::time::Instant;
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    ORIGIN.get_or_init(Instant::now).elapsed()
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    #[inline]
    fn now_ms(&self) -> u64 {
        // Before 1970 only on a badly broken machine; 0 then makes every layout refuse to issue.
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    }

    #[inline]
    fn monotonic(&self) -> Duration {
        boottime().saturating_sub(self.origin)
    }

    fn sleep(&self, d: Duration) -> BoxFuture<'_, ()> {
        Box::pin(tokio::time::sleep(d))
    }
}

/// A clock moved only by the test that owns it. Clones share one time.
///
/// By default [`sleep`](Clock::sleep) waits until the test advances the monotonic time far
/// enough; with [`auto_advance`](ManualClock::auto_advance) a sleep advances both clocks itself,
/// which makes every wait instant and deterministic.
#[derive(Debug, Clone)]
pub struct ManualClock {
    inner: Arc<ManualInner>,
}

#[derive(Debug)]
struct ManualInner {
    wall_ms: AtomicU64,
    mono_ns: AtomicU64,
    auto: AtomicBool,
    moved: Notify,
}

impl ManualClock {
    /// A clock whose wall time is `now_ms` and whose monotonic time is zero.
    pub fn new(now_ms: u64) -> Self {
        ManualClock {
            inner: Arc::new(ManualInner {
                wall_ms: AtomicU64::new(now_ms),
                mono_ns: AtomicU64::new(0),
                auto: AtomicBool::new(false),
                moved: Notify::new(),
            }),
        }
    }

    /// Makes every sleep advance the clock by its own duration.
    pub fn auto_advance(self, on: bool) -> Self {
        self.inner.auto.store(on, Ordering::SeqCst);
        self
    }

    /// Moves both clocks forward by `d`.
    pub fn advance(&self, d: Duration) {
        self.inner
            .wall_ms
            .fetch_add(d.as_millis() as u64, Ordering::SeqCst);
        self.inner
            .mono_ns
            .fetch_add(d.as_nanos() as u64, Ordering::SeqCst);
        self.inner.moved.notify_waiters();
    }

    /// Sets the wall clock alone, forwards or backwards (an NTP step, a bad admin).
    pub fn set_ms(&self, now_ms: u64) {
        self.inner.wall_ms.store(now_ms, Ordering::SeqCst);
        self.inner.moved.notify_waiters();
    }

    /// Moves the wall clock alone back by `ms`.
    pub fn back(&self, ms: u64) {
        self.inner.wall_ms.fetch_sub(ms, Ordering::SeqCst);
        self.inner.moved.notify_waiters();
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.inner.wall_ms.load(Ordering::SeqCst)
    }

    fn monotonic(&self) -> Duration {
        Duration::from_nanos(self.inner.mono_ns.load(Ordering::SeqCst))
    }

    fn sleep(&self, d: Duration) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if self.inner.auto.load(Ordering::SeqCst) {
                self.advance(d);
                YieldOnce(false).await;
                return;
            }
            let until = self.monotonic() + d;
            loop {
                let mut moved = pin!(self.inner.moved.notified());
                moved.as_mut().enable();
                if self.monotonic() >= until {
                    return;
                }
                moved.await;
            }
        })
    }
}

/// Returns `Pending` once, so that other tasks run between two auto-advanced sleeps.
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `/proc/uptime` counts from boot including suspend, as `CLOCK_BOOTTIME` does; the
    /// monotonic clock's source must agree with it (`CLOCK_MONOTONIC` would fall behind it by
    /// every suspend the machine went through).
    #[cfg(target_os = "linux")]
    #[test]
    fn monotonic_source_is_boottime() {
        let uptime: f64 = std::fs::read_to_string("/proc/uptime")
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let source = boottime().as_secs_f64();
        assert!(
            (source - uptime).abs() < 1.0,
            "boottime {source} s vs /proc/uptime {uptime} s"
        );
        let clock = SystemClock::new();
        let a = clock.monotonic();
        std::thread::sleep(Duration::from_millis(5));
        assert!(clock.monotonic() >= a + Duration::from_millis(5));
    }

    #[test]
    fn system_clock_is_near_the_os_time() {
        let c = SystemClock::new();
        let os = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        assert!(c.now_ms().abs_diff(os) < 1000);
        let a = c.monotonic();
        assert!(c.monotonic() >= a);
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let c = ManualClock::new(1_000);
        assert_eq!(c.now_ms(), 1_000);
        c.advance(Duration::from_millis(5));
        assert_eq!(c.now_ms(), 1_005);
        assert_eq!(c.monotonic(), Duration::from_millis(5));
        c.back(10);
        assert_eq!(c.now_ms(), 995);
        assert_eq!(
            c.monotonic(),
            Duration::from_millis(5),
            "wall jumps leave monotonic alone"
        );
        c.set_ms(2_000);
        assert_eq!(c.clone().now_ms(), 2_000, "clones share the time");
    }

    #[tokio::test]
    async fn manual_sleep_waits_for_the_test_to_advance() {
        let c = ManualClock::new(0);
        let sleeper = {
            let c = c.clone();
            tokio::spawn(async move { c.sleep(Duration::from_millis(10)).await })
        };
        tokio::task::yield_now().await;
        c.advance(Duration::from_millis(4));
        tokio::task::yield_now().await;
        assert!(!sleeper.is_finished());
        c.advance(Duration::from_millis(6));
        tokio::time::timeout(Duration::from_secs(5), sleeper)
            .await
            .expect("sleep ends once the clock has moved 10 ms")
            .unwrap();
    }

    #[tokio::test]
    async fn auto_advance_sleep_moves_the_clock() {
        let c = ManualClock::new(100).auto_advance(true);
        c.sleep(Duration::from_millis(7)).await;
        assert_eq!(c.now_ms(), 107);
        assert_eq!(c.monotonic(), Duration::from_millis(7));
    }
}
