//! The data of Leaf's nodes: the `forever` node of `zk_normal` (Leaf's JSON, compatible with Java
//! Leaf's `Endpoint`) and the `notuse` / `inuse` nodes of `zk_recycle`'s pool.

use leaf_core::{Error, NodeIdentity, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::BACKEND;

/// Java Leaf stores "now" every 3 s, not a mark ahead: up to 3 s of its issued timestamps may
/// be above the stored one.
pub(crate) const JAVA_LEAF_UPLOAD_PERIOD_MS: u64 = 3000;

/// The `forever/{ip}:{port}-{seq}` node's data as this crate writes it: Java Leaf's fields
/// (`port` a string, as its `Endpoint` has it) and `leafRs`, which tells that `timestamp` is a
/// high-water mark rather than Java Leaf's "now".
#[derive(Debug, Serialize)]
struct ForeverData<'a> {
    ip: &'a str,
    port: String,
    timestamp: u64,
    #[serde(rename = "leafRs")]
    leaf_rs: bool,
}

/// The data of our `forever` node with `mark_ms` as its timestamp.
pub(crate) fn forever_data(identity: &NodeIdentity, mark_ms: u64) -> Vec<u8> {
    serde_json::to_vec(&ForeverData {
        ip: &identity.ip,
        port: identity.port.to_string(),
        timestamp: mark_ms,
        leaf_rs: true,
    })
    .expect("plain data serialises")
}

/// The highest timestamp the node's previous owner may have issued, read from a `forever`
/// node: our own mark as it is, Java Leaf's "now" plus its upload period; `None` when nothing
/// was issued (a zero or missing timestamp of ours).
pub(crate) fn forever_prev_mark(data: &[u8], path: &str) -> Result<Option<u64>> {
    let v: Value = serde_json::from_slice(data).map_err(|_| garbled(path))?;
    let ts = match v.get("timestamp") {
        None | Some(Value::Null) => None,
        Some(t) => Some(as_u64(t).ok_or_else(|| garbled(path))?),
    };
    let ours = v.get("leafRs").and_then(Value::as_bool).unwrap_or(false);
    Ok(match (ours, ts) {
        (true, ts) => ts.filter(|t| *t > 0),
        // Java Leaf wrote it: it may have issued up to one upload period past it.
        (false, Some(t)) if t > 0 => Some(t + JAVA_LEAF_UPLOAD_PERIOD_MS),
        (false, _) => None,
    })
}

/// Java Leaf writes numbers, but a hand-made node may hold a string.
fn as_u64(v: &Value) -> Option<u64> {
    v.as_u64().or_else(|| v.as_str()?.trim().parse().ok())
}

/// The `recycle/inuse/{id}` node's data: who holds the id, the lease TTL the recycler honours,
/// and the owner's mark.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct InUse {
    pub(crate) owner: String,
    #[serde(rename = "ttlMs")]
    pub(crate) ttl_ms: u64,
    pub(crate) mark: u64,
}

/// The `recycle/notuse/{id}` node's data: the last mark of the id's previous owner (0: never
/// used).
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct NotUse {
    pub(crate) mark: u64,
}

pub(crate) fn to_json(v: &impl Serialize) -> Vec<u8> {
    serde_json::to_vec(v).expect("plain data serialises")
}

/// A pool node's data; an empty node reads as the default where there is one.
pub(crate) fn parse_inuse(data: &[u8], path: &str) -> Result<InUse> {
    serde_json::from_slice(data).map_err(|_| garbled(path))
}

pub(crate) fn parse_notuse(data: &[u8], path: &str) -> Result<NotUse> {
    if data.is_empty() {
        return Ok(NotUse { mark: 0 });
    }
    serde_json::from_slice(data).map_err(|_| garbled(path))
}

fn garbled(path: &str) -> Error {
    Error::backend(
        BACKEND,
        format!("zookeeper node {path} does not hold the data leaf expects"),
    )
}

/// The worker id of a `forever` child `{ip}:{port}-{seq}` of `identity`, `None` for another
/// identity's child.
pub(crate) fn forever_seq(child: &str, identity: &NodeIdentity) -> Option<u64> {
    let rest = child.strip_prefix(&format!("{identity}-"))?;
    if rest.is_empty() || !rest.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    rest.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prev_mark_table() {
        let check = |data: &str, expect: Option<u64>| {
            assert_eq!(
                forever_prev_mark(data.as_bytes(), "/p").unwrap(),
                expect,
                "{data}"
            )
        };
        // Java Leaf's Endpoint: "now" every 3 s.
        check(
            r#"{"ip":"10.0.0.1","port":"8080","timestamp":1700000000000}"#,
            Some(1_700_000_003_000),
        );
        check(
            r#"{"ip":"10.0.0.1","port":8080,"timestamp":"1700000000000"}"#,
            Some(1_700_000_003_000),
        );
        // Ours: a mark, as it is.
        check(
            r#"{"ip":"10.0.0.1","port":"8080","timestamp":1700000000000,"leafRs":true}"#,
            Some(1_700_000_000_000),
        );
        check(
            r#"{"ip":"10.0.0.1","port":"8080","timestamp":0,"leafRs":true}"#,
            None,
        );
        check(r#"{"ip":"10.0.0.1","port":"8080"}"#, None);
        assert!(forever_prev_mark(b"not json", "/p").is_err());
        assert!(forever_prev_mark(br#"{"timestamp":"soon"}"#, "/p").is_err());
    }

    #[test]
    fn our_data_reads_back_and_looks_like_leafs() {
        let me = NodeIdentity::new("10.0.0.1", 8080);
        let data = forever_data(&me, 42);
        let v: Value = serde_json::from_slice(&data).unwrap();
        assert_eq!(v["ip"], "10.0.0.1");
        assert_eq!(v["port"], "8080");
        assert_eq!(v["timestamp"], 42);
        assert_eq!(forever_prev_mark(&data, "/p").unwrap(), Some(42));
    }

    #[test]
    fn seq_table() {
        let me = NodeIdentity::new("10.0.0.1", 8080);
        let check = |child: &str, expect: Option<u64>| {
            assert_eq!(forever_seq(child, &me), expect, "{child}")
        };
        check("10.0.0.1:8080-0000000007", Some(7));
        check("10.0.0.1:8080-0000000000", Some(0));
        check("10.0.0.1:80800-0000000001", None);
        check("10.0.0.11:8080-0000000001", None);
        check("10.0.0.1:8080-", None);
        check("10.0.0.1:8080-12a", None);
    }

    #[test]
    fn pool_data_round_trip() {
        let u = InUse {
            owner: "10.0.0.1:8080".into(),
            ttl_ms: 10_000,
            mark: 5,
        };
        assert_eq!(parse_inuse(&to_json(&u), "/p").unwrap(), u);
        assert!(parse_inuse(b"", "/p").is_err());
        assert_eq!(parse_notuse(b"", "/p").unwrap(), NotUse { mark: 0 });
        assert_eq!(
            parse_notuse(br#"{"mark":9}"#, "/p").unwrap(),
            NotUse { mark: 9 }
        );
    }
}
