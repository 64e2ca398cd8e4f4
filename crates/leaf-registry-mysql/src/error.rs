//! Maps sqlx's MySQL errors to `leaf_core::Error` kinds.

use std::future::Future;
use std::time::Duration;

use leaf_core::Error;
use sqlx::mysql::MySqlDatabaseError;

/// The backend name in `Error::Backend`.
pub(crate) const BACKEND: &str = "mysql";

// MySQL and MariaDB server error numbers.
const ER_DUP_ENTRY: u16 = 1062;
const ER_LOCK_WAIT_TIMEOUT: u16 = 1205;
const ER_LOCK_DEADLOCK: u16 = 1213;
const ER_DATA_OUT_OF_RANGE: u16 = 1690;
const ER_ACCESS_DENIED: u16 = 1045;
const ER_DBACCESS_DENIED: u16 = 1044;
const ER_BAD_DB: u16 = 1049;
const ER_NO_SUCH_TABLE: u16 = 1146;
const ER_BAD_FIELD: u16 = 1054;
const ER_TABLE_EXISTS: u16 = 1050;
const ER_SERVER_SHUTDOWN: u16 = 1053;
const ER_CON_COUNT: u16 = 1040;
const ER_QUERY_INTERRUPTED: u16 = 1317;

/// The server's error number, if the error came from the server.
pub(crate) fn number(e: &sqlx::Error) -> Option<u16> {
    match e {
        sqlx::Error::Database(db) => db
            .try_downcast_ref::<MySqlDatabaseError>()
            .map(MySqlDatabaseError::number),
        _ => None,
    }
}

/// Whether `e` says the table exists already (another process created it first).
pub(crate) fn is_table_exists(e: &sqlx::Error) -> bool {
    number(e) == Some(ER_TABLE_EXISTS)
}

/// Whether `e` is a duplicate key.
pub(crate) fn is_duplicate(e: &sqlx::Error) -> bool {
    number(e) == Some(ER_DUP_ENTRY)
}

/// What an sqlx error met at start-up means: as [`map_sqlx`], except that refused credentials
/// or an unknown database are `Config` (the operator must fix the URL; start-up stops with it).
pub(crate) fn map_sqlx_at_start(e: sqlx::Error, what: &str, key: &str) -> Error {
    match number(&e) {
        Some(ER_ACCESS_DENIED | ER_DBACCESS_DENIED | ER_BAD_DB) => {
            Error::Config(format!("{key}: the server refused it: {e}"))
        }
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
    match number(&e) {
        Some(ER_DUP_ENTRY) => return Error::AlreadyExists(what.to_string()),
        Some(ER_LOCK_WAIT_TIMEOUT) => {
            return Error::Unavailable(format!(
                "mysql: lock wait timeout on {what} (another transaction holds the row)"
            ));
        }
        Some(ER_LOCK_DEADLOCK) => {
            return Error::Unavailable(format!("mysql: deadlock on {what}, rolled back"));
        }
        Some(ER_DATA_OUT_OF_RANGE) => {
            return Error::Exhausted(format!("{what}: max_id would pass the bigint column's end"));
        }
        Some(ER_SERVER_SHUTDOWN | ER_CON_COUNT | ER_QUERY_INTERRUPTED) => {
            return unavailable(&e, "mysql is shutting down or refuses connections");
        }
        // Credentials revoked or rotated while serving: an outage to wait out (503), not a
        // client's mistake; start-up reports it as configuration (`map_sqlx_at_start`).
        Some(ER_ACCESS_DENIED | ER_DBACCESS_DENIED | ER_BAD_DB) => {
            return unavailable(&e, "mysql refused the configured credentials or database");
        }
        Some(ER_NO_SUCH_TABLE | ER_BAD_FIELD) => {
            return Error::Config(format!(
                "{key}: the database does not have Leaf's tables as expected: {e}"
            ));
        }
        _ => {}
    }
    match e {
        sqlx::Error::Configuration(c) => Error::Config(format!("{key}: {c}")),
        sqlx::Error::Tls(t) => Error::Config(format!("{key}: TLS failed: {t}")),
        sqlx::Error::PoolTimedOut => {
            Error::Unavailable("mysql: no connection available within connect_timeout_ms".into())
        }
        sqlx::Error::Io(io) => unavailable(&io, "mysql cannot be reached"),
        sqlx::Error::PoolClosed | sqlx::Error::WorkerCrashed => {
            unavailable(&e, "mysql connection pool is closed")
        }
        // Protocol and other errors: the next attempt may work, and `Backend` is retryable.
        other => Error::backend(BACKEND, other),
    }
}

/// Runs `fut`, failing with `Unavailable` if it takes longer than `limit`: a server that stopped
/// answering (paused, partitioned) never hangs a caller.
pub(crate) async fn bounded<T>(
    limit: Duration,
    what: &str,
    fut: impl Future<Output = leaf_core::Result<T>>,
) -> leaf_core::Result<T> {
    leaf_core::bounded("mysql", limit, what, fut).await
}

#[cfg(test)]
mod tests {
    use super::*;

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
                    backend: "mysql",
                    ..
                }
            ),
            "{e}"
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
