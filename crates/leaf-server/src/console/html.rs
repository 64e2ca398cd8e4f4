//! The console's HTML around its pages: escaping, numbers, durations and times as people read
//! them, and the page itself (its navigation, its style: no script, no asset from another host,
//! tables that turn into cards on a phone).

use std::fmt::Write as _;

use leaf_core::utc_parts;

/// Escapes text for HTML content and attribute values.
pub(crate) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// An integer with thousands separators: `1,234,567`.
pub(crate) fn int(v: impl Into<i128>) -> String {
    let v: i128 = v.into();
    let digits = v.unsigned_abs().to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    if v < 0 {
        out.push('-');
    }
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A duration for people: `45 s`, `12 m 5 s`, `1 h 36 m`, `3 d 4 h`; below a second, `< 1 s`.
pub(crate) fn duration_s(secs: f64) -> String {
    if !secs.is_finite() {
        return "-".into();
    }
    let s = secs.max(0.0).round() as u64;
    if secs < 1.0 {
        return "< 1 s".into();
    }
    let (d, h, m, s) = (s / 86_400, s % 86_400 / 3600, s % 3600 / 60, s % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s} s"),
        (0, 0, _) if s > 0 => format!("{m} m {s} s"),
        (0, 0, _) => format!("{m} m"),
        (0, _, _) if m > 0 => format!("{h} h {m} m"),
        (0, _, _) => format!("{h} h"),
        _ if h > 0 => format!("{} d {h} h", int(d)),
        _ => format!("{} d", int(d)),
    }
}

/// A moment for people: `2026-11-24 20:58:39 UTC (12 s ago)`, or `(in 3 s)` ahead of `now_ms`.
pub(crate) fn time(ms: u64, now_ms: u64) -> String {
    let (y, mo, d, h, mi, s, _) = utc_parts(ms);
    let relative = if ms + 500 < now_ms {
        format!("{} ago", duration_s((now_ms - ms) as f64 / 1000.0))
    } else if ms > now_ms + 500 {
        format!("in {}", duration_s((ms - now_ms) as f64 / 1000.0))
    } else {
        "now".into()
    };
    format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02} UTC ({relative})")
}

/// The pages of the console, for the navigation bar.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Page {
    /// `/`.
    Index,
    /// `/cache`.
    Cache,
    /// `/db`.
    Db,
    /// `/snowflake`.
    Snowflake,
}

const NAV: [(Page, &str, &str); 4] = [
    (Page::Index, "/", "Node"),
    (Page::Cache, "/cache", "Segment cache"),
    (Page::Db, "/db", "Segment table"),
    (Page::Snowflake, "/snowflake", "Snowflake"),
];

const STYLE: &str = "\
:root{color-scheme:light dark;--line:#8884;--muted:#777;--ok:#1a7f37;--bad:#c62828;--hi:#2e7d3222}\
*{box-sizing:border-box}\
body{font:15px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:0;padding:0 1rem 2rem}\
nav{display:flex;flex-wrap:wrap;gap:.25rem 1rem;padding:.6rem 0;border-bottom:1px solid var(--line)}\
nav a{text-decoration:none}nav a[aria-current]{font-weight:600;text-decoration:underline}\
h1{font-size:1.35rem;margin:1rem 0 .2rem}h2{font-size:1.1rem;margin:1.4rem 0 .4rem}\
.meta{color:var(--muted);margin:0 0 1rem;font-size:.9rem}\
table{border-collapse:collapse;margin:.3rem 0}\
th,td{border:1px solid var(--line);padding:.25rem .55rem;text-align:left;vertical-align:top}\
thead th{background:#8881}\
.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}\
.cur{background:var(--hi)}.muted{color:var(--muted)}\
.ok{color:var(--ok);font-weight:600}.bad{color:var(--bad);font-weight:600}\
dl{display:grid;grid-template-columns:max-content 1fr;gap:.3rem 1.2rem;margin:.3rem 0}\
dt{color:var(--muted)}dd{margin:0;overflow-wrap:anywhere}\
code{font-size:.92em}\
@media (max-width:640px){\
table.cards,table.cards tbody,table.cards tr{display:block;width:100%}\
table.cards thead{display:none}\
table.cards tr{border:1px solid var(--line);margin:.6rem 0;padding:.2rem 0}\
table.cards td{display:flex;justify-content:space-between;gap:.8rem;border:0;\
padding:.12rem .6rem;text-align:right;overflow-wrap:anywhere}\
table.cards td::before{content:attr(data-label);flex:none;color:var(--muted);text-align:left}\
table.cards td.head{font-weight:600;text-align:left}table.cards td.head::before{content:none}\
dl{grid-template-columns:1fr}dd{margin-bottom:.4rem}}";

/// A whole page: the navigation, `title`, when it was generated, an optional refresh (in
/// seconds, opt-in with `?refresh=N`), and `body`.
pub(crate) fn page(
    current: Page,
    title: &str,
    now_ms: u64,
    refresh_s: Option<u32>,
    body: &str,
) -> String {
    let mut nav = String::new();
    for (p, href, label) in NAV {
        let aria = if p == current {
            " aria-current=\"page\""
        } else {
            ""
        };
        let _ = write!(nav, "<a href=\"{href}\"{aria}>{label}</a>");
    }
    nav.push_str("<a href=\"/metrics\">Metrics</a><a href=\"/readyz\">Readiness</a>");
    let refresh_meta = refresh_s.map_or_else(String::new, |s| {
        format!("<meta http-equiv=\"refresh\" content=\"{s}\">")
    });
    let refresh_note = match refresh_s {
        Some(s) => format!(", refreshed every {s} s"),
        None => ", add <code>?refresh=5</code> to refresh".into(),
    };
    let (y, mo, d, h, mi, s, _) = utc_parts(now_ms);
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">{refresh_meta}\
         <title>{t} · Leaf</title><style>{STYLE}</style></head>\n<body><nav>{nav}</nav>\n\
         <h1>{t}</h1><p class=\"meta\">Generated {y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02} \
         UTC{refresh_note}</p>\n{body}</body></html>\n",
        t = escape(title)
    )
}
