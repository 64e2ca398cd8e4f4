//! The one error type of every Leaf crate, classified by kind.

use std::error::Error as StdError;

/// A `Result` whose error is [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong, by kind. Backends map their client's errors into these kinds; the server maps
/// the kinds to HTTP status codes and Leaf's result codes.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The named thing (a tag, a row) does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// The caller's input is malformed or out of range.
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// The thing to create exists already.
    #[error("already exists: {0}")]
    AlreadyExists(String),
    /// The service cannot answer now (store down, both segments spent, mark not durable yet).
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// The wall clock is behind its reading when the last ID was issued (snowflake: not the
    /// last timestamp, which may be borrowed ahead of the clock). `waited` tells whether the
    /// generator waited for it first (Leaf's code -1) or the gap was too large to wait (Leaf's
    /// code -3).
    #[error("clock moved backwards by {behind_ms} ms")]
    ClockMovedBackwards {
        /// How far behind that reading the clock is.
        behind_ms: u64,
        /// Whether the generator waited before giving up.
        waited: bool,
    },
    /// The wall clock stepped forward by more than the generator trusts (more than
    /// `max_forward_step` beyond what the monotonic clock counted): nothing is issued, and no
    /// time mark is written, until it comes back within that bound (Leaf's code -3).
    #[error("the wall clock jumped {ahead_ms} ms ahead of the monotonic clock")]
    ClockJumpedForward {
        /// How far the wall clock is ahead of the monotonic clock's reckoning.
        ahead_ms: u64,
    },
    /// The worker id's lease was lost (recycled, expired or fenced); no ID is issued with it.
    #[error("worker id lease lost: {0}")]
    LeaseLost(String),
    /// A finite space ran out: a tag's `max_id` at `i64::MAX`, a layout's timestamp field.
    #[error("exhausted: {0}")]
    Exhausted(String),
    /// The configuration is invalid; the message names the key.
    #[error("configuration error: {0}")]
    Config(String),
    /// A backend's client failed.
    #[error("{backend} error: {source}")]
    Backend {
        /// Which backend (`sqlite`, `mysql`, `zookeeper`, `etcd`, `cache-file`, ...).
        backend: &'static str,
        /// The client's error.
        #[source]
        source: Box<dyn StdError + Send + Sync>,
    },
}

impl Error {
    /// Wraps a backend client's error.
    pub fn backend(
        backend: &'static str,
        source: impl Into<Box<dyn StdError + Send + Sync>>,
    ) -> Self {
        Error::Backend {
            backend,
            source: source.into(),
        }
    }

    /// Whether the same call may succeed later without any change by the caller.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::Unavailable(_)
                | Error::ClockMovedBackwards { .. }
                | Error::ClockJumpedForward { .. }
                | Error::LeaseLost(_)
                | Error::Backend { .. }
        )
    }
}

/// Checks `(field, value, min, max)` for each numeric setting of a configuration: `Config`
/// naming the first field out of its range. Every numeric setting has an upper bound: a huge
/// value is a typo, and a duration added to an `Instant` must not overflow it.
pub fn check_bounds(bounds: &[(&str, u64, u64, u64)]) -> Result<()> {
    for &(field, value, min, max) in bounds {
        if !(min..=max).contains(&value) {
            return Err(Error::Config(format!(
                "{field} must be from {min} to {max}, got {value}"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retryable_kinds() {
        let check = |e: Error, expect: bool| assert_eq!(e.is_retryable(), expect, "{e}");
        check(Error::NotFound("t".into()), false);
        check(Error::InvalidInput("t".into()), false);
        check(Error::AlreadyExists("t".into()), false);
        check(Error::Exhausted("t".into()), false);
        check(Error::Config("t".into()), false);
        check(Error::Unavailable("t".into()), true);
        check(Error::LeaseLost("t".into()), true);
        check(
            Error::ClockMovedBackwards {
                behind_ms: 3,
                waited: true,
            },
            true,
        );
        check(Error::ClockJumpedForward { ahead_ms: 90_000 }, true);
        check(Error::backend("sqlite", "disk i/o error"), true);
    }

    #[test]
    fn messages_are_lowercase_and_name_the_backend() {
        let e = Error::backend("sqlite", "database is locked");
        assert_eq!(e.to_string(), "sqlite error: database is locked");
        let e = Error::ClockMovedBackwards {
            behind_ms: 7,
            waited: false,
        };
        assert_eq!(e.to_string(), "clock moved backwards by 7 ms");
    }

    #[test]
    fn bounds_name_the_first_field_out_of_range() {
        assert!(check_bounds(&[("a", 5, 1, 10), ("b", 0, 0, 0)]).is_ok());
        let e = check_bounds(&[("a", 5, 1, 10), ("b_ms", 11, 1, 10), ("c", 0, 1, 1)])
            .unwrap_err()
            .to_string();
        assert!(e.contains("b_ms must be from 1 to 10, got 11"), "{e}");
    }
}
