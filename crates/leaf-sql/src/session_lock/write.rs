//! A mark written on the lock's session, and the lock taken again when that session is gone.

use std::sync::atomic::Ordering;
use std::time::Duration;

use leaf_core::{Result, bounded};

use super::{Inner, Locking, MAX_TRIED, MarkRow, MarkWrite, Proof, SessionLock, State, pooled};

/// Writes the mark on the lock's session, first opening a session, taking the lock again and
/// checking the stored mark if the session is gone. `Ok(false)`, with the lease marked lost:
/// another process holds the lock, or wrote the mark while this node's lock was gone, or the
/// write proved nothing (the lock or the row is not this node's).
pub(super) async fn write<L: SessionLock>(
    inner: &Inner<L>,
    state: &mut State<L::Session>,
    worker_id: u64,
    mark_ms: u64,
    how: MarkWrite,
) -> Result<bool> {
    let (backend, settings) = (inner.backend, inner.settings);
    let State {
        held,
        own_up_to,
        tried,
        idle_limit,
        ..
    } = state;
    let Some(held) = held.as_mut() else {
        return Ok(true);
    };
    if held.session.is_none() {
        let row = held.row(worker_id);
        match relock(inner, row, *own_up_to, tried, *idle_limit).await? {
            Some((session, server_session)) => {
                held.session = Some(session);
                held.server_session = server_session;
            }
            None => {
                inner.lost.store(true, Ordering::Release);
                return Ok(false);
            }
        }
    }
    if tried.len() >= MAX_TRIED {
        tried.remove(0);
    }
    tried.push(mark_ms);
    let mut session = held.session.take().expect("connected above");
    let written = bounded(
        backend,
        settings.timeout,
        "the mark update",
        inner
            .lock
            .write_mark(&mut session, held.row(worker_id), mark_ms, how),
    )
    .await;
    match written {
        Ok(Proof::Held(())) => {
            held.session = Some(session);
            *own_up_to = (*own_up_to).max(mark_ms);
            tried.clear();
            if how == MarkWrite::Raise {
                inner
                    .confirmed_mark_ms
                    .fetch_max(mark_ms, Ordering::Relaxed);
            }
            Ok(true)
        }
        Ok(Proof::NotHeld) => {
            tracing::error!(
                lock = %held.name,
                identity = %held.identity,
                backend,
                worker_id,
                "a mark write proved nothing: this session does not hold the identity lock, or \
                 the worker id's row is not this identity's; worker id lost"
            );
            inner.lost.store(true, Ordering::Release);
            let _ = tokio::time::timeout(settings.timeout, inner.lock.close(session)).await;
            Ok(false)
        }
        Err(e) => {
            // A statement the server refused leaves the session and its lock as they were: kept
            // (dropping it would free the lock for another process), once it proves the lock
            // again. One that was cut, or given up on, may have lost both: reconnect next time.
            let proved = bounded(
                backend,
                settings.timeout,
                "proving the identity lock after a failed write",
                inner
                    .lock
                    .holds(&mut session, &held.name, held.server_session),
            )
            .await;
            if matches!(proved, Ok(true)) {
                held.session = Some(session);
            } else {
                let _ = tokio::time::timeout(settings.timeout, inner.lock.close(session)).await;
            }
            Err(e)
        }
    }
}

/// A new session holding the lock of `row` again, after the last one was lost, and the server's
/// id of it; `None` if another session holds it, if the session held it before it asked (a
/// pooler), or if the stored mark is above this node's own and is none it sent (another
/// process of the identity held it meanwhile), or the row proves not to be this node's.
async fn relock<L: SessionLock>(
    inner: &Inner<L>,
    row: MarkRow<'_>,
    own_up_to: u64,
    tried: &[u64],
    idle_limit: Duration,
) -> Result<Option<(L::Session, i64)>> {
    let (backend, settings) = (inner.backend, inner.settings);
    let (name, worker_id) = (row.lock, row.worker_id);
    let mut session = bounded(
        backend,
        settings.connect_timeout,
        "connecting for the identity lock",
        async {
            inner
                .lock
                .connect(false, idle_limit)
                .await
                .map_err(|e| e.error)
        },
    )
    .await?;
    let checked = bounded(
        backend,
        settings.timeout,
        "taking the identity lock again",
        async {
            let server_session = match inner.lock.try_lock(&mut session, name, Duration::ZERO).await? {
                Locking::Taken(id) => id,
                Locking::Busy => {
                    tracing::error!(
                        lock = %name,
                        backend,
                        "another process took this node's identity lock while its connection \
                         was down; worker id lost"
                    );
                    return Ok(None);
                }
                Locking::Shared => {
                    tracing::error!(lock = %name, backend, "{}", pooled(backend, name, "held it before it asked"));
                    return Ok(None);
                }
            };
            let row = MarkRow {
                server_session,
                ..row
            };
            match inner.lock.read_mark(&mut session, row).await? {
                Proof::NotHeld => {
                    tracing::error!(
                        lock = %name,
                        identity = %row.identity,
                        backend,
                        worker_id,
                        "the identity lock, taken again, is not held by the statement that reads \
                         the mark, or the worker id's row is not this identity's; worker id lost"
                    );
                    Ok(None)
                }
                Proof::Held(Some(stored)) if stored > own_up_to && !tried.contains(&stored) => {
                    tracing::error!(
                        lock = %name,
                        backend,
                        worker_id,
                        stored_mark_ms = stored,
                        own_mark_ms = own_up_to,
                        "another process of this identity wrote its mark while this node's lock \
                         was gone; worker id lost"
                    );
                    Ok(None)
                }
                Proof::Held(_) => Ok(Some(server_session)),
            }
        },
    )
    .await?;
    let Some(server_session) = checked else {
        let _ = tokio::time::timeout(settings.timeout, inner.lock.close(session)).await;
        return Ok(None);
    };
    tracing::info!(lock = %name, "identity lock taken again after a reconnect");
    Ok(Some((session, server_session)))
}
