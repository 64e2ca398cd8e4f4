//! Hiding the password of a URL (`scheme://user:secret@host`, `?password=`) from logs and
//! `Debug` output: one rule for every backend and the server.

/// `url` with the secret of its user part and any `password=` query parameter replaced by
/// `hidden`. The user part ends at the authority's last `@`, so a password holding `@` is hidden
/// whole. Text that is not a URL comes back unchanged.
pub fn redact_url(url: &str, hidden: &str) -> String {
    let mut out = url.to_string();
    if let Some(scheme_end) = out.find("://") {
        let start = scheme_end + 3;
        let authority_end = out[start..]
            .find(['/', '?', '#'])
            .map_or(out.len(), |i| start + i);
        if let Some(at) = out[start..authority_end].rfind('@')
            && let Some(colon) = out[start..start + at].find(':')
        {
            out.replace_range(start + colon + 1..start + at, hidden);
        }
    }
    if let Some(q) = out.find('?') {
        let query: Vec<String> = out[q + 1..]
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}={hidden}"),
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
        let check = |url: &str, expect: &str| assert_eq!(redact_url(url, "***"), expect, "{url}");
        check("mysql://u:p@h:3306/db", "mysql://u:***@h:3306/db");
        check("mysql://u:p@ss@h/db", "mysql://u:***@h/db");
        check("mysql://u:p:q@h", "mysql://u:***@h");
        check("mysql://u@h/db", "mysql://u@h/db");
        check("mysql://h/db?a=b@c:d", "mysql://h/db?a=b@c:d");
        check(
            "mysql://u:p@h/db?ssl-mode=required&password=x",
            "mysql://u:***@h/db?ssl-mode=required&password=***",
        );
        check("redis://:p@h:6379", "redis://:***@h:6379");
        check("sqlite://leaf-data/leaf.db", "sqlite://leaf-data/leaf.db");
        check("not a url", "not a url");
    }
}
