//! Configuration: built-in defaults, then `leaf.toml` (or `--config PATH`), then `LEAF_...`
//! environment variables with `__` between sections, merged with `figment`.
//!
//! Unknown keys in a file are errors; unknown `LEAF_` variables are returned as warnings (the
//! caller logs them), because a shell environment often carries variables meant for another
//! version or tool. Every error names the key it is about.

mod load;
mod monotonic;
mod redact;
mod sections;
mod segment;
mod server;
mod snowflake;
pub(crate) mod tables;
mod tokens;

use leaf_core::{Error, Result};
use serde::{Deserialize, Serialize};

pub use load::{Loaded, load};
pub use monotonic::MonotonicSection;
pub use redact::redact_url;
use sections::error_path;
pub use sections::{Sections, in_section, read};
pub use segment::{ALIASES, Alias, Range, SegmentSection};
pub use server::{ClientAuth, LogConfig, LogFormat, ServerConfig, TlsConfig};
pub use snowflake::SnowflakeSection;
pub use tokens::{Tokens, parse_token_file};

/// A library's `Config` error names its own field (`max_step`); the server's key adds the
/// section (`segment.max_step`). Other errors pass unchanged.
pub(crate) fn keyed(section: &str, err: Error) -> Error {
    match err {
        Error::Config(m) => Error::Config(format!("{section}.{m}")),
        other => other,
    }
}

/// A library's `Config` errors name its own fields (`refresh_interval`); an operator needs the
/// keys (`segment.refresh_s`), so each field name of `fields` (field, key) in the message is
/// replaced by its key. Only whole words are replaced.
pub(crate) fn name_keys(err: Error, fields: &[(&str, &str)]) -> Error {
    let Error::Config(message) = err else {
        return err;
    };
    Error::Config(map_words(&message, |_, word| {
        let (_, key) = fields.iter().find(|(field, _)| *field == word)?;
        Some((*key).to_owned())
    }))
}

/// `message` with each whole word (`[A-Za-z0-9_]+`) replaced by what `map` answers for it,
/// given the text written so far and the word; `None` keeps the word.
pub(crate) fn map_words(
    message: &str,
    mut map: impl FnMut(&str, &str) -> Option<String>,
) -> String {
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = String::with_capacity(message.len() + 32);
    let mut rest = message;
    while let Some(start) = rest.find(is_word) {
        let (before, tail) = rest.split_at(start);
        out.push_str(before);
        let end = tail.find(|c: char| !is_word(c)).unwrap_or(tail.len());
        let word = &tail[..end];
        match map(&out, word) {
            Some(replaced) => out.push_str(&replaced),
            None => out.push_str(word),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// The prefix of configuration variables.
pub const ENV_PREFIX: &str = "LEAF_";

/// The file read from the working directory when no `--config` is given.
pub const DEFAULT_FILE: &str = "leaf.toml";

/// The whole configuration.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Leaf's `leaf.name`: namespaces ZooKeeper/etcd paths and names the worker-id cache file.
    /// Default `"leaf"`.
    pub name: String,
    /// The HTTP server.
    pub server: ServerConfig,
    /// Logging.
    pub log: LogConfig,
    /// Segment mode.
    pub segment: SegmentSection,
    /// Snowflake mode.
    pub snowflake: SnowflakeSection,
    /// Monotonic mode.
    pub monotonic: MonotonicSection,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            name: "leaf".into(),
            server: ServerConfig::default(),
            log: LogConfig::default(),
            segment: SegmentSection::default(),
            snowflake: SnowflakeSection::default(),
            monotonic: MonotonicSection::default(),
        }
    }
}

impl Config {
    /// Checks what types alone cannot; errors name the key.
    pub fn validate(&self) -> Result<()> {
        if self.name.is_empty() || self.name.contains(['/', '\\']) || self.name.contains("..") {
            return bad(
                "name",
                format!(
                    "{:?} must be non-empty and hold no path separator",
                    self.name
                ),
            );
        }
        self.server.validate()?;
        if let Err(e) = tracing_subscriber::EnvFilter::try_new(&self.log.level) {
            return bad("log.level", format!("{:?}: {e}", self.log.level));
        }
        self.segment.validate()?;
        self.snowflake.validate()?;
        self.monotonic.validate(self.snowflake.mark_renew_ms)?;
        // The backends' own tables, by their crates' rules.
        tables::check(self)
    }
}

fn bad(key: &str, why: String) -> Result<()> {
    Err(Error::Config(format!("{key}: {why}")))
}

/// Checks `(key, value, min, max)` for each numeric key. Every numeric key has an upper bound:
/// a huge value is a typo, and durations added to an `Instant` must not overflow it.
fn check_bounds(bounds: &[(&str, u64, u64, u64)]) -> Result<()> {
    for &(key, value, min, max) in bounds {
        if !(min..=max).contains(&value) {
            return bad(key, format!("must be from {min} to {max}, got {value}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::load::tests::{env, load_toml};
    use super::*;

    #[test]
    fn the_issues_overflowing_layout_is_refused_naming_the_key() {
        // Issue 7 item 1: this started, reported "0 worker ids" and issued duplicates.
        let e = load(
            None,
            env(&[
                ("LEAF_SNOWFLAKE__TIMESTAMP_BITS", "63"),
                ("LEAF_SNOWFLAKE__WORKER_BITS", "4294967284"),
                ("LEAF_SNOWFLAKE__SEQUENCE_BITS", "12"),
            ]),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("snowflake.worker_bits"), "{e}");
        let check = |vars: &[(&str, &str)], key: &str| {
            let e = load(None, env(vars)).unwrap_err().to_string();
            assert!(e.contains(key), "{vars:?}: {e}");
        };
        check(
            &[("LEAF_SNOWFLAKE__TIMESTAMP_BITS", "64")],
            "snowflake.timestamp_bits",
        );
        check(
            &[("LEAF_SNOWFLAKE__SEQUENCE_BITS", "4294967295")],
            "snowflake.sequence_bits",
        );
        check(
            &[("LEAF_SNOWFLAKE__SEQUENCE_BITS", "0")],
            "snowflake.sequence_bits",
        );
        check(
            &[("LEAF_SNOWFLAKE__EPOCH_MS", "18446744073709551615")],
            "snowflake.epoch_ms",
        );
    }

    /// Every numeric key of the server's own: its largest accepted value, and the lowest if
    /// above 0 (`None` for keys a rule elsewhere bounds, listed so that a new key cannot be
    /// forgotten). The keys of a backend's table have the ranges of its crate's `validate()`,
    /// held by the crate's `every_number_is_bounded_and_named`; here only those bounded
    /// elsewhere are listed.
    const NUMERIC_BOUNDS: &[(&str, Option<(u64, u64)>)] = &[
        ("server.max_batch", Some((1, 1_000_000))),
        ("server.max_body_bytes", Some((1, 64 << 20))),
        ("server.max_header_bytes", Some((8192, 1 << 20))),
        ("server.idle_timeout_s", Some((1, 86_400))),
        ("server.write_timeout_s", Some((1, 86_400))),
        ("server.max_connections", Some((1, 1_000_000))),
        ("server.shutdown_timeout_s", Some((0, 3_600))),
        ("server.grpc_max_stream_ids", Some((1, 4_294_967_295))),
        ("server.grpc_chunk", Some((1, 1_000_000))),
        ("server.grpc_max_watches", Some((1, 1_000_000))),
        ("server.http2_max_concurrent_streams", Some((1, 10_000))),
        ("server.http2_keepalive_s", Some((1, 3_600))),
        // Between 0 and 1 (leaf-segment's rule).
        ("segment.preload_threshold", None),
        ("segment.switch_wait_ms", Some((0, 60_000))),
        // With the other at its default: below never above halve (1800; 900).
        ("segment.step_double_below_s", Some((0, 1_800))),
        ("segment.step_halve_above_s", Some((900, 2_592_000))),
        ("segment.max_step", Some((1, 2_147_483_647))),
        ("segment.refresh_s", Some((1, 86_400))),
        ("segment.miss_ttl_ms", Some((0, 3_600_000))),
        ("segment.retry_backoff_max_ms", Some((0, 3_600_000))),
        // The aliases, whatever the store.
        ("segment.max_connections", Some((1, 1_000))),
        ("segment.busy_timeout_ms", Some((0, 3_600_000))),
        ("segment.connect_timeout_ms", Some((0, 3_600_000))),
        ("segment.timeout_ms", Some((0, 3_600_000))),
        ("segment.lock_wait_timeout_s", Some((0, 3_600))),
        ("snowflake.random_start", Some((0, 1 << 62))),
        ("snowflake.max_backwards_ms", Some((0, 60_000))),
        ("snowflake.max_borrow_ms", Some((0, 60_000))),
        ("snowflake.mark_window_ms", Some((1_001, 3_600_000))),
        ("snowflake.mark_renew_ms", Some((1, 2_999))),
        ("snowflake.max_startup_wait_ms", Some((0, 86_400_000))),
        ("snowflake.fencing_margin_ms", Some((0, 3_600_000))),
        ("snowflake.max_forward_step_ms", Some((1, 86_400_000))),
        // Also above snowflake.mark_renew_ms.
        ("monotonic.window_ms", Some((1_001, 3_600_000))),
        // The layout's rule (layout_validation_table in leaf-core).
        ("snowflake.epoch_ms", None),
        ("snowflake.timestamp_bits", None),
        ("snowflake.worker_bits", None),
        ("snowflake.sequence_bits", None),
        // `u16`; 0 means the listen port.
        ("snowflake.port", None),
        // The layout's largest worker id, checked when the id is taken (with the host name's
        // ordinal for the offset).
        ("snowflake.local.worker_id", None),
        ("snowflake.local.worker_id_offset", None),
    ];

    /// The keys of [`NUMERIC_BOUNDS`] this build knows (its backends compiled in).
    fn compiled_bounds() -> Vec<(&'static str, Option<(u64, u64)>)> {
        let numeric = load::tests::known_numeric_keys();
        NUMERIC_BOUNDS
            .iter()
            .filter(|(k, _)| numeric.contains(*k))
            .copied()
            .collect()
    }

    fn env_name(key: &str) -> String {
        format!("LEAF_{}", key.replace('.', "__").to_ascii_uppercase())
    }

    #[test]
    fn every_numeric_key_is_bounded_and_the_error_names_it() {
        for (key, bounds) in compiled_bounds() {
            let Some((min, max)) = bounds else { continue };
            let var = env_name(key);
            let ok = |v: u64| load(None, env(&[(&var, &v.to_string())]));
            if let Err(e) = ok(max) {
                panic!("{key} = {max} is refused: {e}");
            }
            if let Err(e) = ok(min) {
                panic!("{key} = {min} is refused: {e}");
            }
            for bad in [max + 1, u64::MAX] {
                match ok(bad) {
                    Ok(_) => panic!("{key} = {bad} is accepted"),
                    Err(e) => assert!(e.to_string().contains(key), "{key} = {bad}: {e}"),
                }
            }
            if min > 0 {
                let e = ok(min - 1).unwrap_err();
                assert!(e.to_string().contains(key), "{key} = {}: {e}", min - 1);
            }
        }
    }

    /// Whether `key` is in a backend's table (`segment.mysql.timeout_ms`).
    fn in_backend_table(key: &str) -> bool {
        crate::compose::backends::choices().any(|c| key.starts_with(&format!("{}.", c.path)))
    }

    #[test]
    fn the_bounds_table_lists_every_numeric_key() {
        let listed: BTreeSet<&str> = compiled_bounds().iter().map(|(k, _)| *k).collect();
        let numeric = load::tests::known_numeric_keys();
        let numeric: BTreeSet<&str> = numeric
            .iter()
            .map(String::as_str)
            .filter(|k| !in_backend_table(k) || listed.contains(k))
            .collect();
        assert_eq!(listed, numeric);
    }

    #[test]
    fn a_backends_numbers_keep_their_crates_bounds_and_errors_name_the_key() {
        // The crate holds each range; here, that the server applies it and names its own key.
        let mut checked = 0;
        let numeric = load::tests::known_numeric_keys();
        for key in numeric.iter().filter(|k| in_backend_table(k)) {
            if NUMERIC_BOUNDS.iter().any(|(k, _)| k == key) {
                continue;
            }
            let e = load(None, env(&[(&env_name(key), &u64::MAX.to_string())]))
                .expect_err(&format!("{key} = {} is accepted", u64::MAX));
            assert!(e.to_string().contains(key.as_str()), "{key}: {e}");
            checked += 1;
        }
        // Not vacuous: the sqlite store's two numbers, when it is compiled in.
        let least = if cfg!(feature = "sqlite") { 2 } else { 0 };
        assert!(checked >= least, "{checked} backend keys checked");
        eprintln!("{checked} numeric keys of backends checked");
    }

    #[test]
    fn bad_values_name_the_key() {
        let check = |text: &str, key: &str| {
            let e = load_toml(text, &[]).unwrap_err().to_string();
            assert!(e.contains(key), "{text:?}: {e}");
        };
        check("[server]\nmax_batch = \"x\"\n", "server.max_batch");
        check("[server]\nmax_batch = 0\n", "server.max_batch");
        check("[server]\nlisten = \"nowhere\"\n", "server.listen");
        check("[segment]\nstore = \"oracle\"\n", "segment.store");
        check(
            "[segment]\npreload_threshold = 1.5\n",
            "segment.preload_threshold",
        );
        check("[snowflake]\nmode = \"zk\"\n", "snowflake.mode");
        check(
            "[snowflake]\nworker_bits = 20\n",
            "snowflake.timestamp_bits",
        );
        check("[snowflake]\nip = \"ten\"\n", "snowflake.ip");
        check(
            "[snowflake]\nmark_window_ms = 500\n",
            "snowflake.mark_window_ms",
        );
        check("[log]\nformat = \"xml\"\n", "log.format");
        check(
            "[server]\nmax_header_bytes = 100\n",
            "server.max_header_bytes",
        );
        check("[segment]\nseed_tags = [\"a/b\"]\n", "segment.seed_tags");
        check(
            "[segment]\nseed_tags = [\"a\", \"a@\"]\n",
            "segment.seed_tags",
        );
    }

    #[cfg(feature = "etcd")]
    #[test]
    fn etcd_lease_ttls_are_whole_seconds_at_load() {
        // etcd leases count seconds; leaf-registry-etcd refuses anything else, and the
        // server must say so when it reads its configuration, not when it starts the registry.
        let toml = |ttl: u64| {
            format!("[snowflake]\nmode = \"etcd\"\n[snowflake.etcd]\nlease_ttl_ms = {ttl}\n")
        };
        for ttl in [3500, 10_001, 1_999] {
            let e = match load_toml(&toml(ttl), &[]) {
                Ok(_) => {
                    panic!("snowflake.etcd.lease_ttl_ms = {ttl} passes the configuration load")
                }
                Err(e) => e.to_string(),
            };
            assert!(e.contains("snowflake.etcd.lease_ttl_ms"), "{ttl}: {e}");
            assert!(e.contains("whole number of seconds"), "{ttl}: {e}");
        }
        for ttl in [4000, 10_000] {
            let loaded = load_toml(&toml(ttl), &[]).unwrap_or_else(|e| panic!("{ttl}: {e}"));
            let etcd: leaf_registry_etcd::EtcdConfig = read(
                loaded.config.snowflake.backends.get("etcd"),
                "snowflake.etcd",
            )
            .unwrap();
            assert_eq!(etcd.lease_ttl_ms, ttl);
        }
    }

    #[cfg(feature = "mysql")]
    #[test]
    fn mysql_backends_need_mysql_urls_and_the_message_hides_the_password() {
        let e = load(
            None,
            env(&[
                ("LEAF_SEGMENT__STORE", "mysql"),
                ("LEAF_SEGMENT__URL", "postgres://u:hunter2@h/db"),
            ]),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("segment.url"), "{e}");
        assert!(!e.contains("hunter2"), "{e}");
        let e = load(
            None,
            env(&[
                ("LEAF_SEGMENT__STORE", "mysql"),
                ("LEAF_SEGMENT__URL", "mysql://u:p@h/leaf"),
                ("LEAF_SEGMENT__LOCK_WAIT_TIMEOUT_S", "0"),
            ]),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("segment.lock_wait_timeout_s"), "{e}");
        let e = load(None, env(&[("LEAF_SNOWFLAKE__MODE", "mysql")]))
            .map(|_| ())
            .err();
        assert!(
            e.is_none(),
            "the default snowflake.mysql.url is a mysql url: {e:?}"
        );
        let e = load(
            None,
            env(&[
                ("LEAF_SNOWFLAKE__MODE", "mysql"),
                ("LEAF_SNOWFLAKE__MYSQL__URL", "http://h"),
            ]),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("snowflake.mysql.url"), "{e}");
        // A disabled mode's backend settings are not checked.
        let c = load(
            None,
            env(&[
                ("LEAF_SEGMENT__ENABLED", "false"),
                ("LEAF_SEGMENT__STORE", "mysql"),
                ("LEAF_SEGMENT__TIMEOUT_MS", "250"),
            ]),
        )
        .unwrap()
        .config;
        let aliases = c.segment.aliases().unwrap();
        assert_eq!(aliases[0].0, "timeout_ms");
        assert_eq!(aliases[0].2.to_u128(), Some(250));
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn postgres_backends_need_postgres_urls_and_the_message_hides_the_password() {
        let e = load(
            None,
            env(&[
                ("LEAF_SEGMENT__STORE", "postgres"),
                ("LEAF_SEGMENT__URL", "mysql://u:hunter2@h/db"),
            ]),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("segment.url"), "{e}");
        assert!(!e.contains("hunter2"), "{e}");
        let e = load(
            None,
            env(&[
                ("LEAF_SEGMENT__STORE", "postgres"),
                ("LEAF_SEGMENT__POSTGRES__SSL_MODE", "sometimes"),
            ]),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("segment.postgres.ssl_mode"), "{e}");
        let loaded = load(None, env(&[("LEAF_SNOWFLAKE__MODE", "postgres")]));
        assert!(
            loaded.is_ok(),
            "the default snowflake.postgres.url is a postgres url: {:?}",
            loaded.err()
        );
        let e = load(
            None,
            env(&[
                ("LEAF_SNOWFLAKE__MODE", "postgres"),
                ("LEAF_SNOWFLAKE__POSTGRES__URL", "http://h"),
            ]),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("snowflake.postgres.url"), "{e}");
    }

    #[test]
    fn tokens_an_http_header_cannot_carry_are_refused_naming_the_key() {
        // Issue 24 item 10: such a token loaded, and no request could ever present it.
        for key in [
            "server.admin_token",
            "server.client_token",
            "server.metrics_token",
        ] {
            let var = env_name(key);
            for bad in [
                "s3cret\n",
                "s3\r\ncret",
                "s3cret\0",
                "s3cret\x7f",
                "s3cr\u{e9}t",
                "s3cret\u{3000}",
                " s3cret",
                "s3cret ",
                "\ts3cret",
            ] {
                let e = match load(None, env(&[(&var, bad)])) {
                    Ok(_) => panic!("{key} = {bad:?} is accepted"),
                    Err(e) => e.to_string(),
                };
                assert!(e.contains(key), "{key} = {bad:?}: {e}");
                assert!(!e.contains("s3c"), "the message shows the token: {e}");
            }
            for good in [
                "s3cret",
                "Zm9v+/=",
                "a b",
                "a\tb",
                "~!#$%&'*-.^_`|:;<>?@[]{}()\"\\",
            ] {
                let c = load(None, env(&[(&var, good)]))
                    .unwrap_or_else(|e| panic!("{key} = {good:?}: {e}"))
                    .config;
                let loaded = match key {
                    "server.admin_token" => c.server.admin_token,
                    "server.client_token" => c.server.client_token,
                    _ => c.server.metrics_token,
                };
                assert_eq!(loaded.as_slice(), [good]);
            }
        }
    }

    #[test]
    fn allowed_hosts_are_names_or_names_with_ports() {
        let hosts =
            |vars: &[(&str, &str)]| load(None, env(vars)).map(|l| l.config.server.allowed_hosts);
        let var = "LEAF_SERVER__ALLOWED_HOSTS";
        assert_eq!(
            hosts(&[(var, "leaf.example, LEAF2.example:8080")]).unwrap(),
            ["leaf.example", "LEAF2.example:8080"]
        );
        assert_eq!(
            hosts(&[(var, "[leaf.example, \"10.0.0.1:8080\", \"[::1]:8080\"]")]).unwrap(),
            ["leaf.example", "10.0.0.1:8080", "[::1]:8080"]
        );
        let c = load_toml(
            "[server]\nallowed_hosts = [\"leaf.example.\", \"leaf_1.internal\"]\n",
            &[],
        );
        assert!(c.is_ok(), "{:?}", c.err());
        for bad in [
            "[\"\"]",
            "[\"http://leaf.example\"]",
            "[\"leaf.example/\"]",
            "[\"leaf example\"]",
            "[\"leaf.example:x\"]",
            "[\"leaf.example:0\"]",
            "[\"leaf.example:65536\"]",
            "[\"user@leaf.example\"]",
            "[\"leaf..example\"]",
            "[\"*.example\"]",
            "[\"[::1\"]",
            "[\"[leaf]:80\"]",
        ] {
            let text = format!("[server]\nallowed_hosts = {bad}\n");
            let e = match load_toml(&text, &[]) {
                Ok(_) => panic!("allowed_hosts = {bad} is accepted"),
                Err(e) => e.to_string(),
            };
            assert!(e.contains("server.allowed_hosts"), "{bad}: {e}");
        }
    }

    #[test]
    fn debug_hides_secrets() {
        let mut c = Config::default();
        c.server.admin_token = "s3cret".into();
        c.server.client_token = "t0ken".into();
        c.server.metrics_token = "m3trics".into();
        c.segment
            .stores
            .insert("url", "mysql://leaf:hunter2@db:3306/leaf");
        c.snowflake
            .backends
            .set("mysql", "url", "mysql://leaf:hunter2@db:3306/leaf");
        let d = format!("{c:?}");
        assert!(
            !d.contains("s3cret")
                && !d.contains("t0ken")
                && !d.contains("m3trics")
                && !d.contains("hunter2"),
            "{d}"
        );
        assert!(d.contains("mysql://leaf:<redacted>@db:3306/leaf"), "{d}");
    }
}
