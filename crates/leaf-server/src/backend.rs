//! The one place where the configuration chooses the backends. Each backend crate owns its
//! configuration type (defaults, `validate()` naming its own fields) and its constructors; the
//! server reads the backend's table (`[segment.<store>]`, `[snowflake.<mode>]`) straight into
//! that type, prefixes the table's path to its errors, and calls the constructor, in one `match`
//! arm per backend compiled in by its cargo feature. Asking for a backend that was not compiled
//! in fails start-up with a message naming the feature to enable.

use std::sync::Arc;

use async_trait::async_trait;
use figment::value::{Dict, Value};
use leaf_core::{Error, NodeIdentity, Result, SegmentStore, StoreCapabilities, WorkerIdRegistry};
use serde::de::DeserializeOwned;

use crate::config::{Alias, Config, in_section, read};

/// A backend the configuration may choose: a store (`segment.store = "mysql"`) or a workerId
/// mode (`snowflake.mode = "zk_normal"`), the table it reads, the cargo feature that compiles it
/// in and, when compiled in, its table's defaults (the keys a `LEAF_` variable may name) and a
/// check of a table.
#[derive(Clone, Copy)]
pub(crate) struct Backend {
    /// The key that chooses it: `segment.store` or `snowflake.mode`.
    key: &'static str,
    /// The value of `key` that chooses it.
    name: &'static str,
    /// Its table: `segment.mysql`, `snowflake.zk`, ...
    pub path: &'static str,
    /// The cargo feature that compiles it in.
    pub feature: &'static str,
    /// The table's defaults, as the backend's type serialises them.
    pub defaults: Option<fn() -> Value>,
    /// Reads a table at `path` and validates it by its backend's rules.
    check: Option<Check>,
    /// Keys of its configuration type that belong to the other section's table of the same
    /// crate (a workerId mode's key in a store's table): refused here, naming the section.
    refused: &'static [&'static str],
}

/// Reads a table of a backend and validates it by the backend's rules.
type Check = fn(Option<&Value>, &'static Backend) -> Result<()>;

impl Backend {
    /// The table's name within its section (`mysql` of `segment.mysql`).
    fn table(&self) -> &'static str {
        self.path.rsplit('.').next().unwrap_or(self.path)
    }

    /// Whether it is compiled in.
    pub(crate) fn compiled(&self) -> bool {
        self.check.is_some()
    }

    /// It, when compiled in; otherwise a `Config` error naming the feature to build with.
    fn built(&'static self) -> Result<&'static Self> {
        if self.compiled() {
            return Ok(self);
        }
        let (key, name, feature) = (self.key, self.name, self.feature);
        Err(Error::Config(format!(
            "{key} = \"{name}\" needs leaf-server built with the cargo feature `{feature}` \
             (cargo build -p leaf-server --release --features {feature})"
        )))
    }

    /// The keys of its table, when compiled in.
    fn fields(&self) -> Vec<String> {
        match self.defaults.map(|d| d()) {
            Some(Value::Dict(_, d)) => d.into_keys().collect(),
            _ => Vec::new(),
        }
    }

    /// `Config` naming the first key of `value` that belongs to the other section's table.
    fn refuse_foreign_keys(&self, value: Option<&Value>) -> Result<()> {
        let Some(Value::Dict(_, dict)) = value else {
            return Ok(());
        };
        match self.refused.iter().find(|k| dict.contains_key(**k)) {
            Some(key) => Err(Error::Config(format!(
                "key {}.{key}: {key} is a key of [snowflake.{}] (the workerId mode); [{}] does \
                 not take it",
                self.path,
                self.table(),
                self.key.split('.').next().unwrap_or(self.key),
            ))),
            None => Ok(()),
        }
    }

    /// `e` with its fields named as keys of the table (see [`in_section`]).
    fn keyed(&self, e: Error) -> Error {
        in_section(e, self.path, &self.fields())
    }
}

/// The [`Backend`] `$key = $name` of the configuration type `$ty`, compiled in by the cargo
/// feature `$feature`.
macro_rules! backend {
    ($key:literal = $name:literal, $path:literal, $feature:literal, $ty:ty) => {
        backend!($key = $name, $path, $feature, $ty, refusing & [])
    };
    ($key:literal = $name:literal, $path:literal, $feature:literal, $ty:ty, refusing $refused:expr) => {
        Backend {
            key: $key,
            name: $name,
            path: $path,
            feature: $feature,
            #[cfg(feature = $feature)]
            refused: $refused,
            #[cfg(not(feature = $feature))]
            refused: &[],
            #[cfg(feature = $feature)]
            defaults: Some(|| {
                let mut defaults =
                    Value::serialize(<$ty>::default()).unwrap_or_else(|_| Value::from(Dict::new()));
                if let Value::Dict(_, d) = &mut defaults {
                    d.retain(|k, _| !$refused.contains(&k.as_str()));
                }
                defaults
            }),
            #[cfg(not(feature = $feature))]
            defaults: None,
            #[cfg(feature = $feature)]
            check: Some(|value, b| read_backend::<$ty>(value, b, <$ty>::validate).map(drop)),
            #[cfg(not(feature = $feature))]
            check: None,
        }
    };
}

/// Every backend, compiled in or not: the stores, then the workerId modes.
#[rustfmt::skip]
pub(crate) const BACKENDS: &[Backend] = &[
    backend!("segment.store" = "sqlite", "segment.sqlite", "sqlite", leaf_registry_local::SqliteStoreConfig),
    backend!("segment.store" = "mysql", "segment.mysql", "mysql", leaf_registry_mysql::MysqlConfig, refusing leaf_registry_mysql::REGISTRY_ONLY_KEYS),
    backend!("segment.store" = "postgres", "segment.postgres", "postgres", leaf_registry_postgres::PostgresConfig, refusing leaf_registry_postgres::REGISTRY_ONLY_KEYS),
    backend!("segment.store" = "etcd", "segment.etcd", "etcd", leaf_registry_etcd::EtcdConfig),
    backend!("segment.store" = "redis", "segment.redis", "redis", leaf_registry_redis::RedisConfig),
    backend!("snowflake.mode" = "local", "snowflake.local", "local", leaf_registry_local::LocalRegistryConfig),
    backend!("snowflake.mode" = "zk_normal", "snowflake.zk", "zk-normal", leaf_registry_zk::ZkConfig),
    backend!("snowflake.mode" = "zk_recycle", "snowflake.zk", "zk-recycle", leaf_registry_zk::ZkConfig),
    backend!("snowflake.mode" = "mysql", "snowflake.mysql", "mysql", leaf_registry_mysql::MysqlConfig),
    backend!("snowflake.mode" = "postgres", "snowflake.postgres", "postgres", leaf_registry_postgres::PostgresConfig),
    backend!("snowflake.mode" = "etcd", "snowflake.etcd", "etcd", leaf_registry_etcd::EtcdConfig),
    backend!("snowflake.mode" = "redis", "snowflake.redis", "redis", leaf_registry_redis::RedisConfig),
];

/// The backend `key = "name"` chooses, compiled in or not; `Config` listing the known names
/// when there is none.
fn chosen(key: &str, name: &str) -> Result<&'static Backend> {
    let of_key = || BACKENDS.iter().filter(move |b| b.key == key);
    of_key().find(|b| b.name == name).ok_or_else(|| {
        let known: Vec<&str> = of_key().map(|b| b.name).collect();
        Error::Config(format!(
            "{key} = \"{name}\" names no backend; one of {}",
            known.join(", ")
        ))
    })
}

/// The chosen store, built; `Config` naming `segment.store` otherwise.
fn store_backend(config: &Config) -> Result<&'static Backend> {
    chosen("segment.store", &config.segment.store)?.built()
}

/// The chosen mode, built; `Config` naming `snowflake.mode` otherwise.
fn mode_backend(config: &Config) -> Result<&'static Backend> {
    chosen("snowflake.mode", &config.snowflake.mode)?.built()
}

/// The table `value` of `backend` as `C`, validated by `validate`; errors name the key.
#[allow(dead_code, reason = "used by the backends compiled in")]
fn read_backend<C: DeserializeOwned>(
    value: Option<&Value>,
    backend: &Backend,
    validate: fn(&C) -> Result<()>,
) -> Result<C> {
    backend.refuse_foreign_keys(value)?;
    let config: C = read(value, backend.path)?;
    validate(&config).map_err(|e| backend.keyed(e))?;
    Ok(config)
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

/// The backend that reads the table at `path`: one compiled in, if any (both ZooKeeper modes
/// read `snowflake.zk`).
pub(crate) fn of_table(path: &str) -> Option<&'static Backend> {
    let mut of_path = BACKENDS.iter().filter(|b| b.path == path);
    of_path
        .clone()
        .find(|b| b.compiled())
        .or_else(|| of_path.next())
}

/// Checks the backends' tables of `config` by their crates' rules, so that a bad value stops
/// the configuration's load rather than the start: the chosen store's (aliases included) when
/// segment mode is enabled, and every other table present whose backend is compiled in. A
/// table no backend has is an unknown key. A store or mode this build lacks is refused when the
/// server starts, naming its feature; an unknown name here.
pub(crate) fn check(config: &Config) -> Result<()> {
    for (head, name, value) in tables(config) {
        let path = format!("{head}.{name}");
        match of_table(&path) {
            Some(b) if matches!(value, Value::Dict(..)) => {
                if let Some(check) = b.check {
                    check(Some(value), b)?;
                }
            }
            _ if head == "segment" && crate::config::ALIASES.iter().any(|a| a.0 == name) => {}
            _ => return Err(Error::Config(format!("key {path}: unknown field"))),
        }
    }
    let seg = &config.segment;
    if seg.enabled {
        let store = chosen("segment.store", &seg.store)?;
        if let Some(check) = store.check {
            let value = with_aliases(store, seg.stores.get(store.table()), &seg.aliases()?)?;
            check(Some(&value), store).map_err(|e| alias_named(e, seg, store))?;
        }
    }
    if config.snowflake.enabled {
        chosen("snowflake.mode", &config.snowflake.mode)?;
    }
    Ok(())
}

/// The tables present whose backend this build does not have: ignored, with a warning.
pub(crate) fn uncompiled(config: &Config) -> Vec<String> {
    tables(config)
        .map(|(head, name, _)| format!("{head}.{name}"))
        .filter(|path| of_table(path).is_some_and(|b| !b.compiled()))
        .map(|path| {
            let of_path = BACKENDS.iter().filter(|b| b.path == path);
            let features: Vec<&str> = of_path.map(|b| b.feature).collect();
            let features = features.join(" or ");
            format!("[{path}] is ignored: this build has no cargo feature {features}")
        })
        .collect()
}

/// The store's table with the aliases of `[segment]` filled in where the store has the key and
/// its table does not set it; an alias and the table disagreeing is a `Config` error.
fn with_aliases(store: &Backend, table: Option<&Value>, aliases: &[Alias]) -> Result<Value> {
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

/// The store's configuration `C`, aliases filled in, validated.
#[allow(dead_code, reason = "used by the stores compiled in")]
fn store_config<C: DeserializeOwned>(config: &Config, validate: fn(&C) -> Result<()>) -> Result<C> {
    let seg = &config.segment;
    let store = store_backend(config)?;
    let table = seg.stores.get(store.table());
    let value = with_aliases(store, table, &seg.aliases()?)?;
    read_backend(Some(&value), store, validate)
}

/// The mode's configuration `C` from `[snowflake.<table>]`, validated.
#[allow(dead_code, reason = "used by the modes compiled in")]
fn mode_config<C: DeserializeOwned>(config: &Config, validate: fn(&C) -> Result<()>) -> Result<C> {
    let b = mode_backend(config)?;
    read_backend(config.snowflake.backends.get(b.table()), b, validate)
}

/// `e`, naming also the alias of the key it is about: the key the operator wrote, when an
/// alias filled it in, or the alias an earlier version's configuration would use.
fn alias_named(e: Error, seg: &crate::config::SegmentSection, store: &Backend) -> Error {
    let Error::Config(m) = e else { return e };
    let table = seg.stores.get(store.table());
    let set = seg.aliases().unwrap_or_default();
    let named = crate::config::ALIASES
        .iter()
        .find_map(|(alias, targets, _)| {
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

/// The arm of [`segment_store`] for the backend crate `$b` of configuration type `$ty`.
#[allow(unused_macros, reason = "used by the stores compiled in")]
macro_rules! open_store {
    ($b:ident :: $ty:ident, $config:expr) => {
        store(
            $config,
            $b::$ty::validate,
            $b::store_capabilities,
            |c, n| async move { $b::open_store(&c, &n).await },
        )
        .await
    };
}

/// Opens the segment store named by `segment.store`. A store that cannot be opened for a
/// reason that may pass (a server down, a file locked by another program) is returned behind a
/// [`DeferredStore`](crate::deferred::DeferredStore): segment mode starts not ready and its
/// start-up retries reach the store through it. Refused credentials, a corrupt file and the
/// like still stop start-up.
pub(crate) async fn segment_store(config: &Config) -> Result<Arc<dyn SegmentStore>> {
    match config.segment.store.as_str() {
        #[cfg(feature = "sqlite")]
        "sqlite" => open_store!(leaf_registry_local::SqliteStoreConfig, config),
        #[cfg(feature = "mysql")]
        "mysql" => open_store!(leaf_registry_mysql::MysqlConfig, config),
        #[cfg(feature = "postgres")]
        "postgres" => open_store!(leaf_registry_postgres::PostgresConfig, config),
        #[cfg(feature = "etcd")]
        "etcd" => open_store!(leaf_registry_etcd::EtcdConfig, config),
        #[cfg(feature = "redis")]
        "redis" => open_store!(leaf_registry_redis::RedisConfig, config),
        // Unknown, or not compiled in: the message says which.
        _ => Err(store_backend(config)
            .err()
            .unwrap_or_else(|| Error::Config("segment.store: no such store".into()))),
    }
}

/// The chosen store of configuration type `C`: read (aliases included) and validated, then
/// opened with `open`; errors name the table's keys. While it cannot be opened for a reason
/// that may pass, a [`DeferredStore`](crate::deferred::DeferredStore) that opens it on use.
#[allow(dead_code, reason = "used by the stores compiled in")]
async fn store<C, F, Fut>(
    config: &Config,
    validate: fn(&C) -> Result<()>,
    capabilities: fn(&C) -> StoreCapabilities,
    open: F,
) -> Result<Arc<dyn SegmentStore>>
where
    C: DeserializeOwned + Clone + Send + Sync + 'static,
    F: Fn(C, String) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<Arc<dyn SegmentStore>>> + Send + 'static,
{
    let (seg, store) = (&config.segment, store_backend(config)?);
    let c: C = store_config(config, validate).map_err(|e| alias_named(e, seg, store))?;
    let (caps, name) = (capabilities(&c), config.name.clone());
    let connect = move || open(c.clone(), name.clone());
    match connect().await {
        Ok(opened) => Ok(opened),
        Err(e) if e.is_retryable() => {
            let kind = store.table();
            tracing::warn!(store = kind, error = %e, "the segment store cannot be opened yet; retrying");
            let connect: crate::deferred::Connect = Box::new(move || Box::pin(connect()));
            let deferred = crate::deferred::DeferredStore::new(kind, caps, connect);
            Ok(Arc::new(deferred))
        }
        Err(e) => Err(alias_named(store.keyed(e), seg, store)),
    }
}

/// A registry that lists the running nodes of its leaf name, for the start-up peer clock check
/// (`crate::peer_clock`): the ZooKeeper modes, with Leaf's `temporary` nodes.
#[async_trait]
pub trait PeerDirectory: Send + Sync {
    /// The `ip:port` of every other running node.
    async fn peers(&self) -> Result<Vec<String>>;
    /// Lists this node for the others (once its clock passed the check).
    async fn register(&self, identity: &NodeIdentity) -> Result<()>;
    /// How far this node's clock may be from its peers' average, in milliseconds.
    fn max_skew_ms(&self) -> u64;
}

/// The worker-id registry of the configured mode, and its peer directory when it keeps one.
pub(crate) struct Registry {
    /// Where the worker id comes from.
    pub worker: Arc<dyn WorkerIdRegistry>,
    /// The running peers, in the modes that list them.
    pub peers: Option<Arc<dyn PeerDirectory>>,
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
    let sf = &config.snowflake;
    #[allow(unused_variables, reason = "used by the modes compiled in")]
    let (dir, name, backend) = (
        sf.cache_dir.as_path(),
        config.name.as_str(),
        mode_backend(config)?,
    );
    // A mode of the backend crate `$b` and configuration type `$ty`, which lists no peers.
    #[allow(unused_macros, reason = "used by the modes compiled in")]
    macro_rules! plain {
        ($b:ident :: $ty:ident) => {{
            let c = mode_config(config, $b::$ty::validate)?;
            let worker = $b::open_registry(&c, dir, name).map_err(|e| backend.keyed(e))?;
            Ok(Registry {
                worker,
                peers: None,
            })
        }};
    }
    // A ZooKeeper mode: it lists the peers too.
    #[cfg(any(feature = "zk-normal", feature = "zk-recycle"))]
    let zk = |mode| -> Result<Registry> {
        let c = mode_config(config, leaf_registry_zk::ZkConfig::validate)?;
        let worker = leaf_registry_zk::open_registry(&c, mode, dir, name);
        let worker = worker.map_err(|e| backend.keyed(e))?;
        Ok(Registry {
            worker: worker.clone(),
            peers: Some(worker),
        })
    };
    match sf.mode.as_str() {
        #[cfg(feature = "local")]
        "local" => plain!(leaf_registry_local::LocalRegistryConfig),
        #[cfg(feature = "zk-normal")]
        "zk_normal" => zk(leaf_registry_zk::ZkMode::Normal),
        #[cfg(feature = "zk-recycle")]
        "zk_recycle" => zk(leaf_registry_zk::ZkMode::Recycle),
        #[cfg(feature = "mysql")]
        "mysql" => plain!(leaf_registry_mysql::MysqlConfig),
        #[cfg(feature = "postgres")]
        "postgres" => plain!(leaf_registry_postgres::PostgresConfig),
        #[cfg(feature = "etcd")]
        "etcd" => plain!(leaf_registry_etcd::EtcdConfig),
        #[cfg(feature = "redis")]
        "redis" => plain!(leaf_registry_redis::RedisConfig),
        // Never reached: `mode_backend` refused a mode not compiled in.
        other => Err(Error::Config(format!(
            "snowflake.mode = \"{other}\": not compiled in"
        ))),
    }
}

#[cfg(any(feature = "zk-normal", feature = "zk-recycle"))]
#[async_trait]
impl PeerDirectory for leaf_registry_zk::ZkRegistry {
    async fn peers(&self) -> Result<Vec<String>> {
        self.backend().peers().await
    }
    async fn register(&self, identity: &NodeIdentity) -> Result<()> {
        self.backend().register_temporary(identity).await
    }
    fn max_skew_ms(&self) -> u64 {
        self.backend().max_peer_skew_ms()
    }
}

/// An error of the chosen mode's registry (from `acquire`: an identity missing from
/// `work_id_map`, a TTL the generator cannot renew within), its fields named as the server's
/// keys: the one generic place for them.
pub(crate) fn mode_error(config: &Config, e: Error) -> Error {
    match mode_backend(config) {
        Ok(b) => b.keyed(e),
        Err(_) => e,
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[tokio::test]
    async fn backends_not_compiled_in_name_their_feature() {
        for b in BACKENDS.iter().filter(|b| !b.compiled()) {
            let mut c = Config::default();
            let e = match b.key {
                "segment.store" => {
                    c.segment.store = b.name.into();
                    segment_store(&c).await.err()
                }
                _ => {
                    c.snowflake.mode = b.name.into();
                    worker_registry(&c).await.err()
                }
            };
            let e = e.unwrap_or_else(|| panic!("{} = {:?} is not compiled in", b.key, b.name));
            assert!(matches!(e, Error::Config(_)), "{e}");
            let feature = format!("`{}`", b.feature);
            assert!(e.to_string().contains(&feature), "{e}");
            assert!(e.to_string().contains(b.key), "{e}");
        }
    }

    #[tokio::test]
    async fn unknown_backends_are_refused_listing_the_known_ones() {
        let mut c = Config::default();
        c.segment.store = "postgress".into();
        let e = segment_store(&c).await.unwrap_err().to_string();
        assert!(
            e.contains("segment.store = \"postgress\"") && e.contains("mysql"),
            "{e}"
        );
        c.snowflake.mode = "zk".into();
        let e = worker_registry(&c).await.unwrap_err().to_string();
        assert!(
            e.contains("snowflake.mode = \"zk\"") && e.contains("zk_recycle"),
            "{e}"
        );
    }

    #[test]
    fn every_backend_feature_of_the_server_has_its_tables_and_crate() {
        // The server's features (Cargo.toml) against the backends it composes: each backend
        // feature names one leaf-registry-* crate of the workspace and has a table here.
        let manifest = include_str!("../Cargo.toml");
        let features = &manifest[manifest.find("[features]").unwrap()..];
        let features = &features[..features.find("\n[").unwrap()];
        let mut backends = Vec::new();
        for line in features
            .lines()
            .filter(|l| l.contains("dep:leaf-registry-"))
        {
            let (feature, deps) = line.split_once(" = ").unwrap();
            let krate = deps
                .split("dep:")
                .nth(1)
                .and_then(|d| d.split('"').next())
                .unwrap();
            let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(krate);
            assert!(
                dir.join("Cargo.toml").is_file(),
                "{feature}: no crate {krate}"
            );
            backends.push(feature.trim());
        }
        for feature in &backends {
            assert!(
                BACKENDS.iter().any(|b| b.feature == *feature),
                "feature {feature} chooses no backend in BACKENDS"
            );
        }
        for b in BACKENDS {
            assert!(
                backends.contains(&b.feature),
                "{} = {:?} names {}, not a backend feature of leaf-server",
                b.key,
                b.name,
                b.feature
            );
        }
        let crates = std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with("leaf-registry-"));
        for krate in crates {
            assert!(
                features.contains(&format!("dep:{krate}")),
                "{krate} is composed by no feature of leaf-server"
            );
        }
    }

    /// Each alias of `[segment]`, written as a `LEAF_` variable as earlier versions documented
    /// it, reaches the chosen store's key; `C` is the store's type.
    #[allow(dead_code, reason = "used by the stores compiled in")]
    fn aliases_reach<C: DeserializeOwned + serde::Serialize>(
        store: &str,
        validate: fn(&C) -> Result<()>,
        cases: &[(&str, &str, &str)],
    ) {
        for (alias, value, target) in cases {
            let var = format!("LEAF_SEGMENT__{}", alias.to_ascii_uppercase());
            let env = [
                ("LEAF_SEGMENT__STORE".to_owned(), store.to_owned()),
                (var.clone(), (*value).to_owned()),
            ];
            let config = crate::config::load(None, env)
                .unwrap_or_else(|e| panic!("{var}: {e}"))
                .config;
            let c: C = store_config(&config, validate).unwrap();
            let json = serde_json::to_value(&c).unwrap();
            let got = json[target].to_string();
            assert!(
                got.trim_matches('"') == *value || got.contains(value),
                "{var} = {value}: {store}'s {target} is {got}"
            );
        }
    }

    #[cfg(feature = "sqlite")]
    #[test]
    fn the_sqlite_store_takes_the_aliases() {
        aliases_reach(
            "sqlite",
            leaf_registry_local::SqliteStoreConfig::validate,
            &[
                ("url", "sqlite://elsewhere/leaf.db", "url"),
                ("max_connections", "7", "max_connections"),
                ("busy_timeout_ms", "1234", "busy_timeout_ms"),
            ],
        );
    }

    #[cfg(feature = "mysql")]
    #[test]
    fn the_mysql_store_takes_the_aliases() {
        aliases_reach(
            "mysql",
            leaf_registry_mysql::MysqlConfig::validate,
            &[
                ("url", "mysql://u@db:3306/leaf", "url"),
                ("max_connections", "7", "max_connections"),
                ("connect_timeout_ms", "1234", "connect_timeout_ms"),
                ("timeout_ms", "2345", "timeout_ms"),
                ("lock_wait_timeout_s", "9", "lock_wait_timeout_s"),
            ],
        );
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn the_postgres_store_takes_the_aliases() {
        // `lock_wait_timeout_s` is MySQL's (whole seconds); PostgreSQL's own key is
        // `lock_timeout_ms`, which no alias names.
        aliases_reach(
            "postgres",
            leaf_registry_postgres::PostgresConfig::validate,
            &[
                ("url", "postgres://u@db:5432/leaf", "url"),
                ("max_connections", "7", "max_connections"),
                ("connect_timeout_ms", "1234", "connect_timeout_ms"),
                ("timeout_ms", "2345", "timeout_ms"),
            ],
        );
    }

    #[cfg(feature = "etcd")]
    #[test]
    fn the_etcd_store_takes_the_aliases() {
        aliases_reach(
            "etcd",
            leaf_registry_etcd::EtcdConfig::validate,
            &[
                ("url", "http://e1:2379", "endpoints"),
                ("timeout_ms", "2345", "timeout_ms"),
            ],
        );
    }

    #[cfg(feature = "redis")]
    #[test]
    fn the_redis_store_takes_the_aliases() {
        aliases_reach(
            "redis",
            leaf_registry_redis::RedisConfig::validate,
            &[
                ("url", "redis://r:6379", "url"),
                ("connect_timeout_ms", "1234", "connect_timeout_ms"),
                ("timeout_ms", "2345", "timeout_ms"),
            ],
        );
    }

    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn sqlite_store_opens_and_creates_its_directory() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = Config::default();
        c.segment.stores.insert(
            "url",
            format!("sqlite://{}/sub/leaf.db", dir.path().display()),
        );
        let store = segment_store(&c).await.unwrap();
        assert_eq!(store.kind(), "sqlite");
        assert!(dir.path().join("sub/leaf.db").exists());
        // The table's own key, without the alias.
        c.segment.stores.remove("url");
        c.segment.stores.set(
            "sqlite",
            "url",
            format!("sqlite://{}/other.db", dir.path().display()),
        );
        segment_store(&c).await.unwrap();
        assert!(dir.path().join("other.db").exists());
    }

    #[cfg(feature = "mysql")]
    #[test]
    fn mysql_settings_come_from_the_server_configuration() {
        let mut c = Config::default();
        c.segment.store = "mysql".into();
        let url = "mysql://leaf:hunter2@db:3306/leaf?ssl-mode=required";
        c.segment.stores.insert("url", url);
        c.segment.stores.insert("max_connections", 6);
        c.segment.stores.insert("connect_timeout_ms", 1500);
        c.segment.stores.insert("timeout_ms", 2500);
        c.segment.stores.insert("lock_wait_timeout_s", 7);
        let m = store_config(&c, leaf_registry_mysql::MysqlConfig::validate).unwrap();
        assert_eq!(m.url, url);
        assert_eq!(
            (
                m.max_connections,
                m.connect_timeout_ms,
                m.timeout_ms,
                m.lock_wait_timeout_s
            ),
            (6, 1500, 2500, 7)
        );
        assert!(!format!("{m:?}").contains("hunter2"));
        // An alias and the table disagreeing is refused; agreeing is fine.
        c.segment.stores.set("mysql", "timeout_ms", 2500);
        store_config(&c, leaf_registry_mysql::MysqlConfig::validate).unwrap();
        c.segment.stores.set("mysql", "timeout_ms", 99);
        let e = store_config(&c, leaf_registry_mysql::MysqlConfig::validate).unwrap_err();
        assert!(
            e.to_string()
                .contains("segment.timeout_ms and segment.mysql.timeout_ms"),
            "{e}"
        );
        c.snowflake.mode = "mysql".into();
        c.snowflake
            .backends
            .set("mysql", "url", "mysql://w:s3cret@db/leaf");
        let r = mode_config(&c, leaf_registry_mysql::MysqlConfig::validate).unwrap();
        assert_eq!(r.url, "mysql://w:s3cret@db/leaf");
        assert!(!format!("{r:?}").contains("s3cret"));
    }

    /// `fence_on_disconnect` belongs to the SQL workerId modes: their tables take it, a SQL
    /// store's table refuses it naming the section, and a `LEAF_` variable names it only for
    /// the mode.
    #[cfg(all(feature = "mysql", feature = "postgres"))]
    #[test]
    fn a_workerid_mode_key_is_refused_in_the_stores_table() {
        let dir = tempfile::tempdir().unwrap();
        let load_toml = |text: &str| {
            let path = dir.path().join("leaf.toml");
            std::fs::write(&path, text).unwrap();
            crate::config::load(Some(&path), Vec::new())
        };
        for db in ["mysql", "postgres"] {
            let file = format!(
                "[segment]\nstore = \"{db}\"\n[segment.{db}]\nfence_on_disconnect = true\n"
            );
            let Err(e) = load_toml(&file) else {
                panic!("[segment.{db}] took fence_on_disconnect");
            };
            assert!(
                e.to_string().contains(&format!(
                    "key segment.{db}.fence_on_disconnect: fence_on_disconnect is a key of \
                     [snowflake.{db}]"
                )),
                "{e}"
            );
            let file = format!(
                "[snowflake]\nmode = \"{db}\"\n[snowflake.{db}]\nfence_on_disconnect = true\n"
            );
            load_toml(&file).expect(db);
            let var = format!("LEAF_SNOWFLAKE__{}__FENCE_ON_DISCONNECT", db.to_uppercase());
            let mode = "LEAF_SNOWFLAKE__MODE".to_owned();
            let loaded =
                crate::config::load(None, [(mode, db.to_owned()), (var, "true".into())]).unwrap();
            assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
            let unknown = format!("LEAF_SEGMENT__{}__FENCE_ON_DISCONNECT", db.to_uppercase());
            let loaded = crate::config::load(None, [(unknown, "true".to_owned())]).unwrap();
            assert_eq!(loaded.warnings.len(), 1, "{:?}", loaded.warnings);
        }
        let mut c = Config::default();
        c.snowflake.mode = "mysql".into();
        c.snowflake
            .backends
            .set("mysql", "fence_on_disconnect", true);
        let r = mode_config(&c, leaf_registry_mysql::MysqlConfig::validate).unwrap();
        assert!(r.fence_on_disconnect);
    }

    /// The registry of `mode` on `url`, where nothing listens (port 1): it still builds, and
    /// fails only when used.
    #[allow(dead_code, reason = "used by the SQL modes compiled in")]
    async fn made_without_contacting(mode: &str, url: &str) {
        let dir = tempfile::tempdir().unwrap();
        let mut c = Config::default();
        c.snowflake.mode = mode.into();
        c.snowflake.backends.set(mode, "url", url);
        c.snowflake.cache_dir = dir.path().to_path_buf();
        let r = worker_registry(&c).await.unwrap();
        assert_eq!(r.mode(), mode);
    }

    #[cfg(feature = "mysql")]
    #[tokio::test]
    async fn a_mysql_registry_is_made_without_contacting_the_server() {
        made_without_contacting("mysql", "mysql://leaf:pw@127.0.0.1:1/leaf").await;
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn postgres_settings_come_from_the_server_configuration() {
        let mut c = Config::default();
        c.segment.store = "postgres".into();
        let url = "postgres://leaf:hunter2@db:5432/leaf?sslmode=require";
        c.segment.stores.set("postgres", "url", url);
        c.segment.stores.set("postgres", "max_connections", 6);
        c.segment.stores.set("postgres", "lock_timeout_ms", 1500);
        c.segment.stores.insert("timeout_ms", 2500);
        let p = store_config(&c, leaf_registry_postgres::PostgresConfig::validate).unwrap();
        assert_eq!(p.url, url);
        assert_eq!(
            (p.max_connections, p.timeout_ms, p.lock_timeout_ms),
            (6, 2500, 1500)
        );
        assert!(!format!("{p:?}").contains("hunter2"));
        // A bad value names the server's key.
        c.segment.stores.set("postgres", "lock_timeout_ms", 0);
        let e = store_config(&c, leaf_registry_postgres::PostgresConfig::validate).unwrap_err();
        assert!(
            e.to_string().contains("segment.postgres.lock_timeout_ms"),
            "{e}"
        );
        c.snowflake.mode = "postgres".into();
        c.snowflake
            .backends
            .set("postgres", "url", "postgresql://w:s3cret@db/leaf");
        let r = mode_config(&c, leaf_registry_postgres::PostgresConfig::validate).unwrap();
        assert_eq!(r.url, "postgresql://w:s3cret@db/leaf");
        assert!(!format!("{r:?}").contains("s3cret"));
        c.snowflake
            .backends
            .set("postgres", "url", "mysql://w:s3cret@db/leaf");
        let e = mode_config(&c, leaf_registry_postgres::PostgresConfig::validate).unwrap_err();
        assert!(e.to_string().contains("snowflake.postgres.url"), "{e}");
        assert!(!e.to_string().contains("s3cret"), "{e}");
    }

    #[cfg(feature = "postgres")]
    #[tokio::test]
    async fn a_postgres_registry_is_made_without_contacting_the_server() {
        made_without_contacting("postgres", "postgres://leaf:pw@127.0.0.1:1/leaf").await;
    }

    #[cfg(all(feature = "zk-normal", feature = "zk-recycle"))]
    #[tokio::test]
    async fn zk_registries_are_made_without_contacting_zookeeper_and_list_peers() {
        // Nothing listens on port 1: the registries still build, and fail only when used.
        let dir = tempfile::tempdir().unwrap();
        let mut c = Config::default();
        c.snowflake.backends.set("zk", "address", "127.0.0.1:1");
        c.snowflake.backends.set("zk", "max_peer_skew_ms", 800);
        c.snowflake.cache_dir = dir.path().to_path_buf();
        for mode in ["zk_normal", "zk_recycle"] {
            c.snowflake.mode = mode.into();
            let r = registry(&c).await.unwrap();
            assert_eq!(r.worker.mode(), mode);
            let peers = r.peers.expect("zookeeper modes list their peers");
            assert_eq!(peers.max_skew_ms(), 800);
        }
    }

    #[cfg(feature = "zk-normal")]
    #[tokio::test]
    async fn zk_settings_come_from_the_server_configuration_and_bad_ones_name_their_key() {
        let mut c = Config::default();
        c.snowflake.mode = "zk_normal".into();
        for (key, value) in [
            ("address", Value::from("zk1:2181,zk2:2181")),
            ("session_timeout_ms", Value::from(6000u64)),
            ("recycle_idle_timeout_ms", Value::from(20_000u64)),
            ("root", Value::from("/leaf")),
            ("max_peer_skew_ms", Value::from(800u64)),
            ("fence_on_disconnect", Value::from(true)),
        ] {
            c.snowflake.backends.set("zk", key, value);
        }
        let z = mode_config(&c, leaf_registry_zk::ZkConfig::validate).unwrap();
        assert_eq!(
            z,
            leaf_registry_zk::ZkConfig {
                address: "zk1:2181,zk2:2181".into(),
                session_timeout_ms: 6000,
                recycle_idle_timeout_ms: 20_000,
                root: "/leaf".into(),
                max_peer_skew_ms: 800,
                fence_on_disconnect: true,
            }
        );
        c.snowflake.backends.set("zk", "address", " ");
        let e = registry(&c)
            .await
            .err()
            .expect("an empty address is refused");
        assert!(matches!(e, Error::Config(_)), "{e}");
        assert!(e.to_string().contains("snowflake.zk.address"), "{e}");
    }
}
