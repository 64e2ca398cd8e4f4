//! Every backend the server may compose, compiled in or not: one line each in [`BACKENDS`].
//! A backend crate describes itself with `leaf_core::backend::Descriptor` (its names, its table
//! and configuration type, its rules and constructors); [`DynDescriptor`] is that descriptor with
//! the type erased, so that the list is a plain table of unit values. A line whose cargo
//! feature is off keeps the backend's names and feature (a stub), so that asking for it fails
//! start-up with a message naming the feature.
//!
//! Also the opening of the ones the configuration chooses ([`segment_store`], [`registry`]),
//! from the tables `crate::compose::config` read and checked through the same lines.

use std::any::Any;
use std::marker::PhantomData;
use std::path::Path;
use std::sync::Arc;

use figment::value::{Dict, Value};
#[cfg(test)]
use leaf_core::WorkerIdRegistry;
use leaf_core::backend::{Descriptor, Registry};
use leaf_core::{BoxFuture, Error, Result, SegmentStore, StoreCapabilities};

use crate::compose::config::Config;
use crate::compose::config::tables::{alias_named, chosen, keyed, mode_config, store_config};

/// A backend, compiled in or not. Built by the `backend!` macro from one line.
pub(crate) struct Entry {
    /// The cargo feature of `leaf-server` that compiles it in.
    pub(crate) feature: &'static str,
    /// The value of `segment.store` that chooses its store, if it has one.
    pub(crate) store: Option<&'static str>,
    /// The value of `snowflake.mode` that chooses its workerId mode, if it has one.
    pub(crate) mode: Option<&'static str>,
    /// Its table's name in `[segment]` and `[snowflake]`.
    pub(crate) table: &'static str,
    /// `segment.{table}` and `snowflake.{table}`.
    pub(crate) paths: (&'static str, &'static str),
    /// The descriptor, when compiled in.
    pub(crate) imp: Option<&'static dyn DynDescriptor>,
}

/// One backend: `backend!("feature", store = "…"|-, mode = "…"|-, table = "…", Type)`.
macro_rules! backend {
    (@name -) => { None };
    (@name $name:literal) => { Some($name) };
    ($feature:literal, store = $store:tt, mode = $mode:tt, table = $table:literal, $ty:ty) => {
        Entry {
            feature: $feature,
            store: backend!(@name $store),
            mode: backend!(@name $mode),
            table: $table,
            paths: (concat!("segment.", $table), concat!("snowflake.", $table)),
            #[cfg(feature = $feature)]
            imp: Some(&Erased::<$ty>(PhantomData)),
            #[cfg(not(feature = $feature))]
            imp: None,
        }
    };
}

/// Every backend. Adding one is its crate, its feature, and one line here.
#[rustfmt::skip]
pub(crate) const BACKENDS: &[Entry] = &[
    backend!("sqlite", store = "sqlite", mode = -, table = "sqlite", leaf_registry_local::Sqlite),
    backend!("local", store = -, mode = "local", table = "local", leaf_registry_local::Local),
    backend!("zk-normal", store = -, mode = "zk_normal", table = "zk", leaf_registry_zk::ZkNormal),
    backend!("zk-recycle", store = -, mode = "zk_recycle", table = "zk", leaf_registry_zk::ZkRecycle),
    backend!("mysql", store = "mysql", mode = "mysql", table = "mysql", leaf_registry_mysql::Mysql),
    backend!("postgres", store = "postgres", mode = "postgres", table = "postgres", leaf_registry_postgres::Postgres),
    backend!("etcd", store = "etcd", mode = "etcd", table = "etcd", leaf_registry_etcd::Etcd),
    backend!("redis", store = "redis", mode = "redis", table = "redis", leaf_registry_redis::Redis),
];

/// The cargo features of the backends this build has, in [`BACKENDS`]' order.
pub(crate) fn built_in() -> Vec<&'static str> {
    BACKENDS
        .iter()
        .filter(|b| b.imp.is_some())
        .map(|b| b.feature)
        .collect()
}

/// What chooses a backend: `segment.store` or `snowflake.mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// A segment store, `[segment.<table>]`.
    Store,
    /// A workerId mode, `[snowflake.<table>]`.
    Mode,
}

/// A backend in one role: a store or a mode, with the key and value that choose it and its
/// table.
#[derive(Clone, Copy)]
pub(crate) struct Choice {
    /// The key that chooses it: `segment.store` or `snowflake.mode`.
    pub(crate) key: &'static str,
    /// The value of `key` that chooses it.
    pub(crate) name: &'static str,
    /// Its table: `segment.mysql`, `snowflake.zk`, ...
    pub(crate) path: &'static str,
    pub(crate) role: Role,
    pub(crate) entry: &'static Entry,
}

impl Choice {
    /// The cargo feature that compiles it in.
    pub(crate) fn feature(&self) -> &'static str {
        self.entry.feature
    }

    /// The descriptor, when compiled in.
    pub(crate) fn imp(&self) -> Option<&'static dyn DynDescriptor> {
        self.entry.imp
    }

    /// Whether it is compiled in.
    pub(crate) fn compiled(&self) -> bool {
        self.entry.imp.is_some()
    }

    /// The table's name within its section (`mysql` of `segment.mysql`).
    pub(crate) fn table(&self) -> &'static str {
        self.entry.table
    }

    /// Its table's defaults, when compiled in: the keys a `LEAF_` variable may name (a store's
    /// table leaves out the keys only the mode takes).
    pub(crate) fn defaults(&self) -> Option<Value> {
        let imp = self.entry.imp?;
        let mut defaults = imp.defaults();
        if self.role == Role::Store
            && let Value::Dict(_, d) = &mut defaults
        {
            d.retain(|k, _| !imp.mode_only_keys().contains(&k.as_str()));
        }
        Some(defaults)
    }

    /// The keys of its table, when compiled in.
    pub(crate) fn fields(&self) -> Vec<String> {
        match self.defaults() {
            Some(Value::Dict(_, d)) => d.into_keys().collect(),
            _ => Vec::new(),
        }
    }

    /// The keys its table refuses, naming the section that takes them (a mode's keys in a
    /// store's table).
    pub(crate) fn refused(&self) -> &'static [&'static str] {
        match (self.role, self.entry.imp) {
            (Role::Store, Some(imp)) => imp.mode_only_keys(),
            _ => &[],
        }
    }
}

/// Every backend in every role it has: the stores, then the workerId modes, each in the order
/// of [`BACKENDS`].
pub(crate) fn choices() -> impl Iterator<Item = Choice> + Clone {
    let stores = BACKENDS.iter().filter_map(|e| {
        e.store.map(|name| Choice {
            key: "segment.store",
            name,
            path: e.paths.0,
            role: Role::Store,
            entry: e,
        })
    });
    let modes = BACKENDS.iter().filter_map(|e| {
        e.mode.map(|name| Choice {
            key: "snowflake.mode",
            name,
            path: e.paths.1,
            role: Role::Mode,
            entry: e,
        })
    });
    stores.chain(modes)
}

/// A backend's configuration once read and checked: its typed value, shared.
pub(crate) type Typed = Arc<dyn Any + Send + Sync>;

/// Why a table could not be read.
pub(crate) enum ReadError {
    /// Not the backend's type (an unknown key, a wrong type): figment's error.
    Parse(Box<figment::Error>),
    /// The backend's `validate` refused a value.
    Invalid(Error),
}

/// `leaf_core::backend::Descriptor` with its configuration type erased.
pub(crate) trait DynDescriptor: Sync {
    /// The configuration's defaults, as the type serialises them.
    fn defaults(&self) -> Value;
    /// Keys only the workerId mode takes.
    fn mode_only_keys(&self) -> &'static [&'static str];
    /// The descriptor's own names: `(STORE, MODE, TABLE)`.
    #[allow(
        dead_code,
        reason = "the test that each line's names are its descriptor's"
    )]
    fn names(&self) -> (Option<&'static str>, Option<&'static str>, &'static str);
    /// `value` read as the configuration type and validated.
    fn read(&self, value: &Value) -> std::result::Result<Typed, ReadError>;
    /// What the store of `config` can do.
    fn store_capabilities(&self, config: &Typed) -> StoreCapabilities;
    /// Opens the store of `config` for the leaf name `name`.
    fn open_store(
        &self,
        config: Typed,
        name: String,
    ) -> BoxFuture<'static, Result<Arc<dyn SegmentStore>>>;
    /// The workerId mode's registry on `config`.
    fn open_registry(&self, config: &Typed, cache_dir: &Path, name: &str) -> Result<Registry>;
    /// The monotonic mode's leader claim on `config`.
    fn open_leader_registry(
        &self,
        config: &Typed,
        cache_dir: &Path,
        name: &str,
    ) -> Result<Registry>;
}

/// A descriptor as a value: the erased twin of `D`.
pub(crate) struct Erased<D>(pub(crate) PhantomData<fn() -> D>);

/// The typed configuration inside `config`: read by the same descriptor, so always of its
/// type.
fn typed<D: Descriptor>(config: &Typed) -> Result<&D::Config> {
    config.downcast_ref::<D::Config>().ok_or_else(|| {
        Error::Config(format!(
            "the configuration of {} is not of its type",
            D::TABLE
        ))
    })
}

impl<D: Descriptor> DynDescriptor for Erased<D> {
    fn defaults(&self) -> Value {
        Value::serialize(D::Config::default()).unwrap_or_else(|_| Value::from(Dict::new()))
    }

    fn mode_only_keys(&self) -> &'static [&'static str] {
        D::MODE_ONLY_KEYS
    }

    fn names(&self) -> (Option<&'static str>, Option<&'static str>, &'static str) {
        (D::STORE, D::MODE, D::TABLE)
    }

    fn read(&self, value: &Value) -> std::result::Result<Typed, ReadError> {
        let config: D::Config = value
            .deserialize()
            .map_err(|e| ReadError::Parse(Box::new(e)))?;
        D::validate(&config).map_err(ReadError::Invalid)?;
        Ok(Arc::new(config))
    }

    fn store_capabilities(&self, config: &Typed) -> StoreCapabilities {
        typed::<D>(config).map_or(StoreCapabilities::new(false, false), D::store_capabilities)
    }

    fn open_store(
        &self,
        config: Typed,
        name: String,
    ) -> BoxFuture<'static, Result<Arc<dyn SegmentStore>>> {
        Box::pin(async move { D::open_store(typed::<D>(&config)?, &name).await })
    }

    fn open_registry(&self, config: &Typed, cache_dir: &Path, name: &str) -> Result<Registry> {
        D::open_registry(typed::<D>(config)?, cache_dir, name)
    }

    fn open_leader_registry(
        &self,
        config: &Typed,
        cache_dir: &Path,
        name: &str,
    ) -> Result<Registry> {
        D::open_leader_registry(typed::<D>(config)?, cache_dir, name)
    }
}

/// Opens the segment store named by `segment.store`. A store that cannot be opened for a
/// reason that may pass (a server down, a file locked by another program) is returned behind a
/// [`DeferredStore`](leaf_segment::DeferredStore): segment mode starts not ready and its
/// start-up retries reach the store through it. Refused credentials, a corrupt file and the
/// like still stop start-up.
pub(crate) async fn segment_store(config: &Config) -> Result<Arc<dyn SegmentStore>> {
    let seg = &config.segment;
    let (store, typed) = store_config(config)?;
    let imp = store.imp().expect("a chosen store is compiled in");
    let caps = imp.store_capabilities(&typed);
    let name = config.name.clone();
    let connect = move || imp.open_store(typed.clone(), name.clone());
    match connect().await {
        Ok(opened) => Ok(opened),
        Err(e) if e.is_retryable() => {
            let kind = store.table();
            tracing::warn!(store = kind, error = %e, "the segment store cannot be opened yet; retrying");
            let connect: leaf_segment::Connect = Box::new(connect);
            let deferred = leaf_segment::DeferredStore::new(kind, caps, connect);
            Ok(Arc::new(deferred))
        }
        Err(e) => Err(alias_named(keyed(&store, e), seg, &store)),
    }
}

/// The segment store named by `segment.store`, opened now: an error, never a deferred store,
/// when it cannot be (`leaf-server store raise`, which must not wait).
pub(crate) async fn segment_store_now(config: &Config) -> Result<Arc<dyn SegmentStore>> {
    let (store, typed) = store_config(config)?;
    let imp = store.imp().expect("a chosen store is compiled in");
    imp.open_store(typed, config.name.clone())
        .await
        .map_err(|e| alias_named(keyed(&store, e), &config.segment, &store))
}

/// The worker-id registry named by `snowflake.mode`.
#[cfg(test)]
pub(crate) async fn worker_registry(config: &Config) -> Result<Arc<dyn WorkerIdRegistry>> {
    Ok(registry(config).await?.worker)
}

/// The worker-id registry named by `snowflake.mode`, with its peer directory. Nothing is
/// contacted yet: a registry reaches its server at its first `acquire`, so that a start from
/// the cache file works while the server is down.
pub(crate) async fn registry(config: &Config) -> Result<Registry> {
    let (mode, typed) = mode_config(config)?;
    let imp = mode.imp().expect("a chosen mode is compiled in");
    let sf = &config.snowflake;
    imp.open_registry(&typed, sf.cache_dir.as_path(), &config.name)
        .map_err(|e| keyed(&mode, e))
}

/// The monotonic mode's claim: the chosen workerId mode's registry again, under the leaf name
/// `{name}-monotonic` and with its cache file in `{cache_dir}/monotonic`, so that the claim is
/// a pool of its own beside the worker ids.
pub(crate) async fn monotonic_registry(config: &Config) -> Result<Registry> {
    let (mode, typed) = mode_config(config)?;
    let imp = mode.imp().expect("a chosen mode is compiled in");
    let dir = config.snowflake.cache_dir.join("monotonic");
    let name = format!("{}-monotonic", config.name);
    imp.open_leader_registry(&typed, dir.as_path(), &name)
        .map_err(|e| keyed(&mode, e))
}

/// An error of the chosen mode's registry (from `acquire`: an identity missing from
/// `work_id_map`, a TTL the generator cannot renew within), its fields named as the server's
/// keys: the one generic place for them.
pub(crate) fn mode_error(config: &Config, e: Error) -> Error {
    match chosen("snowflake.mode", &config.snowflake.mode) {
        Ok(m) => keyed(&m, e),
        Err(_) => e,
    }
}

#[cfg(test)]
mod tests;
