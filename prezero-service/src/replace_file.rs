//! A file replaced whole: written under a temporary name beside it, flushed,
//! then renamed over it, so a reader sees the old file or the new one, never
//! half, also after a crash. The ledger file and the metrics file are written so.

use std::io;
use std::path::{Path, PathBuf};

/// `path` with `.tmp` appended: where [`replace_file`] writes first.
pub(super) fn tmp_beside(path: &Path) -> PathBuf {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    PathBuf::from(tmp)
}

/// Writes `bytes` to a new file beside `path` (never through a link), of
/// `mode` and, if given, `group`, flushes it (`fsync`), renames it over
/// `path` and flushes the directory, so a reader sees the old file or the new
/// one whole: after the daemon is killed, the rename alone does that; after
/// the machine crashes, only the flushes keep a file system that writes data
/// after names (ext4's `data=writeback`, XFS) from showing an empty or partial
/// file under the name. On the default `/run` (tmpfs) the flushes cost
/// nothing. A failure (a full disk) leaves the old file and no temporary one.
pub(super) fn replace_file(
    path: &Path,
    bytes: &[u8],
    mode: u32,
    group: Option<u32>,
) -> io::Result<()> {
    let tmp = tmp_beside(path);
    let _ = std::fs::remove_file(&tmp);
    if let Err(e) = write_new(&tmp, bytes, mode, group).and_then(|()| std::fs::rename(&tmp, path)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    match std::fs::File::open(dir).and_then(|d| d.sync_all()) {
        // A file system that cannot flush a directory says EINVAL (POSIX
        // leaves it to each): the rename is all it offers.
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(()),
        r => r,
    }
}

/// A new file at `tmp` holding `bytes`, flushed to its device.
fn write_new(tmp: &Path, bytes: &[u8], mode: u32, group: Option<u32>) -> io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(tmp)?;
    if group.is_some() {
        std::os::unix::fs::fchown(&f, None, group)?;
    }
    f.write_all(bytes)?;
    f.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    use prezero_testkit::TempDir;

    #[test]
    fn a_file_is_replaced_whole_with_its_mode_and_nothing_left_beside_it() {
        use std::os::unix::fs::PermissionsExt;
        let d = TempDir::new("replace-file-whole");
        let path = d.join("ledger");
        replace_file(&path, b"first\n", 0o600, None).unwrap();
        replace_file(&path, b"second, longer\n", 0o600, None).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"second, longer\n");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(!tmp_beside(&path).exists());
    }

    #[test]
    fn a_temporary_file_left_by_a_killed_writer_is_replaced() {
        let d = TempDir::new("replace-file-stale");
        let path = d.join("ledger");
        std::fs::write(tmp_beside(&path), b"half a l").unwrap();
        replace_file(&path, b"whole\n", 0o600, None).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"whole\n");
        assert!(!tmp_beside(&path).exists());
    }

    #[test]
    fn a_failed_write_keeps_the_old_file() {
        let d = TempDir::new("replace-file-failed");
        let path = d.join("ledger");
        replace_file(&path, b"old\n", 0o600, None).unwrap();
        // A directory in the temporary file's place: the write fails.
        std::fs::create_dir(tmp_beside(&path)).unwrap();
        std::fs::write(tmp_beside(&path).join("x"), b"").unwrap();
        assert!(replace_file(&path, b"new\n", 0o600, None).is_err());
        assert_eq!(std::fs::read(&path).unwrap(), b"old\n");
    }
}
