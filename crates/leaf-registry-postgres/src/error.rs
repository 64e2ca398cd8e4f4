//! What PostgreSQL's server errors (SQLSTATE codes) mean (`leaf_sql::ServerError`); the
//! mapping to `leaf_core::Error` kinds, and the retry of what a serialization failure or a
//! deadlock rolled back, are `leaf_sql`'s.

use leaf_sql::ServerError;

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
fn code(e: &sqlx::Error) -> Option<String> {
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

/// What the server's error `e` means, by its SQLSTATE. A serialization failure or a deadlock
/// (a database defaulting to `repeatable read` or `serializable`) is a conflict, run again.
pub(crate) fn classify(e: &sqlx::Error) -> Option<ServerError> {
    Some(match code(e)?.as_str() {
        UNIQUE_VIOLATION => ServerError::Duplicate,
        LOCK_NOT_AVAILABLE => ServerError::LockWait,
        QUERY_CANCELED => ServerError::StatementTimeout,
        SERIALIZATION_FAILURE | DEADLOCK_DETECTED => ServerError::Conflict,
        NUMERIC_OUT_OF_RANGE => ServerError::OutOfRange,
        INVALID_PASSWORD
        | INVALID_AUTHORIZATION
        | INVALID_CATALOG_NAME
        | INSUFFICIENT_PRIVILEGE => ServerError::Refused,
        UNDEFINED_TABLE | UNDEFINED_COLUMN => ServerError::NoTable,
        // A hot standby after a fail-over.
        READ_ONLY_TRANSACTION => ServerError::ReadOnly,
        // A server shutting down (57P01..57P03), out of connections, or a connection exception
        // (class 08).
        c if c == TOO_MANY_CONNECTIONS || c.starts_with("57P") || c.starts_with("08") => {
            ServerError::Down
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;
    use std::fmt;

    use leaf_core::Error;
    use leaf_sql::{CONFLICT_ATTEMPTS, map_sqlx, map_sqlx_at_start, retry_conflicts};

    use super::*;
    use crate::PostgresDialect as Pg;

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
            let e = map_sqlx::<Pg>(server(code), "tag t", "url");
            assert!(serving(&e), "{code} while serving: {e:?}");
            if matches!(e, Error::Unavailable(_)) {
                assert!(!e.to_string().contains("own text"), "{code}: {e}");
            }
            let e = map_sqlx_at_start::<Pg>(server(code), "tag t", "url");
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

    #[tokio::test(start_paused = true)]
    async fn conflicts_are_retried_a_bounded_number_of_times_and_nothing_else_is() {
        let run = |codes: Vec<&'static str>| async move {
            let mut calls = 0;
            let r = retry_conflicts::<Pg, _, _, _>(|| {
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
            (Err(Some("40001".into())), CONFLICT_ATTEMPTS as usize)
        );
    }
}
