//! The operator's console: `/` (the node at a glance), `/cache` (each tag's two buffers),
//! `/db` (the stored rows) and `/snowflake` (the generator and its lease), as small
//! self-contained HTML (`super::html`): every value escaped.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use leaf_business::Grouped;
use leaf_core::{SnowflakeLayout, TagRecord};
use leaf_segment::{SegmentView, TagSnapshot};
use leaf_snowflake::{SnowflakeState, SnowflakeStatus};

use super::html::{Page, duration_s, escape, int, page, time};

fn ready(r: &Result<(), String>) -> String {
    match r {
        Ok(()) => "<span class=\"ok\">ready</span>".into(),
        Err(why) => format!("<span class=\"bad\">not ready</span>: {}", escape(why)),
    }
}

/// What the index shows of a mode.
pub(crate) struct ModeInfo<'a> {
    /// The store or workerId mode.
    pub kind: &'a str,
    /// Ready, or why not.
    pub readiness: Result<(), String>,
}

/// What the index shows of the node.
pub(crate) struct NodeInfo<'a> {
    /// Leaf's `name`.
    pub name: &'a str,
    /// The server's version.
    pub version: &'a str,
    /// The node's identity (`ip:port`), once snowflake mode resolved it.
    pub identity: Option<String>,
    /// The address the server listens on.
    pub listen: String,
    /// When the process started (Unix ms).
    pub started_ms: u64,
    /// What leaves the node on the embedded one-node default, one sentence each.
    pub one_node: &'a [String],
    /// Segment mode, `None` when disabled.
    pub segment: Option<ModeInfo<'a>>,
    /// Snowflake mode, `None` when disabled; the worker id once one is held.
    pub snowflake: Option<(ModeInfo<'a>, Option<u64>)>,
    /// The monotonic mode, `None` when disabled.
    pub monotonic: Option<MonotonicLine>,
    /// Whether the gRPC API is served (`server.grpc`).
    pub grpc: bool,
}

/// The monotonic mode's line of the index.
pub(crate) enum MonotonicLine {
    /// This node leads: its window's end (Unix ms) and how many times it was elected.
    Leading { window_end_ms: u64, elections: u64 },
    /// Another node leads (its identity when known).
    Following { leader: Option<String> },
    /// The workerId mode cannot elect a leader: why.
    Refused(String),
}

/// `/`: the node, its modes and their readiness, and the way to every page.
pub(crate) fn index_page(node: &NodeInfo<'_>, now_ms: u64, refresh_s: Option<u32>) -> String {
    let mut b = String::new();
    if !node.one_node.is_empty() {
        b.push_str(
            "<section id=\"one-node\"><h2 class=\"bad\">For one node only</h2>\
             <p>This node runs on the embedded default; a second node on it would issue the \
             same IDs.</p><ul>",
        );
        for w in node.one_node {
            let _ = write!(b, "<li>{}</li>", escape(w));
        }
        b.push_str("</ul></section>\n");
    }
    b.push_str("<dl>");
    let _ = write!(
        b,
        "<dt>Node</dt><dd>{}</dd><dt>Listening on</dt><dd>{}</dd><dt>Leaf name</dt><dd>{}</dd>\
         <dt>Version</dt><dd>leaf-server {}</dd><dt>Started</dt><dd>{}</dd>",
        escape(
            node.identity
                .as_deref()
                .unwrap_or("not resolved (snowflake mode is off or not started)")
        ),
        escape(&node.listen),
        escape(node.name),
        escape(node.version),
        time(node.started_ms, now_ms),
    );
    match &node.segment {
        Some(m) => {
            let _ = write!(
                b,
                "<dt>Segment mode</dt><dd>store <code>{}</code>, {} · \
                 <a href=\"/cache\">cache</a> · <a href=\"/db\">table</a></dd>",
                m.kind,
                ready(&m.readiness)
            );
        }
        None => b.push_str("<dt>Segment mode</dt><dd class=\"muted\">disabled</dd>"),
    }
    match &node.snowflake {
        Some((m, worker)) => {
            let worker = worker.map_or_else(String::new, |w| format!("worker id {w}, "));
            let _ = write!(
                b,
                "<dt>Snowflake mode</dt><dd>workerId mode <code>{}</code>, {worker}{} · \
                 <a href=\"/snowflake\">generator and lease</a></dd>",
                m.kind,
                ready(&m.readiness)
            );
        }
        None => b.push_str("<dt>Snowflake mode</dt><dd class=\"muted\">disabled</dd>"),
    }
    match &node.monotonic {
        Some(MonotonicLine::Leading {
            window_end_ms,
            elections,
        }) => {
            let _ = write!(
                b,
                "<dt>Monotonic IDs</dt><dd><span class=\"ok\">this node leads</span> \
                 (elected {elections} time{}); window confirmed until {}</dd>",
                if *elections == 1 { "" } else { "s" },
                time(*window_end_ms, now_ms),
            );
        }
        Some(MonotonicLine::Following { leader }) => {
            let _ = write!(
                b,
                "<dt>Monotonic IDs</dt><dd>following: requests are forwarded to {}</dd>",
                match leader {
                    Some(l) => format!("<code>{}</code>", escape(l)),
                    None => "<span class=\"bad\">no leader known yet</span>".into(),
                }
            );
        }
        Some(MonotonicLine::Refused(why)) => {
            let _ = write!(
                b,
                "<dt>Monotonic IDs</dt><dd class=\"bad\">not served: {}</dd>",
                escape(why)
            );
        }
        None => b.push_str(
            "<dt>Monotonic IDs</dt><dd class=\"muted\">disabled (<code>monotonic.enabled = \
             false</code>)</dd>",
        ),
    }
    if node.grpc {
        b.push_str(
            "<dt>gRPC</dt><dd>on, this port (<code>application/grpc</code>): \
             <code>leaf.v1.Segment</code>, <code>leaf.v1.Snowflake</code>, \
             <code>leaf.v1.Monotonic</code>, <code>leaf.v1.Admin</code>, health, reflection</dd>",
        );
    } else {
        b.push_str("<dt>gRPC</dt><dd class=\"muted\">off (<code>server.grpc = false</code>)</dd>");
    }
    b.push_str(
        "</dl>\n<h2>Pages</h2><ul>\
         <li><a href=\"/cache\">Segment cache</a>: each tag's two buffers, consumption, loads</li>\
         <li><a href=\"/db\">Segment table</a>: the stored <code>leaf_alloc</code> rows</li>\
         <li><a href=\"/snowflake\">Snowflake</a>: worker id, lease, time mark, clock</li>\
         <li><a href=\"/metrics\">Metrics</a> (Prometheus) · <a href=\"/readyz\">Readiness</a> \
         (JSON) · <a href=\"/healthz\">Liveness</a></li></ul>\n",
    );
    page(Page::Index, "Node", now_ms, refresh_s, &b)
}

fn buffer_cells(view: Option<&SegmentView>, current: bool, label: &str) -> String {
    let class = if current { "num cur" } else { "num" };
    match view {
        Some(v) => format!(
            "<td class=\"{class}\" data-label=\"{label} next id\">{}</td>\
             <td class=\"{class}\" data-label=\"{label} max\">{}</td>\
             <td class=\"{class}\" data-label=\"{label} step\">{}</td>",
            int(v.value),
            int(v.max),
            int(v.step)
        ),
        None => format!("<td class=\"muted\" colspan=\"3\" data-label=\"{label}\">empty</td>"),
    }
}

/// A rate for people: one decimal below 10 IDs/s, whole numbers above.
fn rate(per_sec: f64) -> String {
    if per_sec < 10.0 {
        format!("{per_sec:.1}")
    } else {
        int(per_sec.round() as i64)
    }
}

/// `/cache`: per tag, the step of the next load beside the stored one, the two buffers (the
/// current one marked), what is left, the consumption and the loads. `stored` is the store's
/// rows (a stored tag this node has not loaded yet is listed as such), or why they could not be
/// read.
pub(crate) fn cache_page(
    snapshots: &[TagSnapshot],
    stored: Result<&[TagRecord], &str>,
    now_ms: u64,
    refresh_s: Option<u32>,
) -> String {
    let mut b = String::new();
    if let Err(why) = stored {
        let _ = writeln!(
            b,
            "<p class=\"bad\">The stored steps are unavailable: {}</p>",
            escape(why)
        );
    }
    let mut tags: BTreeMap<&str, (Option<&TagSnapshot>, Option<&TagRecord>)> = BTreeMap::new();
    for s in snapshots {
        tags.entry(s.tag.as_str()).or_default().0 = Some(s);
    }
    for r in stored.unwrap_or(&[]) {
        tags.entry(r.tag.as_str()).or_default().1 = Some(r);
    }
    if tags.is_empty() {
        b.push_str("<p class=\"muted\">No tags.</p>\n");
        return page(Page::Cache, "Segment cache", now_ms, refresh_s, &b);
    }
    b.push_str(
        "<table class=\"cards\"><thead>\
         <tr><th rowspan=\"2\">tag</th><th rowspan=\"2\">state</th><th colspan=\"2\">step</th>\
         <th colspan=\"3\">buffer A</th><th colspan=\"3\">buffer B</th>\
         <th rowspan=\"2\">IDs left</th><th rowspan=\"2\">IDs/s</th><th rowspan=\"2\">lasts</th>\
         <th colspan=\"2\">loads</th></tr>\
         <tr><th>next load</th><th>stored</th><th>next id</th><th>max</th><th>step</th>\
         <th>next id</th><th>max</th><th>step</th><th>ok</th><th>failed</th></tr>\
         </thead><tbody>\n",
    );
    for (tag, (snapshot, row)) in tags {
        let stored_step = match (row, stored) {
            (Some(r), _) => int(r.step),
            (None, Ok(_)) => "-".into(),
            (None, Err(_)) => "?".into(),
        };
        let tag = escape(tag);
        let Some(s) = snapshot.filter(|s| s.initialized) else {
            let _ = writeln!(
                b,
                "<tr><td class=\"head\" data-label=\"tag\">{tag}</td>\
                 <td class=\"muted\" data-label=\"state\">not loaded</td>\
                 <td class=\"num muted\" data-label=\"next load step\">-</td>\
                 <td class=\"num\" data-label=\"stored step\">{stored_step}</td>\
                 <td class=\"muted\" colspan=\"11\" data-label=\"buffers\">no segment taken \
                 since start-up; the first request loads one</td></tr>"
            );
            continue;
        };
        let next = match (s.next_ready, s.loading) {
            (true, _) => "next ready",
            (false, true) => "loading the next",
            (false, false) => "next not loaded yet",
        };
        let lasts = s.buffered_secs.map_or_else(|| "-".to_string(), duration_s);
        let _ = writeln!(
            b,
            "<tr><td class=\"head\" data-label=\"tag\">{tag}</td>\
             <td data-label=\"state\">{} in use, {next}</td>\
             <td class=\"num\" data-label=\"next load step\">{}</td>\
             <td class=\"num\" data-label=\"stored step\">{stored_step}</td>{}{}\
             <td class=\"num\" data-label=\"IDs left\">{}</td>\
             <td class=\"num\" data-label=\"IDs/s\">{}</td>\
             <td class=\"num\" data-label=\"lasts\">{lasts}</td>\
             <td class=\"num\" data-label=\"loads ok\">{}</td>\
             <td class=\"num\" data-label=\"loads failed\">{}</td></tr>",
            if s.current == 0 { "A" } else { "B" },
            int(s.step),
            buffer_cells(s.buffers[0].as_ref(), s.current == 0, "A"),
            buffer_cells(s.buffers[1].as_ref(), s.current == 1, "B"),
            int(s.remaining),
            rate(s.ids_per_sec),
            int(s.loads_ok),
            int(s.loads_failed),
        );
    }
    b.push_str(
        "</tbody></table>\n<p class=\"meta\">The buffer in use is shaded. <em>next load</em> is \
         the step the next load asks for (Leaf's dynamic step: doubled while segments last under \
         15 minutes); <em>stored</em> is the row's step, the floor it never goes below. \
         <em>lasts</em> is how long the IDs left last at the recent rate.</p>\n",
    );
    page(Page::Cache, "Segment cache", now_ms, refresh_s, &b)
}

/// `/db`: the stored rows.
/// How many of a business tag's latest period rows `/db` shows under it.
const PERIODS_SHOWN: usize = 7;

pub(crate) fn db_page(rows: &[Grouped], now_ms: u64, refresh_s: Option<u32>) -> String {
    let mut b = String::new();
    if rows.is_empty() {
        b.push_str("<p class=\"muted\">No rows.</p>\n");
        return page(Page::Db, "Segment table", now_ms, refresh_s, &b);
    }
    b.push_str(
        "<table class=\"cards\"><thead><tr><th>biz_tag</th><th>max_id</th><th>step</th>\
         <th>description</th><th>update_time</th></tr></thead><tbody>\n",
    );
    for g in rows {
        match &g.definition {
            None => db_row(&mut b, &g.record, escape(g.record.tag.as_str()), now_ms),
            Some(def) => {
                let p = def.props();
                let _ = writeln!(
                    b,
                    "<tr><td class=\"head\" data-label=\"biz_tag\">{}</td>\
                     <td class=\"num\" data-label=\"max_id\"></td>\
                     <td class=\"num\" data-label=\"step\">{}</td>\
                     <td data-label=\"description\">business tag: <code>{}</code>, {}, {}, \
                     first {}</td><td data-label=\"update_time\"></td></tr>",
                    escape(def.base().as_str()),
                    int(def.step()),
                    escape(p.format().as_str()),
                    p.reset().map_or("never restarts".to_owned(), |r| format!(
                        "restarts each {r}"
                    )),
                    escape(p.zone().name()),
                    int(p.first()),
                );
                let hidden = g.periods.len().saturating_sub(PERIODS_SHOWN);
                if hidden > 0 {
                    let _ = writeln!(
                        b,
                        "<tr><td class=\"muted\" colspan=\"5\">&nbsp;&nbsp;… {hidden} earlier \
                         period rows (GET /v1/tags lists them all)</td></tr>"
                    );
                }
                for r in &g.periods[hidden..] {
                    let name = format!("&nbsp;&nbsp;↳ {}", escape(r.tag.as_str()));
                    db_row(&mut b, r, name, now_ms);
                }
            }
        }
    }
    b.push_str("</tbody></table>\n");
    page(Page::Db, "Segment table", now_ms, refresh_s, &b)
}

/// One stored row of `/db`, its name as given (escaped).
fn db_row(b: &mut String, r: &TagRecord, name: String, now_ms: u64) {
    let updated = r
        .updated_at_ms
        .and_then(|ms| u64::try_from(ms).ok())
        .map_or_else(String::new, |ms| time(ms, now_ms));
    let _ = writeln!(
        b,
        "<tr><td class=\"head\" data-label=\"biz_tag\">{name}</td>\
         <td class=\"num\" data-label=\"max_id\">{}</td>\
         <td class=\"num\" data-label=\"step\">{}</td>\
         <td data-label=\"description\">{}</td>\
         <td data-label=\"update_time\">{updated}</td></tr>",
        int(r.max_id),
        int(r.step),
        escape(r.description.as_deref().unwrap_or("")),
    );
}

/// What `/snowflake` shows.
pub(crate) enum SnowflakeView<'a> {
    /// Snowflake mode is off.
    Disabled,
    /// Not started (yet, or refused): why.
    NotStarted(&'a str),
    /// The generator's status and layout.
    Running(&'a SnowflakeStatus, &'a SnowflakeLayout),
}

fn state_text(state: &SnowflakeState) -> String {
    match state {
        SnowflakeState::Ready => "<span class=\"ok\">issuing</span>".into(),
        SnowflakeState::WaitingForClock { behind_ms } => format!(
            "waiting: the clock is {} behind the previous mark",
            duration_s(*behind_ms as f64 / 1000.0)
        ),
        SnowflakeState::Unavailable { reason } => {
            format!("<span class=\"bad\">unavailable</span>: {}", escape(reason))
        }
        SnowflakeState::Exhausted { reason } => {
            format!("<span class=\"bad\">exhausted</span>: {}", escape(reason))
        }
        SnowflakeState::ClockJumped { ahead_ms } => format!(
            "<span class=\"bad\">stopped</span>: the wall clock jumped {} ahead of the \
             monotonic clock",
            duration_s(*ahead_ms as f64 / 1000.0)
        ),
        SnowflakeState::LeaseLost => {
            "<span class=\"bad\">stopped</span>: the worker id's lease is lost or not renewed \
             in time; the renewer keeps trying"
                .into()
        }
        SnowflakeState::Closed => "shut down".into(),
    }
}

/// `/snowflake`: the workerId mode, the worker id and its lease, the time mark, the clock and
/// the layout.
pub(crate) fn snowflake_page(
    view: &SnowflakeView<'_>,
    now_ms: u64,
    refresh_s: Option<u32>,
) -> String {
    let (st, layout) = match view {
        SnowflakeView::Disabled => {
            let b = "<p class=\"muted\">Snowflake mode is disabled (<code>snowflake.enabled = \
                     false</code>).</p>\n";
            return page(Page::Snowflake, "Snowflake", now_ms, refresh_s, b);
        }
        SnowflakeView::NotStarted(why) => {
            let b = format!(
                "<p><span class=\"bad\">Not started</span>: {}</p>\n",
                escape(why)
            );
            return page(Page::Snowflake, "Snowflake", now_ms, refresh_s, &b);
        }
        SnowflakeView::Running(st, layout) => (*st, *layout),
    };
    let mut b = String::from("<dl>");
    let lease = match (st.lease_ttl_ms, st.lease_valid_for_ms) {
        (Some(ttl), Some(left)) => format!(
            "TTL {}; issuing allowed until {} without another renewal",
            duration_s(ttl as f64 / 1000.0),
            time(now_ms + left, now_ms)
        ),
        _ => "held for as long as the process runs (this mode never takes the id away)".into(),
    };
    let last = st
        .last_timestamp_ms
        .map_or_else(|| "none yet".to_string(), |ms| time(ms, now_ms));
    let registry = st.registry_mark_ms.map_or_else(String::new, |ms| {
        format!(
            "<dt>Mark in the registry</dt><dd>{} ({} behind the durable mark)</dd>",
            time(ms, now_ms),
            duration_s(st.durable_mark_ms.saturating_sub(ms) as f64 / 1000.0)
        )
    });
    let _ = write!(
        b,
        "<dt>State</dt><dd>{}</dd><dt>workerId mode</dt><dd><code>{}</code></dd>\
         <dt>Worker id</dt><dd>{} (of 0..={})</dd><dt>Lease</dt><dd>{} {lease}</dd>\
         <dt>Time mark</dt><dd>{}: no ID carries a later timestamp until it moves</dd>{registry}\
         <dt>Last ID's timestamp</dt><dd>{last}</dd>\
         <dt>Clock</dt><dd>found behind the last ID {} times, jumped forward {} times</dd></dl>",
        state_text(&st.state),
        st.mode,
        st.worker_id,
        int(layout.max_worker_id()),
        if st.lease_valid {
            "<span class=\"ok\">valid</span>;"
        } else {
            "<span class=\"bad\">not valid</span>;"
        },
        time(st.durable_mark_ms, now_ms),
        int(st.clock_backwards_total),
        int(st.clock_jumps_total),
    );
    let _ = write!(
        b,
        "<h2>Layout</h2><dl><dt>Bits</dt><dd>1 sign · {} timestamp · {} worker · {} sequence</dd>\
         <dt>Epoch</dt><dd>{}</dd><dt>Timestamps run out</dt><dd>{}</dd>\
         <dt>Capacity</dt><dd>{} IDs per millisecond per worker</dd></dl>",
        layout.timestamp_bits(),
        layout.worker_bits(),
        layout.sequence_bits(),
        time(layout.epoch_ms(), now_ms),
        time(layout.max_timestamp_ms(), now_ms),
        int(layout.ids_per_ms()),
    );
    b.push('\n');
    page(Page::Snowflake, "Snowflake", now_ms, refresh_s, &b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use leaf_core::Tag;

    const NOW: u64 = 1_795_000_000_000;

    #[test]
    fn escaping_table() {
        assert_eq!(escape("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&#39;");
        assert_eq!(escape("plain"), "plain");
    }

    #[test]
    fn numbers_durations_and_times_for_people() {
        let check = |v: i64, s: &str| assert_eq!(int(v), s, "{v}");
        check(0, "0");
        check(999, "999");
        check(1000, "1,000");
        check(1_234_567, "1,234,567");
        check(-1_234_567, "-1,234,567");
        check(i64::MAX, "9,223,372,036,854,775,807");
        let check = |s: f64, out: &str| assert_eq!(duration_s(s), out, "{s}");
        check(0.2, "< 1 s");
        check(45.0, "45 s");
        check(60.0, "1 m");
        check(725.0, "12 m 5 s");
        check(5760.0, "1 h 36 m");
        check(7200.0, "2 h");
        check(3.0 * 86_400.0 + 4.0 * 3600.0 + 59.0, "3 d 4 h");
        check(f64::INFINITY, "-");
        assert_eq!(
            time(1_795_000_000_000 - 12_000, NOW),
            "2026-11-18 11:06:28 UTC (12 s ago)"
        );
        assert_eq!(time(NOW + 3_000, NOW), "2026-11-18 11:06:43 UTC (in 3 s)");
        assert_eq!(time(NOW, NOW), "2026-11-18 11:06:40 UTC (now)");
    }

    /// A node with no mode but the ones given.
    fn bare_node(grpc: bool, monotonic: Option<MonotonicLine>) -> NodeInfo<'static> {
        NodeInfo {
            name: "leaf",
            version: "0",
            identity: None,
            listen: "0.0.0.0:8080".into(),
            started_ms: NOW,
            segment: None,
            snowflake: None,
            monotonic,
            grpc,
            one_node: &[],
        }
    }

    #[test]
    fn the_index_says_whether_grpc_is_on() {
        let node = |grpc| bare_node(grpc, None);
        let on = index_page(&node(true), NOW, None);
        assert!(on.contains("<dt>gRPC</dt><dd>on, this port"), "{on}");
        let off = index_page(&node(false), NOW, None);
        assert!(
            off.contains("off (<code>server.grpc = false</code>)"),
            "{off}"
        );
    }

    #[test]
    fn the_index_says_who_leads_the_monotonic_ids() {
        let node = |monotonic| bare_node(true, monotonic);
        let lines = [
            (
                Some(MonotonicLine::Leading {
                    window_end_ms: NOW + 3_000,
                    elections: 1,
                }),
                "this node leads</span> (elected 1 time); window confirmed until \
                 2026-11-18 11:06:43 UTC (in 3 s)",
            ),
            (
                Some(MonotonicLine::Following {
                    leader: Some("10.0.0.2:8080".into()),
                }),
                "forwarded to <code>10.0.0.2:8080</code>",
            ),
            (
                Some(MonotonicLine::Following { leader: None }),
                "no leader known yet",
            ),
            (
                Some(MonotonicLine::Refused("<mysql> cannot".into())),
                "not served: &lt;mysql&gt; cannot",
            ),
            (None, "<code>monotonic.enabled = false</code>"),
        ];
        for (line, shown) in lines {
            let html = index_page(&node(line), NOW, None);
            assert!(html.contains(shown), "{shown}: {html}");
        }
    }

    #[test]
    fn every_page_has_a_viewport_the_navigation_and_its_generation_time() {
        let html = db_page(&[], NOW, Some(5));
        assert!(html.contains("name=\"viewport\""), "{html}");
        for href in ["/", "/cache", "/db", "/snowflake", "/metrics"] {
            assert!(html.contains(&format!("href=\"{href}\"")), "{href}: {html}");
        }
        assert!(html.contains("Generated 2026-11-18 11:06:40 UTC"), "{html}");
        assert!(
            html.contains("http-equiv=\"refresh\" content=\"5\""),
            "{html}"
        );
        assert!(!db_page(&[], NOW, None).contains("http-equiv"));
        assert!(!html.contains("<script"), "no script");
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
        let html = db_page(&leaf_business::group_rows(rows.to_vec()), NOW, None);
        assert!(!html.contains("<script>"), "{html}");
        assert!(html.contains("&lt;script&gt;"), "{html}");
        assert!(html.contains("x &amp; &lt;b&gt;"), "{html}");
        assert!(html.contains("2023-11-14 22:13:20 UTC"), "{html}");
        assert!(html.contains(">2,001<"), "{html}");
    }

    fn row(tag: &str, description: Option<&str>) -> TagRecord {
        TagRecord {
            tag: Tag::new(tag).unwrap(),
            max_id: 101,
            step: 100,
            description: description.map(str::to_owned),
            updated_at_ms: Some(1_700_000_000_123),
        }
    }

    #[test]
    fn db_page_shows_a_business_tag_with_its_latest_periods_under_it() {
        let mut rows = vec![
            row("plain", None),
            row(
                "order@",
                Some(
                    "leaf-props:v1 reset=day zone=Asia/Shanghai first=1 format=O{date:%Y%m%d}{seq:04}",
                ),
            ),
            // A period row without a definition stays a row of its own.
            row("lost@20261101", None),
        ];
        for day in 1..=10 {
            rows.push(row(
                &format!("order@202611{day:02}"),
                Some("period of order"),
            ));
        }
        let html = db_page(&leaf_business::group_rows(rows), NOW, None);
        assert!(
            html.contains("business tag: <code>O{date:%Y%m%d}{seq:04}</code>"),
            "{html}"
        );
        assert!(html.contains("restarts each day, Asia/Shanghai"), "{html}");
        assert!(html.contains("3 earlier period rows"), "{html}");
        assert!(!html.contains("order@20261103"), "{html}");
        assert!(html.contains("↳ order@20261104"), "{html}");
        assert!(html.contains("↳ order@20261110"), "{html}");
        assert!(html.contains(">lost@20261101<"), "{html}");
        let order = html.find(">order<").expect("the base tag");
        assert!(order < html.find("order@20261110").unwrap(), "{html}");
    }

    fn snapshot(tag: &str, initialized: bool) -> TagSnapshot {
        TagSnapshot {
            tag: Tag::new(tag).unwrap(),
            initialized,
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
            step: 8000,
            remaining: 2501,
            ids_per_sec: 10.0,
            buffered_secs: Some(5760.0),
            loads_ok: 2,
            loads_failed: 0,
        }
    }

    #[test]
    fn cache_page_tells_the_steps_apart_and_marks_the_current_buffer() {
        let rows = [TagRecord {
            tag: Tag::new("t\"").unwrap(),
            max_id: 4001,
            step: 1000,
            description: None,
            updated_at_ms: None,
        }];
        let html = cache_page(&[snapshot("t\"", true)], Ok(&rows), NOW, None);
        assert!(html.contains("t&quot;"), "{html}");
        assert!(
            html.contains("data-label=\"next load step\">8,000<")
                && html.contains("data-label=\"stored step\">1,000<"),
            "{html}"
        );
        assert!(
            html.contains("<td class=\"num cur\" data-label=\"A next id\">1,500</td>"),
            "{html}"
        );
        assert!(
            html.contains("<td class=\"num\" data-label=\"B max\">4,001</td>"),
            "{html}"
        );
        assert!(html.contains(">1 h 36 m<"), "{html}");
        assert!(html.contains("<th colspan=\"3\">buffer A</th>"), "{html}");
    }

    #[test]
    fn a_tag_never_loaded_says_so_instead_of_zeros() {
        let html = cache_page(&[snapshot("idle", false)], Err("store down"), NOW, None);
        assert!(html.contains("not loaded"), "{html}");
        assert!(!html.contains("class=\"num cur\""), "{html}");
        assert!(
            html.contains("stored steps are unavailable: store down"),
            "{html}"
        );
        // A stored tag the allocator does not know yet is listed too.
        let rows = [TagRecord {
            tag: Tag::new("new").unwrap(),
            max_id: 1,
            step: 500,
            description: None,
            updated_at_ms: None,
        }];
        let html = cache_page(&[], Ok(&rows), NOW, None);
        assert!(
            html.contains(
                "data-label=\"tag\">new</td><td class=\"muted\" data-label=\"state\">not loaded"
            ),
            "{html}"
        );
        assert!(html.contains("data-label=\"stored step\">500<"), "{html}");
    }
}
