//! Maps `etcd-client`'s errors to `leaf_core::Error` kinds.

use leaf_core::Error;

/// The backend name in `Error::Backend` and in timeout messages.
pub(crate) const BACKEND: &str = "etcd";

// gRPC status codes (tonic's `Code`, numbered as gRPC numbers them).
const CANCELLED: i32 = 1;
const UNKNOWN: i32 = 2;
const DEADLINE_EXCEEDED: i32 = 4;
const INVALID_ARGUMENT: i32 = 3;
const NOT_FOUND: i32 = 5;
const PERMISSION_DENIED: i32 = 7;
const RESOURCE_EXHAUSTED: i32 = 8;
const ABORTED: i32 = 10;
const UNAVAILABLE: i32 = 14;
const UNAUTHENTICATED: i32 = 16;

/// What the client's keep-alive says when the lease is gone (expired or revoked).
const LEASE_NOT_FOUND: &str = "lease not found";

/// Whether `e` says the lease no longer exists.
pub(crate) fn is_lease_gone(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::LeaseKeepAliveError(m) => m.contains(LEASE_NOT_FOUND),
        etcd_client::Error::GRpcStatus(s) => {
            s.code() as i32 == NOT_FOUND && s.message().contains("lease not found")
        }
        _ => false,
    }
}

/// What an etcd error means to Leaf; `what` names the key or the operation, for the log.
/// Retryable kinds carry fixed texts (clients may see them); the client's own text goes to the
/// log.
pub(crate) fn map_etcd(e: etcd_client::Error, what: &str) -> Error {
    use etcd_client::Error as E;
    let unavailable = |msg: &str| {
        tracing::debug!(error = %e, what, "{msg}");
        Error::Unavailable(msg.to_owned())
    };
    if let Some(tls) = tls_failure(&e) {
        return Error::Config(format!(
            "ca_file: TLS with etcd failed (check ca_file, cert_file, key_file and that the \
             members' names in endpoints are in their certificates): {tls}"
        ));
    }
    match &e {
        E::TransportError(_) | E::IoError(_) => unavailable("etcd cannot be reached"),
        E::GRpcStatus(s) => match s.code() as i32 {
            UNAVAILABLE | UNKNOWN | CANCELLED => unavailable("etcd cannot be reached"),
            DEADLINE_EXCEEDED => unavailable("etcd did not answer in time"),
            ABORTED | RESOURCE_EXHAUSTED => unavailable("etcd refused the request for now"),
            PERMISSION_DENIED => Error::Config(format!(
                "username: etcd refused access to {what}; the user's role must grant readwrite \
                 on the keys under prefix (and the cluster must not need a user if none is set)"
            )),
            UNAUTHENTICATED => Error::Config(format!(
                "username: etcd requires authentication for {what}: set username and password \
                 (or password_file)"
            )),
            INVALID_ARGUMENT if s.message().contains("authentication failed") => Error::Config(
                "password: etcd refused the credentials of username (password or \
                     password_file)"
                    .into(),
            ),
            NOT_FOUND => Error::NotFound(format!("etcd: {what}")),
            _ => backend(&e, what),
        },
        E::LeaseKeepAliveError(m) if !m.contains(LEASE_NOT_FOUND) => {
            unavailable("etcd cannot be reached")
        }
        E::InvalidArgs(_) | E::InvalidUri(_) | E::EndpointError(_) => Error::Config(format!(
            "endpoints: etcd-client refused them: {}",
            e.to_string().to_lowercase()
        )),
        _ => backend(&e, what),
    }
}

/// The TLS error (rustls's) somewhere in `e`'s chain of sources: the client refused the
/// handshake (a wrong CA, a name not in a member's certificate) or the member refused it (no
/// client certificate where one is required).
fn tls_failure(e: &etcd_client::Error) -> Option<String> {
    // etcd-client's error does not chain its sources: start from the gRPC status or the
    // transport error it holds.
    let mut source: Option<&(dyn std::error::Error + 'static)> = match e {
        etcd_client::Error::GRpcStatus(status) => Some(status),
        etcd_client::Error::TransportError(transport) => Some(transport),
        other => Some(other),
    };
    while let Some(err) = source {
        // An I/O error's `source` skips the error it wraps: look inside it first. An alert the
        // member sent after the handshake (no client certificate, under TLS 1.3) reaches the
        // client as an I/O error of its text only.
        let io = err.downcast_ref::<std::io::Error>();
        let text = match (err.downcast_ref::<rustls::Error>(), io) {
            (Some(tls), _) => Some(tls.to_string()),
            (None, Some(io)) => Some(match io.get_ref() {
                Some(inner) => inner.to_string(),
                None => io.to_string(),
            }),
            (None, None) => None,
        };
        if let Some(text) = text.filter(|t| leaf_core::tls_certificate_refused(t)) {
            return Some(text);
        }
        source = err.source();
    }
    None
}

fn backend(e: &etcd_client::Error, what: &str) -> Error {
    tracing::warn!(error = %e, what, "unexpected etcd error");
    Error::backend(BACKEND, e.to_string().to_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_table() {
        let check = |e: etcd_client::Error, retryable: bool, kind: fn(&Error) -> bool| {
            let shown = e.to_string();
            let mapped = map_etcd(e, "/leaf/workers/3");
            assert_eq!(mapped.is_retryable(), retryable, "{shown} -> {mapped}");
            assert!(kind(&mapped), "{shown} -> {mapped}");
            let text = mapped.to_string();
            assert_eq!(text, text.to_lowercase(), "lowercase: {text}");
            if retryable {
                assert!(!text.contains("/leaf"), "a fixed text, no key: {text}");
            }
            assert!(!text.ends_with('.'), "{text}");
        };
        let unavailable = |e: &Error| matches!(e, Error::Unavailable(_));
        let status = |code: tonic::Code, msg: &str| {
            etcd_client::Error::GRpcStatus(tonic::Status::new(code, msg.to_owned()))
        };
        use tonic::Code as C;
        for code in [
            C::Unavailable,
            C::Unknown,
            C::Cancelled,
            C::DeadlineExceeded,
            C::Aborted,
            C::ResourceExhausted,
        ] {
            check(
                status(code, "etcdserver: request timed out"),
                true,
                unavailable,
            );
        }
        for code in [C::PermissionDenied, C::Unauthenticated] {
            check(
                status(code, "etcdserver: permission denied"),
                false,
                |e| matches!(e, Error::Config(m) if m.starts_with("username")),
            );
        }
        check(
            status(
                C::InvalidArgument,
                "etcdserver: authentication failed, invalid user ID or password",
            ),
            false,
            |e| matches!(e, Error::Config(m) if m.starts_with("password")),
        );
        check(
            status(C::NotFound, "etcdserver: requested lease not found"),
            false,
            |e| matches!(e, Error::NotFound(_)),
        );
        check(
            status(C::InvalidArgument, "etcdserver: Key Not Found"),
            true,
            |e| {
                matches!(
                    e,
                    Error::Backend {
                        backend: "etcd",
                        ..
                    }
                )
            },
        );
        check(
            etcd_client::Error::LeaseKeepAliveError("channel closed".into()),
            true,
            unavailable,
        );
        check(
            etcd_client::Error::InvalidArgs("empty endpoints".into()),
            false,
            |e| matches!(e, Error::Config(_)),
        );
        check(
            etcd_client::Error::Internal("Something Odd".into()),
            true,
            |e| {
                matches!(
                    e,
                    Error::Backend {
                        backend: "etcd",
                        ..
                    }
                )
            },
        );
    }

    #[test]
    fn lease_gone_is_recognised() {
        assert!(is_lease_gone(&etcd_client::Error::LeaseKeepAliveError(
            "lease not found".into()
        )));
        assert!(is_lease_gone(&etcd_client::Error::GRpcStatus(
            tonic::Status::not_found("etcdserver: requested lease not found")
        )));
        assert!(!is_lease_gone(&etcd_client::Error::GRpcStatus(
            tonic::Status::unavailable("etcdserver: no leader")
        )));
        assert!(!is_lease_gone(&etcd_client::Error::LeaseKeepAliveError(
            "channel closed".into()
        )));
    }
}
