//! A file replaced whole: written under a temporary name beside it, then
//! renamed over it, so a reader sees the old file or the new one, never half.
//! The ledger file and the metrics file are written so.

use std::io;
use std::path::{Path, PathBuf};

/// `path` with `.tmp` appended: where [`replace_file`] writes first.
pub(super) fn tmp_beside(path: &Path) -> PathBuf {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    PathBuf::from(tmp)
}

/// Writes `bytes` to a new file beside `path` (never through a link), of
/// `mode` and, if given, `group`, and renames it over `path`, so a reader sees
/// the old file or the new one whole.
pub(super) fn replace_file(
    path: &Path,
    bytes: &[u8],
    mode: u32,
    group: Option<u32>,
) -> io::Result<()> {
    let tmp = tmp_beside(path);
    let _ = std::fs::remove_file(&tmp);
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)?;
    if group.is_some() {
        std::os::unix::fs::fchown(&f, None, group)?;
    }
    f.write_all(bytes)?;
    drop(f);
    std::fs::rename(&tmp, path)
}
