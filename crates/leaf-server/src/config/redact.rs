//! Hiding secrets (tokens, passwords in URLs) from logs and `Debug`.

pub(super) fn redacted(secret: &str) -> &'static str {
    if secret.is_empty() { "" } else { "<redacted>" }
}

/// `scheme://user:secret@host/..` with the secret replaced, for logs and `Debug`; a
/// `password=` query parameter is hidden too. The user part ends at the authority's last `@`,
/// so a password holding `@` is hidden whole.
pub fn redact_url(url: &str) -> String {
    const HIDDEN: &str = "<redacted>";
    let mut out = url.to_string();
    if let Some(scheme_end) = out.find("://") {
        let start = scheme_end + 3;
        let authority_end = out[start..]
            .find(['/', '?', '#'])
            .map_or(out.len(), |i| start + i);
        if let Some(at) = out[start..authority_end].rfind('@')
            && let Some(colon) = out[start..start + at].find(':')
        {
            out.replace_range(start + colon + 1..start + at, HIDDEN);
        }
    }
    if let Some(q) = out.find('?') {
        let query: Vec<String> = out[q + 1..]
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}={HIDDEN}"),
                _ => kv.to_string(),
            })
            .collect();
        out = format!("{}?{}", &out[..q], query.join("&"));
    }
    out
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
