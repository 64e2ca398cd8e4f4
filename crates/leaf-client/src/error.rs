//! What a server's error answer means for a call: a final `leaf_core::Error` (the same answer
//! would come from every server: an unknown tag, a malformed request, a refused token, a missing
//! client certificate), or a reason to ask the next server (this one cannot serve now).

use std::time::Duration;

use leaf_core::{Error, Result};
use serde::Deserialize;
use serde::de::DeserializeOwned;

/// Leaf's segment code: the key is unknown.
const CODE_UNKNOWN_KEY: i64 = -2;
/// The servers' code of a tag whose IDs ran out (up to `i64::MAX`).
const CODE_EXHAUSTED: i64 = -5;
/// Longest server text kept in an error.
const MAX_MESSAGE_CHARS: usize = 300;

/// Which token a request carried, for the message of a refusal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TokenKind {
    /// `server.client_token` (ID and allocate routes).
    Client,
    /// `server.admin_token` (`/v1/tags`, `PATCH /v1/tags/{tag}`).
    Admin,
}

/// What to do with a non-2xx answer.
#[derive(Debug)]
pub(crate) enum Verdict {
    /// The call ends with this error; the endpoint itself is fine.
    Final(Error),
    /// The endpoint cannot serve now: skip it (at least `retry_after`) and ask the next.
    MoveOn {
        why: String,
        retry_after: Option<Duration>,
    },
}

#[derive(Deserialize)]
struct Body {
    code: i64,
    message: String,
}

/// Judges an answer of `status` with `body` and its `Retry-After`. Only the servers' own
/// `{"code", "message"}` can end a call: any other body (a proxy's, a firewall's) moves on to
/// the next endpoint, whatever its status.
pub(crate) fn judge(
    status: u16,
    body: &[u8],
    retry_after: Option<Duration>,
    token: TokenKind,
) -> Verdict {
    let Ok(Body { code, message }) = serde_json::from_slice::<Body>(body) else {
        // Not the server's word: a proxy's or a firewall's page in front of this endpoint
        // says nothing about the others, whatever its status.
        return Verdict::MoveOn {
            why: format!(
                "{status}, not from leaf-server: {}",
                clip(&String::from_utf8_lossy(body))
            ),
            retry_after,
        };
    };
    let message = clip(&message);
    let strip = |prefix: &str| message.strip_prefix(prefix).unwrap_or(&message).to_owned();
    let token_refused = |status: u16| {
        let (key, setter) = match token {
            TokenKind::Client => ("server.client_token", "client_token"),
            TokenKind::Admin => ("server.admin_token", "admin_token"),
        };
        Verdict::Final(Error::Config(format!(
            "the server refused the request ({status}: {message}); set {setter} to its {key}"
        )))
    };
    match (status, code) {
        (404, CODE_UNKNOWN_KEY) => Verdict::Final(Error::NotFound(strip("not found: "))),
        (503, CODE_EXHAUSTED) => Verdict::Final(Error::Exhausted(strip("exhausted: "))),
        (400 | 413 | 415 | 422, _) => Verdict::Final(Error::InvalidInput(message)),
        // An `https://` server with `server.tls.client_ca_file` refuses a connection that
        // presented no certificate (its TLS routes' rule, the same on every server).
        (401 | 403, _) if message.contains("client certificate") => {
            Verdict::Final(Error::Config(format!(
                "the server refused the request ({status}: {message}); set cert_file and \
                 key_file to a certificate its server.tls.client_ca_file trusts"
            )))
        }
        (401 | 403, _) => token_refused(status),
        (409, _) => Verdict::Final(Error::AlreadyExists(strip("already exists: "))),
        // Anything else is about this server: a 5xx, a mode it has disabled (404), a route it
        // lacks (an older version: 404, 405), a proxy's 429 or 502.
        _ => Verdict::MoveOn {
            why: if code == i64::from(status) {
                format!("{status}: {message}")
            } else {
                format!("{status} (code {code}): {message}")
            },
            retry_after,
        },
    }
}

/// A 2xx answer that is not what the route promises (a proxy's page, another service).
pub(crate) fn malformed(why: String) -> Error {
    Error::backend("http", format!("malformed answer from leaf-server: {why}"))
}

/// The JSON of a 2xx answer.
pub(crate) fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T> {
    serde_json::from_slice(body).map_err(|e| malformed(e.to_string()))
}

/// `Retry-After` in seconds (its other form, an HTTP date, is not sent by the servers and is
/// ignored).
pub(crate) fn retry_after(value: Option<&[u8]>) -> Option<Duration> {
    let text = std::str::from_utf8(value?).ok()?;
    text.trim().parse::<u64>().ok().map(Duration::from_secs)
}

/// A server's text, cut short and without control characters.
fn clip(message: &str) -> String {
    let mut out: String = message
        .chars()
        .filter(|c| !c.is_control())
        .take(MAX_MESSAGE_CHARS)
        .collect();
    if message.chars().count() > MAX_MESSAGE_CHARS {
        out.push_str("...");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(code: i64, message: &str) -> Vec<u8> {
        serde_json::json!({ "code": code, "message": message })
            .to_string()
            .into_bytes()
    }

    #[test]
    fn final_answers_table() {
        let check = |status: u16, code: i64, message: &str, expect: &str| match judge(
            status,
            &body(code, message),
            None,
            TokenKind::Client,
        ) {
            Verdict::Final(e) => assert_eq!(e.to_string(), expect, "{status} {code}"),
            other => panic!("{status} {code}: {other:?}"),
        };
        check(404, -2, "not found: tag t", "not found: tag t");
        check(503, -5, "exhausted: no ids left", "exhausted: no ids left");
        check(
            400,
            400,
            "step must be ...",
            "invalid input: step must be ...",
        );
        check(
            415,
            415,
            "the body must be JSON",
            "invalid input: the body must be JSON",
        );
        check(409, 409, "already exists: tag t", "already exists: tag t");
        let e = match judge(401, &body(401, "no"), None, TokenKind::Admin) {
            Verdict::Final(e) => e,
            other => panic!("{other:?}"),
        };
        assert!(matches!(e, Error::Config(_)), "{e}");
        assert!(e.to_string().contains("admin_token"), "{e}");
        let e = match judge(
            403,
            &body(403, "this route needs a client certificate (...)"),
            None,
            TokenKind::Client,
        ) {
            Verdict::Final(e) => e,
            other => panic!("{other:?}"),
        };
        assert!(matches!(e, Error::Config(_)), "{e}");
        assert!(e.to_string().contains("set cert_file and key_file"), "{e}");
        assert!(!e.to_string().contains("client_token"), "{e}");
    }

    #[test]
    fn server_side_answers_move_on_with_their_retry_after() {
        let check = |status: u16, code: i64, retry: Option<u64>| match judge(
            status,
            &body(code, "x"),
            retry.map(Duration::from_secs),
            TokenKind::Client,
        ) {
            Verdict::MoveOn { why, retry_after } => {
                assert!(why.starts_with(&status.to_string()), "{why}");
                assert_eq!(retry_after, retry.map(Duration::from_secs));
            }
            other => panic!("{status} {code}: {other:?}"),
        };
        check(503, -3, Some(1));
        check(503, -4, Some(1));
        check(503, 503, Some(2));
        check(500, 500, None);
        // A disabled mode or a missing route is this server's, not the tag's.
        check(404, 404, None);
        check(405, 405, None);
        check(429, 429, Some(3));
        // A proxy's page is not JSON.
        match judge(502, b"<html>bad gateway</html>", None, TokenKind::Client) {
            Verdict::MoveOn { why, .. } => {
                assert_eq!(why, "502, not from leaf-server: <html>bad gateway</html>");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_foreign_4xx_moves_on() {
        // The statuses that are final in the servers' own JSON are not in a proxy's page.
        for status in [400, 401, 403, 404, 409, 413, 415, 422] {
            for page in [
                &b"<html>blocked by the firewall</html>"[..],
                b"",
                br#"{"error":"x"}"#,
            ] {
                match judge(
                    status,
                    page,
                    Some(Duration::from_secs(2)),
                    TokenKind::Client,
                ) {
                    Verdict::MoveOn { why, retry_after } => {
                        assert!(why.starts_with(&format!("{status}, not from leaf-server")));
                        assert_eq!(retry_after, Some(Duration::from_secs(2)));
                    }
                    other => panic!("{status}: {other:?}"),
                }
            }
        }
    }

    #[test]
    fn retry_after_table() {
        let check = |v: Option<&str>, expect: Option<u64>| {
            assert_eq!(
                retry_after(v.map(str::as_bytes)),
                expect.map(Duration::from_secs),
                "{v:?}"
            );
        };
        check(Some("1"), Some(1));
        check(Some(" 60 "), Some(60));
        check(Some("0"), Some(0));
        check(Some("Wed, 21 Oct 2015 07:28:00 GMT"), None);
        check(Some("-1"), None);
        check(None, None);
    }

    #[test]
    fn server_text_is_clipped_and_cleaned() {
        let long = "x".repeat(1000);
        assert_eq!(clip(&long).len(), MAX_MESSAGE_CHARS + 3);
        assert_eq!(clip("a\r\nb"), "ab");
    }
}
