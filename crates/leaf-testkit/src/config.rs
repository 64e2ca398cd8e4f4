//! A backend's configuration rules, checked the same way for every backend: each number has a
//! range, and a value outside it is refused by an error naming the field.

use leaf_core::{Error, Result};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Asserts, for each `(field, min, max)` of `bounds`, that `validate` accepts the defaults of
/// `C` with `field` set to `min` and to `max`, and refuses `max + 1` and (when `min > 0`)
/// `min - 1` with an error that names `field`.
///
/// ```
/// # #[derive(Default, serde::Serialize, serde::Deserialize)]
/// # struct Pool { max_connections: u32 }
/// # fn validate(p: &Pool) -> leaf_core::Result<()> {
/// #     match p.max_connections { 1..=1000 => Ok(()),
/// #         n => Err(leaf_core::Error::Config(format!("max_connections {n} out of 1..=1000"))) }
/// # }
/// leaf_testkit::config::assert_bounds::<Pool>(validate, &[("max_connections", 1, 1_000)]);
/// ```
pub fn assert_bounds<C>(validate: fn(&C) -> Result<()>, bounds: &[(&str, u64, u64)])
where
    C: Default + Serialize + DeserializeOwned,
{
    for &(field, min, max) in bounds {
        let with = |value: u64| {
            let mut json = serde_json::to_value(C::default()).expect("the defaults serialise");
            let slot = json.get_mut(field);
            *slot.unwrap_or_else(|| panic!("{field} is no field of the configuration")) =
                value.into();
            // A value the field's type cannot hold is refused as well.
            let c: C =
                serde_json::from_value(json).map_err(|e| Error::Config(format!("{field}: {e}")))?;
            validate(&c)
        };
        for ok in [min, max] {
            if let Err(e) = with(ok) {
                panic!("{field} = {ok} is refused: {e}");
            }
        }
        for bad in std::iter::once(max + 1).chain(min.checked_sub(1)) {
            match with(bad) {
                Ok(()) => panic!("{field} = {bad} is accepted"),
                Err(e) => assert!(e.to_string().contains(field), "{field} = {bad}: {e}"),
            }
        }
    }
}
