//! A backend's configuration rules, checked the same way for every backend: each number has a
//! range, and a value outside it is refused by a `Config` error naming the field.

use leaf_core::{Error, Result};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Asserts, for each `(field, min, max)` of `bounds`, that `validate` accepts the defaults of
/// `C` with `field` set to `min` and to `max`, and refuses `max + 1` and (when `min > 0`)
/// `min - 1`: by a `Config` error naming `field` as a whole word, or because the field's type
/// cannot hold the value. Every number of `C` must be in `bounds` or in `elsewhere` (numbers a
/// rule outside `validate` bounds, such as a worker id checked against the layout), so that a
/// number added later cannot go unbounded unnoticed.
///
/// ```
/// # #[derive(Default, serde::Serialize, serde::Deserialize)]
/// # struct Pool { max_connections: u32, worker_id: u64 }
/// # fn validate(p: &Pool) -> leaf_core::Result<()> {
/// #     match p.max_connections { 1..=1000 => Ok(()),
/// #         n => Err(leaf_core::Error::Config(format!("max_connections {n} out of 1..=1000"))) }
/// # }
/// leaf_testkit::config::assert_bounds::<Pool>(
///     validate,
///     &[("max_connections", 1, 1_000)],
///     &["worker_id"],
/// );
/// ```
pub fn assert_bounds<C>(
    validate: fn(&C) -> Result<()>,
    bounds: &[(&str, u64, u64)],
    elsewhere: &[&str],
) where
    C: Default + Serialize + DeserializeOwned,
{
    let defaults = serde_json::to_value(C::default()).expect("the defaults serialise");
    let numbers = defaults.as_object().into_iter().flatten();
    for (field, _) in numbers.filter(|(_, v)| v.is_number()) {
        let listed = bounds.iter().any(|(f, _, _)| f == field) || elsewhere.contains(&&**field);
        assert!(listed, "the number {field} has no range in the test");
    }
    for &(field, min, max) in bounds {
        // `None`: the field's type cannot hold `value`.
        let with = |value: u64| {
            let mut json = defaults.clone();
            let slot = json.get_mut(field);
            *slot.unwrap_or_else(|| panic!("{field} is no field of the configuration")) =
                value.into();
            serde_json::from_value::<C>(json).ok().map(|c| validate(&c))
        };
        for ok in [min, max] {
            match with(ok) {
                Some(Ok(())) => {}
                Some(Err(e)) => panic!("{field} = {ok} is refused: {e}"),
                None => panic!("{field} = {ok} does not fit the field's type"),
            }
        }
        for bad in max.checked_add(1).into_iter().chain(min.checked_sub(1)) {
            match with(bad) {
                Some(Ok(())) => panic!("{field} = {bad} is accepted"),
                Some(Err(e)) => assert!(
                    matches!(&e, Error::Config(m) if names(m, field)),
                    "{field} = {bad}: {e:?} is not a Config error naming the field"
                ),
                None => {}
            }
        }
    }
}

/// Whether `message` has `field` as a whole word (`timeout_ms` is not in `connect_timeout_ms`).
fn names(message: &str, field: &str) -> bool {
    message
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .any(|word| word == field)
}

/// The numbers every SQL backend's configuration has (`max_connections`, `connect_timeout_ms`,
/// `timeout_ms`, `lease_ttl_ms`) with their ranges, a timeout from `least_timeout_ms`, for [`assert_bounds`].
pub fn sql_bounds(least_timeout_ms: u64) -> Vec<(&'static str, u64, u64)> {
    vec![
        ("max_connections", 1, 1_000),
        ("connect_timeout_ms", least_timeout_ms, 3_600_000),
        ("timeout_ms", least_timeout_ms, 3_600_000),
        ("lease_ttl_ms", 1, 86_400_000),
    ]
}

/// Asserts that the defaults of `C`, a SQL backend's configuration, are the ones every SQL
/// backend documents: no `username`, `password` or `ssl_mode` (the URL's), `max_connections`
/// 8, `connect_timeout_ms` 3000, `timeout_ms` 5000, `fence_on_disconnect` off, `lease_ttl_ms`
/// 10000.
pub fn assert_sql_defaults<C: Default + Serialize>() {
    let c = serde_json::to_value(C::default()).expect("the defaults serialise");
    let shared = [
        ("username", serde_json::Value::Null),
        ("password", serde_json::Value::Null),
        ("max_connections", 8.into()),
        ("connect_timeout_ms", 3000.into()),
        ("timeout_ms", 5000.into()),
        ("ssl_mode", serde_json::Value::Null),
        ("fence_on_disconnect", false.into()),
        ("lease_ttl_ms", 10_000.into()),
    ];
    for (key, value) in shared {
        assert_eq!(c[key], value, "{key}");
    }
}

/// Asserts that `C` reads a partial table on `url` (the rest defaults: `timeout_ms` 5000),
/// and refuses a misspelt key and each of `foreign` (another backend's keys).
pub fn assert_partial_and_strict<C: Serialize + DeserializeOwned>(url: &str, foreign: &[&str]) {
    let table = serde_json::json!({ "url": url, "max_connections": 2 });
    let c = serde_json::to_value(serde_json::from_value::<C>(table).expect("a partial table"));
    let c = c.expect("a configuration serialises");
    assert_eq!(
        (&c["max_connections"], &c["timeout_ms"]),
        (&2.into(), &5000.into())
    );
    for key in foreign.iter().chain(&["pasword"]) {
        let table = serde_json::json!({ *key: 3 });
        assert!(
            serde_json::from_value::<C>(table).is_err(),
            "{key} is taken"
        );
    }
}

/// Asserts that `Debug` of `C` on `url` (with secrets in its user info and parameters) and a
/// `password` shows no secret, and shows `shown`, the URL as logs may show it.
pub fn assert_debug_hides_passwords<C>(url: &str, shown: &str)
where
    C: DeserializeOwned + std::fmt::Debug,
{
    let table = serde_json::json!({ "url": url, "password": "field-secret" });
    let c: C = serde_json::from_value(table).expect("a configuration");
    let debug = format!("{c:?}");
    assert!(!debug.contains("secret"), "{debug}");
    assert!(debug.contains(shown), "{debug}");
}

/// Asserts that `options` (whether a SQL backend makes its connection options of a
/// configuration) refuses `foreign_url`, a URL of another scheme, and an unknown `ssl_mode`
/// with `Config` errors naming the key, and takes each TLS mode of `modes`.
pub fn assert_options_name_the_bad_key<C: DeserializeOwned>(
    options: impl Fn(&C) -> Result<()>,
    foreign_url: &str,
    modes: &[&str],
) {
    let with = |table: serde_json::Value| options(&serde_json::from_value(table).unwrap());
    let e = with(serde_json::json!({ "url": foreign_url })).unwrap_err();
    assert!(
        matches!(&e, Error::Config(m) if m.starts_with("url")),
        "{e}"
    );
    let e = with(serde_json::json!({ "ssl_mode": "sometimes" })).unwrap_err();
    assert!(
        matches!(&e, Error::Config(m) if m.contains("ssl_mode")),
        "{e}"
    );
    for mode in modes {
        assert!(
            with(serde_json::json!({ "ssl_mode": mode })).is_ok(),
            "{mode}"
        );
    }
}
