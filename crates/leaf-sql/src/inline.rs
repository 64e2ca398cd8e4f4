//! The identity lock's statements as single simple queries: their values written into the text
//! as literals ([`inline`]). A simple query is one message and one implicit transaction, which
//! a pooler cannot split between two server sessions (a prepared statement's two round trips
//! it can: the lock would then be taken on one session and proved on another, or its statement
//! be gone by the second), so that behind a pooler the lock shows as not held, by the lock's
//! own reads, rather than as a statement the server lost.

use std::fmt::Write;

use crate::RegistryDialect;

/// A value written into a statement.
#[derive(Clone, Copy, Debug)]
pub enum Arg<'a> {
    /// A number, written as its digits.
    Int(i64),
    /// A text, written as the dialect's literal of its bytes in hex
    /// ([`RegistryDialect::text_literal`]), which no text can end early.
    Text(&'a str),
}

/// `sql` with each placeholder replaced by its value in `args`: `?` by the next one, `$n` by
/// the n-th. The statements given hold neither in a string literal of their own.
pub fn inline<D: RegistryDialect>(sql: &str, args: &[Arg<'_>]) -> String {
    inline_with(sql, args, D::text_literal)
}

/// [`inline`] with `literal` making a text's literal of its hex.
fn inline_with(sql: &str, args: &[Arg<'_>], literal: fn(&str) -> String) -> String {
    let mut out = String::with_capacity(sql.len() + 64);
    let (mut next, mut chars) = (0, sql.char_indices().peekable());
    while let Some((i, c)) = chars.next() {
        let index = match c {
            '?' => {
                next += 1;
                next - 1
            }
            '$' if chars.peek().is_some_and(|(_, d)| d.is_ascii_digit()) => {
                let mut end = i + 1;
                while chars.peek().is_some_and(|(_, d)| d.is_ascii_digit()) {
                    end += chars.next().map_or(0, |(_, d)| d.len_utf8());
                }
                sql[i + 1..end]
                    .parse::<usize>()
                    .unwrap_or(0)
                    .wrapping_sub(1)
            }
            _ => {
                out.push(c);
                continue;
            }
        };
        match args.get(index) {
            Some(Arg::Int(n)) => {
                let _ = write!(out, "{n}");
            }
            Some(Arg::Text(t)) => out.push_str(&literal(&hex(t))),
            // A statement and its arguments are written together; a missing one is NULL, which
            // matches nothing.
            None => out.push_str("NULL"),
        }
    }
    out
}

/// The bytes of `text` in lowercase hex.
fn hex(text: &str) -> String {
    text.bytes()
        .fold(String::with_capacity(text.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(hex: &str) -> String {
        format!("<{hex}>")
    }

    #[test]
    fn texts_are_hex_and_numbers_digits_wherever_the_placeholders_stand() {
        let args = [Arg::Int(-5), Arg::Text("a'b"), Arg::Int(12)];
        assert_eq!(hex("a'b"), "612762");
        assert_eq!(
            inline_with("SELECT ? + ?, ?, ?", &args, shown),
            "SELECT -5 + <612762>, 12, NULL"
        );
        assert_eq!(
            inline_with("SELECT $2, $1, $3, $12, '$', $", &args, shown),
            "SELECT <612762>, -5, 12, NULL, '$', $"
        );
        assert_eq!(inline_with("é = ?", &[Arg::Text("é")], shown), "é = <c3a9>");
    }
}
