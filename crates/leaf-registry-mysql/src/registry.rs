//! `MysqlRegistry`: the `mysql` workerId mode on the fork's `leaf_workerid_alloc` table, with the
//! worker-id cache file as its fallback and its durable record of the time mark.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use leaf_core::{
    AcquireRequest, AsyncCacheFile, CacheRecord, Error, HeldCache, Lease, NodeIdentity,
    RegistryCapabilities, Renewal, Result, WorkerIdRegistry,
};
use sqlx::Row;
use sqlx::mysql::MySqlPool;
use tokio::sync::Mutex;

use crate::config::{MysqlConfig, MysqlRegistryConfig};
use crate::error::{bounded, is_duplicate, map_sqlx};
use crate::store::{ensure_table, pool};

/// The fork's DDL for `leaf_workerid_alloc`, exactly. It runs only when the table is missing;
/// an existing table is never altered.
pub const LEAF_WORKERID_ALLOC_DDL: &str = "CREATE TABLE leaf_workerid_alloc (id int(10) unsigned NOT NULL AUTO_INCREMENT, ip_port varchar(128) NOT NULL DEFAULT '', ip varchar(64) NOT NULL DEFAULT '', port varchar(64) NOT NULL DEFAULT '', max_timestamp bigint(20) DEFAULT NULL, create_time timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP, update_time timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP, PRIMARY KEY (id), UNIQUE KEY ip_port (ip_port)) ENGINE=InnoDB;";

/// The configuration key of the registry's URL, named in messages.
const KEY: &str = "snowflake.mysql.url";

/// The `mysql` workerId mode, as in the fork (NotFound9/Leaf): each node (`ip:port`) owns one
/// row of `leaf_workerid_alloc`, and the row's auto-increment `id` **is** its worker id, for
/// ever (never recycled). Ids start at 1 as MySQL's auto-increment does, so worker id 0 is never
/// handed out; keeping the fork's rule (rather than `id - 1`) means a fleet moving from the fork
/// keeps every node's worker id. An id above the layout's largest worker id fails start-up.
///
/// `max_timestamp` holds the node's time mark. The cache file (`{cache_dir}/worker-{name}`)
/// holds the worker id and the mark too, written and fsynced on every renewal: it is what makes
/// a mark durable, and when the server cannot be reached at start-up the node starts from it,
/// with its mark, so the start-up time check is never skipped.
pub struct MysqlRegistry {
    pool: MySqlPool,
    config: MysqlConfig,
    cache_dir: PathBuf,
    file_name: String,
    held: HeldCache,
    /// Serialises mark writes to the server; see [`MarkWriter`].
    marks: Arc<MarkWriter>,
}

/// The server copy of the mark is written in the background (the cache file is the durable
/// record), at most one write at a time; after `release` no background write may land and
/// raise the final mark again.
#[derive(Default)]
struct MarkWriter {
    lock: Mutex<bool>,
    in_flight: AtomicBool,
}

impl fmt::Debug for MysqlRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MysqlRegistry")
            .field("url", &self.config.redacted_url())
            .field("cache_dir", &self.cache_dir)
            .finish_non_exhaustive()
    }
}

impl MysqlRegistry {
    /// A registry on the server of `config`, keeping its cache file in `cache_dir` under the
    /// name `worker-{name}`. Nothing is contacted or locked before
    /// [`acquire`](WorkerIdRegistry::acquire), so this succeeds while the server is down.
    pub async fn connect(
        config: &MysqlRegistryConfig,
        cache_dir: impl Into<PathBuf>,
        name: &str,
    ) -> Result<Self> {
        let (pool, _) = pool(config, KEY)?;
        Ok(MysqlRegistry {
            pool,
            config: config.clone(),
            cache_dir: cache_dir.into(),
            file_name: format!("worker-{name}"),
            held: HeldCache::new(),
            marks: Arc::default(),
        })
    }

    /// The row of `identity`, inserted when missing: `(id, max_timestamp)`.
    async fn row_for(&self, identity: &NodeIdentity) -> Result<(u64, Option<i64>)> {
        ensure_table(
            &self.pool,
            "leaf_workerid_alloc",
            LEAF_WORKERID_ALLOC_DDL,
            KEY,
        )
        .await?;
        let ip_port = identity.to_string();
        // Look up first: an INSERT that fails on the unique key still uses up an auto-increment
        // value in InnoDB, so a restart never tries one for a node that has its row.
        if let Some(row) = self.lookup(&ip_port).await? {
            return Ok(row);
        }
        let inserted =
            sqlx::query("INSERT INTO leaf_workerid_alloc (ip_port, ip, port) VALUES (?, ?, ?)")
                .bind(&ip_port)
                .bind(&identity.ip)
                .bind(identity.port.to_string())
                .execute(&self.pool)
                .await;
        match inserted {
            Ok(done) => Ok((done.last_insert_id(), None)),
            // Another process with this identity inserted it between our lookup and insert.
            Err(e) if is_duplicate(&e) => self.lookup(&ip_port).await?.ok_or_else(|| {
                Error::backend(
                    crate::error::BACKEND,
                    format!("the leaf_workerid_alloc row of {ip_port} vanished after a duplicate"),
                )
            }),
            Err(e) => Err(map_sqlx(e, &ip_port, KEY)),
        }
    }

    async fn lookup(&self, ip_port: &str) -> Result<Option<(u64, Option<i64>)>> {
        let row =
            sqlx::query("SELECT id, max_timestamp FROM leaf_workerid_alloc WHERE ip_port = ?")
                .bind(ip_port)
                .fetch_optional(&self.pool)
                .await
                .map_err(|e| map_sqlx(e, ip_port, KEY))?;
        row.map(|r| {
            let id: u32 = r.try_get("id").map_err(|e| map_sqlx(e, ip_port, KEY))?;
            let mark: Option<i64> = r
                .try_get("max_timestamp")
                .map_err(|e| map_sqlx(e, ip_port, KEY))?;
            Ok((u64::from(id), mark))
        })
        .transpose()
    }

    /// Writes `mark_ms` to the worker's row in the background, unless a write is in flight
    /// (the next renewal carries a later mark anyway).
    fn write_mark_in_background(&self, worker_id: u64, mark_ms: u64) {
        if self.marks.in_flight.swap(true, Ordering::AcqRel) {
            return;
        }
        let (pool, marks, limit) = (self.pool.clone(), self.marks.clone(), self.config.timeout());
        tokio::spawn(async move {
            let released = marks.lock.lock().await;
            if !*released {
                let r = bounded(
                    limit,
                    "the mark update",
                    write_mark(&pool, worker_id, mark_ms),
                )
                .await;
                if let Err(e) = r {
                    tracing::debug!(worker_id, error = %e, "mark not written to mysql; the cache file has it");
                }
            }
            drop(released);
            marks.in_flight.store(false, Ordering::Release);
        });
    }
}

async fn write_mark(pool: &MySqlPool, worker_id: u64, mark_ms: u64) -> Result<()> {
    sqlx::query("UPDATE leaf_workerid_alloc SET max_timestamp = ? WHERE id = ?")
        .bind(i64::try_from(mark_ms).unwrap_or(i64::MAX))
        .bind(worker_id)
        .execute(pool)
        .await
        .map_err(|e| map_sqlx(e, "leaf_workerid_alloc", KEY))?;
    Ok(())
}

fn too_large(worker_id: u64, identity: &NodeIdentity, max: u64, source: &str) -> Error {
    Error::Config(format!(
        "snowflake.mode = \"mysql\": worker id {worker_id} of node {identity} ({source}) does not \
         fit the layout, whose largest worker id is {max}; widen snowflake.worker_bits or remove \
         unused rows from leaf_workerid_alloc and reset its AUTO_INCREMENT"
    ))
}

#[async_trait]
impl WorkerIdRegistry for MysqlRegistry {
    fn mode(&self) -> &'static str {
        "mysql"
    }

    fn capabilities(&self) -> RegistryCapabilities {
        RegistryCapabilities::new(false, true)
    }

    async fn acquire(&self, req: &AcquireRequest) -> Result<Lease> {
        let mut held = self.held.lock().await;
        if let Some((id, _)) = held.held() {
            return Err(Error::InvalidInput(format!(
                "this registry already holds worker id {id}; release it first"
            )));
        }
        // The lock first: a second process on this cache directory must not start at all.
        let cache = AsyncCacheFile::open(self.cache_dir.clone(), &self.file_name).await?;
        let cached = cache.read().await?;

        let limit = self.config.timeout() + self.config.connect_timeout();
        let (worker_id, server_mark) =
            match bounded(limit, "the worker id lookup", self.row_for(&req.identity)).await {
                Ok((id, mark)) => {
                    if id > req.max_worker_id {
                        return Err(too_large(
                            id,
                            &req.identity,
                            req.max_worker_id,
                            "leaf_workerid_alloc",
                        ));
                    }
                    (
                        id,
                        mark.and_then(|m| u64::try_from(m).ok()).filter(|m| *m > 0),
                    )
                }
                // The server is down: start from the cache file, mark included.
                Err(e) if e.is_retryable() => {
                    let Some(r) = cached else {
                        return Err(Error::Unavailable(format!(
                            "mysql cannot be reached ({e}) and {} holds no worker id to start from",
                            cache.path().display()
                        )));
                    };
                    if r.worker_id > req.max_worker_id {
                        return Err(too_large(
                            r.worker_id,
                            &req.identity,
                            req.max_worker_id,
                            "cache file",
                        ));
                    }
                    tracing::warn!(
                        worker_id = r.worker_id,
                        mark_ms = r.mark_ms,
                        error = %e,
                        "mysql unreachable: starting from the worker id cache file"
                    );
                    let prev_mark_ms = (r.mark_ms > 0).then_some(r.mark_ms);
                    held.hold(r.worker_id, cache);
                    *self.marks.lock.lock().await = false;
                    return Ok(Lease {
                        worker_id: r.worker_id,
                        prev_mark_ms,
                        ttl: None,
                    });
                }
                Err(e) => return Err(e),
            };

        let cached_mark = match cached {
            Some(r) if r.worker_id == worker_id => Some(r.mark_ms).filter(|m| *m > 0),
            Some(r) => {
                tracing::warn!(
                    cached = r.worker_id,
                    assigned = worker_id,
                    "the cache file belongs to another worker id; its mark does not apply"
                );
                None
            }
            None => None,
        };
        let prev_mark_ms = server_mark.max(cached_mark);
        // The cache file learns the worker id now, so that a start while the server is down
        // finds it; the mark stays the highest known.
        cache
            .write(CacheRecord {
                worker_id,
                mark_ms: prev_mark_ms.unwrap_or(0),
            })
            .await?;
        tracing::info!(worker_id, ?prev_mark_ms, identity = %req.identity, "mysql worker id acquired");
        held.hold(worker_id, cache);
        *self.marks.lock.lock().await = false;
        Ok(Lease {
            worker_id,
            prev_mark_ms,
            ttl: None,
        })
    }

    async fn renew(&self, lease: &Lease, mark_ms: u64) -> Result<Renewal> {
        let renewal = self.held.renew(lease.worker_id, mark_ms).await?;
        if renewal == Renewal::Ok {
            self.write_mark_in_background(lease.worker_id, mark_ms);
        }
        Ok(renewal)
    }

    async fn release(&self, lease: &Lease, final_mark_ms: u64) -> Result<()> {
        let worker_id = lease.worker_id;
        // Held until the server has the final mark: no renewal slips in between.
        let mut held = self.held.lock().await;
        if !held.write_mark(worker_id, final_mark_ms).await? {
            tracing::debug!(worker_id, "release of a lease not held");
            return Ok(());
        }
        {
            // Waits for a background write in flight, and stops later ones, so the final mark
            // (which may be below the last renewal's) is the one that stays.
            let mut released = self.marks.lock.lock().await;
            *released = true;
            let r = bounded(
                self.config.timeout(),
                "the final mark",
                write_mark(&self.pool, worker_id, final_mark_ms),
            )
            .await;
            if let Err(e) = r {
                // The cache file has the final mark; the server keeps a later one, which only
                // makes a start elsewhere wait a little.
                tracing::warn!(worker_id, error = %e, "final mark not written to mysql");
            }
        }
        // Closing the file releases the directory lock.
        held.close();
        Ok(())
    }
}
