//! Loading: the defaults, the file and the `LEAF_` variables merged with `figment`, and the
//! known keys that tell a misspelt variable from a real one.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use figment::providers::{Format, Serialized, Toml};
use figment::value::{Dict, Map, Value};
use figment::{Figment, Metadata, Profile, Provider};
use leaf_core::{Error, Result};

use super::{Config, DEFAULT_FILE, ENV_PREFIX};

/// A loaded configuration and the warnings its loading produced.
#[derive(Debug)]
pub struct Loaded {
    /// The configuration, validated.
    pub config: Config,
    /// Things to log once logging is up (unknown `LEAF_` variables).
    pub warnings: Vec<String>,
    /// The file that was read, if any.
    pub file: Option<PathBuf>,
}

/// Loads the configuration: defaults, then `file` (or `leaf.toml` in the working directory if it
/// exists), then the `LEAF_` variables among `env`.
pub fn load(
    file: Option<&Path>,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<Loaded> {
    let file = match file {
        Some(path) => {
            if !path.is_file() {
                return Err(Error::Config(format!(
                    "--config {}: no such file",
                    path.display()
                )));
            }
            Some(path.to_path_buf())
        }
        None => Some(PathBuf::from(DEFAULT_FILE)).filter(|p| p.is_file()),
    };
    let known = known_keys();
    let (env, warnings) = EnvVars::collect(env, &known);
    let mut figment = Figment::from(Serialized::defaults(Config::default()));
    if let Some(path) = &file {
        figment = figment.merge(Toml::file_exact(path));
    }
    let config: Config = figment.merge(env).extract().map_err(describe)?;
    config.validate()?;
    let mut warnings = warnings;
    warnings.extend(super::tables::uncompiled(&config));
    Ok(Loaded {
        config,
        warnings,
        file,
    })
}

/// Every key of the configuration, dotted (`server.listen`), and the keys of maps whose own keys
/// are free (`snowflake.local.work_id_map`).
#[derive(Debug)]
struct KnownKeys {
    leaves: BTreeSet<String>,
    maps: BTreeSet<String>,
    /// The leaves that hold text: an environment value for them is taken as written, so that a
    /// token such as `12345` or a name such as `007` stays text.
    strings: BTreeSet<String>,
}

impl KnownKeys {
    fn contains(&self, key: &str) -> bool {
        self.leaves.contains(key)
            || self.maps.iter().any(|m| {
                key == m
                    || key
                        .strip_prefix(m.as_str())
                        .is_some_and(|r| r.starts_with('.'))
            })
    }
}

fn known_keys() -> KnownKeys {
    fn walk(prefix: &str, dict: &Dict, out: &mut KnownKeys) {
        for (k, v) in dict {
            let key = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            match v {
                Value::Dict(_, d) if d.is_empty() => {
                    out.maps.insert(key);
                }
                Value::Dict(_, d) => walk(&key, d, out),
                Value::String(..) => {
                    out.strings.insert(key.clone());
                    out.leaves.insert(key);
                }
                _ => {
                    out.leaves.insert(key);
                }
            }
        }
    }
    let mut out = KnownKeys {
        leaves: BTreeSet::new(),
        maps: BTreeSet::new(),
        strings: BTreeSet::new(),
    };
    // Serialising the defaults cannot fail: every field is a plain value.
    if let Ok(Value::Dict(_, d)) = Value::serialize(Config::default()) {
        walk("", &d, &mut out);
    }
    // The aliases of the store's keys (unset by default); `url` is text.
    for (key, _, range) in super::ALIASES {
        let key = format!("segment.{key}");
        if range.is_none() {
            out.strings.insert(key.clone());
        }
        out.leaves.insert(key);
    }
    // Each backend's table, as its compiled-in type's defaults name the keys.
    for choice in crate::compose::backends::choices() {
        if let Some(Value::Dict(_, d)) = choice.defaults() {
            walk(choice.path, &d, &mut out);
        }
    }
    out
}

/// The `LEAF_` variables that name known keys, as a figment provider whose errors name the
/// variable.
struct EnvVars {
    dict: Dict,
}

impl EnvVars {
    fn collect(
        vars: impl IntoIterator<Item = (String, String)>,
        known: &KnownKeys,
    ) -> (EnvVars, Vec<String>) {
        let mut dict = Dict::new();
        let mut warnings = Vec::new();
        for (name, value) in vars {
            let Some(rest) = name
                .get(..ENV_PREFIX.len())
                .filter(|p| p.eq_ignore_ascii_case(ENV_PREFIX))
                .map(|_| &name[ENV_PREFIX.len()..])
            else {
                continue;
            };
            let key = rest.to_ascii_lowercase().replace("__", ".");
            if key.is_empty() || key.split('.').any(str::is_empty) || !known.contains(&key) {
                warnings.push(format!(
                    "ignoring environment variable {name}: it names no configuration key"
                ));
                continue;
            }
            let value: Value = if known.strings.contains(&key) {
                Value::from(value)
            } else {
                value.parse().unwrap_or_else(|_| Value::from(value))
            };
            if let Some(nested) = figment::util::nest(&key, value).into_dict() {
                dict = merge_dicts(dict, nested);
            }
        }
        (EnvVars { dict }, warnings)
    }
}

fn merge_dicts(mut a: Dict, b: Dict) -> Dict {
    for (k, v) in b {
        let merged = match (a.remove(&k), v) {
            (Some(Value::Dict(_, x)), Value::Dict(tag, y)) => Value::Dict(tag, merge_dicts(x, y)),
            (_, v) => v,
        };
        a.insert(k, merged);
    }
    a
}

impl Provider for EnvVars {
    fn metadata(&self) -> Metadata {
        Metadata::named("environment")
            .interpolater(|_, keys| format!("{ENV_PREFIX}{}", keys.join("__").to_ascii_uppercase()))
    }

    fn data(&self) -> std::result::Result<Map<Profile, Dict>, figment::Error> {
        Ok(Profile::Default.collect(self.dict.clone()))
    }
}

/// Turns figment's errors into one message that names each key and where it came from.
fn describe(err: figment::Error) -> Error {
    let lines: Vec<String> = err
        .into_iter()
        .map(|e| {
            let path = super::sections::error_path(&e);
            let key = path.join(".");
            let source = match &e.metadata {
                Some(md) if md.name == "environment" => {
                    format!(" (from {})", md.interpolate(&Profile::Default, &path))
                }
                Some(md) => match &md.source {
                    Some(src) => format!(" (in {src})"),
                    None => String::new(),
                },
                None => String::new(),
            };
            if key.is_empty() {
                format!("{}{source}", e.kind)
            } else {
                format!("key {key}: {}{source}", e.kind)
            }
        })
        .collect();
    Error::Config(lines.join("; "))
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    #[cfg(all(feature = "sqlite", feature = "local"))]
    use {
        crate::compose::config::read, leaf_core::SnowflakeLayout,
        leaf_registry_local::LocalRegistryConfig,
    };

    pub(in crate::compose::config) fn env(vars: &[(&str, &str)]) -> Vec<(String, String)> {
        vars.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// The keys whose default is a number (the aliases count as numbers but `url`).
    pub(in crate::compose::config) fn known_numeric_keys() -> BTreeSet<String> {
        let mut defaults = Figment::from(Serialized::defaults(Config::default()));
        for choice in crate::compose::backends::choices() {
            if let Some(d) = choice.defaults() {
                defaults = defaults.merge(Serialized::default(choice.path, d));
            }
        }
        let aliases = crate::compose::config::ALIASES
            .iter()
            .filter(|(_, _, range)| range.is_some())
            .map(|(k, _, _)| format!("segment.{k}"));
        known_keys()
            .leaves
            .into_iter()
            .filter(|k| matches!(defaults.find_value(k), Ok(Value::Num(..))))
            .chain(aliases)
            .collect()
    }

    pub(in crate::compose::config) fn load_toml(
        text: &str,
        vars: &[(&str, &str)],
    ) -> Result<Loaded> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("leaf.toml");
        std::fs::write(&path, text).unwrap();
        load(Some(&path), env(vars))
    }

    #[cfg(all(feature = "sqlite", feature = "local"))]
    #[test]
    fn defaults_are_the_designs() {
        let c = load(None, Vec::new()).unwrap().config;
        assert_eq!(c.server.listen.to_string(), "0.0.0.0:8080");
        assert_eq!(c.server.max_batch, 10_000);
        let sqlite: leaf_registry_local::SqliteStoreConfig =
            read(c.segment.stores.get("sqlite"), "segment.sqlite").unwrap();
        assert_eq!(sqlite.url, "sqlite://leaf-data/leaf.db");
        assert_eq!(c.segment.store, "sqlite");
        assert_eq!(c.snowflake.mode, "local");
        let local: LocalRegistryConfig =
            read(c.snowflake.backends.get("local"), "snowflake.local").unwrap();
        assert_eq!(local.worker_id, 0);
        assert_eq!(c.snowflake.cache_dir, PathBuf::from("leaf-data"));
        assert_eq!(c.segment.seed_tags, vec!["leaf-segment-test".to_string()]);
        assert_eq!(c.snowflake.layout().unwrap(), SnowflakeLayout::default());
    }

    #[test]
    fn the_readme_lists_every_key_with_its_default() {
        let readme = include_str!("../../../README.md");
        // The block of "## Configuration" (other sections show parts of it).
        let section = readme
            .find("\n## Configuration\n")
            .expect("a Configuration section");
        let start = section
            + readme[section..].find("```toml\n").expect("a toml block")
            + "```toml\n".len();
        let len = readme[start..].find("```").expect("its end");
        let mut c = load_toml(&readme[start..start + len], &[]).unwrap().config;
        // Each backend table lists its crate's defaults.
        // Unset options (no default) are documented in a comment.
        let json = |v: &Value| match serde_json::to_value(v).unwrap() {
            serde_json::Value::Object(m) => {
                serde_json::Value::Object(m.into_iter().filter(|(_, v)| !v.is_null()).collect())
            }
            other => other,
        };
        // Each table once (the ZooKeeper modes share theirs), read by a compiled-in backend.
        let paths: BTreeSet<&str> = crate::compose::backends::choices()
            .map(|c| c.path)
            .collect();
        for section in paths
            .into_iter()
            .filter_map(crate::compose::config::tables::of_table)
        {
            let (head, name) = section.path.split_once('.').unwrap();
            let tables = match head {
                "segment" => &mut c.segment.stores,
                _ => &mut c.snowflake.backends,
            };
            let listed = tables
                .get(name)
                .unwrap_or_else(|| panic!("[{}]", section.path));
            if let Some(defaults) = section.defaults() {
                assert_eq!(json(listed), json(&defaults), "[{}]", section.path);
            }
            tables.remove(name);
        }
        assert_eq!(c, Config::default());
        let listed: BTreeSet<String> = {
            let mut k = known_keys();
            k.leaves.append(&mut k.maps);
            k.leaves
        };
        for key in listed {
            let leaf = key.rsplit('.').next().unwrap();
            assert!(
                readme.contains(&format!("{leaf} = ")),
                "{key} is documented"
            );
        }
    }

    #[test]
    fn every_key_of_the_design_is_known() {
        let known = known_keys();
        for key in [
            "name",
            "server.listen",
            "server.admin_token",
            "server.client_token",
            "server.metrics_token",
            "server.max_batch",
            "segment.enabled",
            "segment.preload_threshold",
            "segment.switch_wait_ms",
            "segment.step_double_below_s",
            "segment.step_halve_above_s",
            "segment.max_step",
            "segment.refresh_s",
            "segment.miss_ttl_ms",
            "segment.store",
            "segment.url",
            "snowflake.enabled",
            "snowflake.mode",
            "snowflake.epoch_ms",
            "snowflake.ip",
            "snowflake.port",
            "snowflake.cache_dir",
            "snowflake.interface",
            "snowflake.timestamp_bits",
            "snowflake.worker_bits",
            "snowflake.sequence_bits",
            "snowflake.random_start",
            "snowflake.max_backwards_ms",
            "snowflake.max_borrow_ms",
            "snowflake.mark_window_ms",
            "snowflake.mark_renew_ms",
            "snowflake.max_startup_wait_ms",
            "snowflake.max_forward_step_ms",
            "snowflake.local.worker_id",
            "snowflake.local.work_id_map",
            "snowflake.local.work_id_map.10.0.0.1:8080",
            "snowflake.zk.address",
            "snowflake.mysql.url",
            "snowflake.postgres.url",
            "segment.postgres.lock_timeout_ms",
            "snowflake.etcd.endpoints",
            "snowflake.redis.url",
            "snowflake.redis.lease_ttl_ms",
            "segment.redis.accept_weak_durability",
            "log.format",
            "log.level",
        ] {
            // A backend's keys are known when its crate is compiled in.
            let uncompiled = crate::compose::backends::choices().any(|s| {
                let built =
                    crate::compose::config::tables::of_table(s.path).is_some_and(|b| b.compiled());
                key.starts_with(&format!("{}.", s.path)) && !built
            });
            assert!(known.contains(key) || uncompiled, "{key}");
        }
        assert!(!known.contains("server.lisen"));
        assert!(!known.contains("server"));
        assert!(!known.contains("snowflake.local.work_id_mapx"));
    }

    #[cfg(all(feature = "sqlite", feature = "local"))]
    #[test]
    fn file_then_environment() {
        let l = load_toml(
            "name = \"svc\"\n[server]\nlisten = \"127.0.0.1:9000\"\nmax_batch = 5\n\
             [snowflake.local]\nwork_id_map = { \"10.0.0.1:8080\" = 3 }\n",
            &[
                ("LEAF_SERVER__LISTEN", "127.0.0.1:9090"),
                ("LEAF_SEGMENT__ENABLED", "false"),
                ("LEAF_SNOWFLAKE__MODE", "zk_recycle"),
                ("LEAFTEST_MYSQL_URL", "mysql://x"),
                ("PATH", "/bin"),
            ],
        )
        .unwrap();
        let c = l.config;
        assert_eq!(c.name, "svc");
        assert_eq!(c.server.listen.to_string(), "127.0.0.1:9090", "env wins");
        assert_eq!(c.server.max_batch, 5, "file wins over defaults");
        assert!(!c.segment.enabled);
        assert_eq!(c.snowflake.mode, "zk_recycle");
        let local: LocalRegistryConfig =
            read(c.snowflake.backends.get("local"), "snowflake.local").unwrap();
        assert_eq!(local.work_id_map.get("10.0.0.1:8080"), Some(&3));
        assert!(l.warnings.is_empty(), "{:?}", l.warnings);
    }

    #[test]
    fn unknown_key_in_a_file_is_an_error_naming_it() {
        let e = load_toml("[server]\nlisen = \"127.0.0.1:1\"\n", &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("key server.lisen: unknown field"), "{e}");
        assert!(e.contains("leaf.toml"), "{e}");
        let e = load_toml("[segmnt]\nenabled = true\n", &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("key segmnt: unknown field"), "{e}");
    }

    #[test]
    fn bad_environment_value_names_the_variable() {
        let e = load(None, env(&[("LEAF_SERVER__MAX_BATCH", "lots")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("server.max_batch"), "{e}");
        assert!(e.contains("LEAF_SERVER__MAX_BATCH"), "{e}");
    }

    #[test]
    fn unknown_environment_variables_are_warnings() {
        let l = load(
            None,
            env(&[
                ("LEAF_SERVER__LISEN", "x"),
                ("LEAF_", "x"),
                ("LEAF_SERVER____LISTEN", "x"),
                ("LEAF_SERVER__MAX_BATCH", "7"),
            ]),
        )
        .unwrap();
        assert_eq!(l.config.server.max_batch, 7);
        assert_eq!(l.warnings.len(), 3, "{:?}", l.warnings);
        assert!(l.warnings[0].contains("LEAF_SERVER__LISEN"));
    }

    #[cfg(all(feature = "sqlite", feature = "local"))]
    #[test]
    fn text_keys_take_environment_values_as_written() {
        let c = load(
            None,
            env(&[
                ("LEAF_SERVER__ADMIN_TOKEN", "12345"),
                ("LEAF_NAME", "007"),
                ("LEAF_SNOWFLAKE__IP", "10.0.0.1"),
                (
                    "LEAF_SNOWFLAKE__LOCAL__WORK_ID_MAP",
                    "{\"10.0.0.1:8080\" = 3}",
                ),
                ("LEAF_SEGMENT__SEED_TAGS", "[a, b]"),
                ("LEAF_SNOWFLAKE__ENABLED", "false"),
            ]),
        )
        .unwrap()
        .config;
        assert_eq!(c.server.admin_token.as_slice(), ["12345"]);
        assert_eq!(c.name, "007");
        assert_eq!(c.snowflake.ip, "10.0.0.1");
        let local: LocalRegistryConfig =
            read(c.snowflake.backends.get("local"), "snowflake.local").unwrap();
        assert_eq!(local.work_id_map.get("10.0.0.1:8080"), Some(&3));
        assert_eq!(c.segment.seed_tags, ["a", "b"]);
        assert!(!c.snowflake.enabled);
    }

    #[test]
    fn missing_config_file_is_an_error() {
        let e = load(Some(Path::new("/nonexistent/leaf.toml")), Vec::new()).unwrap_err();
        assert!(e.to_string().contains("--config"), "{e}");
    }
}
