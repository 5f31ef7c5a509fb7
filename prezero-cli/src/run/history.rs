//! Where `prezero run --lazy` keeps what a command took in its last run
//! (`PREZERO_HISTORY`): one small file per command (the program's resolved
//! path and its arguments) under the cache directory's `history/`. The
//! preload writes it at the program's exit and reads it at the next start.

use std::ffi::{OsStr, OsString};
use std::fs::{self, DirBuilder};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use super::{cache_dirs, private_dir};

/// The history file of `program args`, its directory made (0700) if it
/// was not there; `None` where no cache directory is ours.
pub fn file_for(program: &OsStr, args: &[OsString]) -> Option<PathBuf> {
    let dir = directory("history")?;
    file_in(&dir, program, args)
}

/// The private directory `name` in the first cache directory that is ours,
/// made (0700) if it was not there.
pub fn directory(name: &str) -> Option<PathBuf> {
    cache_dirs().into_iter().find_map(|dir| {
        private_dir(&dir).ok()?;
        let dir = dir.join(name);
        match DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(_) => return None,
        }
        private_dir(&dir).ok()?;
        Some(dir)
    })
}

/// The history file of `program args` in `dir`.
pub fn file_in(dir: &Path, program: &OsStr, args: &[OsString]) -> Option<PathBuf> {
    Some(dir.join(format!("{:016x}", key(&resolve(program)?, args))))
}

/// The program as `exec` finds it: a path as given, a bare name on `PATH`;
/// resolved to the file itself (links followed).
fn resolve(program: &OsStr) -> Option<PathBuf> {
    if program.as_bytes().contains(&b'/') {
        return fs::canonicalize(program).ok();
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
        .and_then(|p| fs::canonicalize(p).ok())
}

/// FNV-1a over the program's path and each argument, each ended by a NUL
/// (which no argument holds): the same command, the same file.
fn key(program: &Path, args: &[OsString]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let parts = std::iter::once(program.as_os_str()).chain(args.iter().map(OsString::as_os_str));
    for part in parts {
        for &b in part.as_bytes().iter().chain(&[0]) {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_and_its_arguments_make_the_key() {
        let p = Path::new("/usr/bin/python3");
        let a = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(key(p, &a(&["x.py"])), key(p, &a(&["x.py"])));
        assert_ne!(key(p, &a(&["x.py"])), key(p, &a(&["y.py"])));
        // The boundaries count: "ab" "c" is not "a" "bc".
        assert_ne!(key(p, &a(&["ab", "c"])), key(p, &a(&["a", "bc"])));
        assert_ne!(key(p, &[]), key(Path::new("/usr/bin/python3.11"), &[]));
    }

    #[test]
    fn a_bare_name_is_found_on_path() {
        let sh = resolve(OsStr::new("sh")).expect("sh on PATH");
        assert!(sh.is_absolute() && sh.is_file(), "{}", sh.display());
        assert_eq!(resolve(OsStr::new("no-such-program-here")), None);
    }
}
