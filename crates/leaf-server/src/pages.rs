//! The monitor pages of Leaf, `/cache` (each tag's two buffers) and `/db` (the stored rows), as
//! small self-contained HTML with every value escaped.

use std::fmt::Write as _;

use leaf_core::TagRecord;
use leaf_core::layout::format_utc_ms;
use leaf_segment::{SegmentView, TagSnapshot};

/// Escapes text for HTML content and attribute values.
pub fn escape(s: &str) -> String {
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

fn page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{t}</title>\
         <style>body{{font-family:sans-serif}}table{{border-collapse:collapse}}\
         td,th{{border:1px solid #999;padding:2px 8px;text-align:right}}\
         .current{{background:#dfd}}</style></head>\n<body><h1>{t}</h1>\n{body}</body></html>\n",
        t = escape(title)
    )
}

fn buffer_cell(view: Option<&SegmentView>, current: bool) -> String {
    let class = if current { " class=\"current\"" } else { "" };
    match view {
        Some(v) => format!(
            "<td{class}>{}</td><td{class}>{}</td><td{class}>{}</td>",
            v.value, v.max, v.step
        ),
        None => format!("<td{class} colspan=\"3\">empty</td>"),
    }
}

/// The `/cache` page: per tag, the two buffers (value, max, step), which one is current, whether
/// the next is ready, and the consumption.
pub fn cache_page(snapshots: &[TagSnapshot]) -> String {
    let mut b = String::from(
        "<table>\n<tr><th>tag</th><th>init</th><th>current</th><th>next ready</th>\
         <th>loading</th><th>step</th><th>buffer 0 value</th><th>max</th><th>step</th>\
         <th>buffer 1 value</th><th>max</th><th>step</th><th>remaining</th><th>IDs/s</th>\
         <th>lasts (s)</th><th>loads ok</th><th>loads failed</th></tr>\n",
    );
    for s in snapshots {
        let lasts = s
            .buffered_secs
            .map_or_else(|| "-".to_string(), |v| format!("{v:.0}"));
        let _ = writeln!(
            b,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>{}{}\
             <td>{}</td><td>{:.1}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(s.tag.as_str()),
            s.initialized,
            s.current,
            s.next_ready,
            s.loading,
            s.step,
            buffer_cell(s.buffers[0].as_ref(), s.current == 0),
            buffer_cell(s.buffers[1].as_ref(), s.current == 1),
            s.remaining,
            s.ids_per_sec,
            lasts,
            s.loads_ok,
            s.loads_failed,
        );
    }
    b.push_str("</table>\n");
    page("Leaf segment cache", &b)
}

/// The `/db` page: the stored rows.
pub fn db_page(rows: &[TagRecord]) -> String {
    let mut b = String::from(
        "<table>\n<tr><th>biz_tag</th><th>max_id</th><th>step</th><th>description</th>\
         <th>update_time (UTC)</th></tr>\n",
    );
    for r in rows {
        let updated = r
            .updated_at_ms
            .and_then(|ms| u64::try_from(ms).ok())
            .map_or_else(String::new, format_utc_ms);
        let _ = writeln!(
            b,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(r.tag.as_str()),
            r.max_id,
            r.step,
            escape(r.description.as_deref().unwrap_or("")),
            updated,
        );
    }
    b.push_str("</table>\n");
    page("Leaf segment table", &b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use leaf_core::Tag;

    #[test]
    fn escaping_table() {
        assert_eq!(escape("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&#39;");
        assert_eq!(escape("plain"), "plain");
    }

    #[test]
    fn db_page_escapes_tags_and_descriptions() {
        let rows = [TagRecord {
            tag: Tag::new("<script>").unwrap(),
            max_id: 2001,
            step: 2000,
            description: Some("x & <b>".into()),
            updated_at_ms: Some(1_700_000_000_123),
        }];
        let html = db_page(&rows);
        assert!(!html.contains("<script>"), "{html}");
        assert!(html.contains("&lt;script&gt;"), "{html}");
        assert!(html.contains("x &amp; &lt;b&gt;"), "{html}");
        assert!(html.contains("2023-11-14T22:13:20.123Z"), "{html}");
    }

    #[test]
    fn cache_page_shows_both_buffers_and_the_current_one() {
        let snap = TagSnapshot {
            tag: Tag::new("t\"").unwrap(),
            initialized: true,
            buffers: [
                Some(SegmentView {
                    value: 1500,
                    max: 2001,
                    step: 2000,
                }),
                Some(SegmentView {
                    value: 2001,
                    max: 4001,
                    step: 2000,
                }),
            ],
            current: 0,
            next_ready: true,
            loading: false,
            step: 2000,
            remaining: 2501,
            ids_per_sec: 10.0,
            buffered_secs: Some(250.1),
            loads_ok: 2,
            loads_failed: 0,
        };
        let html = cache_page(&[snap]);
        assert!(html.contains("t&quot;"), "{html}");
        assert!(
            html.contains("<td class=\"current\">1500</td><td class=\"current\">2001</td>"),
            "{html}"
        );
        assert!(
            html.contains("<td>2001</td><td>4001</td><td>2000</td>"),
            "{html}"
        );
    }
}
