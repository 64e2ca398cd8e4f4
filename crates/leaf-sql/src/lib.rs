#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod config;
mod error;
mod inline;
mod leases;
mod queries;
mod registry;
mod rows;
mod session_lock;
mod store;

pub use config::{Setters, Settings, SqlConfig, fmt_config, parse_url, ssl_mode, validate_store};
pub use error::{
    CONFLICT_ATTEMPTS, ServerError, map_sqlx, map_sqlx_at_start, retry_conflicts, worker_id_of,
};
pub use inline::{Arg, inline};
pub use leases::{LeaseRow, SqlLeaseRegistry, SqlLeases};
pub use queries::Queries;
pub use registry::{RegistryDialect, SqlClaims, SqlRegistry, Transport, reachable};
pub use rows::{not_found, record, records};
pub use session_lock::{
    ConnectError, Held, HeldIdentity, IdentitySettings, Locking, MarkRow, MarkWrite, Proof,
    SessionLock, session_idle_limit,
};
pub use store::{SqlStore, StoreDialect};

use std::marker::PhantomData;
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use leaf_core::backend::{Descriptor, Registry};
use leaf_core::{Result, SegmentStore, StoreCapabilities};
use sqlx::pool::PoolOptions;
use sqlx::{Connection, Database, Pool};

/// The configuration key of a SQL backend's URL, named in messages.
pub const KEY: &str = "url";

/// The keys of a SQL backend's configuration that only its workerId mode takes: a segment
/// store's table refuses them.
pub const REGISTRY_ONLY_KEYS: &[&str] = &["fence_on_disconnect", "lease_ttl_ms"];

/// A dialect's connection.
pub type Conn<D> = <<D as Dialect>::Db as Database>::Connection;

/// A dialect's connect options.
pub type Options<D> = <Conn<D> as Connection>::Options;

/// What one SQL database does its own way: its configuration, the DDL creation race, and what
/// its error codes mean; with [`StoreDialect`] (the store's statements) and
/// [`RegistryDialect`] (the workerId mode's, and the identity lock), everything else of a SQL
/// backend ([`SqlStore`], [`SqlClaims`], [`Sql`]) is written once over it. Implemented by a
/// unit type of the backend's crate.
#[async_trait]
pub trait Dialect: Send + Sync + Sized + 'static {
    /// sqlx's database.
    type Db: Database;
    /// The backend's configuration.
    type Config: SqlConfig<Options = Options<Self>>;

    /// The backend's name: its `segment.store`, `snowflake.mode` and table, in messages and
    /// as `Error::Backend`'s backend.
    const NAME: &'static str;

    /// `pool` with what every pooled connection of `config` must set. Default: as it is.
    fn pool_options(config: &Self::Config, pool: PoolOptions<Self::Db>) -> PoolOptions<Self::Db> {
        let _ = config;
        pool
    }

    /// Creates `table` with `ddl` unless it exists, also when other servers race to create it:
    /// whether this call created it.
    async fn create_table(
        pool: &Pool<Self::Db>,
        table: &str,
        ddl: &'static str,
    ) -> Result<bool, sqlx::Error>;

    /// What a server's error means, if it is one the shared code tells apart.
    fn classify(e: &sqlx::Error) -> Option<ServerError>;
}

/// The descriptor (`leaf_core::backend::Descriptor`) of the SQL backend of dialect `D`: its store
/// and its workerId mode under `D::NAME`, for `leaf-server`'s composition.
pub struct Sql<D>(PhantomData<D>);

impl<D: Dialect> std::fmt::Debug for Sql<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // As the backend's crate names it: `Mysql`.
        f.write_str(&store::type_name(D::NAME, ""))
    }
}

#[async_trait]
impl<D: Queries> Descriptor for Sql<D> {
    type Config = D::Config;
    const TABLE: &'static str = D::NAME;
    const STORE: Option<&'static str> = Some(D::NAME);
    const MODE: Option<&'static str> = Some(D::NAME);
    const MODE_ONLY_KEYS: &'static [&'static str] = REGISTRY_ONLY_KEYS;

    fn validate(config: &D::Config) -> Result<()> {
        config.validate()
    }

    /// Durable, shared by any number of servers.
    fn store_capabilities(config: &D::Config) -> StoreCapabilities {
        let _ = config;
        StoreCapabilities::new(true, true)
    }

    /// `leaf_alloc` created when missing, checked when present, after [`validate_store`].
    /// `name` (the leaf name) is not used: the database is the namespace.
    async fn open_store(config: &D::Config, name: &str) -> Result<Arc<dyn SegmentStore>> {
        let _ = name;
        validate_store::<D>(config)?;
        // Boxed: the server's start-up future holds this one, and with sqlx's futures nested
        // in it unboxed, computing its layout passes the compiler's query depth limit (release
        // builds of leaf-server failed so).
        Ok(Arc::new(Box::pin(SqlStore::<D>::connect(config)).await?))
    }

    /// The registry on the server of `config`, its cache file in `cache_dir`. Nothing is
    /// contacted before its first `acquire`.
    fn open_registry(config: &D::Config, cache_dir: &Path, name: &str) -> Result<Registry> {
        config.validate()?;
        let registry = SqlClaims::<D>::connect(config, name)?.registry(cache_dir);
        Ok(Registry::without_peers(Arc::new(registry)))
    }

    /// With `fence_on_disconnect`, a leased pool in `leaf_workerid_lease` ([`SqlLeases`], its
    /// lease `lease_ttl_ms`); without it the workerId mode's registry, which the monotonic mode
    /// refuses: its user chose to keep issuing while the server is away, which a leader cannot.
    fn open_leader_registry(config: &D::Config, cache_dir: &Path, name: &str) -> Result<Registry> {
        if !config.settings().fence_on_disconnect {
            return Self::open_registry(config, cache_dir, name);
        }
        let registry = SqlLeases::<D>::connect(config, name)?.registry(cache_dir);
        Ok(Registry::without_peers(Arc::new(registry)))
    }
}
