//! Warm restart: at graceful shutdown the tags used lately (the server: in the last 24 hours,
//! [`SegmentAllocator::recently_used`](crate::SegmentAllocator::recently_used)) are written to a file in the
//! cache directory; at start-up they are loaded in the background
//! ([`SegmentAllocator::warm`](crate::SegmentAllocator::warm)), so that the first request after
//! a restart does not wait on the store. The file is this crate's only I/O, in a directory of
//! the caller's choosing.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use leaf_core::Tag;

/// The file holding the tags, one per line (tags hold no control characters).
pub fn path(cache_dir: &Path, name: &str) -> PathBuf {
    cache_dir.join(format!("{name}.segment-tags"))
}

/// The tags of the file; none if it is missing. Lines that are not valid tags are skipped with a
/// warning: the list is only a hint.
pub fn read(path: &Path) -> Vec<Tag> {
    let text = match fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot read the warm-restart tag list");
            return Vec::new();
        }
    };
    text.lines()
        .filter(|l| !l.is_empty())
        .filter_map(|l| match Tag::new(l) {
            Ok(t) => Some(t),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "skipping a line of the warm-restart tag list");
                None
            }
        })
        .collect()
}

/// Replaces the file with `tags`: written to a temporary file, synced, renamed.
pub fn write(path: &Path, tags: &[Tag]) -> io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("segment-tags.tmp");
    let mut f = File::create(&tmp)?;
    for t in tags {
        writeln!(f, "{t}")?;
    }
    f.sync_all()?;
    drop(f);
    fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_missing_and_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let p = path(&dir.path().join("sub"), "leaf");
        assert!(read(&p).is_empty(), "a missing file is an empty list");
        let tags = vec![Tag::new("a").unwrap(), Tag::new("b c").unwrap()];
        write(&p, &tags).unwrap();
        assert_eq!(read(&p), tags);
        fs::write(&p, format!("a\n{}\n\nb\n", "x".repeat(300))).unwrap();
        assert_eq!(
            read(&p),
            vec![Tag::new("a").unwrap(), Tag::new("b").unwrap()]
        );
    }
}
