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
    let current = match fs::read(path) {
        Ok(bytes) => Some(bytes),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(io_error(e)),
    };
    if current.as_deref() == Some(text.as_bytes()) {
        return Ok(Written::Unchanged);
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
        if let Some(previous) = &current {
            // The previous file, for an operator to compare or roll back to; itself replaced
            // atomically.
            let prev = prev_path(path);
            let prev_tmp = dir.join(format!(".prev.{}.tmp", std::process::id()));
            if let Err(e) = fs::write(&prev_tmp, previous).and_then(|()| fs::rename(&prev_tmp, &prev)) {
                // A disk that fills up half-way leaves no half-written copy behind either.
                let _ = fs::remove_file(&prev_tmp);
                return Err(io_error(e));
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
}
