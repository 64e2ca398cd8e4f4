//! The snowflake layout a node issues with, recorded beside its worker-id cache file
//! (`{cache_dir}/{name}.layout`): a start whose `epoch_ms` or `*_bits` differ from the recorded
//! ones is refused. Another epoch or other field widths put the IDs of this worker id on other
//! numbers, where they can meet the IDs it already issued, and decoding an old ID gives a wrong
//! time and worker id.
//!
//! The record is this node's (its cache directory), not the fleet's, so two nodes configured
//! with different layouts are not caught here: a record in the registry every node shares would
//! change the fork's `leaf_workerid_alloc` table, which the `mysql` and `postgres` modes keep
//! exactly as the fork (and an existing Java fleet) has it, and the other registries have no
//! such record yet.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use leaf_core::{Error, Result, SnowflakeLayout};

/// The record's path for `name` in `cache_dir`.
pub fn path(cache_dir: &Path, name: &str) -> PathBuf {
    cache_dir.join(format!("{name}.layout"))
}

/// The layout's fields as the record holds them: `(key, value)`, keys as configured.
fn fields(layout: &SnowflakeLayout) -> [(&'static str, u64); 4] {
    [
        ("epoch_ms", layout.epoch_ms()),
        ("timestamp_bits", u64::from(layout.timestamp_bits())),
        ("worker_bits", u64::from(layout.worker_bits())),
        ("sequence_bits", u64::from(layout.sequence_bits())),
    ]
}

/// Compares `layout` with the one recorded in `cache_dir`, recording it when there is none.
/// `Config` naming each key that differs when the record holds another layout, or when the
/// record cannot be read as one; `Backend` when the file cannot be read or written.
pub fn check_or_record(cache_dir: &Path, name: &str, layout: &SnowflakeLayout) -> Result<()> {
    let file = path(cache_dir, name);
    match fs::read_to_string(&file) {
        Ok(text) => compare(&file, &text, layout),
        Err(e) if e.kind() == io::ErrorKind::NotFound => record(cache_dir, &file, layout),
        Err(e) => Err(io_err(&file, "read", &e)),
    }
}

fn compare(file: &Path, text: &str, layout: &SnowflakeLayout) -> Result<()> {
    let mut differ = Vec::new();
    for (key, value) in fields(layout) {
        let recorded = text
            .lines()
            .filter_map(|l| l.trim().split_once('='))
            .find(|(k, _)| k.trim() == key)
            .and_then(|(_, v)| v.trim().parse::<u64>().ok())
            .ok_or_else(|| {
                Error::Config(format!(
                    "{} holds no {key}: it is not a layout record; restore it, or delete it if \
                     no snowflake ID of this node's worker id is in use",
                    file.display()
                ))
            })?;
        if recorded != value {
            differ.push(format!("snowflake.{key} is {value}, recorded {recorded}"));
        }
    }
    if differ.is_empty() {
        return Ok(());
    }
    Err(Error::Config(format!(
        "the snowflake layout differs from the one this node issued IDs with ({}; recorded in \
         {}): IDs of another layout can repeat the ones already issued, and old IDs would \
         decode wrongly. Set the recorded values again. Only if no snowflake ID of this node \
         is in use anywhere, delete that file to record the new layout",
        differ.join(", "),
        file.display()
    )))
}

/// Writes the record: a temporary file, fsynced, renamed into place. A record another process
/// wrote meanwhile is compared instead.
fn record(cache_dir: &Path, file: &Path, layout: &SnowflakeLayout) -> Result<()> {
    fs::create_dir_all(cache_dir).map_err(|e| io_err(cache_dir, "create", &e))?;
    let mut text = String::from(
        "# leaf snowflake layout: this node's IDs were issued with it; never change it\n",
    );
    for (key, value) in fields(layout) {
        text.push_str(&format!("{key}={value}\n"));
    }
    let tmp = file.with_extension("layout.tmp");
    let mut f = File::create(&tmp).map_err(|e| io_err(&tmp, "create", &e))?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(|e| io_err(&tmp, "write", &e))?;
    drop(f);
    // A hard link fails when the record exists: two processes racing on one directory never
    // overwrite each other's record.
    match fs::hard_link(&tmp, file) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            let _ = fs::remove_file(&tmp);
            let text = fs::read_to_string(file).map_err(|e| io_err(file, "read", &e))?;
            return compare(file, &text, layout);
        }
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            return Err(io_err(file, "write", &e));
        }
    }
    let _ = fs::remove_file(&tmp);
    OpenOptions::new()
        .read(true)
        .open(cache_dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_err(cache_dir, "sync", &e))?;
    tracing::info!(file = %file.display(), "snowflake layout recorded");
    Ok(())
}

fn io_err(path: &Path, what: &str, e: &io::Error) -> Error {
    Error::backend(
        "cache-file",
        format!("cannot {what} {}: {e}", path.display()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(t: u32, w: u32, s: u32, epoch: u64) -> SnowflakeLayout {
        SnowflakeLayout::new(t, w, s, epoch).unwrap()
    }

    /// `Ok` or the `Config` message of checking `then` after `first` was recorded.
    fn check(first: SnowflakeLayout, then: SnowflakeLayout) -> std::result::Result<(), String> {
        let dir = tempfile::tempdir().unwrap();
        check_or_record(dir.path(), "leaf", &first).unwrap();
        match check_or_record(dir.path(), "leaf", &then) {
            Ok(()) => Ok(()),
            Err(Error::Config(m)) => Err(m),
            Err(other) => panic!("not a Config error: {other}"),
        }
    }

    #[test]
    fn the_first_start_records_and_the_same_layout_passes() {
        let d = SnowflakeLayout::default();
        check(d, d).unwrap();
        let dir = tempfile::tempdir().unwrap();
        check_or_record(&dir.path().join("new"), "svc", &d).unwrap();
        let text = fs::read_to_string(dir.path().join("new/svc.layout")).unwrap();
        assert!(text.contains("epoch_ms=1288834974657\n"), "{text}");
        assert!(text.contains("worker_bits=10\n"), "{text}");
    }

    #[test]
    fn every_changed_field_is_refused_by_its_key() {
        let d = (41, 10, 12, leaf_core::TWITTER_EPOCH_MS);
        for (changed, key) in [
            (
                (41, 10, 12, 1_500_000_000_000),
                "snowflake.epoch_ms is 1500000000000",
            ),
            (
                (40, 10, 12, d.3),
                "snowflake.timestamp_bits is 40, recorded 41",
            ),
            ((41, 8, 12, d.3), "snowflake.worker_bits is 8, recorded 10"),
            (
                (41, 10, 11, d.3),
                "snowflake.sequence_bits is 11, recorded 12",
            ),
        ] {
            let then = layout(changed.0, changed.1, changed.2, changed.3);
            let e = check(layout(d.0, d.1, d.2, d.3), then).unwrap_err();
            assert!(e.contains(key), "{key}: {e}");
            assert!(e.contains("leaf.layout"), "names the file: {e}");
        }
    }

    #[test]
    fn a_record_that_is_not_one_is_refused_not_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let file = path(dir.path(), "leaf");
        fs::write(&file, "epoch_ms=1288834974657\nworker_bits=ten\n").unwrap();
        let e = check_or_record(dir.path(), "leaf", &SnowflakeLayout::default()).unwrap_err();
        assert!(matches!(e, Error::Config(_)), "{e}");
        assert!(e.to_string().contains("no timestamp_bits"), "{e}");
        assert!(fs::read_to_string(&file).unwrap().contains("ten"));
    }
}
