//! Maps sqlx's PostgreSQL errors (SQLSTATE codes) to `leaf_core::Error` kinds, and retries the
//! statements a serialization failure or a deadlock rolled back.

use std::future::Future;
use std::time::Duration;

use leaf_core::Error;

/// The backend name in `Error::Backend`.
pub(crate) const BACKEND: &str = "postgres";

// SQLSTATE codes (PostgreSQL's appendix A).
const UNIQUE_VIOLATION: &str = "23505";
const DUPLICATE_TABLE: &str = "42P07";
const DUPLICATE_OBJECT: &str = "42710";
const UNDEFINED_TABLE: &str = "42P01";
const UNDEFINED_COLUMN: &str = "42703";
const NUMERIC_OUT_OF_RANGE: &str = "22003";
const SERIALIZATION_FAILURE: &str = "40001";
const DEADLOCK_DETECTED: &str = "40P01";
const LOCK_NOT_AVAILABLE: &str = "55P03";
const QUERY_CANCELED: &str = "57014";
const INVALID_PASSWORD: &str = "28P01";
const INVALID_AUTHORIZATION: &str = "28000";
const INVALID_CATALOG_NAME: &str = "3D000";
const INSUFFICIENT_PRIVILEGE: &str = "42501";
const TOO_MANY_CONNECTIONS: &str = "53300";
const READ_ONLY_TRANSACTION: &str = "25006";

/// The server's SQLSTATE, if the error came from the server.
pub(crate) fn code(e: &sqlx::Error) -> Option<String> {
    match e {
        sqlx::Error::Database(db) => db.code().map(|c| c.into_owned()),
        _ => None,
    }
}

/// Whether `e` says an object being created exists already: the relation (42P07), its row
/// type or another object of the same name (42710), or a catalog row another transaction
/// inserted first (23505).
pub(crate) fn is_duplicate_object(e: &sqlx::Error) -> bool {
    matches!(
        code(e).as_deref(),
        Some(DUPLICATE_TABLE | DUPLICATE_OBJECT | UNIQUE_VIOLATION)
    )
}

/// The constraint a unique violation broke, if `e` is one.
pub(crate) fn duplicate_of(e: &sqlx::Error) -> Option<String> {
    match e {
        sqlx::Error::Database(db) if db.code().as_deref() == Some(UNIQUE_VIOLATION) => {
            Some(db.constraint().unwrap_or_default().to_owned())
        }
        _ => None,
    }
}

/// Whether running the statement (or transaction) again may succeed at once: a serialization
/// failure or a deadlock, which the server resolved by rolling this one back.
pub(crate) fn is_serialization_failure(e: &sqlx::Error) -> bool {
    matches!(
        code(e).as_deref(),
        Some(SERIALIZATION_FAILURE | DEADLOCK_DETECTED)
    )
}

/// What an sqlx error met at start-up means: as [`map_sqlx`], except that refused credentials
/// or a missing database are `Config` (the operator must fix the URL; start-up stops with it).
pub(crate) fn map_sqlx_at_start(e: sqlx::Error, what: &str, key: &str) -> Error {
    match code(&e).as_deref() {
        Some(
            INVALID_PASSWORD
            | INVALID_AUTHORIZATION
            | INVALID_CATALOG_NAME
            | INSUFFICIENT_PRIVILEGE,
        ) => Error::Config(format!("{key}: the server refused it: {e}")),
        _ => map_sqlx(e, what, key),
    }
}

/// What an sqlx error means to Leaf while serving. `what` names the object for `AlreadyExists`;
/// `key` is the configuration key of the server's URL, for the kinds a configuration change
/// must fix. Messages of retryable kinds are fixed texts (clients may see them); the server's
/// own text goes to the log.
pub(crate) fn map_sqlx(e: sqlx::Error, what: &str, key: &str) -> Error {
    let unavailable = |e: &dyn std::fmt::Display, msg: &str| {
        tracing::warn!(error = %e, "{msg}");
        Error::Unavailable(msg.to_owned())
    };
    if let Some(code) = code(&e) {
        match code.as_str() {
            UNIQUE_VIOLATION => return Error::AlreadyExists(what.to_string()),
            LOCK_NOT_AVAILABLE => {
                return Error::Unavailable(format!(
                    "postgres: lock wait timeout on {what} (another transaction holds the row)"
                ));
            }
            QUERY_CANCELED => {
                return unavailable(&e, "postgres: statement timeout (the server is too slow)");
            }
            SERIALIZATION_FAILURE | DEADLOCK_DETECTED => {
                return Error::Unavailable(format!(
                    "postgres: {what} kept conflicting with concurrent transactions"
                ));
            }
            NUMERIC_OUT_OF_RANGE => {
                return Error::Exhausted(format!(
                    "{what}: max_id would pass the bigint column's end"
                ));
            }
            // Credentials revoked or rotated while serving: an outage to wait out (503), not a
            // client's mistake; start-up reports it as configuration (`map_sqlx_at_start`).
            INVALID_PASSWORD
            | INVALID_AUTHORIZATION
            | INVALID_CATALOG_NAME
            | INSUFFICIENT_PRIVILEGE => {
                return unavailable(
                    &e,
                    "postgres refused the configured credentials or database",
                );
            }
            UNDEFINED_TABLE | UNDEFINED_COLUMN => {
                return Error::Config(format!(
                    "{key}: the database does not have Leaf's tables as expected: {e}"
                ));
            }
            // A hot standby after a fail-over, or a server shutting down (57P01..57P03), out of
            // connections, or a connection exception (class 08): all pass.
            READ_ONLY_TRANSACTION => {
                return unavailable(&e, "postgres is read-only (a standby?)");
            }
            c if c == TOO_MANY_CONNECTIONS || c.starts_with("57P") || c.starts_with("08") => {
                return unavailable(&e, "postgres is shutting down or refuses connections");
            }
            _ => {}
        }
    }
    match e {
        sqlx::Error::Configuration(c) => Error::Config(format!("{key}: {c}")),
        sqlx::Error::Tls(t) => Error::Config(format!("{key}: TLS failed: {t}")),
        sqlx::Error::PoolTimedOut => {
            Error::Unavailable("postgres: no connection available within connect_timeout_ms".into())
        }
        sqlx::Error::Io(io) => unavailable(&io, "postgres cannot be reached"),
        sqlx::Error::PoolClosed | sqlx::Error::WorkerCrashed => {
            unavailable(&e, "postgres connection pool is closed")
        }
        // Protocol and other errors: the next attempt may work, and `Backend` is retryable.
        other => Error::backend(BACKEND, other),
    }
}

/// How often a statement rolled back by a serialization failure or a deadlock is run at most
/// before the caller gets `Unavailable`; the caller's time bound (`timeout_ms`) usually ends
/// the attempts first. A handful is not enough: eight servers allocating one tag at once on a
/// busy machine were seen to lose eight times in a row.
const SERIALIZATION_ATTEMPTS: u32 = 100;

/// The longest pause between two attempts, in milliseconds.
const MAX_PAUSE_MS: u64 = 64;

/// Runs `attempt` until it does not fail with a serialization failure or a deadlock (a
/// database whose `default_transaction_isolation` is `repeatable read` or `serializable`
/// rolls back concurrent allocations of one tag), at most [`SERIALIZATION_ATTEMPTS`] times,
/// with a random pause between attempts, growing up to [`MAX_PAUSE_MS`], so that the
/// contenders spread out (each round, one of them commits). The caller bounds the whole in
/// time.
pub(crate) async fn retry_serialization<T, F, Fut>(mut attempt: F) -> Result<T, sqlx::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, sqlx::Error>>,
{
    let mut tries = 1;
    loop {
        match attempt().await {
            Err(e) if is_serialization_failure(&e) && tries < SERIALIZATION_ATTEMPTS => {
                tries += 1;
                let pause = fastrand::u64(1..=(2u64 << tries.min(6)).min(MAX_PAUSE_MS));
                tokio::time::sleep(Duration::from_millis(pause)).await;
            }
            other => return other,
        }
    }
}

/// Runs `fut`, failing with `Unavailable` if it takes longer than `limit`: a server that stopped
/// answering (paused, partitioned) never hangs a caller.
pub(crate) async fn bounded<T>(
    limit: Duration,
    what: &str,
    fut: impl Future<Output = leaf_core::Result<T>>,
) -> leaf_core::Result<T> {
    leaf_core::bounded("postgres", limit, what, fut).await
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;
    use std::fmt;

    use super::*;

    /// A server error with only its SQLSTATE, as sqlx hands a server's error over.
    #[derive(Debug)]
    struct ServerError(&'static str);

    impl fmt::Display for ServerError {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "the server's own text, SQLSTATE {}", self.0)
        }
    }

    impl std::error::Error for ServerError {}

    impl sqlx::error::DatabaseError for ServerError {
        fn message(&self) -> &str {
            "the server's own text"
        }
        fn code(&self) -> Option<Cow<'_, str>> {
            Some(Cow::Borrowed(self.0))
        }
        fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
            self
        }
        fn kind(&self) -> sqlx::error::ErrorKind {
            sqlx::error::ErrorKind::Other
        }
    }

    fn server(code: &'static str) -> sqlx::Error {
        sqlx::Error::Database(Box::new(ServerError(code)))
    }

    #[test]
    fn server_errors_by_kind_while_serving_and_at_start() {
        type Kind = fn(&Error) -> bool;
        let unavailable: Kind = |e| matches!(e, Error::Unavailable(_));
        let config: Kind = |e| matches!(e, Error::Config(_));
        let check = |code: &'static str, serving: Kind, at_start: Kind| {
            let e = map_sqlx(server(code), "tag t", "url");
            assert!(serving(&e), "{code} while serving: {e:?}");
            if matches!(e, Error::Unavailable(_)) {
                assert!(!e.to_string().contains("own text"), "{code}: {e}");
            }
            let e = map_sqlx_at_start(server(code), "tag t", "url");
            assert!(at_start(&e), "{code} at start: {e:?}");
        };
        for code in ["28P01", "28000", "3D000", "42501"] {
            check(code, unavailable, config);
        }
        for code in [
            "55P03", "57014", "40001", "40P01", "57P01", "57P02", "57P03", "53300", "08006",
            "25006",
        ] {
            check(code, unavailable, unavailable);
        }
        for code in ["42P01", "42703"] {
            check(code, config, config);
        }
        let exists: Kind = |e| matches!(e, Error::AlreadyExists(m) if m == "tag t");
        check("23505", exists, exists);
        let exhausted: Kind = |e| matches!(e, Error::Exhausted(_));
        check("22003", exhausted, exhausted);
        let other: Kind = |e| matches!(e, Error::Backend { .. }) && e.is_retryable();
        check("XX000", other, other);
    }

    #[test]
    fn client_side_errors_by_kind() {
        let check = |e: sqlx::Error, retryable: bool| {
            let e = map_sqlx(e, "tag t", "url");
            assert_eq!(e.is_retryable(), retryable, "{e}");
            e
        };
        let e = check(sqlx::Error::PoolTimedOut, true);
        assert!(matches!(e, Error::Unavailable(_)), "{e}");
        let e = check(
            sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionRefused)),
            true,
        );
        assert!(matches!(e, Error::Unavailable(_)), "{e}");
        let e = check(sqlx::Error::Configuration("bad".into()), false);
        assert!(
            matches!(&e, Error::Config(m) if m.starts_with("url")),
            "{e}"
        );
        let e = check(sqlx::Error::Protocol("garbled".into()), true);
        assert!(
            matches!(
                e,
                Error::Backend {
                    backend: "postgres",
                    ..
                }
            ),
            "{e}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn conflicts_are_retried_a_bounded_number_of_times_and_nothing_else_is() {
        let run = |codes: Vec<&'static str>| async move {
            let mut calls = 0;
            let r = retry_serialization(|| {
                calls += 1;
                let code = codes.get(calls - 1).copied();
                async move {
                    match code {
                        Some(c) => Err(server(c)),
                        None => Ok(calls),
                    }
                }
            })
            .await;
            (r.map_err(|e| code(&e)), calls)
        };
        // A conflict or two, then success.
        assert_eq!(run(vec!["40001", "40P01"]).await, (Ok(3), 3));
        // Another error: at once, as it is.
        assert_eq!(run(vec!["55P03"]).await, (Err(Some("55P03".into())), 1));
        // Conflicts without end: given up after the bound, as the conflict.
        let endless = vec!["40001"; 1000];
        assert_eq!(
            run(endless).await,
            (Err(Some("40001".into())), SERIALIZATION_ATTEMPTS as usize)
        );
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
            matches!(&e, Error::Unavailable(m) if m.contains("50 ms")),
            "{e}"
        );
        let ok = bounded(Duration::from_millis(50), "x", async { Ok(7) }).await;
        assert_eq!(ok.unwrap(), 7);
    }
}
