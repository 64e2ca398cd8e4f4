//! What a backend says of its identity lock ([`SessionLock`]), and the words of its answers.

use std::time::Duration;

use async_trait::async_trait;
use leaf_core::{Error, Result};

/// How a mark write treats the stored mark.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkWrite {
    /// Renewals: the stored mark never goes backwards (`GREATEST`).
    Raise,
    /// The graceful release: the last timestamp issued, which may be below the last renewal's.
    Final,
}

/// What taking the lock on a new session found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Locking {
    /// The session holds the lock now; the server's id of the session that took it (MySQL's
    /// `CONNECTION_ID()`, PostgreSQL's `pg_backend_pid()`), which every later proof names, so
    /// that a pooler's other server session that took the lock for another client never
    /// proves it for this one.
    Taken(i64),
    /// Another session holds it (still, after the wait).
    Busy,
    /// The session held the lock before it asked: a session that was just opened holds no
    /// lock on a direct connection, so the server session is shared with another client (a
    /// pooler in transaction mode handing one server session to several clients).
    Shared,
}

/// What a statement that proves the lock found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proof<T> {
    /// The session held the lock, and the row was the identity's: the statement's answer.
    Held(T),
    /// Nothing was read or written: the session does not hold the lock, or the worker id's row
    /// is not the identity's (deleted, or given to another identity).
    NotHeld,
}

/// The row a mark is read from and written to, and what proves it is this node's: its worker
/// id, the identity that owns it, and the lock that this node's server session must hold.
#[derive(Clone, Copy, Debug)]
pub struct MarkRow<'a> {
    /// The worker id (the row's key).
    pub worker_id: u64,
    /// The identity (`ip:port`) the row belongs to.
    pub identity: &'a str,
    /// The identity lock's name.
    pub lock: &'a str,
    /// The server's id of the session that took the lock ([`Locking::Taken`]): the statement
    /// must run on it.
    pub server_session: i64,
}

/// Why a session could not be opened.
#[derive(Debug)]
pub struct ConnectError {
    /// The error.
    pub error: Error,
    /// Whether the server answered (an error it sent): it was reached, whatever else holds.
    pub answered: bool,
}

impl ConnectError {
    /// `error`, which the server sent.
    pub fn answered(error: Error) -> Self {
        ConnectError {
            error,
            answered: true,
        }
    }

    /// `error`, which came from the client or the network.
    pub fn unanswered(error: Error) -> Self {
        ConnectError {
            error,
            answered: false,
        }
    }
}

/// A backend's identity lock: sessions, the lock on one, and the mark read and written on it,
/// each read and write proving the lock in the same statement.
#[async_trait]
pub trait SessionLock: Send + Sync + 'static {
    /// A server session (a dedicated connection) that may hold the lock.
    type Session: Send + 'static;

    /// Opens a session whose server ends it after `idle_limit` without a statement.
    /// `at_start`: errors are start-up errors (refused credentials are a configuration
    /// mistake); otherwise outages. A failure says whether the server answered it.
    async fn connect(
        &self,
        at_start: bool,
        idle_limit: Duration,
    ) -> std::result::Result<Self::Session, ConnectError>;

    /// Whether a transport connection (TCP, a Unix socket) to the server can be opened now,
    /// within `timeout`, without speaking its protocol: asked after [`connect`](Self::connect)
    /// failed, to tell a server that could not be reached at all from one that was reached.
    async fn reachable(&self, timeout: Duration) -> bool;

    /// Takes the lock `name` on a session that was just opened, waiting up to `wait` (zero:
    /// not at all) for another session to free it.
    async fn try_lock(
        &self,
        session: &mut Self::Session,
        name: &str,
        wait: Duration,
    ) -> Result<Locking>;

    /// Whether `session` holds the lock `name` and is the server session `server_session`
    /// ([`Locking::Taken`]), asked in a statement of its own.
    async fn holds(
        &self,
        session: &mut Self::Session,
        name: &str,
        server_session: i64,
    ) -> Result<bool>;

    /// Refuses, with a message naming it, a deployment of the server in which the lock guards
    /// nothing (a multi-primary cluster, whose locks are each node's own). Asked on every new
    /// session of a claim, before the lock. Default: none.
    async fn check_deployment(&self, session: &mut Self::Session) -> Result<()> {
        let _ = session;
        Ok(())
    }

    /// The stored mark of `row`, read on `session` in one statement that proves the lock.
    async fn read_mark(
        &self,
        session: &mut Self::Session,
        row: MarkRow<'_>,
    ) -> Result<Proof<Option<u64>>>;

    /// Writes the mark of `row` on `session` as `how` says, in one statement that proves the
    /// lock, committed when it returns (an unchanged value is written).
    async fn write_mark(
        &self,
        session: &mut Self::Session,
        row: MarkRow<'_>,
        mark_ms: u64,
        how: MarkWrite,
    ) -> Result<Proof<()>>;

    /// Ends `session`, which frees the lock. Default: dropped.
    async fn close(&self, session: Self::Session) {
        drop(session);
    }
}

/// The idle limit of a lock's session for a node that renews every `renew_period`: a minute,
/// or ten renew periods if that is longer. Renewals write on the session, so a live node never
/// comes near it; a process that vanished without closing its connection (a host gone, a
/// partition) loses the lock that long after, instead of after hours of TCP timeouts.
pub fn session_idle_limit(renew_period: Duration) -> Duration {
    Duration::from_secs(60).max(renew_period.saturating_mul(10))
}
