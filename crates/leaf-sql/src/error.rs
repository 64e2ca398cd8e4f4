//! sqlx's errors as `leaf_core::Error` kinds: a dialect classifies its server's codes
//! ([`ServerError`]), the rest is the same for every SQL backend. Also the retry of a
//! statement a serialization failure rolled back.

use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

use leaf_core::{Error, Result};

use crate::Dialect;

/// What a server's error means, as [`Dialect::classify`] tells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerError {
    /// A unique key is taken: `AlreadyExists`.
    Duplicate,
    /// A row lock was not granted in time.
    LockWait,
    /// A deadlock rolled the transaction back (not run again).
    Deadlock,
    /// A serialization failure or a deadlock rolled the statement back: [`retry_conflicts`]
    /// runs it again.
    Conflict,
    /// The server's statement timeout cancelled the statement.
    StatementTimeout,
    /// A number would pass its column's end: `Exhausted`.
    OutOfRange,
    /// The credentials, the role or the database refused: `Config` at start-up, an outage
    /// while serving.
    Refused,
    /// A table or a column of Leaf's is missing: `Config`.
    NoTable,
    /// A read-only server (a standby).
    ReadOnly,
    /// A server shutting down, out of connections, or a lost connection.
    Down,
}

/// What an sqlx error met at start-up means: as [`map_sqlx`], except that refused credentials
/// or an unknown database are `Config` (the operator must fix the URL; start-up stops with it).
pub fn map_sqlx_at_start<D: Dialect>(e: sqlx::Error, what: &str, key: &str) -> Error {
    // A certificate the client refused (or the server refused ours): the configuration must
    // change. While serving, the same is an outage to report and wait out (503).
    if let sqlx::Error::Io(io) = &e
        && is_certificate_refusal(io)
    {
        return tls_failed(key, io);
    }
    match D::classify(&e) {
        Some(ServerError::Refused) => Error::Config(format!("{key}: the server refused it: {e}")),
        class => map(D::NAME, class, e, what, key),
    }
}

/// What an sqlx error means to Leaf while serving. `what` names the object for `AlreadyExists`;
/// `key` is the configuration key of the server's URL, for the kinds a configuration change
/// must fix. Messages of retryable kinds are fixed texts (clients may see them); the server's
/// own text goes to the log.
pub fn map_sqlx<D: Dialect>(e: sqlx::Error, what: &str, key: &str) -> Error {
    map(D::NAME, D::classify(&e), e, what, key)
}

fn map(
    name: &'static str,
    class: Option<ServerError>,
    e: sqlx::Error,
    what: &str,
    key: &str,
) -> Error {
    let msg = match class {
        Some(ServerError::Duplicate) => return Error::AlreadyExists(what.to_string()),
        Some(ServerError::LockWait) => {
            return Error::Unavailable(format!(
                "{name}: lock wait timeout on {what} (another transaction holds the row)"
            ));
        }
        Some(ServerError::Deadlock) => {
            return Error::Unavailable(format!("{name}: deadlock on {what}, rolled back"));
        }
        Some(ServerError::Conflict) => {
            return Error::Unavailable(format!(
                "{name}: {what} kept conflicting with concurrent transactions"
            ));
        }
        Some(ServerError::OutOfRange) => {
            return Error::Exhausted(format!("{what}: max_id would pass the bigint column's end"));
        }
        Some(ServerError::NoTable) => {
            return Error::Config(format!(
                "{key}: the database does not have Leaf's tables as expected: {e}"
            ));
        }
        Some(ServerError::StatementTimeout) => {
            format!("{name}: statement timeout (the server is too slow)")
        }
        // Credentials revoked or rotated while serving: an outage to wait out (503), not a
        // client's mistake; start-up reports it as configuration (`map_sqlx_at_start`).
        Some(ServerError::Refused) => {
            format!("{name} refused the configured credentials or database")
        }
        Some(ServerError::ReadOnly) => format!("{name} is read-only (a standby?)"),
        Some(ServerError::Down) => format!("{name} is shutting down or refuses connections"),
        None => return map_client(name, e, key),
    };
    unavailable(&e, msg)
}

/// The errors the client tells apart, whatever the server.
fn map_client(name: &'static str, e: sqlx::Error, key: &str) -> Error {
    match e {
        sqlx::Error::Configuration(c) => Error::Config(format!("{key}: {c}")),
        sqlx::Error::Tls(t) => tls_failed(key, &t),
        sqlx::Error::PoolTimedOut => Error::Unavailable(format!(
            "{name}: no connection available within connect_timeout_ms"
        )),
        sqlx::Error::Io(io) => unavailable(&io, format!("{name} cannot be reached")),
        sqlx::Error::PoolClosed | sqlx::Error::WorkerCrashed => {
            unavailable(&e, format!("{name} connection pool is closed"))
        }
        // Protocol and other errors: the next attempt may work, and `Backend` is retryable.
        other => Error::backend(name, other),
    }
}

/// Whether an I/O error is a certificate refused in the TLS handshake (sqlx hands rustls's
/// error over inside an I/O error): the server's certificate not signed by `ca_file` or not
/// for the URL's host, or the server refusing ours. Other TLS errors are not the
/// configuration's.
fn is_certificate_refusal(io: &std::io::Error) -> bool {
    io.get_ref()
        .and_then(|i| i.downcast_ref::<rustls::Error>())
        .is_some_and(|tls| leaf_core::tls_certificate_refused(&tls.to_string()))
}

/// `Config` naming the keys to check after a failed TLS handshake.
fn tls_failed(key: &str, e: &dyn Display) -> Error {
    Error::Config(format!(
        "{key}: TLS with the server failed (check ssl_mode, ca_file, cert_file, key_file and the \
         host name in {key}): {e}"
    ))
}

/// `Unavailable` with the fixed text `msg`; the error itself goes to the log.
fn unavailable(e: &dyn Display, msg: String) -> Error {
    tracing::warn!(error = %e, "{msg}");
    Error::Unavailable(msg)
}

/// A worker id read from `leaf_workerid_alloc`: a negative one (written by hand) is refused.
pub fn worker_id_of<D: Dialect>(id: i64, ip_port: &str) -> Result<u64> {
    u64::try_from(id).map_err(|_| {
        Error::Config(format!(
            "{} workerId mode: leaf_workerid_alloc gives {ip_port} the id {id}; worker ids are \
             not negative",
            D::NAME
        ))
    })
}

/// How often a statement rolled back by a serialization failure or a deadlock is run at most
/// before the caller gets `Unavailable`; the caller's time bound (`timeout_ms`) usually ends
/// the attempts first. A handful is not enough: eight servers allocating one tag at once on a
/// busy machine were seen to lose eight times in a row.
pub const CONFLICT_ATTEMPTS: u32 = 100;

/// The longest pause between two attempts, in milliseconds.
const MAX_PAUSE_MS: u64 = 64;

/// Runs `attempt` until it does not fail with a [`ServerError::Conflict`] (a database whose
/// `default_transaction_isolation` is `repeatable read` or `serializable` rolls back
/// concurrent allocations of one tag), at most [`CONFLICT_ATTEMPTS`] times, with a random pause
/// between attempts, growing up to 64 ms, so that the contenders spread out (each round, one of
/// them commits). The caller bounds the whole in time.
pub async fn retry_conflicts<D, T, F, Fut>(mut attempt: F) -> Result<T, sqlx::Error>
where
    D: Dialect,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, sqlx::Error>>,
{
    let mut tries = 1;
    loop {
        match attempt().await {
            Err(e)
                if D::classify(&e) == Some(ServerError::Conflict) && tries < CONFLICT_ATTEMPTS =>
            {
                tries += 1;
                let pause = fastrand::u64(1..=(2u64 << tries.min(6)).min(MAX_PAUSE_MS));
                tokio::time::sleep(Duration::from_millis(pause)).await;
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_side_errors_by_kind() {
        for name in ["mysql", "postgres"] {
            let check = |e: sqlx::Error, retryable: bool| {
                let e = map(name, None, e, "tag t", "url");
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
                matches!(e, Error::Backend { backend, .. } if backend == name),
                "{e}"
            );
        }
    }

    /// Every call of the store and the registry is bounded so (`leaf_core::bounded` with the
    /// dialect's name).
    #[tokio::test(start_paused = true)]
    async fn a_call_that_never_ends_is_unavailable() {
        for name in ["mysql", "postgres"] {
            let limit = Duration::from_millis(50);
            let pending = std::future::pending::<Result<()>>();
            let e = leaf_core::bounded(name, limit, "an allocation", pending)
                .await
                .unwrap_err();
            assert!(
                matches!(&e, Error::Unavailable(m) if m.contains("50 ms")),
                "{e}"
            );
            let ok = leaf_core::bounded(name, limit, "x", async { Ok(7) }).await;
            assert_eq!(ok.unwrap(), 7);
        }
    }
}
