//! Maps `zookeeper-client`'s errors to `leaf_core::Error` kinds, and bounds every call in time.

use std::future::Future;
use std::time::Duration;

use leaf_core::Error;
use zookeeper_client as zk;

/// The backend name in `Error::Backend`.
pub(crate) const BACKEND: &str = "zookeeper";

/// What a ZooKeeper error means to Leaf; `what` names the node or the operation, for the log.
/// Retryable kinds carry fixed texts (clients may see them); the client's own text and the
/// node go to the log.
pub(crate) fn map_zk(e: zk::Error, what: &str) -> Error {
    use zk::Error as Z;
    let unavailable = |msg: &str| {
        tracing::debug!(error = %e, what, "{msg}");
        Error::Unavailable(msg.to_owned())
    };
    match e {
        Z::ConnectionLoss | Z::Timeout | Z::NoHosts => unavailable("zookeeper cannot be reached"),
        Z::SessionExpired | Z::ClientClosed | Z::SessionMoved => {
            unavailable("the zookeeper session ended; the next call opens a new one")
        }
        Z::Throttled => unavailable("zookeeper throttled the request"),
        Z::NotReadOnly => unavailable("only a read-only zookeeper server is reachable"),
        // Named after the key that decides who this client is: another user's node (or a
        // parent whose acl does not let this one create or delete there).
        Z::NoAuth => Error::Config(format!(
            "auth: zookeeper refused this client access to {what}: the acl there grants nothing \
             to the identity of auth (or auth_file), or to a client without one; grant it on the \
             existing nodes (setacl) or configure the identity they were created for"
        )),
        Z::AuthFailed => Error::Config(format!(
            "auth: zookeeper refused the authentication of this client ({what})"
        )),
        Z::InvalidAcl => Error::Config(format!(
            "acl: zookeeper refused the acl of {what} as invalid"
        )),
        Z::NoNode => Error::NotFound(format!("zookeeper node {what}")),
        Z::NodeExists => Error::AlreadyExists(format!("zookeeper node {what}")),
        other => {
            tracing::warn!(error = %other, what, "unexpected zookeeper error");
            // The client's own words, lowercased as every Leaf message ("ZooKeeper ..." in some).
            Error::backend(BACKEND, other.to_string().to_lowercase())
        }
    }
}

/// Whether `e` ends the session for good: the client must be replaced by a new session.
pub(crate) fn is_terminal(e: &zk::Error) -> bool {
    matches!(
        e,
        zk::Error::SessionExpired | zk::Error::ClientClosed | zk::Error::AuthFailed
    )
}

/// Runs `fut`, failing with `Unavailable` if it takes longer than `limit`: an ensemble that
/// stopped answering never hangs a caller.
pub(crate) async fn bounded<T>(
    limit: Duration,
    what: &str,
    fut: impl Future<Output = leaf_core::Result<T>>,
) -> leaf_core::Result<T> {
    leaf_core::bounded("zookeeper", limit, what, fut).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_table() {
        let check = |e: zk::Error, retryable: bool, kind: fn(&Error) -> bool| {
            let mapped = map_zk(e.clone(), "/snowflake/leaf");
            assert_eq!(mapped.is_retryable(), retryable, "{e:?} -> {mapped}");
            assert!(kind(&mapped), "{e:?} -> {mapped}");
            let text = mapped.to_string();
            assert_eq!(text, text.to_lowercase(), "lowercase: {text}");
            if retryable {
                assert!(
                    !text.contains("/snowflake"),
                    "a fixed text, no node: {text}"
                );
            }
            assert!(!text.ends_with('.'), "{text}");
        };
        let unavailable = |e: &Error| matches!(e, Error::Unavailable(_));
        for e in [
            zk::Error::ConnectionLoss,
            zk::Error::Timeout,
            zk::Error::NoHosts,
            zk::Error::SessionExpired,
            zk::Error::ClientClosed,
            zk::Error::Throttled,
        ] {
            check(e, true, unavailable);
        }
        for (e, key) in [
            (zk::Error::NoAuth, "auth: "),
            (zk::Error::AuthFailed, "auth: "),
            (zk::Error::InvalidAcl, "acl: "),
        ] {
            check(e.clone(), false, |e| matches!(e, Error::Config(_)));
            let mapped = map_zk(e, "/snowflake/leaf");
            assert!(
                matches!(&mapped, Error::Config(m) if m.starts_with(key) && m.contains("/snowflake/leaf")),
                "{mapped}"
            );
        }
        check(zk::Error::NoNode, false, |e| {
            matches!(e, Error::NotFound(_))
        });
        check(zk::Error::NodeExists, false, |e| {
            matches!(e, Error::AlreadyExists(_))
        });
        check(zk::Error::Unimplemented, true, |e| {
            matches!(
                e,
                Error::Backend {
                    backend: "zookeeper",
                    ..
                }
            )
        });
        check(zk::Error::ReconfigDisabled, true, |e| {
            matches!(e, Error::Backend { .. })
        });
    }

    #[test]
    fn terminal_errors() {
        assert!(is_terminal(&zk::Error::SessionExpired));
        assert!(is_terminal(&zk::Error::ClientClosed));
        assert!(!is_terminal(&zk::Error::ConnectionLoss));
        assert!(!is_terminal(&zk::Error::BadVersion));
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_that_never_ends_is_unavailable() {
        let e = bounded(
            Duration::from_millis(50),
            "a claim",
            std::future::pending::<leaf_core::Result<()>>(),
        )
        .await
        .unwrap_err();
        assert!(
            matches!(&e, Error::Unavailable(m) if m.contains("50 ms")),
            "{e}"
        );
        assert_eq!(
            bounded(Duration::from_millis(50), "x", async { Ok(7) })
                .await
                .unwrap(),
            7
        );
    }
}
