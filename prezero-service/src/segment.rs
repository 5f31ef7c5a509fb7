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

use std::fs;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::ptr::NonNull;

use super::SEALS;
use crate::{Error, Result};
use prezero::numa::{self, Topology};
use prezero::region::PageKind;
use prezero_sys as sys;

/// The NUMA node a segment's pages must be on, and the CPUs that fill it
/// (none: a node of memory only, filled from anywhere).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Home {
    pub(crate) node: u32,
    pub(crate) cpus: Vec<usize>,
}

impl Home {
    /// `node`'s home in `topology`: the node's CPUs this process may run on
    /// (a cpuset may leave some or all out: then it fills from anywhere, and
    /// the mapping's binding alone places the pages).
    pub(crate) fn of(topology: &Topology, node: u32) -> Home {
        Home {
            node,
            cpus: topology.usable_cpus(node),
        }
    }
}

/// A populated hugetlb memfd and the daemon's mapping of it.
pub(crate) struct Segment {
    /// The daemon's reopened handle (see the module comment).
    file: OwnedFd,
    ptr: NonNull<u8>,
    len: usize,
    page: PageKind,
    /// Where its pages must be (`None`: taken over and not yet given a pool).
    home: Option<Home>,
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
    /// SIGBUS later. Its mapping is bound to `home`'s node before any fault;
    /// [`Segment::repopulate`] then faults them in there.
    pub(crate) fn create(page: PageKind, len: usize, home: Home) -> Result<Segment> {
        let name = match page {
            PageKind::Huge2M => c"prezero-2MB",
            PageKind::Huge1G => c"prezero-1GB",
            _ => return Err(Error::invalid("service segments are hugetlb (2MB or 1GB)")),
        };
        let memfd = sys::memfd_create(name, libc::MFD_ALLOW_SEALING | page.memfd_flags())
            .map_err(|e| Error::os("memfd_create", e))?;
        // No other process can have the memfd yet.
        sys::ftruncate(memfd.as_fd(), len).map_err(|e| Error::os("ftruncate", e))?;
        sys::add_seals(memfd.as_fd(), SEALS).map_err(|e| Error::os("fcntl(F_ADD_SEALS)", e))?;
        let file = reopen(memfd.as_fd())?;
        drop(memfd);
        sys::fchmod(file.as_fd(), 0o600).map_err(|e| Error::os("fchmod", e))?;
        let mut seg = Segment::map(file, page, len, 0)?;
        seg.place(home)?;
        Ok(seg)
    }

    /// Binds the daemon's mapping to `home`'s node (`MPOL_BIND`: a page the
    /// node cannot supply is a failed fault, never a page elsewhere). Pages
    /// already in the file stay where they are; [`Segment::check_home`] finds
    /// them. A kernel without NUMA has one node: nothing to bind.
    pub(crate) fn place(&mut self, home: Home) -> Result<()> {
        match sys::mbind(
            self.ptr.as_ptr(),
            self.len,
            libc::MPOL_BIND,
            &[home.node],
            false,
        ) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {}
            Err(e) => return Err(Error::os("mbind (a segment to its node)", e)),
        }
        self.home = Some(home);
        Ok(())
    }

    /// The node its pages must be on.
    pub(crate) fn node(&self) -> Option<u32> {
        self.home.as_ref().map(|h| h.node)
    }

    /// The CPUs that fill it (empty: any).
    pub(crate) fn cpus(&self) -> &[usize] {
        self.home.as_ref().map_or(&[][..], |h| &h.cpus[..])
    }

    /// The node most of its present pages are on (a segment taken over from a
    /// previous instance: which pool it goes back to).
    pub(crate) fn most_on(&self) -> Option<u32> {
        let p = numa::placement(self.ptr.as_ptr(), self.len, self.page_size()).ok()?;
        p.on.iter().max_by_key(|&&(_, n)| n).map(|&(node, _)| node)
    }

    /// Ok if every page is present and on the segment's node: checked after
    /// every fill, since a tenant that punched a hole may have faulted a page
    /// in elsewhere through its own mapping, which a scrub in place keeps.
    pub(crate) fn check_home(&self) -> Result<()> {
        let Some(home) = &self.home else {
            return Err(Error::invalid("a segment without a node"));
        };
        let p = match numa::placement(self.ptr.as_ptr(), self.len, self.page_size()) {
            Ok(p) => p,
            // No NUMA in this kernel: one node, nothing to check.
            Err(e) if e.errno() == libc::ENOSYS => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        if p.all_on(home.node) {
            return Ok(());
        }
        Err(Error::invalid(format!(
            "{} of its {} pages are not on NUMA node {} ({:?} present per node, {} absent)",
            p.present() + p.absent - p.pages_on(home.node),
            p.present() + p.absent,
            home.node,
            p.on,
            p.absent
        )))
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
        let seals = sys::seals(file.as_fd()).ok();
        let len = st.st_size as usize;
        let ours = st.st_uid == sys::geteuid() && st.st_mode & 0o777 == 0o600;
        if seals != Some(SEALS)
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
        std::os::unix::fs::fchown(&self.file, Some(uid), None).map_err(|e| Error::os("fchown", e))
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
        let ptr = sys::mmap_shared(file.as_fd(), len, flags).map_err(|e| {
            if e.raw_os_error() == Some(libc::ENOMEM) {
                prezero::region::hugetlb_shortage(page, len).into()
            } else {
                Error::os("mmap(memfd)", e)
            }
        })?;
        let st = match fstat(file.as_fd()) {
            Ok(st) => st,
            Err(e) => {
                // SAFETY: the mapping just made; nothing refers to it yet.
                let _ = unsafe { sys::munmap(ptr, len) };
                return Err(e);
            }
        };
        Ok(Segment {
            file,
            ptr,
            len,
            page,
            home: None,
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
        // The length (sealed) stays. The daemon's mapping stays valid: the pages
        // behind it are gone until the next fault, which nothing takes before
        // `repopulate` has succeeded.
        sys::punch_hole(self.file.as_fd(), 0, self.len)
            .map_err(|e| Error::os("fallocate(PUNCH_HOLE) of a segment", e))
    }

    /// Faults every missing page of `[off, off+len)` into the file with
    /// `threads` threads (`MADV_POPULATE_WRITE`) on its node's CPUs: the
    /// kernel zeroes each new one, on the node the mapping is bound to, and
    /// pages already there are left as they are. A page the hugetlb pool (of
    /// that node) cannot supply is an error, not a SIGBUS.
    pub(crate) fn repopulate(&self, off: usize, len: usize, threads: usize) -> Result<()> {
        assert!(
            off <= self.len && len <= self.len - off && off.is_multiple_of(self.page_size()),
            "a range of the segment from a page boundary"
        );
        let cpus = self.cpus();
        // SAFETY: off <= len (asserted), so the pointer lies in the mapping.
        let from = unsafe { self.ptr.as_ptr().add(off) };
        // SAFETY: the range lies in our own shared hugetlb mapping, from a page
        // boundary; nobody relies on its pages being absent.
        let r = unsafe { prezero::prefault::prefault_from(from, len, threads, true, cpus) };
        match r {
            Ok(_) => Ok(()),
            // The fault found no page to allocate (the kernel says EFAULT):
            // on the segment's node, since its mapping is bound there.
            Err(e) if e.errno() == libc::EFAULT => {
                let node = self.node().unwrap_or(0);
                let page = self.page_size();
                Err(Error::Local(prezero::Error::HugetlbShortage {
                    page_size: page,
                    needed: len / page,
                    free: 0,
                    reserve_cmd: format!(
                        "echo N > {} (node {node} had no free {} page for the segment)",
                        prezero::hugetlb::nr_path(node, page),
                        self.page.name()
                    ),
                }))
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// `fstat` of our own descriptor.
fn fstat(fd: BorrowedFd<'_>) -> Result<libc::stat> {
    sys::fstat(fd).map_err(|e| Error::os("fstat", e))
}

/// Whether the file behind `fd` has an open file description besides `fd`'s
/// own: true if a write lease is refused.
fn other_openers(fd: BorrowedFd<'_>) -> Result<bool> {
    // A granted lease is dropped again at once, so no opener is ever made to
    // wait on it.
    match sys::set_lease(fd, libc::F_WRLCK) {
        Ok(()) => {
            let _ = sys::set_lease(fd, libc::F_UNLCK);
            Ok(false)
        }
        Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EBUSY)) => Ok(true),
        Err(e) => Err(Error::os("fcntl(F_SETLEASE)", e)),
    }
}

/// Without file leases the daemon could not see descriptors in flight, so it
/// refuses to start: a plain memfd, reopened as segments are, must show "no
/// other opener" alone and "another opener" while a second open exists.
pub(crate) fn check_leases_work() -> Result<()> {
    let memfd =
        sys::memfd_create(c"prezero-lease-probe", 0).map_err(|e| Error::os("memfd_create", e))?;
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
        // SAFETY: the mapping was made in `map` and nothing borrows it once the
        // segment is dropped (the scrubber returns segments before they die).
        let _ = unsafe { sys::munmap(self.ptr, self.len) };
    }
}

/// The inode back to the daemon's uid, mode 0600 (whatever its lessee set).
fn take_back(fd: BorrowedFd<'_>) -> Result<()> {
    std::os::unix::fs::fchown(fd, Some(sys::geteuid()), None)
        .map_err(|e| Error::os("fchown", e))?;
    sys::fchmod(fd, 0o600).map_err(|e| Error::os("fchmod", e))
}

/// `open("/proc/self/fd/N", O_RDWR)`: a new open file description of the same file.
fn reopen(fd: BorrowedFd<'_>) -> Result<OwnedFd> {
    let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
    open_rw(Path::new(&path), 0).map_err(|e| Error::os("open(/proc/self/fd) to reopen a memfd", e))
}

/// Opens `path` read-write and close-on-exec, with extra `flags`: a magic
/// link (`/proc/PID/fd/N`, `/proc/PID/map_files/RANGE`) so opened is a new
/// open file description of the file it names.
pub(super) fn open_rw(path: &Path, flags: libc::c_int) -> std::io::Result<OwnedFd> {
    let file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(flags)
        .open(path)?;
    Ok(file.into())
}
