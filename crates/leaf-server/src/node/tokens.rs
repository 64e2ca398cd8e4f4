//! The tokens a rule accepts now: those of the configuration and those of its token file,
//! which [`watch`] re-reads when its content changes, so that a token rotates without a
//! restart: add the new token, move the clients over, remove the old one.
//!
//! A file that cannot be read, or that holds a line no header could carry or no token at all,
//! keeps the tokens read before (logged, and counted in `leaf_token_file_reads_total`): a
//! half-written or emptied file never opens a route. A rule with a file configured is set
//! even while the file holds no token that passed: it then refuses every token, never none.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::compose::config::{ServerConfig, Tokens, parse_token_file};
use crate::node::metrics::Metrics;

/// How often the token files are looked at.
pub(crate) const REREAD_EVERY: Duration = Duration::from_secs(1);

/// The tokens one rule accepts.
#[derive(Debug)]
pub struct TokenSet {
    /// Which setting, for logs and metrics (`admin`, `client`, `metrics`).
    name: &'static str,
    configured: Vec<String>,
    file: Option<PathBuf>,
    /// The configured tokens and the file's, as last read.
    current: RwLock<Arc<Vec<String>>>,
    /// The file's content at its last good read.
    last_read: RwLock<Option<String>>,
}

impl TokenSet {
    /// The set of `tokens`, and of `file` if one is named (read now; a file that cannot be read
    /// leaves the set with the configured tokens only, and set).
    pub(crate) fn new(name: &'static str, tokens: &Tokens, file: Option<&Path>) -> Self {
        let set = TokenSet {
            name,
            configured: tokens.as_slice().to_vec(),
            file: file.map(Path::to_path_buf),
            current: RwLock::new(Arc::new(tokens.as_slice().to_vec())),
            last_read: RwLock::new(None),
        };
        if let Some(Err(why)) = set.reread() {
            tracing::error!(
                token = name,
                file = %file.map(Path::display).map(|d| d.to_string()).unwrap_or_default(),
                "{why}; until it is fixed only the configured tokens pass"
            );
        }
        set
    }

    /// The first token accepted now, to present to another node of the cluster.
    pub(crate) fn first(&self) -> Option<String> {
        self.current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .first()
            .cloned()
    }

    /// Whether any token is configured here (a file counts even while it holds none that
    /// passed); unset, the rule's default applies (open, or loopback for the admin rule).
    pub fn is_set(&self) -> bool {
        !self.configured.is_empty() || self.file.is_some()
    }

    /// Whether `presented` is one of the tokens. Each is compared in full, without an early
    /// exit, whichever matches.
    pub fn accepts(&self, presented: &[u8]) -> bool {
        let current = Arc::clone(&self.current.read().unwrap_or_else(|p| p.into_inner()));
        current.iter().fold(false, |any, t| {
            constant_time_eq(presented, t.as_bytes()) | any
        })
    }

    /// Reads the file again if its content changed: `None` when there is no file or nothing
    /// changed, else whether the new content was taken (the number of tokens now) or why not.
    fn reread(&self) -> Option<Result<usize, String>> {
        let path = self.file.as_ref()?;
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) => {
                // An error once per change: remember that the last read failed.
                let mut last = self.last_read.write().unwrap_or_else(|p| p.into_inner());
                let failed = Some(format!("\0{e}"));
                if *last == failed {
                    return None;
                }
                *last = failed;
                return Some(Err(format!("cannot read {}: {e}", path.display())));
            }
        };
        let mut last = self.last_read.write().unwrap_or_else(|p| p.into_inner());
        if last.as_deref() == Some(text.as_str()) {
            return None;
        }
        let parsed = parse_token_file(&text);
        *last = Some(text);
        Some(match parsed {
            Ok(from_file) => {
                let mut all = self.configured.clone();
                all.extend(from_file);
                let n = all.len();
                *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(all);
                Ok(n)
            }
            Err(why) => Err(format!("{}: {why}", path.display())),
        })
    }
}

/// The three rules' token sets.
#[derive(Debug)]
pub struct TokenSets {
    /// `server.admin_token` and `server.admin_token_file`.
    pub admin: TokenSet,
    /// `server.client_token` and `server.client_token_file`.
    pub client: TokenSet,
    /// `server.metrics_token` and `server.metrics_token_file`.
    pub metrics: TokenSet,
}

impl TokenSets {
    /// The sets of `server`, each file read now.
    pub(crate) fn new(server: &ServerConfig) -> Self {
        let [admin, client, metrics] = server.token_settings();
        TokenSets {
            admin: TokenSet::new("admin", admin.1, admin.3),
            client: TokenSet::new("client", client.1, client.3),
            metrics: TokenSet::new("metrics", metrics.1, metrics.3),
        }
    }

    fn all(&self) -> [&TokenSet; 3] {
        [&self.admin, &self.client, &self.metrics]
    }

    /// Whether any set has a file to watch.
    pub(crate) fn has_files(&self) -> bool {
        self.all().iter().any(|s| s.file.is_some())
    }

    /// Reads every changed file once, logging and counting what happened.
    pub(crate) fn reread(&self, metrics: &Metrics) {
        for set in self.all() {
            match set.reread() {
                None => {}
                Some(Ok(n)) => {
                    metrics.token_file_read(set.name, true);
                    tracing::info!(token = set.name, tokens = n, "token file read again");
                }
                Some(Err(why)) => {
                    metrics.token_file_read(set.name, false);
                    tracing::error!(
                        token = set.name,
                        "token file not taken, the tokens read before still pass: {why}"
                    );
                }
            }
        }
    }
}

/// Re-reads the token files of `sets` every [`REREAD_EVERY`] for ever (the server aborts it at
/// shutdown).
pub(crate) async fn watch(sets: Arc<TokenSets>, metrics: Arc<Metrics>) {
    let mut every = tokio::time::interval(REREAD_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let (sets, metrics) = (Arc::clone(&sets), Arc::clone(&metrics));
        // A file read is blocking I/O, however small.
        let _ = tokio::task::spawn_blocking(move || sets.reread(&metrics)).await;
    }
}

/// Compares without an early exit, so the time taken does not tell how much of a guess was
/// right. The length is not secret enough to hide: it only says how long the token is.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_eq_table() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(constant_time_eq(b"", b""));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
    }

    #[test]
    fn a_file_rotates_and_a_bad_one_keeps_the_tokens_before() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("client");
        std::fs::write(&path, "old\n").unwrap();
        let set = TokenSet::new("client", &Tokens::from("cfg"), Some(&path));
        assert!(set.is_set());
        assert!(set.accepts(b"cfg") && set.accepts(b"old") && !set.accepts(b"new"));
        assert!(set.reread().is_none(), "nothing changed");
        std::fs::write(&path, "old\nnew\n").unwrap();
        assert_eq!(set.reread(), Some(Ok(3)));
        assert!(set.accepts(b"old") && set.accepts(b"new"));
        std::fs::write(&path, "new\n").unwrap();
        assert_eq!(set.reread(), Some(Ok(2)));
        assert!(!set.accepts(b"old") && set.accepts(b"new") && set.accepts(b"cfg"));
        // Emptied, garbled, removed: the tokens before still pass, none is opened.
        for bad in ["", "\n# nothing\n", "n\u{e9}w\n"] {
            std::fs::write(&path, bad).unwrap();
            assert!(matches!(set.reread(), Some(Err(_))), "{bad:?}");
            assert!(set.accepts(b"new") && !set.accepts(b"") && !set.accepts(b"old"));
        }
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(set.reread(), Some(Err(_))));
        assert!(set.reread().is_none(), "one error per change");
        assert!(set.accepts(b"new"));
        std::fs::write(&path, "newer\n").unwrap();
        assert_eq!(set.reread(), Some(Ok(2)));
        assert!(set.accepts(b"newer") && !set.accepts(b"new"));
    }

    #[test]
    fn a_file_that_holds_no_token_leaves_the_rule_set_and_closed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("admin");
        std::fs::write(&path, "\n").unwrap();
        let set = TokenSet::new("admin", &Tokens::default(), Some(&path));
        assert!(set.is_set(), "an empty file must not read as no token");
        assert!(!set.accepts(b"") && !set.accepts(b"anything"));
        let unset = TokenSet::new("admin", &Tokens::default(), None);
        assert!(!unset.is_set());
    }
}
