//! Files a command writes at its end, checked at its start: a run of
//! minutes that cannot write its result fails before it measures anything.

use std::fs::OpenOptions;
use std::io::ErrorKind;
use std::path::Path;

use anyhow::{Context, Result};

/// Whether `path` can be written, as `what` ("the report") says in the
/// error: an existing file opens for writing (not truncated), or its
/// directory takes a new one (made for the check and removed: a run that
/// fails later leaves nothing behind).
pub fn check_writable(path: &Path, what: &str) -> Result<()> {
    let cannot = || format!("cannot write {what} to {}", path.display());
    match OpenOptions::new().write(true).open(path) {
        Ok(_) => return Ok(()),
        Err(e) if e.kind() != ErrorKind::NotFound => return Err(e).with_context(cannot),
        Err(_) => {}
    }
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .with_context(cannot)?;
    std::fs::remove_file(path).with_context(cannot)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_that_cannot_be_written_is_refused_and_a_new_one_left_absent() {
        let dir = prezero_testkit::TempDir::new("output");
        let new = dir.join("report.html");
        check_writable(&new, "the report").unwrap();
        assert!(!new.exists(), "the check left its file behind");
        std::fs::write(&new, "kept").unwrap();
        check_writable(&new, "the report").unwrap();
        assert_eq!(std::fs::read_to_string(&new).unwrap(), "kept");
        let e = check_writable(&dir.join("no/such/dir/x.html"), "the report").unwrap_err();
        assert!(
            format!("{e:#}").contains("cannot write the report to"),
            "{e:#}"
        );
        assert!(check_writable(Path::new("/proc/nope/x.html"), "the report").is_err());
    }
}
