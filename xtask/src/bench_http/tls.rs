//! `--tls`: TLS on the port beside plaintext, in one session: the same release binary started
//! twice, one with `[server.tls]` (a certificate `leaf-loadgen --certs` makes: ECDSA P-256 for
//! 127.0.0.1), one without, both segment mode only on SQLite, and `leaf-loadgen` driving each
//! the same way, with the same connections and one request in flight on each (`--ca` for the TLS
//! one: rustls, TLS 1.3). Each pair runs plaintext first, then TLS, after a warm-up of both:
//! HTTP/1.1 single IDs and `count=1000` batches, gRPC `NextSegmentIds` (h2c against h2 by ALPN)
//! single and 1000; and the handshake's cost, new connections per second (`connect`: TCP
//! connect, the full TLS handshake without resumption, one GET with `Connection: close`) with
//! every connection busy, and the time of one such connection alone. The list runs twice, so
//! that a drift of the machine shows; beside each rate, the CPU time per call of the server and
//! the generator together (from `/proc/PID/stat`), which other work on the machine does not
//! distort as it does the rates.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

use super::grpc::{Run, loadgen, loadgen_with};
use super::server::{Server, cpu_seconds, server_command};
use super::{CONNECTIONS, SEGMENT};

/// One comparison: its name, the load generator's arguments, and its connections.
struct Pair {
    name: &'static str,
    args: &'static [&'static str],
    connections: u32,
}

const PAIRS: &[Pair] = &[
    Pair {
        name: "HTTP/1.1 GET /api/segment/get/{tag}",
        args: &["http"],
        connections: CONNECTIONS,
    },
    Pair {
        name: "HTTP/1.1 GET /v1/segment/{tag}?count=1000",
        args: &["http", "--count", "1000"],
        connections: CONNECTIONS,
    },
    Pair {
        name: "gRPC NextSegmentIds { count: 1 }",
        args: &["grpc"],
        connections: CONNECTIONS,
    },
    Pair {
        name: "gRPC NextSegmentIds { count: 1000 }",
        args: &["grpc", "--count", "1000"],
        connections: CONNECTIONS,
    },
    Pair {
        name: "new connection per request (32 at once)",
        args: &["connect"],
        connections: CONNECTIONS,
    },
    Pair {
        name: "new connection per request (one at a time)",
        args: &["connect"],
        connections: 1,
    },
];

/// How many times the whole list runs.
const ROUNDS: usize = 2;

/// One measured run against `server`, and the CPU seconds that the server and the generator
/// spent, together and the server alone.
struct Measured {
    run: Run,
    cpu_s: f64,
    server_s: f64,
}

/// One side of a line (plaintext or TLS): its runs, one a round.
#[derive(Default)]
struct Side {
    runs: Vec<Measured>,
}

impl Measured {
    /// Calls answered 200, per second.
    fn ok_per_s(&self) -> f64 {
        let r = &self.run;
        r.requests_per_s * (r.requests - r.errors.min(r.requests)) as f64 / r.requests.max(1) as f64
    }
}

impl Side {
    fn mean(&self, f: impl Fn(&Run) -> f64) -> f64 {
        self.runs.iter().map(|m| f(&m.run)).sum::<f64>() / self.runs.len().max(1) as f64
    }

    fn ok_per_s(&self) -> f64 {
        self.runs.iter().map(Measured::ok_per_s).sum::<f64>() / self.runs.len().max(1) as f64
    }

    fn calls(&self) -> f64 {
        self.runs.iter().map(|m| m.run.requests).sum::<u64>().max(1) as f64
    }

    /// CPU microseconds per call, server and generator together, over all rounds.
    fn cpu_us(&self) -> f64 {
        self.runs.iter().map(|m| m.cpu_s).sum::<f64>() * 1e6 / self.calls()
    }

    /// CPU microseconds per call of the server alone.
    fn server_us(&self) -> f64 {
        self.runs.iter().map(|m| m.server_s).sum::<f64>() * 1e6 / self.calls()
    }

    fn errors(&self) -> u64 {
        self.runs.iter().map(|m| m.run.errors).sum()
    }
}

fn measure(
    loadgen: &Path,
    server: &Server,
    addr: &str,
    args: &[&str],
    seconds: u64,
    connections: u32,
) -> Result<Measured> {
    let before = cpu_seconds(server.0.id())?;
    let run = loadgen_with(loadgen, addr, args, seconds, connections)?;
    let server_cpu = cpu_seconds(server.0.id())? - before;
    Ok(Measured {
        cpu_s: server_cpu + run.cpu_s,
        server_s: server_cpu,
        run,
    })
}

/// Whether the server at `addr` answers `/readyz` with 200 (over TLS with `ca`).
fn ready(loadgen: &Path, addr: &str, ca: Option<&Path>) -> bool {
    let mut cmd = Command::new(loadgen);
    cmd.args([addr, "probe"]);
    if let Some(ca) = ca {
        cmd.arg("--ca").arg(ca);
    }
    cmd.output().is_ok_and(|o| o.status.success())
}

pub(super) fn compare_tls(root: &Path, seconds: u64) -> Result<()> {
    let (server_bin, loadgen_bin) = super::grpc::release_binaries(root)?;
    let certs = std::env::temp_dir().join(format!("leaf-bench-http-certs-{}", std::process::id()));
    let made = Command::new(&loadgen_bin)
        .arg("--certs")
        .arg(&certs)
        .status()
        .context("cannot run leaf-loadgen --certs")?;
    if !made.success() {
        bail!("leaf-loadgen --certs failed ({made})");
    }
    let ca = certs.join("ca.pem");
    let ca_arg = ca
        .to_str()
        .context("a temporary directory that is not UTF-8")?;

    let (mut cmd, plain_dir, plain_addr) = server_command(&server_bin, "plain")?;
    cmd.env("LEAF_SNOWFLAKE__ENABLED", "false");
    let (mut plain, _) =
        Server::start(&mut cmd, "leaf-server (plaintext)", plain_addr, &[SEGMENT])?;
    let (mut cmd, tls_dir, tls_addr) = server_command(&server_bin, "tls")?;
    cmd.env("LEAF_SNOWFLAKE__ENABLED", "false")
        .env("LEAF_SERVER__TLS__CERT_FILE", certs.join("server.pem"))
        .env("LEAF_SERVER__TLS__KEY_FILE", certs.join("server.key"));
    let (p, t) = (plain_addr.to_string(), tls_addr.to_string());
    let (mut tls, _) = Server::start_until(&mut cmd, "leaf-server (TLS)", || {
        ready(&loadgen_bin, &t, Some(&ca))
    })?;

    // Warm-ups that grow the tag's dynamic step on both, so that no measured run pays for the
    // first small segments.
    for (addr, extra) in [(&p, &[][..]), (&t, &["--ca", ca_arg][..])] {
        let with = |args: &[&'static str]| {
            let mut all: Vec<&str> = args.to_vec();
            all.extend_from_slice(extra);
            all
        };
        loadgen(
            &loadgen_bin,
            addr,
            &with(&["grpc-stream", "--count", "1000000"]),
            3,
        )?;
        loadgen(&loadgen_bin, addr, &with(&["http", "--count", "1000"]), 2)?;
    }
    // Plaintext then TLS for each line, the whole list ROUNDS times: a drift of the machine
    // (other work on its two cores) shows as rounds that disagree.
    let mut rows: Vec<(&Pair, Side, Side)> = PAIRS
        .iter()
        .map(|pair| (pair, Side::default(), Side::default()))
        .collect();
    for _ in 0..ROUNDS {
        for (pair, plain_side, tls_side) in &mut rows {
            plain_side.runs.push(measure(
                &loadgen_bin,
                &plain,
                &p,
                pair.args,
                seconds,
                pair.connections,
            )?);
            let mut args = pair.args.to_vec();
            args.extend(["--ca", ca_arg]);
            tls_side.runs.push(measure(
                &loadgen_bin,
                &tls,
                &t,
                &args,
                seconds,
                pair.connections,
            )?);
        }
    }
    plain.stop();
    tls.stop();
    for dir in [plain_dir, tls_dir, certs] {
        std::fs::remove_dir_all(&dir).ok();
    }

    println!();
    println!(
        "| what | connections | plaintext calls/s | TLS calls/s | TLS / plaintext (each round) | by CPU | plaintext p50 / p99 ms | TLS p50 / p99 ms | CPU µs per call, plaintext / TLS | errors |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (pair, a, b) in &rows {
        let rounds: Vec<String> = a
            .runs
            .iter()
            .zip(&b.runs)
            .map(|(x, y)| format!("{:.2}", y.ok_per_s() / x.ok_per_s()))
            .collect();
        println!(
            "| {} | {} | {:.0} | {:.0} | {:.2}x ({}) | {:.2}x | {:.3} / {:.3} | {:.3} / {:.3} | {:.1} / {:.1} | {} |",
            pair.name,
            pair.connections,
            a.ok_per_s(),
            b.ok_per_s(),
            b.ok_per_s() / a.ok_per_s(),
            rounds.join(", "),
            a.cpu_us() / b.cpu_us(),
            a.mean(|r| r.p50_ms),
            a.mean(|r| r.p99_ms),
            b.mean(|r| r.p50_ms),
            b.mean(|r| r.p99_ms),
            a.cpu_us(),
            b.cpu_us(),
            a.errors() + b.errors(),
        );
    }
    let ratio = |i: usize| rows[i].2.ok_per_s() / rows[i].1.ok_per_s();
    let by_cpu = |i: usize| rows[i].1.cpu_us() / rows[i].2.cpu_us();
    let verdict = |r: f64| if r >= 0.8 { "met" } else { "missed" };
    println!();
    for (i, what) in [
        (0, "HTTP single IDs"),
        (1, "HTTP count=1000"),
        (2, "gRPC single IDs"),
        (3, "gRPC count=1000"),
    ] {
        println!(
            "- steady state, {what}: TLS {:.2}x plaintext (target at least 0.8x: {}); by CPU per \
             call, {:.2}x",
            ratio(i),
            verdict(ratio(i)),
            by_cpu(i)
        );
    }
    let (busy_plain, busy_tls) = (&rows[4].1, &rows[4].2);
    println!(
        "- new connections: {:.0}/s over TLS against {:.0}/s plaintext ({:.2}x); the full \
         handshake costs about {:.0} µs of CPU, server and generator together ({:.0} against \
         {:.0} µs per connection), of which the server's share is {:.0} µs ({:.0} against {:.0})",
        busy_tls.ok_per_s(),
        busy_plain.ok_per_s(),
        ratio(4),
        busy_tls.cpu_us() - busy_plain.cpu_us(),
        busy_tls.cpu_us(),
        busy_plain.cpu_us(),
        busy_tls.server_us() - busy_plain.server_us(),
        busy_tls.server_us(),
        busy_plain.server_us()
    );
    let (one_plain, one_tls) = (&rows[5].1, &rows[5].2);
    let (p50_tls, p50_plain) = (one_tls.mean(|r| r.p50_ms), one_plain.mean(|r| r.p50_ms));
    println!(
        "- one connection at a time, connect to answer: p50 {p50_tls:.3} ms over TLS, \
         {p50_plain:.3} ms plaintext: the handshake adds {:.3} ms",
        p50_tls - p50_plain
    );
    println!(
        "- one request in flight on each connection, {seconds} s per run, plaintext then TLS \
         for each line, {ROUNDS} rounds (rates and latencies are their means, CPU per call their \
         total), segment mode on SQLite, snowflake mode off; TLS 1.3 (rustls with ring on both \
         sides), ECDSA P-256 certificate, no session resumption; calls/s count 200s only; by \
         CPU: plaintext's CPU per call over TLS's, the rate ratio of a machine that the two \
         processes have to themselves"
    );
    Ok(())
}
