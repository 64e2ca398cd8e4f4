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
