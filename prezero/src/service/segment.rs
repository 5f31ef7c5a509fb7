//! One segment: a hugetlb memfd the daemon created, populated and keeps mapped,
//! and the proof that nobody else holds it any more.
//!
//! The daemon's handle is a reopened file (`open("/proc/self/fd/N")`, mode 0600),
//! not the `memfd_create` descriptor, and each hand-out is another such reopen.
//! That makes every holder visible to the kernel's lease check: a write lease on
//! the daemon's handle is granted only while no other *open file description* of
//! the inode exists anywhere (`fs/locks.c`, `check_conflicting_open`). A mapping
//! keeps its file description open, and so does a descriptor in flight inside a
//! unix socket's queue, so the check sees both, which a scan of `/proc` cannot.
//! An `O_PATH` descriptor is the one kind of holder it does not count: the /proc
//! scan catches those, and mode 0600 keeps them from being reopened by other uids.

use std::collections::HashSet;
use std::ffi::CString;
use std::fs;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;

use crate::error::{Error, Result};
use crate::region::PageKind;

/// A populated hugetlb memfd and the daemon's mapping of it.
pub(crate) struct Segment {
    /// The daemon's reopened handle (see the module comment).
    file: OwnedFd,
    ptr: NonNull<u8>,
    len: usize,
    /// `st_dev`, `st_ino` of the memfd: what the /proc scan looks for.
    pub(crate) dev: u64,
    pub(crate) ino: u64,
}

// SAFETY: the mapping is owned by the Segment and freed only in Drop; moving the
// owner between threads moves no aliasing.
unsafe impl Send for Segment {}

impl Segment {
    /// Creates a memfd of `len` bytes on `page` pages, maps it and populates it
    /// with `threads` threads (the kernel zeroes each page once). A hugetlb
    /// shortage is `HugetlbShortage`, never a SIGBUS: the mapping reserves the
    /// pages before anything touches them.
    pub(crate) fn create(page: PageKind, len: usize, threads: usize) -> Result<Segment> {
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
                libc::MFD_CLOEXEC | libc::MFD_HUGETLB | size_flag,
            )
        };
        if raw < 0 {
            return Err(Error::os("memfd_create", io::Error::last_os_error()));
        }
        // SAFETY: raw is a fresh descriptor nobody else owns.
        let memfd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: ftruncate on our own memfd.
        if unsafe { libc::ftruncate(memfd.as_raw_fd(), len as libc::off_t) } != 0 {
            return Err(Error::os("ftruncate", io::Error::last_os_error()));
        }
        let file = reopen(memfd.as_fd())?;
        drop(memfd);
        // SAFETY: fchmod on our own descriptor.
        if unsafe { libc::fchmod(file.as_raw_fd(), 0o600) } != 0 {
            return Err(Error::os("fchmod", io::Error::last_os_error()));
        }
        // SAFETY: a new shared mapping of our memfd at a kernel-chosen address.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
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
        // SAFETY: the fstat buffer is a local.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat on our own descriptor into a local buffer.
        if unsafe { libc::fstat(file.as_raw_fd(), &mut st) } != 0 {
            return Err(Error::os("fstat", io::Error::last_os_error()));
        }
        let seg = Segment {
            file,
            ptr,
            len,
            dev: st.st_dev,
            ino: st.st_ino,
        };
        // SAFETY: [ptr, ptr+len) is the mapping just made, which reserved its pages.
        unsafe { crate::prefault::prefault_raw(ptr.as_ptr(), len, threads)? };
        Ok(seg)
    }

    /// Bytes of the memfd.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The daemon's mapping, for the scrubber. The caller must be the only user
    /// of the segment's memory (the segment is quarantined and proven unheld).
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

/// Every `(dev, ino)` in `wanted` that some process other than this one holds:
/// an entry in any task's descriptor table (`/proc/*/task/*/fd`, which also
/// shows threads that unshared their table and `O_PATH` descriptors) or a mapping
/// (`/proc/*/maps`). Processes that vanish during the scan hold nothing.
pub(crate) fn held_elsewhere(wanted: &HashSet<(u64, u64)>) -> HashSet<(u64, u64)> {
    let mut held = HashSet::new();
    if wanted.is_empty() {
        return held;
    }
    let me = std::process::id().to_string();
    let Ok(procs) = fs::read_dir("/proc") else {
        return held;
    };
    for p in procs.flatten() {
        let name = p.file_name();
        let Some(pid) = name.to_str() else { continue };
        if !pid.bytes().all(|b| b.is_ascii_digit()) || pid == me {
            continue;
        }
        let base = p.path();
        if let Ok(maps) = fs::read_to_string(base.join("maps")) {
            for line in maps.lines() {
                if let Some(key) = maps_inode(line) {
                    if wanted.contains(&key) {
                        held.insert(key);
                    }
                }
            }
        }
        let Ok(tasks) = fs::read_dir(base.join("task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let Ok(fds) = fs::read_dir(t.path().join("fd")) else {
                continue;
            };
            for fd in fds.flatten() {
                // stat follows the magic link to the open file itself.
                if let Ok(md) = fs::metadata(fd.path()) {
                    use std::os::unix::fs::MetadataExt;
                    let key = (md.dev(), md.ino());
                    if wanted.contains(&key) {
                        held.insert(key);
                    }
                }
            }
        }
    }
    held
}

/// `(dev, ino)` of a `/proc/PID/maps` line: "addr perms offset MAJ:MIN inode path".
fn maps_inode(line: &str) -> Option<(u64, u64)> {
    let mut f = line.split_ascii_whitespace();
    let dev = f.nth(3)?;
    let ino: u64 = f.next()?.parse().ok()?;
    if ino == 0 {
        return None;
    }
    let (maj, min) = dev.split_once(':')?;
    let maj = u64::from_str_radix(maj, 16).ok()?;
    let min = u64::from_str_radix(min, 16).ok()?;
    Some((libc::makedev(maj as u32, min as u32), ino))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines_parse_to_dev_and_inode() {
        let l = "7f0000000000-7f0010000000 rw-s 00000000 00:11 115182 /memfd:prezero-2MB (deleted)";
        assert_eq!(maps_inode(l), Some((libc::makedev(0, 0x11), 115182)));
        assert_eq!(
            maps_inode("7ffd1000-7ffd2000 rw-p 00000000 00:00 0 [stack]"),
            None
        );
        assert_eq!(maps_inode("garbage"), None);
    }
}
