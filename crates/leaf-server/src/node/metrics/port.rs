//! The port's metrics: connections open and refused, token files read again, and TLS.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use super::{Exposition, Metrics};

/// The token settings, in the order of `Port::token_file_reads`.
const TOKEN_SETTINGS: [&str; 3] = ["admin", "client", "metrics"];

#[derive(Debug, Default)]
pub(super) struct Port {
    connections_open: AtomicU64,
    connections_refused: AtomicU64,
    /// By token setting (admin, client, metrics) and result (taken, refused).
    token_file_reads: [[AtomicU64; 2]; 3],
    /// The port's TLS: its certificate's expiry (0: no TLS), reloads by result (loaded,
    /// kept the one before), handshakes that failed.
    tls_expiry: AtomicI64,
    tls_reloads: [AtomicU64; 2],
    tls_handshake_failures: AtomicU64,
}

impl Metrics {
    /// A connection was accepted and is served; `connection_closed` when it ends.
    pub fn connection_opened(&self) {
        self.port.connections_open.fetch_add(1, Ordering::Relaxed);
    }

    /// A served connection ended.
    pub fn connection_closed(&self) {
        self.port.connections_open.fetch_sub(1, Ordering::Relaxed);
    }

    /// A connection was closed at once: `server.max_connections` were open.
    pub fn connection_refused(&self) {
        self.port
            .connections_refused
            .fetch_add(1, Ordering::Relaxed);
    }

    /// A token file of setting `token` (`admin`, `client`, `metrics`) was read again after a
    /// change: `ok`, its tokens taken; else kept out.
    pub fn token_file_read(&self, token: &str, ok: bool) {
        if let Some(i) = TOKEN_SETTINGS.iter().position(|t| *t == token) {
            self.port.token_file_reads[i][usize::from(!ok)].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The port's TLS loaded a certificate that expires at `not_after` (seconds since the epoch).
    pub fn tls_loaded(&self, not_after: i64) {
        self.port.tls_expiry.store(not_after, Ordering::Relaxed);
    }

    /// The TLS files changed and were read again: `ok`, loaded; else the pair before stays.
    pub fn tls_reloaded(&self, ok: bool) {
        self.port.tls_reloads[usize::from(!ok)].fetch_add(1, Ordering::Relaxed);
    }

    /// A connection to the TLS port was not TLS, or its handshake failed or took too long.
    pub fn tls_handshake_failed(&self) {
        self.port
            .tls_handshake_failures
            .fetch_add(1, Ordering::Relaxed);
    }
}

impl Port {
    pub(super) fn render(&self, out: &mut Exposition) {
        out.family(
            "leaf_connections_open",
            "Connections being served (HTTP/1.1 and HTTP/2)",
            "gauge",
        );
        out.sample(
            "leaf_connections_open",
            &[],
            self.connections_open.load(Ordering::Relaxed) as f64,
        );
        out.family(
            "leaf_connections_refused_total",
            "Connections closed at once because server.max_connections were open",
            "counter",
        );
        out.sample(
            "leaf_connections_refused_total",
            &[],
            self.connections_refused.load(Ordering::Relaxed) as f64,
        );
        out.family(
            "leaf_token_file_reads_total",
            "Token files read again after a change, by setting and result (error: the tokens \
             read before still pass)",
            "counter",
        );
        for (i, token) in TOKEN_SETTINGS.iter().enumerate() {
            for (j, result) in ["ok", "error"].iter().enumerate() {
                out.sample(
                    "leaf_token_file_reads_total",
                    &[("token", token), ("result", result)],
                    self.token_file_reads[i][j].load(Ordering::Relaxed) as f64,
                );
            }
        }
        let expiry = self.tls_expiry.load(Ordering::Relaxed);
        if expiry != 0 {
            out.family(
                "leaf_tls_certificate_expiry_timestamp_seconds",
                "When the port's TLS certificate in use expires (notAfter), in seconds since the \
                 epoch",
                "gauge",
            );
            out.sample(
                "leaf_tls_certificate_expiry_timestamp_seconds",
                &[],
                expiry as f64,
            );
            out.family(
                "leaf_tls_reloads_total",
                "TLS files read again after a change (or SIGHUP), by result (error: the \
                 certificate before stays in use)",
                "counter",
            );
            for (i, result) in ["ok", "error"].iter().enumerate() {
                out.sample(
                    "leaf_tls_reloads_total",
                    &[("result", result)],
                    self.tls_reloads[i].load(Ordering::Relaxed) as f64,
                );
            }
            out.family(
                "leaf_tls_handshake_failures_total",
                "Connections to the TLS port that were plain text, or whose handshake failed \
                 (an unknown or expired client certificate, among others) or took longer than \
                 server.idle_timeout_s",
                "counter",
            );
            out.sample(
                "leaf_tls_handshake_failures_total",
                &[],
                self.tls_handshake_failures.load(Ordering::Relaxed) as f64,
            );
        }
    }
}
