//! `Tag`: a validated business tag (Leaf's `biz_tag`).

use std::borrow::Borrow;
use std::fmt;
use std::str::FromStr;

use crate::{Error, Result};

/// The longest tag, in characters: Leaf's `biz_tag varchar(128)`.
pub const MAX_TAG_CHARS: usize = 128;

/// A business tag: 1 to 128 characters, no control characters, no `/`.
///
/// Every `biz_tag` an existing Leaf database is likely to hold is accepted; what is refused is
/// what cannot travel in a URL path segment or a log line unharmed.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tag(Box<str>);

impl Tag {
    /// Validates `s` as a tag.
    pub fn new(s: impl AsRef<str>) -> Result<Self> {
        let s = s.as_ref();
        validate(s)?;
        Ok(Tag(s.into()))
    }

    /// The tag as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn validate(s: &str) -> Result<()> {
    if s.is_empty() {
        return Err(Error::InvalidInput("tag is empty".into()));
    }
    let chars = s.chars().count();
    if chars > MAX_TAG_CHARS {
        return Err(Error::InvalidInput(format!(
            "tag has {chars} characters, at most {MAX_TAG_CHARS} are allowed"
        )));
    }
    if let Some(c) = s.chars().find(|c| c.is_control() || *c == '/') {
        return Err(Error::InvalidInput(format!(
            "tag contains the forbidden character {c:?}"
        )));
    }
    Ok(())
}

impl fmt::Display for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl FromStr for Tag {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Tag::new(s)
    }
}

impl TryFrom<String> for Tag {
    type Error = Error;
    fn try_from(s: String) -> Result<Self> {
        validate(&s)?;
        Ok(Tag(s.into_boxed_str()))
    }
}

impl AsRef<str> for Tag {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// Lets maps keyed by `Tag` be looked up with a plain `&str`, without building a `Tag`.
impl Borrow<str> for Tag {
    fn borrow(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &str, ok: bool) {
        assert_eq!(Tag::new(input).is_ok(), ok, "tag {input:?}");
    }

    #[test]
    fn validation_table() {
        check("leaf-segment-test", true);
        check("order.v2_中文", true);
        check("a b", true);
        check(&"x".repeat(128), true);
        check(&"é".repeat(128), true);
        check("", false);
        check(&"x".repeat(129), false);
        check(&"x".repeat(300), false);
        check("a/b", false);
        check("a\nb", false);
        check("a\u{0}b", false);
        check("tab\there", false);
        check("del\u{7f}", false);
    }

    #[test]
    fn errors_say_why() {
        let e = Tag::new("a/b").unwrap_err().to_string();
        assert!(e.contains("'/'"), "{e}");
        let e = Tag::new("").unwrap_err().to_string();
        assert!(e.contains("empty"), "{e}");
    }

    #[test]
    fn borrows_as_str() {
        let mut m = std::collections::HashMap::new();
        m.insert(Tag::new("t").unwrap(), 1);
        assert_eq!(m.get("t"), Some(&1));
    }
}
