//! The backends' tables of a configuration: which backend `segment.store` and
//! `snowflake.mode` choose, each table read into its backend's type (through
//! `crate::compose::backends`) and checked by the backend's rules, errors naming the server's keys. The
//! check reads the chosen backends' tables, and start-up reads them again into the typed values
//! it opens the backends with; a configuration keeps no reading of its own.

use figment::value::{Dict, Value};
use leaf_core::{Error, Result};

use super::{Alias, Config, SegmentSection, error_path, in_section};
use crate::compose::backends::{Choice, ReadError, Typed, choices};

/// The backend `key = "name"` chooses, compiled in or not; `Config` listing the known names
/// when there is none.
pub(crate) fn chosen(key: &str, name: &str) -> Result<Choice> {
    let of_key = || choices().filter(move |c| c.key == key);
    of_key().find(|c| c.name == name).ok_or_else(|| {
        let known: Vec<&str> = of_key().map(|c| c.name).collect();
        Error::Config(format!(
            "{key} = \"{name}\" names no backend; one of {}",
            known.join(", ")
        ))
    })
}

/// `choice` when compiled in; otherwise a `Config` error naming the feature to build with.
pub(crate) fn built(choice: Choice) -> Result<Choice> {
    if choice.compiled() {
        return Ok(choice);
    }
    let (key, name, feature) = (choice.key, choice.name, choice.feature());
    Err(Error::Config(format!(
        "{key} = \"{name}\" needs leaf-server built with the cargo feature `{feature}` \
         (cargo build -p leaf-server --release --features {feature})"
    )))
}

/// The chosen store, built; `Config` naming `segment.store` otherwise.
pub(crate) fn store_choice(config: &Config) -> Result<Choice> {
    built(chosen("segment.store", &config.segment.store)?)
}

/// The chosen mode, built; `Config` naming `snowflake.mode` otherwise.
pub(crate) fn mode_choice(config: &Config) -> Result<Choice> {
    built(chosen("snowflake.mode", &config.snowflake.mode)?)
}

/// The backend that reads the table at `path`: one compiled in, if any (both ZooKeeper modes
/// read `snowflake.zk`).
pub(crate) fn of_table(path: &str) -> Option<Choice> {
    let of_path = choices().filter(|c| c.path == path);
    of_path
        .clone()
        .find(Choice::compiled)
        .or_else(|| of_path.clone().next())
}

/// `e` with its fields named as keys of `choice`'s table (see [`in_section`]).
pub(crate) fn keyed(choice: &Choice, e: Error) -> Error {
    in_section(e, choice.path, &choice.fields())
}

/// The table `value` of the compiled-in `choice`, read into its type and validated; errors
/// name the key. A missing table reads as the type's defaults.
pub(crate) fn read_table(value: Option<&Value>, choice: &Choice) -> Result<Typed> {
    let imp = built(*choice)?
        .imp()
        .expect("a built backend has its descriptor");
    refuse_foreign_keys(value, choice)?;
    let empty = Value::from(Dict::new());
    imp.read(value.unwrap_or(&empty)).map_err(|e| match e {
        ReadError::Parse(e) => {
            let key: Vec<String> = std::iter::once(choice.path.to_owned())
                .chain(error_path(&e))
                .collect();
            Error::Config(format!("key {}: {}", key.join("."), e.kind))
        }
        ReadError::Invalid(e) => keyed(choice, e),
    })
}

/// `Config` naming the first key of `value` that belongs to the other section's table.
fn refuse_foreign_keys(value: Option<&Value>, choice: &Choice) -> Result<()> {
    let Some(Value::Dict(_, dict)) = value else {
        return Ok(());
    };
    match choice.refused().iter().find(|k| dict.contains_key(**k)) {
        Some(key) => Err(Error::Config(format!(
            "key {}.{key}: {key} is a key of [snowflake.{}] (the workerId mode); [{}] does \
             not take it",
            choice.path,
            choice.table(),
            choice.key.split('.').next().unwrap_or(choice.key),
        ))),
        None => Ok(()),
    }
}

/// Every table (or key) of the backends' sections, with its section's name.
fn tables(config: &Config) -> impl Iterator<Item = (&'static str, &str, &Value)> {
    let stores = config.segment.stores.iter().map(|(n, v)| ("segment", n, v));
    stores.chain(
        config
            .snowflake
            .backends
            .iter()
            .map(|(n, v)| ("snowflake", n, v)),
    )
}

/// Checks the backends' tables of `config` by their crates' rules, so that a bad value stops
/// the configuration's load rather than the start: the chosen store's (aliases included) when
/// segment mode is enabled, the chosen mode's when snowflake mode is, and every other table
/// present whose backend is compiled in, in the order they come. A table no backend has is an
/// unknown key. A store or mode this build lacks is refused when the server starts, naming its
/// feature; an unknown name here. Nothing read is kept: start-up reads the chosen tables again
/// into the typed values it opens the backends with ([`store_config`], [`mode_config`]).
pub(crate) fn check(config: &Config) -> Result<()> {
    let chosen_of = |enabled: bool, key: &str, name: &str| {
        enabled
            .then(|| chosen(key, name).ok())
            .flatten()
            .filter(Choice::compiled)
    };
    let store = chosen_of(
        config.segment.enabled,
        "segment.store",
        &config.segment.store,
    );
    let mode = chosen_of(
        config.snowflake.enabled,
        "snowflake.mode",
        &config.snowflake.mode,
    );
    let (mut store_read, mut mode_read) = (false, false);
    for (head, name, value) in tables(config) {
        let path = format!("{head}.{name}");
        match of_table(&path) {
            Some(c) if matches!(value, Value::Dict(..)) => {
                if store.is_some_and(|s| s.path == c.path) {
                    store_config(config)?;
                    store_read = true;
                } else if mode.is_some_and(|m| m.path == c.path) {
                    mode_config(config)?;
                    mode_read = true;
                } else if c.compiled() {
                    read_table(Some(value), &c)?;
                }
            }
            _ if head == "segment" && super::ALIASES.iter().any(|a| a.0 == name) => {}
            _ => return Err(Error::Config(format!("key {path}: unknown field"))),
        }
    }
    // The chosen names are known, and their tables read even when absent (the defaults, the
    // aliases).
    if config.segment.enabled {
        chosen("segment.store", &config.segment.store)?;
        if store.is_some() && !store_read {
            store_config(config)?;
        }
    }
    if config.snowflake.enabled {
        chosen("snowflake.mode", &config.snowflake.mode)?;
        if mode.is_some() && !mode_read {
            mode_config(config)?;
        }
    }
    Ok(())
}

/// The chosen store and its table, aliases filled in.
fn store_table(config: &Config) -> Result<(Choice, Value)> {
    let seg = &config.segment;
    let store = chosen("segment.store", &seg.store)?;
    let value = with_aliases(&store, seg.stores.get(store.table()), &seg.aliases()?)?;
    Ok((store, value))
}

/// The chosen mode and its table.
fn mode_table(config: &Config) -> Result<(Choice, Value)> {
    let mode = chosen("snowflake.mode", &config.snowflake.mode)?;
    let value = config
        .snowflake
        .backends
        .get(mode.table())
        .cloned()
        .unwrap_or_else(|| Value::from(Dict::new()));
    Ok((mode, value))
}

/// The tables present whose backend this build does not have: ignored, with a warning.
pub(crate) fn uncompiled(config: &Config) -> Vec<String> {
    tables(config)
        .map(|(head, name, _)| format!("{head}.{name}"))
        .filter(|path| of_table(path).is_some_and(|c| !c.compiled()))
        .map(|path| {
            let features: Vec<&str> = choices()
                .filter(|c| c.path == path)
                .map(|c| c.feature())
                .collect();
            let features = features.join(" or ");
            format!("[{path}] is ignored: this build has no cargo feature {features}")
        })
        .collect()
}

/// The store's table with the aliases of `[segment]` filled in where the store has the key and
/// its table does not set it; an alias and the table disagreeing is a `Config` error.
fn with_aliases(store: &Choice, table: Option<&Value>, aliases: &[Alias]) -> Result<Value> {
    let mut dict = match table {
        Some(Value::Dict(_, d)) => d.clone(),
        _ => Dict::new(),
    };
    let fields = store.fields();
    for (alias, targets, value) in aliases {
        let Some(target) = targets.iter().find(|t| fields.iter().any(|f| f == *t)) else {
            continue;
        };
        match dict.get(*target) {
            None => {
                dict.insert((*target).to_owned(), value.clone());
            }
            Some(own) if same(own, value) => {}
            Some(_) => {
                return Err(Error::Config(format!(
                    "segment.{alias} and {}.{target} are both set, to different values; keep one",
                    store.path
                )));
            }
        }
    }
    Ok(Value::from(dict))
}

/// Whether two values are equal, numbers by value (`2500` read from a file and from an
/// alias may differ in width).
fn same(a: &Value, b: &Value) -> bool {
    let number = |v: &Value| v.to_u128().map(|u| u as i128).or_else(|| v.to_i128());
    match (number(a), number(b)) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

/// `e`, naming also the alias of the key it is about: the key the operator wrote, when an
/// alias filled it in, or the alias an earlier version's configuration would use.
pub(crate) fn alias_named(e: Error, seg: &SegmentSection, store: &Choice) -> Error {
    let Error::Config(m) = e else { return e };
    let table = seg.stores.get(store.table());
    let set = seg.aliases().unwrap_or_default();
    let named = super::ALIASES.iter().find_map(|(alias, targets, _)| {
        let target = targets
            .iter()
            .find(|t| m.contains(&format!("{}.{t}", store.path)))?;
        let own = matches!(table, Some(Value::Dict(_, d)) if d.contains_key(*target));
        match (own, set.iter().any(|(k, _, _)| k == alias)) {
            (false, true) => Some(format!("set as segment.{alias}")),
            (false, false) => Some(format!("or segment.{alias}")),
            (true, _) => None,
        }
    });
    match named {
        Some(note) => Error::Config(format!("{m} ({note})")),
        None => Error::Config(m),
    }
}

/// The chosen store (built) and its configuration, read (aliases included) into its type and
/// validated: what the composition owns once it opened the store.
pub(crate) fn store_config(config: &Config) -> Result<(Choice, Typed)> {
    let store = store_choice(config)?;
    let (_, value) = store_table(config).map_err(|e| alias_named(e, &config.segment, &store))?;
    let typed =
        read_table(Some(&value), &store).map_err(|e| alias_named(e, &config.segment, &store))?;
    Ok((store, typed))
}

/// The chosen mode (built) and its configuration from `[snowflake.<table>]`, read into its
/// type and validated.
pub(crate) fn mode_config(config: &Config) -> Result<(Choice, Typed)> {
    let mode = mode_choice(config)?;
    let (_, value) = mode_table(config)?;
    let typed = read_table(Some(&value), &mode)?;
    Ok((mode, typed))
}

#[cfg(all(test, feature = "sqlite", feature = "local"))]
mod tests {
    use super::*;

    /// The chosen tables read into their types, as the configuration says now.
    #[test]
    fn the_chosen_tables_are_read_into_their_types() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}/leaf.db", dir.path().display());
        let mut c = Config::default();
        c.segment.stores.set("sqlite", "url", &url);
        c.snowflake.backends.set("local", "worker_id", 3);
        c.validate().unwrap();
        let (store, _) = store_config(&c).unwrap();
        assert_eq!(store.path, "segment.sqlite");
        let worker_id = |c: &Config| {
            let (_, mode) = mode_config(c).unwrap();
            mode.downcast_ref::<leaf_registry_local::LocalRegistryConfig>()
                .unwrap()
                .worker_id
        };
        assert_eq!(worker_id(&c), 3);
        c.snowflake.backends.set("local", "worker_id", 4);
        assert_eq!(worker_id(&c), 4);
    }
}
