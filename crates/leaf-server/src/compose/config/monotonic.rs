//! `[monotonic]`: the monotonic mode (linearizable IDs from an elected leader).

use std::path::PathBuf;

use leaf_core::Result;
use serde::{Deserialize, Serialize};

use super::{bad, check_bounds};

/// The monotonic mode's settings. The leader renews its claim with the snowflake mode's
/// `mark_renew_ms` and stops `fencing_margin_ms` before its lease could end.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct MonotonicSection {
    /// Serve `/v1/monotonic` where the workerId mode can elect a leader. Default `true`.
    pub enabled: bool,
    /// How far ahead of the clock the leader's confirmed window ends: the longest it issues
    /// without the backend. Default 3000.
    pub window_ms: u64,
    /// A follower's requests that wait at the same moment go to the leader in one call.
    /// `false`: one call per request (to measure what coalescing brings). Default `true`.
    pub coalesce: bool,
    /// With `[server.tls]` on: the CAs (PEM) a follower verifies its leader's certificate
    /// with. Default: `server.tls.client_ca_file`.
    pub forward_ca_file: Option<PathBuf>,
    /// With `[server.tls]` on: the name the leader's certificate must carry (a DNS name every
    /// node's certificate has, say). Default: the leader's address (`snowflake.ip`).
    pub forward_server_name: Option<String>,
}

impl Default for MonotonicSection {
    fn default() -> Self {
        MonotonicSection {
            enabled: true,
            window_ms: 3000,
            coalesce: true,
            forward_ca_file: None,
            forward_server_name: None,
        }
    }
}

impl MonotonicSection {
    /// Checks the window against the renew period (`mark_renew_ms`) it must outlast.
    pub(crate) fn validate(&self, mark_renew_ms: u64) -> Result<()> {
        check_bounds(&[("monotonic.window_ms", self.window_ms, 1, 3_600_000)])?;
        if self.window_ms <= mark_renew_ms {
            return bad(
                "monotonic.window_ms",
                format!(
                    "{} must be above snowflake.mark_renew_ms ({mark_renew_ms}): the window \
                     would run out between two renewals",
                    self.window_ms
                ),
            );
        }
        Ok(())
    }
}
