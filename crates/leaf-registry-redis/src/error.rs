//! Maps the redis client's errors to `leaf_core::Error` kinds.

use std::future::Future;
use std::time::Duration;

use leaf_core::Error;
use redis::{ErrorKind, RedisError, ServerErrorKind};

/// The backend name in `Error::Backend` and in timeout messages.
pub(crate) const BACKEND: &str = "redis";

/// Whether `e` means the connection is broken (or unusable) and must be opened again.
pub(crate) fn breaks_connection(e: &RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped() || e.is_timeout() || e.is_unrecoverable_error()
}

/// What a redis error means to Leaf. Messages of retryable kinds are fixed texts (clients may
/// see them); the client's own text goes to the log.
pub(crate) fn map_redis(e: RedisError) -> Error {
    let unavailable = |e: &RedisError, msg: &str| {
        tracing::warn!(error = %e, "{msg}");
        Error::Unavailable(msg.to_owned())
    };
    if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() {
        return unavailable(&e, "redis cannot be reached");
    }
    if e.is_timeout() {
        return unavailable(&e, "redis did not answer in time");
    }
    match e.kind() {
        ErrorKind::Server(
            ServerErrorKind::BusyLoading
            | ServerErrorKind::TryAgain
            | ServerErrorKind::MasterDown
            | ServerErrorKind::ClusterDown,
        ) => unavailable(&e, "redis is loading its data or not serving yet"),
        ErrorKind::Server(ServerErrorKind::ReadOnly) => {
            unavailable(&e, "redis is a read-only replica; writes need the primary")
        }
        // Credentials revoked or rotated while serving: an outage to wait out (503), not a
        // client's mistake. Start-up reports it as configuration (`map_redis_at_start`).
        ErrorKind::AuthenticationFailed | ErrorKind::Server(ServerErrorKind::NoPerm) => {
            unavailable(&e, "redis refused the configured credentials")
        }
        ErrorKind::InvalidClientConfig => Error::Config(format!("url: {e}")),
        // Protocol and other errors: the next attempt may work, and `Backend` is retryable.
        _ => Error::backend(BACKEND, e),
    }
}

/// As [`map_redis`], except that refused credentials or a bad client configuration at the
/// first connection are `Config`: the operator must fix the URL, and start-up stops with it.
pub(crate) fn map_redis_at_start(e: RedisError) -> Error {
    match e.kind() {
        ErrorKind::AuthenticationFailed
        | ErrorKind::Server(ServerErrorKind::NoPerm)
        | ErrorKind::InvalidClientConfig => {
            Error::Config(format!("url: the redis server refused it: {e}"))
        }
        _ => map_redis(e),
    }
}

/// Runs `fut`, failing with `Unavailable` if it takes longer than `limit`: a server that stopped
/// answering (paused, partitioned) never hangs a caller.
pub(crate) async fn bounded<T>(
    limit: Duration,
    what: &str,
    fut: impl Future<Output = leaf_core::Result<T>>,
) -> leaf_core::Result<T> {
    leaf_core::bounded(BACKEND, limit, what, fut).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_side_errors_by_kind() {
        let io: RedisError = std::io::Error::from(std::io::ErrorKind::ConnectionRefused).into();
        assert!(breaks_connection(&io));
        let e = map_redis(io);
        assert!(
            matches!(&e, Error::Unavailable(m) if m == "redis cannot be reached"),
            "{e}"
        );
        assert!(e.is_retryable());

        let bad: RedisError = (ErrorKind::InvalidClientConfig, "bad url").into();
        let e = map_redis(bad.clone());
        assert!(
            matches!(&e, Error::Config(m) if m.starts_with("url")),
            "{e}"
        );
        let e = map_redis_at_start(bad);
        assert!(
            matches!(&e, Error::Config(m) if m.starts_with("url")),
            "{e}"
        );

        let auth: RedisError = (ErrorKind::AuthenticationFailed, "denied").into();
        assert!(matches!(map_redis(auth.clone()), Error::Unavailable(_)));
        assert!(matches!(map_redis_at_start(auth), Error::Config(_)));

        let parse: RedisError = (ErrorKind::Parse, "garbled").into();
        let e = map_redis(parse);
        assert!(
            matches!(
                e,
                Error::Backend {
                    backend: "redis",
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.is_retryable());
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_that_never_ends_is_unavailable() {
        let e = bounded(
            Duration::from_millis(50),
            "an allocation",
            std::future::pending::<leaf_core::Result<()>>(),
        )
        .await
        .unwrap_err();
        assert!(
            matches!(&e, Error::Unavailable(m) if m.contains("50 ms") && m.starts_with("redis")),
            "{e}"
        );
        let ok = bounded(Duration::from_millis(50), "x", async { Ok(7) }).await;
        assert_eq!(ok.unwrap(), 7);
    }
}
