//! Files and descriptors: memfds and their seals, leases, punching, `fstat`,
//! descriptor flags, eventfds and `poll`.
//!
//! Each call acts on a descriptor the caller holds (a `BorrowedFd`), so a
//! descriptor cannot be closed under it; a number that names nothing is the
//! kernel's EBADF.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};

use super::{check, owned};

/// A length or offset as `off_t`; past its range is EINVAL, as the kernel
/// answers a negative one.
fn off(n: usize) -> io::Result<libc::off_t> {
    libc::off_t::try_from(n).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// `memfd_create(2)`: a new anonymous file named `name` (what
/// `/proc/PID/fd/N` shows after `/memfd:`), close-on-exec, with extra `flags`
/// (`MFD_ALLOW_SEALING`, `MFD_HUGETLB` and its size).
///
/// pre: none (unknown flags are EINVAL).
pub fn memfd_create(name: &CStr, flags: libc::c_uint) -> io::Result<OwnedFd> {
    #[cfg(debug_assertions)]
    super::fault::check(super::fault::Kind::MemfdCreate)?;
    // SAFETY: `name` is NUL-terminated; the kernel copies it.
    owned(unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | flags) })
}

/// `ftruncate(2)`: sets the file's length.
///
/// pre: none. (Shrinking a file that is mapped makes an access past its new
/// end a SIGBUS, not undefined behaviour; the seals forbid it where it matters.)
pub fn ftruncate(fd: BorrowedFd<'_>, len: usize) -> io::Result<()> {
    // SAFETY: ftruncate has no memory-safety preconditions.
    check(unsafe { libc::ftruncate(fd.as_raw_fd(), off(len)?) }).map(drop)
}

/// Adds `seals` (`F_SEAL_*`) to a memfd made with `MFD_ALLOW_SEALING`.
///
/// pre: none (a file that cannot be sealed is EINVAL; one sealed with
/// `F_SEAL_SEAL` is EPERM).
pub fn add_seals(fd: BorrowedFd<'_>, seals: libc::c_int) -> io::Result<()> {
    // SAFETY: fcntl(F_ADD_SEALS) takes an int and touches no memory of ours.
    check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) }).map(drop)
}

/// The seals (`F_SEAL_*`) the file carries.
///
/// pre: none.
pub fn seals(fd: BorrowedFd<'_>) -> io::Result<libc::c_int> {
    // SAFETY: fcntl(F_GET_SEALS) takes no argument.
    check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) })
}

/// The file status flags (`F_GETFL`: the access mode, `O_NONBLOCK`, ...).
///
/// pre: none.
pub fn status_flags(fd: BorrowedFd<'_>) -> io::Result<libc::c_int> {
    // SAFETY: fcntl(F_GETFL) takes no argument.
    check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })
}

/// Sets or clears `O_NONBLOCK` on the open file description (shared with
/// every duplicate of the descriptor).
///
/// pre: none.
pub fn set_nonblocking(fd: BorrowedFd<'_>, on: bool) -> io::Result<()> {
    let fl = status_flags(fd)?;
    let fl = if on {
        fl | libc::O_NONBLOCK
    } else {
        fl & !libc::O_NONBLOCK
    };
    // SAFETY: fcntl(F_SETFL) takes an int and touches no memory of ours.
    check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl) }).map(drop)
}

/// Sets or clears `FD_CLOEXEC`. Async-signal-safe (a `pre_exec` hook may call it).
///
/// pre: none.
pub fn set_cloexec(fd: BorrowedFd<'_>, on: bool) -> io::Result<()> {
    let flags = if on { libc::FD_CLOEXEC } else { 0 };
    // SAFETY: fcntl(F_SETFD) takes an int and touches no memory of ours.
    check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, flags) }).map(drop)
}

/// `fchmod(2)`: the file's permission bits.
///
/// pre: none.
pub fn fchmod(fd: BorrowedFd<'_>, mode: libc::mode_t) -> io::Result<()> {
    // SAFETY: fchmod has no memory-safety preconditions.
    check(unsafe { libc::fchmod(fd.as_raw_fd(), mode) }).map(drop)
}

/// `fstat(2)`. Takes a bare number too (a `RawFd`), for a `pre_exec` hook that
/// checks what a number names before it trusts it: async-signal-safe (no
/// allocation).
///
/// pre: none (a number that names nothing is EBADF; reading metadata changes
/// nothing).
pub fn fstat(fd: impl AsRawFd) -> io::Result<libc::stat> {
    // SAFETY: an all-zero stat is valid; fstat writes into the local.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes one stat into the local.
    check(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    Ok(st)
}

/// `fstatfs(2)`: the file system the file is on.
///
/// pre: none.
pub fn fstatfs(fd: BorrowedFd<'_>) -> io::Result<libc::statfs> {
    // SAFETY: an all-zero statfs is valid; fstatfs writes into the local.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatfs writes one statfs into the local.
    check(unsafe { libc::fstatfs(fd.as_raw_fd(), &mut fs) })?;
    Ok(fs)
}

/// `F_SETLEASE`: takes a lease of `kind` (`F_RDLCK`, `F_WRLCK`) on the file, or
/// drops ours (`F_UNLCK`). A write lease is granted only while no other open
/// file description of the file exists (EAGAIN or EBUSY otherwise).
///
/// pre: the caller drops a lease it took before it could matter: while it is
/// held, another opener waits up to `/proc/sys/fs/lease-break-time` and this
/// process gets SIGIO.
pub fn set_lease(fd: BorrowedFd<'_>, kind: libc::c_int) -> io::Result<()> {
    // SAFETY: fcntl(F_SETLEASE) takes an int and touches no memory of ours.
    check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETLEASE, kind) }).map(drop)
}

/// Takes the pages of `[offset, offset+len)` out of the file, keeping its
/// length (`FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE`). A mapping of the
/// range stays valid: the next access faults a page in again.
///
/// pre: none.
pub fn punch_hole(fd: BorrowedFd<'_>, offset: usize, len: usize) -> io::Result<()> {
    #[cfg(debug_assertions)]
    super::fault::check(super::fault::Kind::Fallocate)?;
    let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
    // SAFETY: fallocate has no memory-safety preconditions.
    check(unsafe { libc::fallocate(fd.as_raw_fd(), mode, off(offset)?, off(len)?) }).map(drop)
}

/// A new eventfd (counter 0), nonblocking and close-on-exec.
///
/// pre: none.
pub fn eventfd() -> io::Result<OwnedFd> {
    // A new descriptor, owned by no one else (`owned`'s pre).
    owned(crate::raw::eventfd()?)
}

/// Adds `n` to an eventfd's counter (makes it readable).
///
/// pre: `fd` is an eventfd (other files take the 8 bytes as data).
pub fn eventfd_add(fd: BorrowedFd<'_>, n: u64) -> io::Result<()> {
    // SAFETY: an 8-byte write from a local.
    let r = unsafe { libc::write(fd.as_raw_fd(), (&n as *const u64).cast(), 8) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Reads and resets an eventfd's counter (EAGAIN if it is 0 and the eventfd
/// nonblocking).
///
/// pre: `fd` is an eventfd.
pub fn eventfd_take(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let mut n = 0u64;
    // SAFETY: an 8-byte read into a local.
    let r = unsafe { libc::read(fd.as_raw_fd(), (&mut n as *mut u64).cast(), 8) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n)
}

/// A `pollfd` waiting for `fd` to be readable (a negative `fd` is skipped).
///
/// pre: none.
pub fn pollfd_in(fd: RawFd) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}

/// `poll(2)`: waits up to `timeout_ms` (-1: no limit) for an event on `fds`;
/// the number of entries with events. EINTR is an error (the caller decides
/// whether to wait again).
///
/// pre: none (a number in `fds` that names nothing reports `POLLNVAL`).
pub fn poll(fds: &mut [libc::pollfd], timeout_ms: libc::c_int) -> io::Result<usize> {
    Ok(crate::raw::poll(fds, timeout_ms)?)
}
