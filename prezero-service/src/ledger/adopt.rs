//! Adoption: at start-up, taking over what a previous instance handed out and
//! some process still holds: the files its ledger file names, found open in
//! processes (`/proc`), each reopened as the daemon's own.

use std::collections::HashMap;
use std::fs;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, Instant};

use super::file::read_ledger;
use crate::log;
use crate::segment::{open_rw, Segment};
use prezero::region::PageKind;
use prezero_sys as sys;

/// Takes over what a previous instance handed out and some process still
/// holds: `(segment, uid to charge)`. Segments of a page size no pool serves
/// now (none of `served`) are left to their holders.
pub(crate) fn adopt(ledger: &Path, served: &[PageKind]) -> Vec<(Segment, u32)> {
    let wanted = read_ledger(ledger);
    if wanted.is_empty() {
        return Vec::new();
    }
    // In a thread of its own, which passes on each file as it finds it, so
    // that a process whose descriptor blocks in stat or open (a FUSE file,
    // say) cannot hold the start-up past the budget, nor cost what was found.
    let deadline = Instant::now() + ADOPT_BUDGET;
    let (tx, rx) = std::sync::mpsc::channel();
    let looking = wanted.clone();
    let _ = std::thread::Builder::new()
        .name("prezero-serve-adopt".into())
        .spawn(move || find_holders(&looking, deadline, |key, f| drop(tx.send((key, f)))));
    let mut found = Vec::new();
    while let Ok(f) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        found.push(f);
    }
    if Instant::now() >= deadline {
        log(&format!(
            "looking for segments a previous instance handed out took over {} s: stopped; \
             what was not found is not charged",
            ADOPT_BUDGET.as_secs()
        ));
    }
    let mut adopted = Vec::new();
    for (key, f) in found {
        let page = wanted[&key];
        if !served.contains(&page) {
            continue;
        }
        match Segment::adopt(f.file, page, f.uid) {
            Ok(seg) => adopted.push((seg, f.uid)),
            Err(e) => log(&format!(
                "a segment of the previous instance (held by uid {}) cannot be taken over: {e}",
                f.uid
            )),
        }
    }
    adopted
}

/// A file of a previous daemon found open in a process, reopened as our own.
struct Found {
    file: OwnedFd,
    /// The real uid of the process that holds it: who is charged for it.
    uid: u32,
}

/// Finds, for each `(dev, ino)` in `wanted`, one process that holds it as a
/// descriptor (`/proc/PID/fd`) or a mapping (`/proc/PID/map_files`, which
/// needs `CAP_CHECKPOINT_RESTORE` or `CAP_SYS_ADMIN`), reopens it from there
/// and passes it to `found` at once. Run once at start-up, to take over what a
/// previous instance handed out; it stops at `deadline`, checked at every
/// descriptor. Only the descriptor table of each process is read (not each
/// thread's), so its cost grows with descriptors, not threads times
/// descriptors; a link is opened only if its name is `memfd:prezero-*` and its
/// `(dev, ino)` (a `stat`, which opens nothing) is one of `wanted`.
fn find_holders(
    wanted: &HashMap<(u64, u64), PageKind>,
    deadline: Instant,
    mut found: impl FnMut((u64, u64), Found),
) {
    use std::os::unix::fs::MetadataExt;
    let mut seen = std::collections::HashSet::new();
    let me = std::process::id().to_string();
    let Ok(procs) = fs::read_dir("/proc") else {
        return;
    };
    let over = || Instant::now() >= deadline;
    for p in procs.flatten() {
        if seen.len() == wanted.len() || over() {
            return;
        }
        let name = p.file_name();
        let Some(pid) = name.to_str() else { continue };
        if !pid.bytes().all(|b| b.is_ascii_digit()) || pid == me {
            continue;
        }
        let base = p.path();
        let Some(uid) = real_uid(&base) else { continue };
        let mut take = |path: std::path::PathBuf| {
            let Ok(md) = fs::metadata(&path) else { return };
            let key = (md.dev(), md.ino());
            if !wanted.contains_key(&key) || seen.contains(&key) {
                return;
            }
            let Ok(file) = open_rw(&path, libc::O_NONBLOCK | libc::O_NOCTTY) else {
                return;
            };
            // The link may have changed between the stat and the open.
            match sys::fstat(file.as_fd()) {
                Ok(st) if (st.st_dev, st.st_ino) == key => {
                    seen.insert(key);
                    found(key, Found { file, uid });
                }
                _ => {}
            }
        };
        if let Ok(fds) = fs::read_dir(base.join("fd")) {
            for fd in fds.flatten() {
                if over() {
                    return;
                }
                let is_ours = fs::read_link(fd.path())
                    .is_ok_and(|t| t.as_os_str().as_encoded_bytes().starts_with(MEMFD_PREFIX));
                if is_ours {
                    take(fd.path());
                }
            }
        }
        if let Ok(maps) = fs::read_to_string(base.join("maps")) {
            for line in maps.lines() {
                let Some((key, range)) = maps_inode(line) else {
                    continue;
                };
                if line.contains("/memfd:prezero-") && wanted.contains_key(&key) {
                    take(base.join("map_files").join(range));
                }
            }
        }
    }
}

/// What `/proc/PID/fd/N` reads for a segment: "/memfd:prezero-2MB (deleted)".
const MEMFD_PREFIX: &[u8] = b"/memfd:prezero-";

/// The real uid of the process at `/proc/PID` (its "Uid:" line).
fn real_uid(proc_dir: &std::path::Path) -> Option<u32> {
    let status = fs::read_to_string(proc_dir.join("status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_ascii_whitespace().nth(1)?.parse().ok()
}

/// How long start-up may look for a previous instance's holders.
const ADOPT_BUDGET: Duration = Duration::from_secs(2);

/// `(dev, ino)` and the address range of a `/proc/PID/maps` line:
/// "addr perms offset MAJ:MIN inode path".
fn maps_inode(line: &str) -> Option<((u64, u64), &str)> {
    let mut f = line.split_ascii_whitespace();
    let range = f.next()?;
    let dev = f.nth(2)?;
    let ino: u64 = f.next()?.parse().ok()?;
    if ino == 0 {
        return None;
    }
    let (maj, min) = dev.split_once(':')?;
    let maj = u64::from_str_radix(maj, 16).ok()?;
    let min = u64::from_str_radix(min, 16).ok()?;
    Some(((libc::makedev(maj as u32, min as u32), ino), range))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines_parse_to_dev_and_inode() {
        let l = "7f0000000000-7f0010000000 rw-s 00000000 00:11 115182 /memfd:prezero-2MB (deleted)";
        assert_eq!(
            maps_inode(l),
            Some((
                (libc::makedev(0, 0x11), 115182),
                "7f0000000000-7f0010000000"
            ))
        );
        assert_eq!(
            maps_inode("7ffd1000-7ffd2000 rw-p 00000000 00:00 0 [stack]"),
            None
        );
        assert_eq!(maps_inode("garbage"), None);
    }
}
