//! `RedisStore`: segment mode's rows on Redis, one hash per tag, allocated by one Lua script.

use std::collections::HashMap;
use std::fmt;

use async_trait::async_trait;
use leaf_core::{
    Allocation, Error, NewTag, Result, SegmentStore, StoreCapabilities, Tag, TagRecord, TagUpdate,
};
use leaf_core::{clamp_step, validate_step};
use redis::Script;
use redis::aio::MultiplexedConnection;

use crate::config::{RedisConfig, RedisStoreConfig};
use crate::connection::{Connection, not_replicated};

/// The allocation: `max_id += step` (the given one, else the stored one) with Redis's exact
/// 64-bit `HINCRBY`, `update_time` stamped with the server's clock, the row returned as
/// strings (Lua numbers are doubles and would round a `max_id` past 2^53).
///
/// KEYS[1] the tag's hash; ARGV[1] the step to add, or "" for the stored one.
/// Answers `{"missing"}`, `{"badstep", stored}`, `{"overflow", max_id, stored}` (nothing
/// changed: the sum would pass i64::MAX) or `{"ok", max_id, stored, used}`.
const ALLOCATE: &str = r#"
local stored = redis.call('HGET', KEYS[1], 'step')
if not redis.call('HGET', KEYS[1], 'max_id') then return {'missing'} end
local step = ARGV[1]
if step == '' then
  local n = tonumber(stored)
  if not n or n < 1 or n ~= math.floor(n) then return {'badstep', tostring(stored)} end
  step = stored
end
local ok = pcall(redis.call, 'HINCRBY', KEYS[1], 'max_id', step)
if not ok then
  return {'overflow', redis.call('HGET', KEYS[1], 'max_id'), tostring(stored)}
end
local t = redis.call('TIME')
redis.call('HSET', KEYS[1], 'update_time', string.format('%.0f', t[1] * 1000 + math.floor(t[2] / 1000)))
return {'ok', redis.call('HGET', KEYS[1], 'max_id'), tostring(stored), step}
"#;

/// The allocation near `i64::MAX`: adds ARGV[2] (what is left, computed by the caller) only if
/// `max_id` is still ARGV[1]. Answers `{"missing"}`, `{"moved"}` or as [`ALLOCATE`].
const ALLOCATE_REST: &str = r#"
local cur = redis.call('HGET', KEYS[1], 'max_id')
if not cur then return {'missing'} end
if cur ~= ARGV[1] then return {'moved'} end
redis.call('HINCRBY', KEYS[1], 'max_id', ARGV[2])
local t = redis.call('TIME')
redis.call('HSET', KEYS[1], 'update_time', string.format('%.0f', t[1] * 1000 + math.floor(t[2] / 1000)))
return {'ok', redis.call('HGET', KEYS[1], 'max_id'), tostring(redis.call('HGET', KEYS[1], 'step')), ARGV[2]}
"#;

/// Creates a tag: the hash and its name in the tag set, or nothing if the hash exists.
/// KEYS[1] the hash, KEYS[2] the tag set; ARGV: tag, max_id, step, has description (1/0),
/// description.
const CREATE: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local t = redis.call('TIME')
redis.call('HSET', KEYS[1], 'max_id', ARGV[2], 'step', ARGV[3],
  'update_time', string.format('%.0f', t[1] * 1000 + math.floor(t[2] / 1000)))
if ARGV[4] == '1' then redis.call('HSET', KEYS[1], 'description', ARGV[5]) end
redis.call('SADD', KEYS[2], ARGV[1])
return 1
"#;

/// Changes a tag's step and/or description, if the hash exists. KEYS[1] the hash; ARGV: has
/// step (1/0), step, has description (1/0), description.
const UPDATE: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if ARGV[1] == '1' then redis.call('HSET', KEYS[1], 'step', ARGV[2]) end
if ARGV[3] == '1' then redis.call('HSET', KEYS[1], 'description', ARGV[4]) end
local t = redis.call('TIME')
redis.call('HSET', KEYS[1], 'update_time', string.format('%.0f', t[1] * 1000 + math.floor(t[2] / 1000)))
return 1
"#;

/// A segment store on Redis, safe for any number of servers at once.
///
/// Per tag one hash `{key_prefix}:tag:{tag}` (`max_id`, `step`, `description`,
/// `update_time`), and the set `{key_prefix}:tags` of every tag. An allocation is one Lua
/// script, atomic as every script is; near `i64::MAX` a second, compare-and-set script adds
/// what is left. Every call is bounded by `timeout_ms` (plus `wait_timeout_ms` with replicas)
/// and fails with `Unavailable`, never hangs. The connection is checked by the durability guard
/// whenever it is opened.
pub struct RedisStore {
    conn: Connection,
    allocate: Script,
    allocate_rest: Script,
    create: Script,
    update: Script,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("url", &self.conn.config().redacted_url())
            .field("key_prefix", &self.conn.config().key_prefix)
            .finish_non_exhaustive()
    }
}

/// One script's answer: a status and string fields.
type Answer = Vec<String>;

impl RedisStore {
    /// Connects to the server of `config` and runs the durability guard. Fails with `Config`
    /// if the configuration is invalid, the server refuses the credentials, its durability is
    /// weaker than `appendonly yes` + `appendfsync always`, or it may evict keys (a
    /// `maxmemory` with a `maxmemory-policy` other than `noeviction`) (unless
    /// `accept_weak_durability`); with `Unavailable` if it cannot be reached in time.
    pub async fn connect(config: &RedisStoreConfig) -> Result<Self> {
        let store = RedisStore {
            conn: Connection::new(config)?,
            allocate: Script::new(ALLOCATE),
            allocate_rest: Script::new(ALLOCATE_REST),
            create: Script::new(CREATE),
            update: Script::new(UPDATE),
        };
        store.conn.open().await?;
        tracing::debug!(url = %config.redacted_url(), "redis segment store ready");
        Ok(store)
    }

    /// [`connect`](Self::connect) with the default settings.
    pub async fn connect_url(url: &str) -> Result<Self> {
        Self::connect(&RedisConfig::with_url(url)).await
    }

    fn tags_key(&self) -> String {
        format!("{}:tags", self.conn.config().key_prefix)
    }

    fn tag_key(&self, tag: &Tag) -> String {
        format!("{}:tag:{tag}", self.conn.config().key_prefix)
    }

    /// Runs `script` on the tag's hash as a write; `Unavailable` when fewer than
    /// `wait_replicas` replicas acknowledged it.
    async fn run<T: redis::FromRedisValue>(
        &self,
        what: &str,
        script: &Script,
        key: String,
        args: Vec<String>,
    ) -> Result<T> {
        let (answer, replicated) = self
            .conn
            .write(what, |mut c: MultiplexedConnection| async move {
                let mut inv = script.key(key);
                for a in &args {
                    inv.arg(a);
                }
                inv.invoke_async(&mut c).await
            })
            .await?;
        if !replicated {
            return Err(not_replicated());
        }
        Ok(answer)
    }

    async fn allocate_inner(&self, tag: &Tag, step: Option<i64>) -> Result<Allocation> {
        let key = self.tag_key(tag);
        let arg = step.map(|s| s.to_string()).unwrap_or_default();
        let answer = self
            .run("the allocation", &self.allocate, key.clone(), vec![arg])
            .await?;
        match status(&answer) {
            "ok" => allocation(tag, &answer),
            "missing" => Err(not_found(tag)),
            "badstep" => Err(Error::InvalidInput(format!(
                "tag {tag} has step {} stored; a step must be at least 1",
                answer.get(1).map_or("(none)", String::as_str)
            ))),
            "overflow" => self.allocate_rest(tag, step, &answer).await,
            other => Err(unexpected(other)),
        }
    }

    /// The end of a tag's range: what is left before `i64::MAX`, added only if `max_id` is
    /// still the one read ([`clamp_step`]); tried again while other allocations move it.
    async fn allocate_rest(
        &self,
        tag: &Tag,
        step: Option<i64>,
        first: &Answer,
    ) -> Result<Allocation> {
        let mut answer = first.clone();
        // Each script is bounded by the timeout; the rounds by this count (another server's
        // allocation between the read and the compare-and-set makes one more).
        for _ in 0..64 {
            let max_id = parse_i64(&answer, 1, "max_id")?;
            let stored = parse_i64(&answer, 2, "step")?;
            let wanted = match step {
                Some(s) => s,
                None => stored,
            };
            let used = clamp_step(tag, max_id, wanted)?;
            let key = self.tag_key(tag);
            let next = self
                .run(
                    "the allocation",
                    &self.allocate_rest,
                    key,
                    vec![max_id.to_string(), used.to_string()],
                )
                .await?;
            match status(&next) {
                "ok" => return allocation(tag, &next),
                "missing" => return Err(not_found(tag)),
                "moved" => {
                    answer = self
                        .run(
                            "the allocation",
                            &self.allocate,
                            self.tag_key(tag),
                            vec![step.map(|s| s.to_string()).unwrap_or_default()],
                        )
                        .await?;
                    match status(&answer) {
                        "ok" => return allocation(tag, &answer),
                        "missing" => return Err(not_found(tag)),
                        "overflow" => continue,
                        other => return Err(unexpected(other)),
                    }
                }
                other => return Err(unexpected(other)),
            }
        }
        Err(Error::Unavailable(format!(
            "tag {tag}: the end of its range is contended; try again"
        )))
    }

    async fn fetch(&self, tag: &Tag) -> Result<Option<TagRecord>> {
        let key = self.tag_key(tag);
        let fields: HashMap<String, String> = self
            .conn
            .call("the lookup", |mut c| async move {
                redis::cmd("HGETALL").arg(key).query_async(&mut c).await
            })
            .await?;
        if fields.is_empty() {
            return Ok(None);
        }
        record(tag.clone(), &fields).map(Some)
    }
}

fn status(answer: &Answer) -> &str {
    answer.first().map_or("", String::as_str)
}

fn unexpected(status: &str) -> Error {
    Error::backend(
        crate::error::BACKEND,
        format!("a leaf script answered {status:?}, which this version does not know"),
    )
}

fn parse_i64(answer: &Answer, i: usize, field: &str) -> Result<i64> {
    answer.get(i).and_then(|v| v.parse().ok()).ok_or_else(|| {
        Error::backend(
            crate::error::BACKEND,
            format!(
                "the tag's {field} is not a 64-bit integer: {:?}",
                answer.get(i)
            ),
        )
    })
}

fn allocation(tag: &Tag, answer: &Answer) -> Result<Allocation> {
    Ok(Allocation {
        tag: tag.clone(),
        max_id: parse_i64(answer, 1, "max_id")?,
        step: parse_i64(answer, 2, "step")?,
        used_step: parse_i64(answer, 3, "step used")?,
    })
}

fn record(tag: Tag, fields: &HashMap<String, String>) -> Result<TagRecord> {
    let int = |name: &str| -> Result<Option<i64>> {
        match fields.get(name) {
            None => Ok(None),
            Some(v) => v.parse().map(Some).map_err(|_| {
                Error::backend(
                    crate::error::BACKEND,
                    format!("tag {tag}: field {name} is not a 64-bit integer: {v:?}"),
                )
            }),
        }
    };
    let missing = |name: &str| {
        Error::backend(
            crate::error::BACKEND,
            format!("tag {tag}: the hash has no {name} field"),
        )
    };
    Ok(TagRecord {
        max_id: int("max_id")?.ok_or_else(|| missing("max_id"))?,
        step: int("step")?.ok_or_else(|| missing("step"))?,
        description: fields.get("description").cloned(),
        updated_at_ms: int("update_time")?,
        tag,
    })
}

fn not_found(tag: &Tag) -> Error {
    Error::NotFound(format!("tag {tag}"))
}

#[async_trait]
impl SegmentStore for RedisStore {
    fn kind(&self) -> &'static str {
        "redis"
    }

    fn capabilities(&self) -> StoreCapabilities {
        StoreCapabilities::new(true, true)
    }

    async fn allocate(&self, tag: &Tag, step: Option<i64>) -> Result<Allocation> {
        if let Some(s) = step {
            validate_step(s)?;
        }
        self.allocate_inner(tag, step).await
    }

    async fn get(&self, tag: &Tag) -> Result<Option<TagRecord>> {
        self.fetch(tag).await
    }

    async fn list(&self) -> Result<Vec<TagRecord>> {
        let tags = self.tags().await?;
        let keys: Vec<String> = tags.iter().map(|t| self.tag_key(t)).collect();
        let rows: Vec<HashMap<String, String>> = if keys.is_empty() {
            Vec::new()
        } else {
            self.conn
                .call("the listing", |mut c| async move {
                    let mut pipe = redis::pipe();
                    for k in &keys {
                        pipe.cmd("HGETALL").arg(k);
                    }
                    pipe.query_async(&mut c).await
                })
                .await?
        };
        // A tag whose hash is gone, or is not Leaf's, is skipped rather than hiding every other.
        let mut records: Vec<TagRecord> = tags
            .into_iter()
            .zip(rows)
            .filter(|(_, fields)| !fields.is_empty())
            .filter_map(|(tag, fields)| match record(tag, &fields) {
                Ok(r) => Some(r),
                Err(e) => {
                    tracing::warn!(error = %e, "skipping a tag hash");
                    None
                }
            })
            .collect();
        records.sort_by(|a, b| a.tag.cmp(&b.tag));
        Ok(records)
    }

    async fn tags(&self) -> Result<Vec<Tag>> {
        let key = self.tags_key();
        let names: Vec<String> = self
            .conn
            .call("the tag listing", |mut c| async move {
                redis::cmd("SMEMBERS").arg(key).query_async(&mut c).await
            })
            .await?;
        let mut tags: Vec<Tag> = names
            .into_iter()
            .filter_map(|n| match Tag::try_from(n) {
                Ok(t) => Some(t),
                Err(e) => {
                    tracing::warn!(error = %e, "skipping a member of the tag set");
                    None
                }
            })
            .collect();
        tags.sort();
        Ok(tags)
    }

    async fn create(&self, new: &NewTag) -> Result<TagRecord> {
        new.validate()?;
        let key = self.tag_key(&new.tag);
        let tags_key = self.tags_key();
        let script = &self.create;
        let args = [
            new.tag.to_string(),
            new.max_id.to_string(),
            new.step.to_string(),
            if new.description.is_some() { "1" } else { "0" }.to_string(),
            new.description.clone().unwrap_or_default(),
        ];
        let (created, replicated) = self
            .conn
            .write("the insert", |mut c| async move {
                let mut inv = script.key(key);
                inv.key(tags_key);
                for a in &args {
                    inv.arg(a);
                }
                let created: i64 = inv.invoke_async(&mut c).await?;
                Ok(created)
            })
            .await?;
        if created == 0 {
            return Err(Error::AlreadyExists(format!("tag {}", new.tag)));
        }
        if !replicated {
            return Err(not_replicated());
        }
        self.fetch(&new.tag)
            .await?
            .ok_or_else(|| not_found(&new.tag))
    }

    async fn update(&self, tag: &Tag, update: &TagUpdate) -> Result<TagRecord> {
        update.validate()?;
        let args = vec![
            if update.step.is_some() { "1" } else { "0" }.to_string(),
            update.step.unwrap_or_default().to_string(),
            if update.description.is_some() {
                "1"
            } else {
                "0"
            }
            .to_string(),
            update.description.clone().unwrap_or_default(),
        ];
        let answer = self
            .run::<i64>("the update", &self.update, self.tag_key(tag), args)
            .await?;
        if answer == 0 {
            return Err(not_found(tag));
        }
        self.fetch(tag).await?.ok_or_else(|| not_found(tag))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t() -> Tag {
        Tag::new("t").unwrap()
    }

    #[test]
    fn records_from_hashes() {
        let check = |fields: &[(&str, &str)],
                     expect: Option<(i64, i64, Option<&str>, Option<i64>)>| {
            let map: HashMap<String, String> = fields
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            match (record(t(), &map), expect) {
                (Ok(r), Some((max_id, step, d, u))) => {
                    assert_eq!(
                        (r.max_id, r.step, r.description.as_deref(), r.updated_at_ms),
                        (max_id, step, d, u),
                        "{fields:?}"
                    );
                }
                (Err(e), None) => assert!(matches!(e, Error::Backend { .. }), "{e}"),
                (got, want) => panic!("{fields:?}: got {got:?}, want {want:?}"),
            }
        };
        check(
            &[("max_id", "1"), ("step", "2000")],
            Some((1, 2000, None, None)),
        );
        check(
            &[
                ("max_id", "9223372036854775807"),
                ("step", "5"),
                ("description", ""),
                ("update_time", "1700000000000"),
            ],
            Some((i64::MAX, 5, Some(""), Some(1_700_000_000_000))),
        );
        check(&[("max_id", "1.5"), ("step", "2")], None);
        check(&[("step", "2")], None);
    }

    #[test]
    fn allocations_from_answers() {
        let a: Answer = ["ok", "4001", "2000", "2000"].map(String::from).to_vec();
        let got = allocation(&t(), &a).unwrap();
        assert_eq!(got.range(), 2001..4001);
        let bad: Answer = ["ok", "x"].map(String::from).to_vec();
        assert!(allocation(&t(), &bad).is_err());
    }
}
