//! [`TempDir`]: a directory of a test's own, gone when the test is, whether
//! it passed or failed.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A fresh directory `$TMPDIR/prezero-WHAT-PID-N`, removed with
/// everything in it when dropped. A failing test's panic unwinds through its
/// locals, so the directory goes then too; only a test killed outright
/// (SIGKILL, a timeout) leaves it, which `.ci/run`'s look at /tmp catches.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// Makes the directory; `what` names the test in the path, for whoever
    /// finds one left.
    ///
    /// # Panics
    ///
    /// If the directory cannot be made (a test that has nowhere to write
    /// cannot check anything).
    pub fn new(what: &str) -> TempDir {
        // Several per process: tests run in parallel threads.
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("prezero-{what}-{}-{n}", std::process::id()));
        // A directory of the same name is what a previous run of this pid
        // left when it was killed: not this test's to trust.
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir(&path)
            .unwrap_or_else(|e| panic!("cannot make {}: {e}", path.display()));
        TempDir { path }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The guard stands for its path (`dir.join(..)`, `dir.display()`), so that
/// a test holds one value, the guard, for as long as it uses the directory.
impl std::ops::Deref for TempDir {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for TempDir {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        // A socket or ledger a daemon of the test still writes may come back
        // between the walk and the rmdir: a second pass takes it.
        if std::fs::remove_dir_all(&self.path).is_err() {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::TempDir;

    #[test]
    fn the_directory_goes_with_the_guard_also_when_the_test_panics() {
        let kept = TempDir::new("testkit-tempdir");
        let path = kept.path().to_path_buf();
        std::fs::create_dir(kept.join("sub")).unwrap();
        std::fs::write(kept.join("sub/file"), b"x").unwrap();
        drop(kept);
        assert!(!path.exists(), "{} left", path.display());

        let mut inside = None;
        let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let d = TempDir::new("testkit-tempdir");
            std::fs::write(d.join("file"), b"x").unwrap();
            inside = Some(d.path().to_path_buf());
            panic!("the test fails");
        }));
        assert!(failed.is_err());
        let inside = inside.unwrap();
        assert!(
            !inside.exists(),
            "{} left by a failed test",
            inside.display()
        );
        let (a, b) = (
            TempDir::new("testkit-tempdir"),
            TempDir::new("testkit-tempdir"),
        );
        assert_ne!(a.path(), b.path(), "two guards of one test share nothing");
    }
}
