//! Prometheus metrics: counters and histograms kept with atomics on the request path, and the
//! text exposition format written by hand (a few dozen lines do not justify a registry crate).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::hash::Hash;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use leaf_core::Tag;

mod port;

/// Upper bounds (seconds) of the request-duration buckets.
const REQUEST_BUCKETS: [f64; 14] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// Upper bounds (seconds) of the segment-load buckets: a store round trip.
const LOAD_BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// A histogram with fixed buckets.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    // One per bound plus +Inf; not cumulative (cumulated when rendered).
    counts: Box<[AtomicU64]>,
    sum_ns: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_ns: AtomicU64::new(0),
        }
    }

    /// Records one observation.
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let i = self
            .bounds
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(self.bounds.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(
            d.as_nanos().min(u128::from(u64::MAX)) as u64,
            Ordering::Relaxed,
        );
    }

    fn render(&self, out: &mut Exposition, name: &str, labels: &[(&str, &str)]) {
        let mut cumulative = 0;
        for (i, count) in self.counts.iter().enumerate() {
            cumulative += count.load(Ordering::Relaxed);
            let le = match self.bounds.get(i) {
                Some(b) => b.to_string(),
                None => "+Inf".to_string(),
            };
            let mut l = labels.to_vec();
            l.push(("le", &le));
            out.sample(&format!("{name}_bucket"), &l, cumulative as f64);
        }
        out.sample(
            &format!("{name}_sum"),
            labels,
            self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9,
        );
        out.sample(&format!("{name}_count"), labels, cumulative as f64);
    }
}

/// One route's counters.
#[derive(Debug)]
struct RouteStats {
    // Indexed by status - 100, for 100..=599: a lock-free increment for every status.
    statuses: Box<[AtomicU64]>,
    duration: Histogram,
}

impl RouteStats {
    fn new() -> Self {
        RouteStats {
            statuses: (100..600).map(|_| AtomicU64::new(0)).collect(),
            duration: Histogram::new(&REQUEST_BUCKETS),
        }
    }
}

/// One gRPC method's counters: calls by final code (indexed by the code's number), durations.
#[derive(Debug)]
struct RpcStats {
    codes: [AtomicU64; 17],
    duration: Histogram,
}

impl RpcStats {
    fn new() -> Self {
        RpcStats {
            codes: std::array::from_fn(|_| AtomicU64::new(0)),
            duration: Histogram::new(&REQUEST_BUCKETS),
        }
    }
}

/// The canonical name of a gRPC code (`OK`, `NOT_FOUND`), the `code` label.
fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code as C;
    match code {
        C::Ok => "OK",
        C::Cancelled => "CANCELLED",
        C::Unknown => "UNKNOWN",
        C::InvalidArgument => "INVALID_ARGUMENT",
        C::DeadlineExceeded => "DEADLINE_EXCEEDED",
        C::NotFound => "NOT_FOUND",
        C::AlreadyExists => "ALREADY_EXISTS",
        C::PermissionDenied => "PERMISSION_DENIED",
        C::ResourceExhausted => "RESOURCE_EXHAUSTED",
        C::FailedPrecondition => "FAILED_PRECONDITION",
        C::Aborted => "ABORTED",
        C::OutOfRange => "OUT_OF_RANGE",
        C::Unimplemented => "UNIMPLEMENTED",
        C::Internal => "INTERNAL",
        C::Unavailable => "UNAVAILABLE",
        C::DataLoss => "DATA_LOSS",
        C::Unauthenticated => "UNAUTHENTICATED",
    }
}

/// The address family of a client, a label of the allocation counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    /// IPv4, IPv4-mapped IPv6 addresses included.
    Ipv4,
    /// IPv6.
    Ipv6,
    /// No socket peer known (a request handed to the router without one).
    Unknown,
}

impl Family {
    /// The family of `peer`.
    pub fn of(peer: Option<SocketAddr>) -> Self {
        match peer.map(|p| p.ip().to_canonical()) {
            Some(std::net::IpAddr::V4(_)) => Family::Ipv4,
            Some(std::net::IpAddr::V6(_)) => Family::Ipv6,
            None => Family::Unknown,
        }
    }

    /// The label value.
    pub fn label(self) -> &'static str {
        match self {
            Family::Ipv4 => "ipv4",
            Family::Ipv6 => "ipv6",
            Family::Unknown => "unknown",
        }
    }
}

/// Ranges reserved for leasing clients, of one tag and client address family.
#[derive(Debug, Default)]
struct ClientAllocations {
    ranges: AtomicU64,
    ids: AtomicU64,
}

/// Loads of a business tag's period rows.
#[derive(Debug, Default)]
struct Loads {
    ok: AtomicU64,
    failed: AtomicU64,
}

/// The shared value of `key` in `map`, made on first use. A read lock on the common path.
fn slot<K: Eq + Hash + Clone, V: Default>(map: &RwLock<HashMap<K, Arc<V>>>, key: &K) -> Arc<V> {
    if let Some(v) = map.read().unwrap_or_else(|p| p.into_inner()).get(key) {
        return v.clone();
    }
    map.write()
        .unwrap_or_else(|p| p.into_inner())
        .entry(key.clone())
        .or_default()
        .clone()
}

/// The server's own metrics (the allocator's and generator's state is read at scrape time).
#[derive(Debug)]
pub struct Metrics {
    routes: RwLock<HashMap<String, Arc<RouteStats>>>,
    rpcs: RwLock<HashMap<&'static str, Arc<RpcStats>>>,
    segment_issued: RwLock<HashMap<Tag, Arc<AtomicU64>>>,
    format_overflows: RwLock<HashMap<Tag, Arc<AtomicU64>>>,
    client_allocations: RwLock<HashMap<(Tag, Family), Arc<ClientAllocations>>>,
    business_loads: RwLock<HashMap<Tag, Arc<Loads>>>,
    snowflake_issued: AtomicU64,
    segment_load_duration: Histogram,
    /// The port's connections, token files and TLS.
    port: port::Port,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            routes: RwLock::default(),
            rpcs: RwLock::default(),
            segment_issued: RwLock::default(),
            format_overflows: RwLock::default(),
            client_allocations: RwLock::default(),
            business_loads: RwLock::default(),
            snowflake_issued: AtomicU64::new(0),
            segment_load_duration: Histogram::new(&LOAD_BUCKETS),
            port: port::Port::default(),
        }
    }
}

impl Metrics {
    /// Empty metrics.
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts one request of `route` (the route's pattern, never the raw path: bounded labels).
    pub fn observe_request(&self, route: &str, status: u16, took: Duration) {
        let stats = self.route(route);
        if let Some(slot) = status
            .checked_sub(100)
            .and_then(|i| stats.statuses.get(usize::from(i)))
        {
            slot.fetch_add(1, Ordering::Relaxed);
        }
        stats.duration.observe(took);
    }

    fn route(&self, route: &str) -> Arc<RouteStats> {
        if let Some(s) = self
            .routes
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(route)
        {
            return s.clone();
        }
        self.routes
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .entry(route.to_string())
            .or_insert_with(|| Arc::new(RouteStats::new()))
            .clone()
    }

    /// Counts one gRPC call of `method` (a label from a fixed list, never a client's path)
    /// that ended with `code`.
    pub fn observe_rpc(&self, method: &'static str, code: tonic::Code, took: Duration) {
        let stats = {
            let read = self.rpcs.read().unwrap_or_else(|p| p.into_inner());
            read.get(method).cloned()
        };
        let stats = stats.unwrap_or_else(|| {
            self.rpcs
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .entry(method)
                .or_insert_with(|| Arc::new(RpcStats::new()))
                .clone()
        });
        if let Some(slot) = stats.codes.get(code as usize) {
            slot.fetch_add(1, Ordering::Relaxed);
        }
        stats.duration.observe(took);
    }

    /// Counts `n` segment IDs issued for `tag`.
    pub fn segment_issued(&self, tag: &Tag, n: u64) {
        slot(&self.segment_issued, tag).fetch_add(n, Ordering::Relaxed);
    }

    /// Counts one request refused because a value of `tag` no longer fits its format's width.
    pub fn format_overflow(&self, tag: &Tag) {
        slot(&self.format_overflows, tag).fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one range of `ids` IDs of `tag` reserved for a leasing client of `family`.
    pub fn client_allocation(&self, tag: &Tag, family: Family, ids: u64) {
        let c = slot(&self.client_allocations, &(tag.clone(), family));
        c.ranges.fetch_add(1, Ordering::Relaxed);
        c.ids.fetch_add(ids, Ordering::Relaxed);
    }

    /// Counts `n` snowflake IDs issued.
    pub fn snowflake_issued(&self, n: u64) {
        self.snowflake_issued.fetch_add(n, Ordering::Relaxed);
    }

    /// Records one segment load's duration.
    pub fn segment_load(&self, took: Duration) {
        self.segment_load_duration.observe(took);
    }

    /// Records one load of a business tag's period row under its base tag `tag`: counted here,
    /// since the rows (whose snapshots count a plain tag's loads) come and go each period.
    pub fn business_load(&self, tag: &Tag, ok: bool, took: Duration) {
        self.segment_load(took);
        let loads = slot(&self.business_loads, tag);
        let n = if ok { &loads.ok } else { &loads.failed };
        n.fetch_add(1, Ordering::Relaxed);
    }

    /// Each business tag's loads, `(tag, ok, failed)`, in tag order.
    pub fn business_loads(&self) -> Vec<(Tag, u64, u64)> {
        let loads = self
            .business_loads
            .read()
            .unwrap_or_else(|p| p.into_inner());
        let mut all: Vec<_> = loads
            .iter()
            .map(|(t, n)| {
                let count = |a: &AtomicU64| a.load(Ordering::Relaxed);
                (t.clone(), count(&n.ok), count(&n.failed))
            })
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    /// Writes the counters and histograms kept here.
    pub fn render(&self, out: &mut Exposition) {
        out.family(
            "leaf_ids_issued_total",
            "IDs issued, by mode and tag",
            "counter",
        );
        per_tag(
            out,
            "leaf_ids_issued_total",
            &[("mode", "segment")],
            &self.segment_issued,
        );
        out.sample(
            "leaf_ids_issued_total",
            &[("mode", "snowflake"), ("tag", "")],
            self.snowflake_issued.load(Ordering::Relaxed) as f64,
        );
        out.family(
            "leaf_format_overflows_total",
            "Requests refused because a business tag's value no longer fits its format's width, \
             by tag",
            "counter",
        );
        per_tag(
            out,
            "leaf_format_overflows_total",
            &[],
            &self.format_overflows,
        );

        {
            let allocations = self
                .client_allocations
                .read()
                .unwrap_or_else(|p| p.into_inner());
            let mut rows: Vec<_> = allocations.iter().collect();
            rows.sort_by(|a, b| a.0.cmp(b.0));
            for (name, help, ids) in [
                (
                    "leaf_client_allocations_total",
                    "Ranges reserved for leasing clients (POST /v1/segment/{tag}/allocate), by tag \
                     and client address family",
                    false,
                ),
                (
                    "leaf_client_allocated_ids_total",
                    "IDs in the ranges reserved for leasing clients, by tag and client address \
                     family",
                    true,
                ),
            ] {
                out.family(name, help, "counter");
                for ((tag, family), c) in &rows {
                    let n = if ids { &c.ids } else { &c.ranges };
                    out.sample(
                        name,
                        &[("tag", tag.as_str()), ("family", family.label())],
                        n.load(Ordering::Relaxed) as f64,
                    );
                }
            }
        }

        let routes = self.routes.read().unwrap_or_else(|p| p.into_inner());
        let mut routes: Vec<_> = routes.iter().collect();
        routes.sort_by(|a, b| a.0.cmp(b.0));
        out.family(
            "leaf_requests_total",
            "HTTP requests, by route and status",
            "counter",
        );
        for (route, stats) in &routes {
            for (i, n) in stats.statuses.iter().enumerate() {
                let n = n.load(Ordering::Relaxed);
                if n > 0 {
                    let status = (i + 100).to_string();
                    out.sample(
                        "leaf_requests_total",
                        &[("route", route.as_str()), ("status", &status)],
                        n as f64,
                    );
                }
            }
        }
        out.family(
            "leaf_request_duration_seconds",
            "HTTP request duration, by route",
            "histogram",
        );
        for (route, stats) in &routes {
            stats.duration.render(
                out,
                "leaf_request_duration_seconds",
                &[("route", route.as_str())],
            );
        }
        let rpcs = self.rpcs.read().unwrap_or_else(|p| p.into_inner());
        let mut rpcs: Vec<_> = rpcs.iter().collect();
        rpcs.sort_by(|a, b| a.0.cmp(b.0));
        out.family(
            "leaf_grpc_requests_total",
            "gRPC calls, by method and final gRPC code (CANCELLED: the client went away)",
            "counter",
        );
        for (method, stats) in &rpcs {
            for (i, n) in stats.codes.iter().enumerate() {
                let n = n.load(Ordering::Relaxed);
                if n > 0 {
                    let code = code_name(tonic::Code::from_i32(i as i32));
                    out.sample(
                        "leaf_grpc_requests_total",
                        &[("method", method), ("code", code)],
                        n as f64,
                    );
                }
            }
        }
        out.family(
            "leaf_grpc_request_duration_seconds",
            "gRPC call duration until its status (a stream: its whole life), by method",
            "histogram",
        );
        for (method, stats) in &rpcs {
            stats.duration.render(
                out,
                "leaf_grpc_request_duration_seconds",
                &[("method", method)],
            );
        }
        self.port.render(out);
        out.family(
            "leaf_segment_load_duration_seconds",
            "Duration of segment loads from the store",
            "histogram",
        );
        self.segment_load_duration
            .render(out, "leaf_segment_load_duration_seconds", &[]);
    }
}

/// A Prometheus text exposition being written.
#[derive(Debug, Default)]
pub struct Exposition {
    text: String,
}

impl Exposition {
    /// An empty exposition.
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts a metric family: its `HELP` and `TYPE` lines.
    pub fn family(&mut self, name: &str, help: &str, kind: &str) {
        let _ = writeln!(self.text, "# HELP {name} {help}");
        let _ = writeln!(self.text, "# TYPE {name} {kind}");
    }

    /// Writes one sample.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.text.push_str(name);
        if !labels.is_empty() {
            self.text.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.text.push(',');
                }
                self.text.push_str(k);
                self.text.push_str("=\"");
                escape_label(&mut self.text, v);
                self.text.push('"');
            }
            self.text.push('}');
        }
        let _ = writeln!(self.text, " {}", format_value(value));
    }

    /// The text.
    pub fn finish(self) -> String {
        self.text
    }
}

fn escape_label(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

fn format_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        v.to_string()
    }
}

/// One sample of `name` per tag of `counts`, in tag order, with `labels` before the tag's.
fn per_tag(
    out: &mut Exposition,
    name: &str,
    labels: &[(&str, &str)],
    counts: &RwLock<HashMap<Tag, Arc<AtomicU64>>>,
) {
    let counts = counts.read().unwrap_or_else(|p| p.into_inner());
    let mut tags: Vec<_> = counts.iter().collect();
    tags.sort_by(|a, b| a.0.cmp(b.0));
    for (tag, n) in tags {
        let mut all = labels.to_vec();
        all.push(("tag", tag.as_str()));
        out.sample(name, &all, n.load(Ordering::Relaxed) as f64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_escaped() {
        let mut e = Exposition::new();
        e.sample("m", &[("tag", "a\"b\\c\nd")], 1.0);
        assert_eq!(e.finish(), "m{tag=\"a\\\"b\\\\c\\nd\"} 1\n");
    }

    #[test]
    fn requests_and_histograms_render() {
        let m = Metrics::new();
        m.observe_request("/api/segment/get/{*key}", 200, Duration::from_micros(50));
        m.observe_request("/api/segment/get/{*key}", 200, Duration::from_millis(2));
        m.observe_request("/api/segment/get/{*key}", 404, Duration::from_secs(9));
        m.segment_issued(&Tag::new("t").unwrap(), 5);
        m.segment_issued(&Tag::new("t").unwrap(), 2);
        m.snowflake_issued(3);
        let t = Tag::new("t").unwrap();
        m.client_allocation(&t, Family::of(Some("10.0.0.1:1".parse().unwrap())), 100);
        m.client_allocation(
            &t,
            Family::of(Some("[::ffff:10.0.0.1]:1".parse().unwrap())),
            50,
        );
        m.client_allocation(&t, Family::of(Some("[::1]:1".parse().unwrap())), 10);
        m.client_allocation(&t, Family::of(None), 1);
        let mut e = Exposition::new();
        m.render(&mut e);
        let text = e.finish();
        let has = |line: &str| assert!(text.lines().any(|l| l == line), "{line}\n{text}");
        has("leaf_ids_issued_total{mode=\"segment\",tag=\"t\"} 7");
        has("leaf_ids_issued_total{mode=\"snowflake\",tag=\"\"} 3");
        has("leaf_requests_total{route=\"/api/segment/get/{*key}\",status=\"200\"} 2");
        has("leaf_requests_total{route=\"/api/segment/get/{*key}\",status=\"404\"} 1");
        has(
            "leaf_request_duration_seconds_bucket{route=\"/api/segment/get/{*key}\",le=\"0.0001\"} 1",
        );
        has(
            "leaf_request_duration_seconds_bucket{route=\"/api/segment/get/{*key}\",le=\"0.0025\"} 2",
        );
        has(
            "leaf_request_duration_seconds_bucket{route=\"/api/segment/get/{*key}\",le=\"+Inf\"} 3",
        );
        has("leaf_request_duration_seconds_count{route=\"/api/segment/get/{*key}\"} 3");
        has("# TYPE leaf_segment_load_duration_seconds histogram");
        has("leaf_segment_load_duration_seconds_count 0");
        has("# TYPE leaf_client_allocations_total counter");
        has("leaf_client_allocations_total{tag=\"t\",family=\"ipv4\"} 2");
        has("leaf_client_allocations_total{tag=\"t\",family=\"ipv6\"} 1");
        has("leaf_client_allocations_total{tag=\"t\",family=\"unknown\"} 1");
        has("leaf_client_allocated_ids_total{tag=\"t\",family=\"ipv4\"} 150");
        has("leaf_client_allocated_ids_total{tag=\"t\",family=\"ipv6\"} 10");
    }

    #[test]
    fn rpcs_render_by_method_and_code_name() {
        let m = Metrics::new();
        let method = "/leaf.v1.Segment/NextSegmentIds";
        m.observe_rpc(method, tonic::Code::Ok, Duration::from_micros(50));
        m.observe_rpc(method, tonic::Code::Ok, Duration::from_micros(60));
        m.observe_rpc(method, tonic::Code::NotFound, Duration::from_millis(2));
        m.observe_rpc("unknown", tonic::Code::Unimplemented, Duration::ZERO);
        let mut e = Exposition::new();
        m.render(&mut e);
        let text = e.finish();
        let has = |line: &str| assert!(text.lines().any(|l| l == line), "{line}\n{text}");
        has("leaf_grpc_requests_total{method=\"/leaf.v1.Segment/NextSegmentIds\",code=\"OK\"} 2");
        has(
            "leaf_grpc_requests_total{method=\"/leaf.v1.Segment/NextSegmentIds\",code=\"NOT_FOUND\"} 1",
        );
        has("leaf_grpc_requests_total{method=\"unknown\",code=\"UNIMPLEMENTED\"} 1");
        has(
            "leaf_grpc_request_duration_seconds_count{method=\"/leaf.v1.Segment/NextSegmentIds\"} 3",
        );
        for i in 0..17 {
            let name = code_name(tonic::Code::from_i32(i));
            assert_eq!(name == "UNKNOWN", i == 2, "{i} {name}");
        }
    }
}
