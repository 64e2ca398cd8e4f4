//! The tokens of `[server]`: `admin_token`, `client_token` and `metrics_token` each take one
//! token (a string, as before) or a list (old and new during a rotation), and
//! `*_token_file` names a file of more, one per line, which the server re-reads when it
//! changes. A token is a secret: `Debug` and errors never show one.

use std::fmt;
use std::path::Path;

use leaf_core::Result;
use serde::{Deserialize, Serialize};

use super::bad;

/// One token setting: no token (empty), one, or several.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Tokens(Vec<String>);

impl Tokens {
    /// No token is configured here.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The tokens, in their order.
    pub fn as_slice(&self) -> &[String] {
        &self.0
    }
}

impl From<&str> for Tokens {
    /// One token; the empty string is none.
    fn from(token: &str) -> Self {
        Tokens::from(vec![token.to_owned()])
    }
}

impl From<String> for Tokens {
    fn from(token: String) -> Self {
        Tokens::from(vec![token])
    }
}

impl From<Vec<String>> for Tokens {
    /// The tokens of a list, empty entries left out.
    fn from(list: Vec<String>) -> Self {
        Tokens(list.into_iter().filter(|t| !t.is_empty()).collect())
    }
}

impl fmt::Debug for Tokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.len() {
            0 => f.write_str("\"\""),
            1 => f.write_str("<redacted>"),
            n => write!(f, "[<redacted>; {n}]"),
        }
    }
}

impl<'de> Deserialize<'de> for Tokens {
    /// A string, or a list of strings. A value an environment variable gives as a number
    /// (`LEAF_SERVER__ADMIN_TOKEN=12345`) is its digits.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        d.deserialize_any(TokensVisitor)
    }
}

/// One token: a string, or a number's digits.
struct Token(String);

impl<'de> Deserialize<'de> for Token {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        match d.deserialize_any(TokensVisitor)?.0.as_slice() {
            [one] => Ok(Token(one.clone())),
            _ => Err(serde::de::Error::custom("a list of tokens holds strings")),
        }
    }
}

struct TokensVisitor;

impl<'de> serde::de::Visitor<'de> for TokensVisitor {
    type Value = Tokens;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a token (a string) or a list of tokens")
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> std::result::Result<Tokens, E> {
        Ok(Tokens::from(v))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> std::result::Result<Tokens, E> {
        Ok(Tokens::from(v.to_string()))
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> std::result::Result<Tokens, E> {
        Ok(Tokens::from(v.to_string()))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(
        self,
        mut seq: A,
    ) -> std::result::Result<Tokens, A::Error> {
        let mut list = Vec::new();
        while let Some(Token(t)) = seq.next_element()? {
            list.push(t);
        }
        Ok(Tokens::from(list))
    }
}

impl Serialize for Tokens {
    /// As it was written: a string for none or one, a list for more.
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self.0.as_slice() {
            [] => s.serialize_str(""),
            [one] => s.serialize_str(one),
            many => many.serialize(s),
        }
    }
}

/// Checks each token of `tokens`, configured under `key`.
pub(super) fn check_all(key: &str, tokens: &Tokens) -> Result<()> {
    for (i, token) in tokens.as_slice().iter().enumerate() {
        if let Err(why) = check_token(token) {
            let which = if tokens.as_slice().len() == 1 {
                String::new()
            } else {
                format!("token {} of the list: ", i + 1)
            };
            return bad(key, format!("{which}{why}"));
        }
    }
    Ok(())
}

/// The tokens of a token file's `text`: one per line, blank lines and lines starting with `#`
/// left out, white space around each line ignored (a secret mounted from Kubernetes ends with
/// a line break). `Err` says which line is wrong, never what it holds; a file without a token
/// is an error too, since it would close the routes to everyone or, worse, be read as "no
/// token".
pub fn parse_token_file(text: &str) -> std::result::Result<Vec<String>, String> {
    let mut tokens = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim_matches(|c: char| c.is_ascii_whitespace());
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        check_token(line).map_err(|why| format!("line {}: {why}", n + 1))?;
        tokens.push(line.to_owned());
    }
    if tokens.is_empty() {
        return Err("it holds no token (one per line; # starts a comment)".into());
    }
    Ok(tokens)
}

/// Reads and parses the token file at `path`, configured under `key`.
pub(super) fn check_file(key: &str, path: &Path) -> Result<()> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()));
    match text.and_then(|t| parse_token_file(&t)) {
        Ok(_) => Ok(()),
        Err(why) => bad(key, format!("{}: {why}", path.display())),
    }
}

/// A token travels as `Authorization: Bearer <token>`. A character that a header value cannot
/// carry (a control character, a line break; anything beyond ASCII, which RFC 9110 leaves
/// obsolete and clients encode differently), or a space or tab at either end (header parsers
/// strip it), makes a token that no request can present: refused, saying where the character
/// is, never the token.
fn check_token(token: &str) -> std::result::Result<(), String> {
    let sendable = |c: char| c.is_ascii_graphic() || c == ' ' || c == '\t';
    if let Some((i, c)) = token.chars().enumerate().find(|&(_, c)| !sendable(c)) {
        let kind = if c.is_ascii() {
            "a control character"
        } else {
            "a character beyond ASCII"
        };
        return Err(format!(
            "character {} of the token is {kind}, which an HTTP header cannot carry (the token \
             is sent as Authorization: Bearer <token>); use visible ASCII",
            i + 1
        ));
    }
    if token.starts_with([' ', '\t']) || token.ends_with([' ', '\t']) {
        return Err(
            "the token starts or ends with a space or tab, which HTTP header parsers \
                    strip, so no request could present it"
                .into(),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_files_table() {
        assert_eq!(parse_token_file("new\n").unwrap(), ["new"]);
        assert_eq!(
            parse_token_file("# rotation of 2026-11\r\nold \n\n  new\r\n").unwrap(),
            ["old", "new"]
        );
        for (text, line) in [("ok\nbad\u{e9}\n", "line 2"), ("a\n\tb\u{0}c\n", "line 2")] {
            let e = parse_token_file(text).unwrap_err();
            assert!(e.starts_with(line), "{e}");
            assert!(!e.contains("bad") && !e.contains("b\u{0}c"), "{e}");
        }
        for empty in ["", "\n\n", "# only a comment\n", "   \n"] {
            let e = parse_token_file(empty).unwrap_err();
            assert!(e.contains("no token"), "{empty:?}: {e}");
        }
    }

    #[test]
    fn debug_never_shows_a_token() {
        assert_eq!(format!("{:?}", Tokens::default()), "\"\"");
        assert_eq!(format!("{:?}", Tokens::from("s3cret")), "<redacted>");
        let two = Tokens::from(vec!["s3cret".into(), "n3w".into()]);
        assert_eq!(format!("{two:?}"), "[<redacted>; 2]");
        assert_eq!(Tokens::from(""), Tokens::default());
    }
}
