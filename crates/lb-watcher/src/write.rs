//! Writing lb-proxy's configuration so that lb-proxy (or an operator) never sees half a file:
//! a temporary file in the same directory, fsync, validation, the previous file kept as
//! `NAME.prev`, rename over, fsync of the directory.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::Error;

/// What [`write_config`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// The file already held exactly this text: nothing touched.
    Unchanged,
    Replaced,
}

/// `NAME.prev` beside `path`.
pub fn prev_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".prev");
    path.with_file_name(name)
}

/// Writes `text` to `path` atomically; `validate` is given the temporary file before the
/// rename and stops everything when it fails (the current file stays as it was).
pub fn write_config(
    path: &Path,
    text: &str,
    validate: impl FnOnce(&Path) -> Result<(), Error>,
) -> Result<Written, Error> {
    let io_error = |source: io::Error| Error::Write { path: path.to_path_buf(), source };
    // Only a file of the same length can hold the same text: the 1 MB read of a 10,000-server
    // file is skipped whenever the set's size moved.
    let current_len = match fs::metadata(path) {
        Ok(meta) => Some(meta.len()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(io_error(e)),
    };
    if current_len == u64::try_from(text.len()).ok() {
        match fs::read(path) {
            Ok(bytes) if bytes == text.as_bytes() => return Ok(Written::Unchanged),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_error(e)),
        }
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(path.file_name().unwrap_or_default());
    tmp_name.push(format!(".{}.tmp", std::process::id()));
    let tmp = dir.join(tmp_name);
    let result = (|| {
        let mut file = OpenOptions::new().write(true).create(true).truncate(true).open(&tmp).map_err(io_error)?;
        file.write_all(text.as_bytes()).map_err(io_error)?;
        file.sync_all().map_err(io_error)?;
        drop(file);
        validate(&tmp)?;
        if current_len.is_some() {
            // The previous file, for an operator to compare or roll back to; itself replaced
            // atomically.
            let prev = prev_path(path);
            let prev_tmp = dir.join(format!(".prev.{}.tmp", std::process::id()));
            match keep_copy(path, &prev_tmp).and_then(|()| fs::rename(&prev_tmp, &prev)) {
                Ok(()) => {}
                // Removed since it was looked at: nothing to keep.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    // A disk that fills up half-way leaves no half-written copy behind either.
                    let _ = fs::remove_file(&prev_tmp);
                    return Err(io_error(e));
                }
            }
        }
        fs::rename(&tmp, path).map_err(io_error)?;
        File::open(&dir).and_then(|d| d.sync_all()).map_err(io_error)?;
        Ok(Written::Replaced)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// `to` made to hold what `from` holds now: a second name for the same file where the file
/// system allows (the rename that follows gives `from`'s name to the new file, so the old one
/// lives on under `to` unchanged, and nothing is copied), else a copy. A symbolic link (an
/// operator's) is copied through, as before: a link to the link would follow its target.
fn keep_copy(from: &Path, to: &Path) -> io::Result<()> {
    match fs::remove_file(to) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    if fs::symlink_metadata(from)?.is_file() && fs::hard_link(from, to).is_ok() {
        return Ok(());
    }
    fs::copy(from, to).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_keeps_prev_and_skips_unchanged() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("lb-proxy.yaml");
        assert_eq!(write_config(&path, "one\n", |_| Ok(()))?, Written::Replaced);
        assert!(!prev_path(&path).exists());
        assert_eq!(write_config(&path, "one\n", |_| Ok(()))?, Written::Unchanged);
        assert_eq!(write_config(&path, "two\n", |_| Ok(()))?, Written::Replaced);
        assert_eq!(fs::read_to_string(&path)?, "two\n");
        assert_eq!(fs::read_to_string(prev_path(&path))?, "one\n");
        let refused = write_config(&path, "three\n", |p| {
            Err(Error::Write { path: p.to_path_buf(), source: io::Error::other("invalid") })
        });
        assert!(refused.is_err());
        assert_eq!(fs::read_to_string(&path)?, "two\n", "a file that does not validate is not installed");
        let left: Vec<_> = fs::read_dir(dir.path())?.filter_map(Result::ok).map(|e| e.file_name()).collect();
        assert_eq!(left.len(), 2, "no temporary file left: {left:?}");
        Ok(())
    }

    #[test]
    fn a_failure_keeping_the_previous_file_leaves_nothing_behind() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("lb-proxy.yaml");
        write_config(&path, "one\n", |_| Ok(()))?;
        // `NAME.prev` cannot be replaced (a directory is in the way), as on a disk that fills up
        // after the new file was written.
        fs::create_dir(prev_path(&path))?;
        fs::write(prev_path(&path).join("x"), "")?;
        assert!(write_config(&path, "two\n", |_| Ok(())).is_err());
        assert_eq!(fs::read_to_string(&path)?, "one\n", "the current file untouched");
        let left: Vec<_> = fs::read_dir(dir.path())?.filter_map(Result::ok).map(|e| e.file_name()).collect();
        assert_eq!(left.len(), 2, "no temporary file left: {left:?}");
        Ok(())
    }

    #[test]
    fn the_previous_file_is_kept_through_a_link_or_a_copy() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("lb-proxy.yaml");
        write_config(&path, "one\n", |_| Ok(()))?;
        write_config(&path, "two\n", |_| Ok(()))?;
        write_config(&path, "three\n", |_| Ok(()))?;
        assert_eq!(fs::read_to_string(prev_path(&path))?, "two\n");
        assert_eq!(fs::read_to_string(&path)?, "three\n");
        // An operator's symbolic link: `.prev` holds the old text, the link's target is not
        // touched.
        let target = dir.path().join("real.yaml");
        fs::write(&target, "linked\n")?;
        let linked = dir.path().join("linked.yaml");
        std::os::unix::fs::symlink(&target, &linked)?;
        assert_eq!(write_config(&linked, "four\n", |_| Ok(()))?, Written::Replaced);
        assert_eq!(fs::read_to_string(prev_path(&linked))?, "linked\n");
        assert!(!fs::symlink_metadata(prev_path(&linked))?.file_type().is_symlink());
        assert_eq!(fs::read_to_string(&target)?, "linked\n");
        assert_eq!(fs::read_to_string(&linked)?, "four\n");
        // Same length, other text: written.
        assert_eq!(write_config(&linked, "five\n", |_| Ok(()))?, Written::Replaced);
        assert_eq!(write_config(&linked, "five\n", |_| Ok(()))?, Written::Unchanged);
        Ok(())
    }
}
