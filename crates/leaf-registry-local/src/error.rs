//! Maps sqlx's errors to `leaf_core::Error` kinds.

use std::path::Path;

use leaf_core::Error;

/// The backend name in `Error::Backend`.
pub(crate) const BACKEND: &str = "sqlite";

// SQLite's primary result codes (the low byte of an extended code).
const SQLITE_BUSY: i32 = 5;
const SQLITE_LOCKED: i32 = 6;
const SQLITE_CORRUPT: i32 = 11;
const SQLITE_NOTADB: i32 = 26;

/// What an sqlx error means to Leaf. `what` names the object for the kinds that carry it
/// (`AlreadyExists`).
pub(crate) fn map_sqlx(e: sqlx::Error, what: &str) -> Error {
    match e {
        sqlx::Error::Database(db) if db.is_unique_violation() => {
            Error::AlreadyExists(what.to_string())
        }
        sqlx::Error::Configuration(c) => {
            Error::Config(format!("url is not a usable sqlite database: {c}"))
        }
        // Busy, locked, I/O, pool timeouts and the rest: the next attempt may work, and
        // `Backend` is retryable.
        other => Error::backend(BACKEND, other),
    }
}

/// Opening `file` failed. A file that is not a SQLite database, or a corrupt one, does not
/// mend by itself: `Config`, naming the file, so that start-up stops. Anything else (a lock held
/// by another program, an I/O error) is retryable, as [`map_sqlx`] says.
pub(crate) fn map_open(e: sqlx::Error, file: &Path) -> Error {
    if primary_code(&e).is_some_and(|c| matches!(c, SQLITE_CORRUPT | SQLITE_NOTADB)) {
        return Error::Config(format!(
            "url: {} is not a usable sqlite database (corrupt, or another kind of file): {e}",
            file.display()
        ));
    }
    map_sqlx(e, "database")
}

/// Whether another connection held the lock we needed: worth another try.
pub(crate) fn is_busy(e: &sqlx::Error) -> bool {
    primary_code(e).is_some_and(|c| matches!(c, SQLITE_BUSY | SQLITE_LOCKED))
}

fn primary_code(e: &sqlx::Error) -> Option<i32> {
    match e {
        sqlx::Error::Database(db) => db
            .code()
            .and_then(|c| c.parse::<i32>().ok())
            .map(|c| c & 0xff),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::Connection;
    use sqlx::sqlite::SqliteConnection;

    #[tokio::test]
    async fn unique_violation_is_already_exists_and_others_are_retryable() {
        let mut c = SqliteConnection::connect("sqlite::memory:").await.unwrap();
        sqlx::query("CREATE TABLE t (k TEXT PRIMARY KEY)")
            .execute(&mut c)
            .await
            .unwrap();
        sqlx::query("INSERT INTO t VALUES ('a')")
            .execute(&mut c)
            .await
            .unwrap();
        let e = sqlx::query("INSERT INTO t VALUES ('a')")
            .execute(&mut c)
            .await
            .unwrap_err();
        assert!(!is_busy(&e));
        let e = map_sqlx(e, "tag a");
        assert!(matches!(&e, Error::AlreadyExists(m) if m == "tag a"), "{e}");

        let e = sqlx::query("SELECT * FROM missing")
            .execute(&mut c)
            .await
            .unwrap_err();
        let e = map_sqlx(e, "x");
        assert!(
            matches!(
                &e,
                Error::Backend {
                    backend: "sqlite",
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.is_retryable());
    }

    #[tokio::test]
    async fn a_held_write_lock_is_busy_and_retryable() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("b.db").display());
        let mut a = SqliteConnection::connect(&url).await.unwrap();
        sqlx::query("CREATE TABLE t (k INTEGER)")
            .execute(&mut a)
            .await
            .unwrap();
        let _tx = a.begin_with("BEGIN IMMEDIATE").await.unwrap();
        let opts: sqlx::sqlite::SqliteConnectOptions = url.parse().unwrap();
        let mut b = SqliteConnection::connect_with(&opts.busy_timeout(std::time::Duration::ZERO))
            .await
            .unwrap();
        let e = sqlx::query("INSERT INTO t VALUES (1)")
            .execute(&mut b)
            .await
            .unwrap_err();
        assert!(is_busy(&e), "{e}");
        let e = map_sqlx(e, "x");
        assert!(
            matches!(e, Error::Backend { .. }) && e.is_retryable(),
            "{e}"
        );
    }

    #[test]
    fn bad_configuration_names_the_key() {
        let e = map_sqlx(sqlx::Error::Configuration("bad mode".into()), "x");
        assert!(
            matches!(&e, Error::Config(m) if m.starts_with("url")),
            "{e}"
        );
    }
}
