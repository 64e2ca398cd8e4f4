//! Configuration of the ZooKeeper workerId modes (`[snowflake.zk]`): where the ensemble is, the
//! session timeout, the recycling idle timeout, the root of Leaf's nodes, the peer clock check,
//! and who this server is to ZooKeeper (`auth`, `auth_file`) with the ACL of the nodes it creates
//! (`acl`).

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use leaf_core::{Error, Result};
use serde::{Deserialize, Serialize};
use zookeeper_client::{self as zk, AuthId, Permission};

/// How to reach ZooKeeper and how the `zk_normal` / `zk_recycle` modes use it.
#[derive(Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ZkConfig {
    /// The ensemble, as ZooKeeper's connect string: `host:port[,host:port...]` (Leaf's
    /// `leaf.zk.list`). Default `"127.0.0.1:2181"`.
    pub address: String,
    /// The session timeout to negotiate, in milliseconds (the server clamps it into its
    /// `2..=20 × tickTime`). It bounds every call too: one that takes longer fails with
    /// `Unavailable`. A crashed node's live lock (`zk_normal`) disappears after it. Default `10000`.
    pub session_timeout_ms: u64,
    /// `zk_recycle`: the TTL of a worker id's lease, in milliseconds. The owner stores it in its
    /// node; any node's recycler returns the id to the pool once its node went unchanged that
    /// long. It must be at least the generator's minimum (renew period + fencing margin +
    /// latency allowance). Also the lease of the monotonic leader's claim on `zk_normal` with
    /// `fence_on_disconnect` (a `zk_recycle` pool of one). Default `10000`.
    pub recycle_idle_timeout_ms: u64,
    /// The root of Leaf's nodes (Leaf's `/snowflake`); the nodes of a leaf name live under
    /// `{root}/{name}`. Default `"/snowflake"`.
    pub root: String,
    /// The peer clock check: snowflake mode stays off when this node's clock is further than
    /// this from the average of its peers', in milliseconds. Default `5000`.
    pub max_peer_skew_ms: u64,
    /// `zk_normal`: stop issuing when ZooKeeper has not confirmed this node's live lock for the
    /// session timeout minus the generator's fencing margin, and resume once the session (or a
    /// new one holding the lock) is confirmed. Each renewal then confirms the lock and writes
    /// the mark to the `forever` node before it counts. Off (Leaf's behaviour), a node keeps
    /// serving through a ZooKeeper outage, and a partition longer than the session timeout lets
    /// a second process of the same identity take the worker id while this one still issues.
    /// Default `false`.
    pub fence_on_disconnect: bool,
    /// ZooKeeper digest authentication, `"user:password"` (what zkCli's `addauth digest` takes),
    /// sent with every session this server opens. Never logged nor shown by `Debug`. Default: none
    /// (the nodes are created open to anyone, as Leaf does).
    pub auth: Option<String>,
    /// The file holding `user:password` instead of `auth` (a mounted secret; one trailing line
    /// break is ignored), read again each time a new session is opened, so a rotated secret
    /// takes effect without a restart.
    pub auth_file: Option<PathBuf>,
    /// The ACL of every node this server creates, each entry `scheme:id:permissions` as zkCli
    /// writes it (`permissions` from `cdrwa`): `"digest:leaf:BASE64(SHA1(leaf:password)):cdrwa"`,
    /// `"auth::cdrwa"` (whoever authenticated as this server), `"world:anyone:r"`. Default: with
    /// `auth` (or `auth_file`), `["auth::cdrwa"]`, this server's identity only; without,
    /// `["world:anyone:cdrwa"]`, open to anyone (Leaf's). Nodes that exist already keep theirs.
    pub acl: Vec<String>,
}

impl fmt::Debug for ZkConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkConfig")
            .field("address", &self.address)
            .field("session_timeout_ms", &self.session_timeout_ms)
            .field("recycle_idle_timeout_ms", &self.recycle_idle_timeout_ms)
            .field("root", &self.root)
            .field("max_peer_skew_ms", &self.max_peer_skew_ms)
            .field("fence_on_disconnect", &self.fence_on_disconnect)
            .field("auth", &self.auth.as_ref().map(|_| "<redacted>"))
            .field("auth_file", &self.auth_file)
            .field("acl", &self.acl)
            .finish()
    }
}

impl Default for ZkConfig {
    fn default() -> Self {
        ZkConfig {
            address: "127.0.0.1:2181".into(),
            session_timeout_ms: 10_000,
            recycle_idle_timeout_ms: 10_000,
            root: "/snowflake".into(),
            max_peer_skew_ms: 5000,
            fence_on_disconnect: false,
            auth: None,
            auth_file: None,
            acl: Vec::new(),
        }
    }
}

impl ZkConfig {
    /// The defaults with `address`.
    pub fn with_address(address: impl Into<String>) -> Self {
        ZkConfig {
            address: address.into(),
            ..ZkConfig::default()
        }
    }

    /// `Config`, naming the field, if a value cannot work.
    pub fn validate(&self) -> Result<()> {
        if self.address.trim().is_empty() {
            return Err(Error::Config(
                "address must name at least one host:port".into(),
            ));
        }
        const HOUR_MS: u64 = 3_600_000;
        leaf_core::check_bounds(&[
            // ZooKeeper grants at least 2 ticks (4 s with its default tickTime).
            (
                "session_timeout_ms",
                self.session_timeout_ms,
                1_000,
                HOUR_MS,
            ),
            (
                "recycle_idle_timeout_ms",
                self.recycle_idle_timeout_ms,
                1,
                24 * HOUR_MS,
            ),
            ("max_peer_skew_ms", self.max_peer_skew_ms, 0, 24 * HOUR_MS),
        ])?;
        let root = &self.root;
        let bad_root = !root.starts_with('/')
            || root.len() < 2
            || root.ends_with('/')
            || root.contains("//")
            || root.split('/').any(|seg| seg == "." || seg == "..");
        if bad_root {
            return Err(Error::Config(format!(
                "root {root:?} must be an absolute zookeeper path such as \"/snowflake\", \
                 without a trailing slash"
            )));
        }
        // The file too, now: a start-up error rather than one at the first session.
        self.credentials()?;
        self.acls()?;
        Ok(())
    }

    /// The `user:password` of `auth` or, read now, of `auth_file`; `Config` naming the key
    /// (never showing the value) if it is not of that form or the file cannot be read.
    pub(crate) fn credentials(&self) -> Result<Option<String>> {
        let Some(value) =
            leaf_core::secret("auth", self.auth.as_deref(), self.auth_file.as_deref())?
        else {
            return Ok(None);
        };
        let key = match &self.auth_file {
            Some(path) => format!("auth_file: {} must hold", path.display()),
            None => "auth must be".to_owned(),
        };
        match value.split_once(':') {
            Some((user, password)) if !user.is_empty() && !password.is_empty() => Ok(Some(value)),
            _ => Err(Error::Config(format!(
                "{key} \"user:password\" (zookeeper's digest scheme, as zkCli's addauth digest \
                 takes it)"
            ))),
        }
    }

    /// The ACL of the nodes this server creates (see [`ZkConfig::acl`]); `Config` naming the
    /// entry that cannot be one.
    pub(crate) fn acls(&self) -> Result<Vec<zk::Acl>> {
        let authed = self.auth.is_some() || self.auth_file.is_some();
        if self.acl.is_empty() {
            let who = if authed {
                AuthId::authed()
            } else {
                AuthId::anyone()
            };
            return Ok(vec![zk::Acl::new(Permission::ALL, who)]);
        }
        self.acl
            .iter()
            .enumerate()
            .map(|(i, entry)| {
                parse_acl(entry, authed).map_err(|why| Error::Config(format!("acl[{i}]: {why}")))
            })
            .collect()
    }

    pub(crate) fn session_timeout(&self) -> Duration {
        Duration::from_millis(self.session_timeout_ms.max(1))
    }

    pub(crate) fn recycle_ttl(&self) -> Duration {
        Duration::from_millis(self.recycle_idle_timeout_ms)
    }
}

/// One `acl` entry, `scheme:id:permissions`; why not, without the entry (a digest entry given
/// a password instead of its hash would show it).
fn parse_acl(entry: &str, authed: bool) -> std::result::Result<zk::Acl, String> {
    const FORM: &str = "must be scheme:id:permissions, such as \"world:anyone:r\", \
                        \"auth::cdrwa\" or \"digest:user:BASE64HASH:cdrwa\"";
    let (Some((scheme, rest)), Some((_, perms))) = (entry.split_once(':'), entry.rsplit_once(':'))
    else {
        return Err(FORM.to_owned());
    };
    let Some(id) = rest.strip_suffix(perms).and_then(|r| r.strip_suffix(':')) else {
        return Err(FORM.to_owned());
    };
    if scheme.is_empty() || perms.is_empty() {
        return Err(FORM.to_owned());
    }
    let mut permission = Permission::NONE;
    for c in perms.chars() {
        permission = permission
            | match c {
                'c' => Permission::CREATE,
                'd' => Permission::DELETE,
                'r' => Permission::READ,
                'w' => Permission::WRITE,
                'a' => Permission::ADMIN,
                _ => {
                    return Err(format!(
                        "the permissions {perms:?} must be letters of cdrwa (create, delete, \
                         read, write, admin)"
                    ));
                }
            };
    }
    match scheme {
        "world" if id != "anyone" => return Err("the world scheme's id is anyone".to_owned()),
        "auth" if !authed => {
            return Err("the auth scheme needs auth or auth_file (this server's identity)".into());
        }
        "auth" if !id.is_empty() => return Err("the auth scheme's id is empty: auth::cdrwa".into()),
        "digest" => {
            // SHA-1 is 20 bytes: 28 characters of base64 ending in one '='.
            let ok = id.split_once(':').is_some_and(|(user, hash)| {
                !user.is_empty()
                    && hash.len() == 28
                    && hash.ends_with('=')
                    && hash[..27]
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
            });
            if !ok {
                return Err(
                    "a digest id is user:BASE64(SHA1(user:password)), 28 characters after \
                     the user (echo -n user:password | openssl dgst -binary -sha1 | base64), \
                     never the password"
                        .to_owned(),
                );
            }
        }
        "world" | "auth" | "ip" | "x509" | "sasl" => {}
        _ => {
            return Err(format!(
                "unknown scheme {scheme:?}: world, auth, digest, ip, x509 or sasl"
            ));
        }
    }
    Ok(zk::Acl::new(permission, AuthId::new(scheme, id)))
}

/// Whether `name` can be one path segment: the leaf name of `{root}/{name}`.
pub(crate) fn validate_name(name: &str) -> Result<()> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') {
        return Err(Error::Config(format!(
            "the leaf name {name:?} must be one zookeeper path segment (not empty, no '/')"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_number_is_bounded_and_named() {
        leaf_testkit::config::assert_bounds::<ZkConfig>(
            ZkConfig::validate,
            &[
                ("session_timeout_ms", 1_000, 3_600_000),
                ("recycle_idle_timeout_ms", 1, 86_400_000),
                ("max_peer_skew_ms", 0, 86_400_000),
            ],
            &[],
        );
    }

    #[test]
    fn defaults_match_the_documented_ones() {
        let c = ZkConfig::default();
        assert_eq!(c.address, "127.0.0.1:2181");
        assert_eq!(c.session_timeout_ms, 10_000);
        assert_eq!(c.recycle_idle_timeout_ms, 10_000);
        assert_eq!(c.root, "/snowflake");
        assert_eq!(c.max_peer_skew_ms, 5000);
        assert!(!c.fence_on_disconnect);
        assert_eq!((c.auth.as_deref(), c.auth_file.as_deref()), (None, None));
        assert!(c.acl.is_empty());
        c.validate().unwrap();
    }

    #[test]
    fn deserialises_partial_and_refuses_unknown_keys() {
        let c: ZkConfig =
            serde_json::from_str(r#"{"address": "zk1:2181,zk2:2181", "root": "/leaf"}"#).unwrap();
        assert_eq!(c.address, "zk1:2181,zk2:2181");
        assert_eq!(c.root, "/leaf");
        assert_eq!(c.session_timeout_ms, 10_000);
        assert!(serde_json::from_str::<ZkConfig>(r#"{"adress": "x"}"#).is_err());
        let c: ZkConfig = serde_json::from_str(
            r#"{"auth_file": "/run/secrets/zk", "acl": ["auth::cdrwa", "world:anyone:r"]}"#,
        )
        .unwrap();
        assert_eq!(
            c.auth_file.as_deref(),
            Some(std::path::Path::new("/run/secrets/zk"))
        );
        assert_eq!(c.acl, ["auth::cdrwa", "world:anyone:r"]);
    }

    #[test]
    fn validation_names_the_field() {
        let check = |c: ZkConfig, field: &str| {
            let e = c.validate().unwrap_err();
            assert!(
                matches!(&e, Error::Config(m) if m.starts_with(field)),
                "{field}: {e}"
            );
        };
        let d = ZkConfig::default;
        check(
            ZkConfig {
                address: " ".into(),
                ..d()
            },
            "address",
        );
        check(
            ZkConfig {
                session_timeout_ms: 0,
                ..d()
            },
            "session_timeout_ms",
        );
        check(
            ZkConfig {
                recycle_idle_timeout_ms: 0,
                ..d()
            },
            "recycle_idle_timeout_ms",
        );
        for root in ["snowflake", "/", "/a/", "/a//b", "/a/../b", ""] {
            check(
                ZkConfig {
                    root: root.into(),
                    ..d()
                },
                "root",
            );
        }
        ZkConfig {
            root: "/a/b".into(),
            ..d()
        }
        .validate()
        .unwrap();
    }

    fn config_message(e: Error) -> String {
        match e {
            Error::Config(m) => m,
            other => panic!("not a configuration error: {other}"),
        }
    }

    #[test]
    fn debug_never_shows_the_auth_secret() {
        let c = ZkConfig {
            auth: Some("leaf:hunter2".into()),
            auth_file: Some("/run/secrets/zk-auth".into()),
            acl: vec!["auth::cdrwa".into()],
            ..ZkConfig::default()
        };
        let d = format!("{c:?}");
        assert!(!d.contains("hunter2"), "{d}");
        assert!(
            d.contains("<redacted>") && d.contains("/run/secrets/zk-auth"),
            "{d}"
        );
        // Nor the errors about it.
        for bad in ["leafhunter2", "leaf:", ":hunter2"] {
            let e = ZkConfig {
                auth: Some(bad.into()),
                ..ZkConfig::default()
            }
            .validate()
            .unwrap_err();
            let e = config_message(e);
            assert!(e.starts_with("auth must be \"user:password\""), "{e}");
            assert!(!e.contains("hunter2"), "{e}");
        }
    }

    #[test]
    fn auth_comes_from_the_key_or_the_file_read_each_time() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("zk-auth");
        let c = ZkConfig {
            auth_file: Some(path.clone()),
            ..ZkConfig::default()
        };
        let e = config_message(c.validate().unwrap_err());
        assert!(
            e.starts_with("auth_file: cannot read") && e.contains("zk-auth"),
            "{e}"
        );
        std::fs::write(&path, "leaf:one\n").unwrap();
        assert_eq!(c.credentials().unwrap().as_deref(), Some("leaf:one"));
        std::fs::write(&path, "leaf:two").unwrap();
        assert_eq!(c.credentials().unwrap().as_deref(), Some("leaf:two"));
        std::fs::write(&path, "no-colon-hunter2\n").unwrap();
        let e = config_message(c.validate().unwrap_err());
        assert!(
            e.starts_with("auth_file: ") && e.contains("must hold"),
            "{e}"
        );
        assert!(!e.contains("hunter2"), "{e}");
        let both = ZkConfig {
            auth: Some("leaf:x".into()),
            ..c.clone()
        };
        let e = both.validate().unwrap_err().to_string();
        assert!(e.contains("auth and auth_file are both set"), "{e}");
        assert_eq!(ZkConfig::default().credentials().unwrap(), None);
    }

    #[test]
    fn acl_defaults_and_entries() {
        use zk::{Acl, AuthId, Permission as P};
        let open = ZkConfig::default().acls().unwrap();
        assert_eq!(open, vec![Acl::new(P::ALL, AuthId::anyone())]);
        let authed = ZkConfig {
            auth: Some("leaf:pw".into()),
            ..ZkConfig::default()
        };
        assert_eq!(
            authed.acls().unwrap(),
            vec![Acl::new(P::ALL, AuthId::authed())]
        );
        let hash = "UvYbquhh2NhWHaQf1u3RNOR7Q2I=";
        let listed = ZkConfig {
            acl: vec![
                format!("digest:leaf:{hash}:cdrwa"),
                "world:anyone:r".into(),
                "auth::cdrwa".into(),
                "ip:10.0.0.0/8:rw".into(),
                "ip:2001:db8::/32:r".into(),
            ],
            ..authed.clone()
        };
        assert_eq!(
            listed.acls().unwrap(),
            vec![
                Acl::new(P::ALL, AuthId::new("digest", &format!("leaf:{hash}"))),
                Acl::new(P::READ, AuthId::anyone()),
                Acl::new(P::ALL, AuthId::authed()),
                Acl::new(P::READ | P::WRITE, AuthId::new("ip", "10.0.0.0/8")),
                Acl::new(P::READ, AuthId::new("ip", "2001:db8::/32")),
            ]
        );
        let bad = |entry: &str, authed_too: bool, expect: &str| {
            let c = ZkConfig {
                acl: vec!["world:anyone:r".into(), entry.into()],
                auth: authed_too.then(|| "leaf:pw".into()),
                ..ZkConfig::default()
            };
            let e = config_message(c.validate().unwrap_err());
            assert!(
                e.starts_with("acl[1]: ") && e.contains(expect),
                "{entry}: {e}"
            );
            assert!(!e.contains("hunter2"), "{e}");
        };
        bad("world:anyone", true, "scheme:id:permissions");
        bad("anyone", true, "scheme:id:permissions");
        bad(":anyone:r", true, "scheme:id:permissions");
        bad("world:anyone:", true, "scheme:id:permissions");
        bad("world:anyone:rx", true, "cdrwa");
        bad("world:someone:r", true, "anyone");
        bad("auth::cdrwa", false, "needs auth");
        bad("digest:leaf:hunter2:cdrwa", true, "never the password");
        bad("digest:leaf:cdrwa", true, "never the password");
        bad("kerberos:leaf:cdrwa", true, "unknown scheme");
    }

    #[test]
    fn names_are_one_segment() {
        validate_name("leaf").unwrap();
        for bad in ["", ".", "..", "a/b"] {
            assert!(validate_name(bad).is_err(), "{bad:?}");
        }
    }
}
