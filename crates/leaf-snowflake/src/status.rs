//! `SnowflakeStatus`: what the generator reports to health checks and metrics.

/// A snapshot of the generator, from [`Snowflake::status`](crate::Snowflake::status).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SnowflakeStatus {
    /// The registry's workerId mode (`local`, `zk_recycle`, ...).
    pub mode: &'static str,
    /// The worker id in use (or last used, after the lease was lost).
    pub worker_id: u64,
    /// The lease's TTL, where the registry can take the id away (recycling modes, and
    /// `zk_normal` with `fence_on_disconnect`); `None` otherwise.
    pub lease_ttl_ms: Option<u64>,
    /// How long issuing may go on without another successful renewal (the fencing deadline
    /// minus now, 0 once passed), where the lease has a TTL; `None` otherwise.
    pub lease_valid_for_ms: Option<u64>,
    /// Whether IDs can be issued now, and if not why.
    pub state: SnowflakeState,
    /// The last time mark the registry confirmed as durable (Unix ms); no ID carries a later
    /// timestamp.
    pub durable_mark_ms: u64,
    /// The timestamp of the last ID issued, if any.
    pub last_timestamp_ms: Option<u64>,
    /// How far the last issued timestamp is ahead of the wall clock on milliseconds borrowed
    /// ahead of it (`max_borrow`; at most that), 0 when it is not.
    pub lead_ms: u64,
    /// How far the wall clock is behind the latest reading an ID was issued at (a clock step
    /// back; a borrowed lead is not one), 0 when it is not.
    pub clock_behind_ms: u64,
    /// Milliseconds borrowed ahead of the wall clock since start-up: each one is a millisecond
    /// whose sequence was spent and that did not wait for the clock.
    pub borrowed_ms_total: u64,
    /// The lease is held and, in recycling modes, not past its fencing deadline.
    pub lease_valid: bool,
    /// `durable_mark_ms - now`: how far ahead of the wall clock the mark is (negative once the
    /// clock passed it, which stops issuing).
    pub mark_lag_ms: i64,
    /// How often the clock was found behind its reading when the last ID was issued (a clock
    /// step back) since start-up.
    pub clock_backwards_total: u64,
    /// How often the wall clock was found to have jumped forward further than
    /// `max_forward_step` (each jump counted once, however long it lasts).
    pub clock_jumps_total: u64,
    /// The mark the shared registry last confirmed, where it keeps a copy apart from the
    /// durable one (`WorkerIdRegistry::confirmed_mark_ms`, e.g. the `mysql` row); `None`
    /// otherwise. `durable_mark_ms` minus this is how far that copy lags.
    pub registry_mark_ms: Option<u64>,
}

/// Whether the generator can issue IDs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SnowflakeState {
    /// Issuing.
    Ready,
    /// The clock is behind the worker id's previous mark by at most `max_startup_wait`:
    /// `next_id` waits until it has passed.
    WaitingForClock {
        /// How far the clock is behind the previous mark.
        behind_ms: u64,
    },
    /// Not issuing; the reason names the cause (the clock's gap to the previous mark, a time mark
    /// that could not be made durable, the clock before the epoch or past the timestamp field's
    /// end).
    Unavailable {
        /// Why, for logs and the 503 body.
        reason: String,
    },
    /// The wall clock is past the end of the layout's timestamp field: no ID can be issued
    /// again with this layout and epoch.
    Exhausted {
        /// When the field ran out (numbers only; fit for clients).
        reason: String,
    },
    /// The wall clock jumped forward further than `max_forward_step` beyond the monotonic
    /// clock's reckoning: nothing is issued and the mark does not move until it comes back.
    ClockJumped {
        /// How far the wall clock is ahead of the reckoning.
        ahead_ms: u64,
    },
    /// The registry took the worker id away, or the lease was not renewed in time (fencing).
    /// The renewer keeps trying to renew or to acquire a new worker id.
    LeaseLost,
    /// [`shutdown`](crate::Snowflake::shutdown) was called.
    Closed,
}
