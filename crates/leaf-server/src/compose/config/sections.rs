//! The backends' own sections, `[segment.<store>]` and `[snowflake.<mode>]`: kept as read, and
//! deserialized straight into the backend crate's configuration type by the one place that
//! composes the backends (`crate::compose::backends`). The server restates none of their fields.

use std::collections::BTreeMap;
use std::fmt;

use figment::value::{Dict, Value};
use leaf_core::{Error, Result};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::map_words;
use super::redact::redact_url;

/// The tables of a section that belong to its backends, by name (`mysql`, `zk`, ...).
#[derive(Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(transparent)]
pub struct Sections(BTreeMap<String, Value>);

impl Sections {
    /// The table of `name`, if the configuration has one.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.0.get(name)
    }

    /// Every name with its value, tables or not (a scalar here is an unknown key).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Sets the key `name` itself to `value` (an alias of `[segment]`): for tests, and for
    /// callers that build a configuration in code.
    pub fn insert(&mut self, name: &str, value: impl Serialize) {
        let value = Value::serialize(value).unwrap_or_else(|e| Value::from(e.to_string()));
        self.0.insert(name.to_owned(), value);
    }

    /// Removes the key or table `name`.
    pub fn remove(&mut self, name: &str) {
        self.0.remove(name);
    }

    /// Sets `key` of the table `name` to `value` (creating the table): for tests, and for
    /// callers that build a configuration in code.
    pub fn set(&mut self, name: &str, key: &str, value: impl Serialize) {
        let value = Value::serialize(value).unwrap_or_else(|e| Value::from(e.to_string()));
        let table = self
            .0
            .entry(name.to_owned())
            .or_insert_with(|| Value::from(Dict::new()));
        if let Value::Dict(_, dict) = table {
            dict.insert(key.to_owned(), value);
        } else {
            let mut dict = Dict::new();
            dict.insert(key.to_owned(), value);
            *table = Value::from(dict);
        }
    }
}

/// The table `value` as the backend type `C`, its errors naming `path` (`segment.mysql`) and
/// the field. A missing table reads as `C`'s defaults.
pub fn read<C: DeserializeOwned>(value: Option<&Value>, path: &str) -> Result<C> {
    let empty = Value::from(Dict::new());
    value.unwrap_or(&empty).deserialize().map_err(|e| {
        let key: Vec<String> = std::iter::once(path.to_owned())
            .chain(error_path(&e))
            .collect();
        Error::Config(format!("key {}: {}", key.join("."), e.kind))
    })
}

/// The path of the key a figment error is about. figment puts an unknown field at the end of
/// the path; serde alone would not.
pub(super) fn error_path(e: &figment::Error) -> Vec<String> {
    let mut path = e.path.clone();
    if let figment::error::Kind::UnknownField(field, _) = &e.kind
        && path.last() != Some(field)
    {
        path.push(field.clone());
    }
    path
}

/// A backend's `Config` error names its own fields (`url ...`, `set accept_weak_durability =
/// true`); the operator's keys are `{path}.{field}`, so each field named, as a whole word,
/// becomes its key, and an error that does not start with one gets the section in front
/// (`{path}: ...`). `fields` are the keys of the backend's type. Other kinds pass unchanged.
pub fn in_section(err: Error, path: &str, fields: &[String]) -> Error {
    let Error::Config(message) = err else {
        return err;
    };
    let mut leading = None;
    let out = map_words(&message, |before, word| {
        // A field leads the message; later, only an identifier (`accept_weak_durability`) is
        // one, not a plain word such as "url" in prose or a part of a URL or a path.
        let first = leading.is_none() && before.is_empty();
        let in_name = before.ends_with("://") || before.ends_with('.') || before.ends_with('/');
        let field = fields.iter().any(|f| f == word) && (first || (word.contains('_') && !in_name));
        leading.get_or_insert(field && first);
        field.then(|| format!("{path}.{word}"))
    });
    if leading == Some(true) {
        Error::Config(out)
    } else {
        Error::Config(format!("{path}: {out}"))
    }
}

impl fmt::Debug for Sections {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut map = f.debug_map();
        for (name, value) in &self.0 {
            map.entry(name, &Redacted(value, name));
        }
        map.finish()
    }
}

/// A value as `Debug` shows it: passwords in URLs and secret-looking keys hidden.
struct Redacted<'a>(&'a Value, &'a str);

impl fmt::Debug for Redacted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // ZooKeeper's `auth` ("user:password") and its `acl` (digest hashes of passwords).
        let secret = ["password", "token", "secret"]
            .iter()
            .any(|s| self.1.contains(s))
            || ["auth", "acl"].contains(&self.1);
        match self.0 {
            Value::String(_, s) if secret && !s.is_empty() => f.write_str("\"<redacted>\""),
            Value::String(_, s) => write!(f, "{:?}", redact_url(s)),
            Value::Dict(_, d) => {
                let mut map = f.debug_map();
                for (k, v) in d {
                    map.entry(k, &Redacted(v, k));
                }
                map.finish()
            }
            Value::Array(_, a) => f
                .debug_list()
                .entries(a.iter().map(|v| Redacted(v, self.1)))
                .finish(),
            other => write!(f, "{other:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(default, deny_unknown_fields)]
    struct Probe {
        url: String,
        timeout_ms: u64,
    }

    impl Default for Probe {
        fn default() -> Self {
            Probe {
                url: "x://default".into(),
                timeout_ms: 5,
            }
        }
    }

    #[test]
    fn a_section_reads_into_the_backends_type_with_its_defaults() {
        let mut s = Sections::default();
        assert_eq!(
            read::<Probe>(s.get("probe"), "segment.probe").unwrap(),
            Probe::default()
        );
        s.set("probe", "timeout_ms", 9);
        let p: Probe = read(s.get("probe"), "segment.probe").unwrap();
        assert_eq!((p.url.as_str(), p.timeout_ms), ("x://default", 9));
        let mut typo = s.clone();
        typo.set("probe", "timeot_ms", 9);
        let e = read::<Probe>(typo.get("probe"), "segment.probe").unwrap_err();
        assert!(e.to_string().contains("segment.probe.timeot_ms"), "{e}");
        s.set("probe", "timeout_ms", "soon");
        let e = read::<Probe>(s.get("probe"), "segment.probe").unwrap_err();
        assert!(e.to_string().contains("segment.probe.timeout_ms"), "{e}");
    }

    #[test]
    fn a_backends_errors_name_the_section() {
        let fields: Vec<String> = ["lease_ttl_ms", "url", "work_id_map"]
            .map(String::from)
            .into();
        let check = |message: &str, expect: &str| {
            let e = in_section(Error::Config(message.into()), "snowflake.etcd", &fields);
            assert_eq!(e.to_string(), Error::Config(expect.into()).to_string());
        };
        check(
            "lease_ttl_ms must be from 1000 to 86400000, got 5",
            "snowflake.etcd.lease_ttl_ms must be from 1000 to 86400000, got 5",
        );
        check(
            "url \"x\" is not a redis:// url",
            "snowflake.etcd.url \"x\" is not a redis:// url",
        );
        check(
            "work_id_map: node 10.0.0.1:1 has no worker id",
            "snowflake.etcd.work_id_map: node 10.0.0.1:1 has no worker id",
        );
        check(
            "the leaf name \"a/b\" must be one etcd key segment",
            "snowflake.etcd: the leaf name \"a/b\" must be one etcd key segment",
        );
        check("urls are odd", "snowflake.etcd: urls are odd");
        check(
            "redis at redis://h:1/url runs weak; set url and work_id_map = 1",
            "snowflake.etcd: redis at redis://h:1/url runs weak; set url and \
             snowflake.etcd.work_id_map = 1",
        );
        let other = in_section(Error::Unavailable("url".into()), "x", &fields);
        assert!(matches!(other, Error::Unavailable(m) if m == "url"));
    }

    #[test]
    fn debug_hides_passwords_and_tokens() {
        let mut s = Sections::default();
        s.set("mysql", "url", "mysql://leaf:hunter2@db/leaf");
        s.set("mysql", "password", "hunter3");
        s.set("redis", "url", "redis://:hunter4@r:6379");
        s.set("zk", "auth", "leaf:hunter5");
        s.set("server", "client_auth", "required");
        let d = format!("{s:?}");
        for secret in ["hunter2", "hunter3", "hunter4", "hunter5"] {
            assert!(!d.contains(secret), "{d}");
        }
        assert!(
            d.contains("\"required\""),
            "a TLS mode is not a secret: {d}"
        );
        assert!(d.contains("mysql://leaf:<redacted>@db/leaf"), "{d}");
    }
}
