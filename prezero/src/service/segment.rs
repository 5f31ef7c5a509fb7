//! One segment: a sealed hugetlb memfd the daemon created, populated and keeps
//! mapped, the proof that no other process holds it, and its refresh with fresh
//! pages between tenants.
//!
//! Three kernel mechanisms carry the isolation, none of them a scan:
//!
//! * **Leases see every file holder.** The daemon's handle is a reopened file
//!   (`open("/proc/self/fd/N")`, mode 0600), and each hand-out is another such
//!   reopen. A write lease on the daemon's handle is granted only while no other
//!   *open file description* of the inode exists anywhere (`fs/locks.c`,
//!   `check_conflicting_open`): descriptors in any process, mappings (a mapping
//!   keeps its file open) and descriptors in flight in a socket queue. `O_PATH`
//!   descriptors are not counted, and need not be: they cannot read, write or
//!   map, and reopening one needs the file's permission (0600, the daemon's uid).
//! * **A punch hands pinned pages to their pinner.** Pages can be held with no
//!   file at all (io_uring fixed buffers, `vmsplice` into a pipe, VFIO and RDMA
//!   pins). Punching the whole file takes every page out of it; a pinned page
//!   stays with its pinner, and the repopulation that follows faults in fresh
//!   pages the kernel zeroes. The next tenant's pages were never reachable by the
//!   last one.
//! * **Seals fix the size.** `F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL` before
//!   the first hand-out: no tenant can truncate a segment under the daemon (a
//!   SIGBUS when it scrubs) or grow it past what the daemon clears and counts,
//!   nor add a seal that would stop the punch.
//!
//! A tenant can still punch holes (and take the freed pages elsewhere): the
//! repopulation is `MADV_POPULATE_WRITE`, so a page the kernel cannot find is an
//! error and a destroyed segment, never a signal.

use std::collections::HashMap;
use std::ffi::CString;
use std::fs;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::region::PageKind;

/// The seals every segment carries from before its first hand-out.
const SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;

/// A populated hugetlb memfd and the daemon's mapping of it.
pub(crate) struct Segment {
    /// The daemon's reopened handle (see the module comment).
    file: OwnedFd,
    ptr: NonNull<u8>,
    len: usize,
    page: PageKind,
    /// `st_dev`, `st_ino` of the memfd: its name in the ledger.
    pub(crate) dev: u64,
    pub(crate) ino: u64,
}

// SAFETY: the mapping is owned by the Segment and freed only in Drop; moving the
// owner between threads moves no aliasing.
unsafe impl Send for Segment {}

impl Segment {
    /// Creates a sealed memfd of `len` bytes on `page` pages and maps it, which
    /// reserves its pages: a hugetlb shortage is `HugetlbShortage` here, never a
    /// SIGBUS later. [`Segment::repopulate`] then faults them in.
    pub(crate) fn create(page: PageKind, len: usize) -> Result<Segment> {
        let size_flag = match page {
            PageKind::Huge2M => libc::MFD_HUGE_2MB,
            PageKind::Huge1G => libc::MFD_HUGE_1GB,
            _ => return Err(Error::invalid("service segments are hugetlb (2MB or 1GB)")),
        };
        let name = CString::new(format!("prezero-{}", page.name())).expect("no NUL");
        // SAFETY: name is NUL-terminated; the flags are valid memfd_create flags.
        let raw = unsafe {
            libc::memfd_create(
                name.as_ptr(),
                libc::MFD_CLOEXEC | libc::MFD_HUGETLB | libc::MFD_ALLOW_SEALING | size_flag,
            )
        };
        if raw < 0 {
            return Err(Error::os("memfd_create", io::Error::last_os_error()));
        }
        // SAFETY: raw is a fresh descriptor nobody else owns.
        let memfd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: ftruncate and fcntl(F_ADD_SEALS) on our own memfd, which no
        // other process can have yet.
        unsafe {
            if libc::ftruncate(memfd.as_raw_fd(), len as libc::off_t) != 0 {
                return Err(Error::os("ftruncate", io::Error::last_os_error()));
            }
            if libc::fcntl(memfd.as_raw_fd(), libc::F_ADD_SEALS, SEALS) != 0 {
                return Err(Error::os("fcntl(F_ADD_SEALS)", io::Error::last_os_error()));
            }
        }
        let file = reopen(memfd.as_fd())?;
        drop(memfd);
        // SAFETY: fchmod on our own descriptor.
        if unsafe { libc::fchmod(file.as_raw_fd(), 0o600) } != 0 {
            return Err(Error::os("fchmod", io::Error::last_os_error()));
        }
        Segment::map(file, page, len, 0)
    }

    /// Takes over a segment a previous daemon made, from a holder's descriptor
    /// reopened as the daemon's own handle. Only a file that is still what a
    /// daemon makes (sealed, a whole number of pages, and either the daemon's
    /// own at mode 0600, or lent to `holder`, the uid found holding it, as a
    /// leased segment is) is adopted, and taken back at once; its pages are
    /// not touched (a holder may have punched holes). The mapping reserves nothing (`MAP_NORESERVE`): a hole would
    /// otherwise need a free page now, and a tenant that emptied the hugetlb
    /// pool would escape its charge; the pages are faulted in, or the segment
    /// dropped, when it is cleaned.
    pub(crate) fn adopt(file: OwnedFd, page: PageKind, holder: u32) -> Result<Segment> {
        let st = fstat(file.as_fd())?;
        // SAFETY: fcntl(F_GET_SEALS) reads the seals of our own descriptor.
        let seals = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GET_SEALS) };
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        let len = st.st_size as usize;
        let ours = st.st_uid == me && st.st_mode & 0o777 == 0o600;
        if seals != SEALS
            || !(ours || st.st_uid == holder)
            || len == 0
            || !len.is_multiple_of(page.page_size())
        {
            return Err(Error::invalid(
                "not a prezero segment (seals, owner, mode or size differ)",
            ));
        }
        take_back(file.as_fd())?;
        Segment::map(file, page, len, libc::MAP_NORESERVE)
    }

    /// Gives the file's inode to `uid` for a lease, so that the tenant's
    /// programs may open it by name (`/proc/self/fd/N`, a VMM's `mem-path`),
    /// which checks the inode's permission; the daemon's own uid keeps it.
    pub(crate) fn lend_to(&self, uid: u32) -> Result<()> {
        // SAFETY: fchown on our own descriptor; -1 keeps the group.
        if unsafe { libc::fchown(self.file.as_raw_fd(), uid, u32::MAX) } != 0 {
            return Err(Error::os("fchown", io::Error::last_os_error()));
        }
        Ok(())
    }

    /// Takes the inode back from a lease: the daemon's, mode 0600, before
    /// anything else is decided about the segment. From here on only
    /// descriptors opened meanwhile reach it (the lease check sees them), not
    /// an `O_PATH` one the tenant kept: reopening it needs the permission.
    pub(crate) fn take_back(&self) -> Result<()> {
        take_back(self.file.as_fd())
    }

    /// Maps `file` shared, with extra mmap `flags`; a hugetlb shortage is
    /// `HugetlbShortage`.
    fn map(file: OwnedFd, page: PageKind, len: usize, flags: libc::c_int) -> Result<Segment> {
        // SAFETY: a new shared mapping of our memfd at a kernel-chosen address.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | flags,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ENOMEM) {
                let pool = crate::cpu::hugetlb_pool(page.page_size());
                let (free, total) = pool.map_or((0, 0), |p| (p.free, p.total));
                let needed = len / page.page_size();
                return Err(Error::HugetlbShortage {
                    page_size: page.page_size(),
                    needed,
                    free,
                    reserve_cmd: format!(
                        "echo {} > {}",
                        total + needed.saturating_sub(free),
                        crate::cpu::HugetlbPool::nr_path(page.page_size())
                    ),
                });
            }
            return Err(Error::os("mmap(memfd)", e));
        }
        let ptr = NonNull::new(p.cast()).expect("mmap does not return NULL on success");
        let st = match fstat(file.as_fd()) {
            Ok(st) => st,
            Err(e) => {
                // SAFETY: the mapping just made; nothing refers to it yet.
                unsafe { libc::munmap(p, len) };
                return Err(e);
            }
        };
        Ok(Segment {
            file,
            ptr,
            len,
            page,
            dev: st.st_dev,
            ino: st.st_ino,
        })
    }

    /// Bytes of one of its pages.
    pub(crate) fn page_size(&self) -> usize {
        self.page.page_size()
    }

    /// Bytes of the memfd.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The daemon's mapping, for verification. The caller must be the only user
    /// of the segment's memory (the segment is proven unheld and populated).
    pub(crate) fn memory(&self) -> (NonNull<u8>, usize) {
        (self.ptr, self.len)
    }

    /// A new open file description of the memfd, to hand to a client.
    pub(crate) fn open_for_client(&self) -> Result<OwnedFd> {
        reopen(self.file.as_fd())
    }

    /// Whether any open file description other than the daemon's own exists:
    /// another process's descriptor, a mapping, or a descriptor in flight.
    pub(crate) fn has_other_openers(&self) -> Result<bool> {
        other_openers(self.file.as_fd())
    }

    /// Takes every page out of the file (`FALLOC_FL_PUNCH_HOLE` over all of it).
    /// Unpinned pages go back to the hugetlb pool; a page someone pinned stays
    /// with that pinner and leaves the file for good.
    pub(crate) fn punch(&self) -> Result<()> {
        // SAFETY: fallocate on our own descriptor; KEEP_SIZE leaves the length
        // (sealed) unchanged. The daemon's mapping stays valid: the pages behind
        // it are gone until the next fault, which nothing takes before
        // `repopulate` has succeeded.
        let r = unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                0,
                self.len as libc::off_t,
            )
        };
        if r != 0 {
            return Err(Error::os(
                "fallocate(PUNCH_HOLE) of a segment",
                io::Error::last_os_error(),
            ));
        }
        Ok(())
    }

    /// Faults every missing page of `[off, off+len)` into the file with
    /// `threads` threads (`MADV_POPULATE_WRITE`): the kernel zeroes each new one,
    /// and pages already there are left as they are. A page the hugetlb pool
    /// cannot supply is an error, not a SIGBUS.
    pub(crate) fn repopulate(&self, off: usize, len: usize, threads: usize) -> Result<()> {
        assert!(
            off <= self.len && len <= self.len - off && off.is_multiple_of(self.page_size()),
            "a range of the segment from a page boundary"
        );
        // SAFETY: the range lies in our own shared hugetlb mapping, from a page
        // boundary; nobody relies on its pages being absent.
        let r =
            unsafe { crate::prefault::prefault_as(self.ptr.as_ptr().add(off), len, threads, true) };
        match r {
            Ok(_) => Ok(()),
            // The fault found no page to allocate (the kernel says EFAULT).
            Err(e) if e.errno() == libc::EFAULT => Err(Error::invalid(format!(
                "the hugetlb pool had no free {} page for it",
                self.page.name()
            ))),
            Err(e) => Err(e),
        }
    }
}

/// `fstat` of our own descriptor.
fn fstat(fd: BorrowedFd<'_>) -> Result<libc::stat> {
    // SAFETY: an all-zero stat is valid; fstat writes into the local.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat on a descriptor we hold, into a local buffer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(Error::os("fstat", io::Error::last_os_error()));
    }
    Ok(st)
}

/// Whether the file behind `fd` has an open file description besides `fd`'s
/// own: true if a write lease is refused.
fn other_openers(fd: BorrowedFd<'_>) -> Result<bool> {
    // SAFETY: fcntl lease calls on a descriptor we own; a granted lease is
    // dropped again at once, so no opener is ever made to wait on it.
    unsafe {
        if libc::fcntl(fd.as_raw_fd(), libc::F_SETLEASE, libc::F_WRLCK) == 0 {
            libc::fcntl(fd.as_raw_fd(), libc::F_SETLEASE, libc::F_UNLCK);
            return Ok(false);
        }
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EBUSY) => Ok(true),
        _ => Err(Error::os("fcntl(F_SETLEASE)", e)),
    }
}
/// Without file leases the daemon could not see descriptors in flight, so it
/// refuses to start: a plain memfd, reopened as segments are, must show "no
/// other opener" alone and "another opener" while a second open exists.
pub(crate) fn check_leases_work() -> Result<()> {
    let name = CString::new("prezero-lease-probe").expect("no NUL");
    // SAFETY: name is NUL-terminated; MFD_CLOEXEC is a valid flag.
    let raw = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if raw < 0 {
        return Err(Error::os("memfd_create", io::Error::last_os_error()));
    }
    // SAFETY: raw is a fresh descriptor nobody else owns.
    let memfd = unsafe { OwnedFd::from_raw_fd(raw) };
    let probe = reopen(memfd.as_fd())?;
    drop(memfd);
    let other = reopen(probe.as_fd())?;
    let with_other = other_openers(probe.as_fd());
    drop(other);
    match (other_openers(probe.as_fd()), with_other) {
        (Ok(false), Ok(true)) => Ok(()),
        (Err(e), _) | (_, Err(e)) => Err(Error::invalid(format!(
            "file leases do not work here ({e}); prezero serve needs them to prove no \
             process still holds a segment (check that /proc/sys/fs/leases-enable is 1)"
        ))),
        _ => Err(Error::invalid(
            "file leases do not see other openers here: cannot prove isolation",
        )),
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: the mapping was made in `create` and nothing borrows it once the
        // segment is dropped (the scrubber returns segments before they die).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// `open("/proc/self/fd/N", O_RDWR)`: a new open file description of the same file.
/// The inode back to the daemon's uid, mode 0600 (whatever its lessee set).
fn take_back(fd: BorrowedFd<'_>) -> Result<()> {
    // SAFETY: geteuid has no preconditions; fchown and fchmod act on our own
    // descriptor.
    unsafe {
        if libc::fchown(fd.as_raw_fd(), libc::geteuid(), u32::MAX) != 0 {
            return Err(Error::os("fchown", io::Error::last_os_error()));
        }
        if libc::fchmod(fd.as_raw_fd(), 0o600) != 0 {
            return Err(Error::os("fchmod", io::Error::last_os_error()));
        }
    }
    Ok(())
}

fn reopen(fd: BorrowedFd<'_>) -> Result<OwnedFd> {
    let path = CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())).expect("no NUL");
    // SAFETY: path is NUL-terminated.
    let raw = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if raw < 0 {
        return Err(Error::os(
            "open(/proc/self/fd) to reopen a memfd",
            io::Error::last_os_error(),
        ));
    }
    // SAFETY: raw is a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// A file of a previous daemon found open in a process, reopened as our own.
pub(crate) struct Found {
    pub(crate) file: OwnedFd,
    /// The real uid of the process that holds it: who is charged for it.
    pub(crate) uid: u32,
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
pub(crate) fn find_holders(
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
            let Ok(c) = CString::new(path.as_os_str().as_encoded_bytes()) else {
                return;
            };
            // SAFETY: c is NUL-terminated; opening a magic link reopens the file.
            let raw = unsafe {
                libc::open(
                    c.as_ptr(),
                    libc::O_RDWR | libc::O_CLOEXEC | libc::O_NONBLOCK | libc::O_NOCTTY,
                )
            };
            if raw < 0 {
                return;
            }
            // SAFETY: a fresh descriptor nobody else owns.
            let file = unsafe { OwnedFd::from_raw_fd(raw) };
            // The link may have changed between the stat and the open.
            match fstat(file.as_fd()) {
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
pub(crate) const ADOPT_BUDGET: Duration = Duration::from_secs(2);

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
