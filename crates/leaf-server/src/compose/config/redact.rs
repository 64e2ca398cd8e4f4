//! Hiding secrets (tokens, passwords in URLs) from logs and `Debug`.

/// `url` with its password shown as `<redacted>`, for logs and `Debug`
/// (`leaf_core::redact_url`).
pub fn redact_url(url: &str) -> String {
    leaf_core::redact_url(url, "<redacted>")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_table() {
        let check = |url: &str, expect: &str| assert_eq!(redact_url(url), expect, "{url}");
        check("mysql://u:p@h:3306/db", "mysql://u:<redacted>@h:3306/db");
        check("mysql://u:p@ss@h/db", "mysql://u:<redacted>@h/db");
        check("mysql://u@h/db", "mysql://u@h/db");
        check("mysql://h/db?a=b@c:d", "mysql://h/db?a=b@c:d");
        check(
            "mysql://u:p@h/db?ssl-mode=required&password=x",
            "mysql://u:<redacted>@h/db?ssl-mode=required&password=<redacted>",
        );
        check("sqlite://leaf-data/leaf.db", "sqlite://leaf-data/leaf.db");
        check("not a url", "not a url");
    }
}
