//! What MySQL's and MariaDB's server errors mean (`leaf_sql::ServerError`); the mapping to
//! `leaf_core::Error` kinds is `leaf_sql`'s.

use leaf_sql::ServerError;
use sqlx::mysql::MySqlDatabaseError;

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
fn number(e: &sqlx::Error) -> Option<u16> {
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

/// What the server's error `e` means, by its number.
pub(crate) fn classify(e: &sqlx::Error) -> Option<ServerError> {
    Some(match number(e)? {
        ER_DUP_ENTRY => ServerError::Duplicate,
        ER_LOCK_WAIT_TIMEOUT => ServerError::LockWait,
        ER_LOCK_DEADLOCK => ServerError::Deadlock,
        ER_DATA_OUT_OF_RANGE => ServerError::OutOfRange,
        ER_SERVER_SHUTDOWN | ER_CON_COUNT | ER_QUERY_INTERRUPTED => ServerError::Down,
        ER_ACCESS_DENIED | ER_DBACCESS_DENIED | ER_BAD_DB => ServerError::Refused,
        ER_NO_SUCH_TABLE | ER_BAD_FIELD => ServerError::NoTable,
        _ => return None,
    })
}
