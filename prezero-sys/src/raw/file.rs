//! Files and descriptors of the OS layer: a procfs or sysfs file's start
//! read into a stack buffer, a control file written, a PSI trigger, an
//! eventfd; numbers in, numbers out, no allocation.

use std::ffi::{c_int, CStr};

use super::Errno;

/// Reads the start of the file at `path` into `buf` with one `read` (a small
/// procfs file comes whole): the bytes read.
///
/// pre: none.
pub fn read_file_start(path: &CStr, buf: &mut [u8]) -> Result<usize, Errno> {
    // SAFETY: open reads the NUL-terminated path; the descriptor is new and
    // this function's alone.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(Errno::last());
    }
    // SAFETY: read writes at most `buf.len()` bytes into `buf`.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    let read = usize::try_from(n).map_err(|_| Errno::last());
    // SAFETY: the descriptor opened above, used by no one else.
    unsafe { libc::close(fd) };
    read
}

/// A descriptor of `path` open for reading (kept: a file to poll).
///
/// pre: none.
pub fn open_read(path: &CStr) -> Option<c_int> {
    // SAFETY: open reads the NUL-terminated path.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    (fd >= 0).then_some(fd)
}

/// Opens `path` for writing, close-on-exec: its descriptor, or `None`.
///
/// pre: none.
pub fn open_write(path: &CStr) -> Option<c_int> {
    // SAFETY: open reads the NUL-terminated path.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    (fd >= 0).then_some(fd)
}

/// Opens the file `name` of the directory `dir` with `flags` (and
/// `O_CREAT`, 0600, if asked): only where the directory is the caller's own
/// (owned by the effective uid, no access for group or others, not a
/// symbolic link) and the file a regular one of the caller's with one link.
/// Never through a link, never waiting (a FIFO). The descriptor, or `None`.
///
/// pre: none.
pub fn open_private(dir: &CStr, name: &CStr, flags: c_int) -> Option<c_int> {
    let dir_flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: open reads the NUL-terminated path; the descriptor is new and
    // this function's alone.
    let dfd = unsafe { libc::open(dir.as_ptr(), dir_flags) };
    if dfd < 0 {
        return None;
    }
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let fd = owned_stat(dfd)
        .filter(|st| st.st_uid == me && st.st_mode & 0o077 == 0)
        .and_then(|_| {
            let flags = flags | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC;
            // SAFETY: openat reads the NUL-terminated name in the open
            // directory `dfd`.
            let fd = unsafe { libc::openat(dfd, name.as_ptr(), flags, 0o600) };
            (fd >= 0).then_some(fd)
        });
    // SAFETY: the directory's descriptor, opened above and no one else's.
    unsafe { libc::close(dfd) };
    let fd = fd?;
    let regular = owned_stat(fd).is_some_and(|st| {
        st.st_mode & libc::S_IFMT == libc::S_IFREG && st.st_uid == me && st.st_nlink == 1
    });
    if !regular {
        // SAFETY: the descriptor opened above, used by no one else.
        unsafe { libc::close(fd) };
        return None;
    }
    Some(fd)
}

/// `fstat` of `fd`.
fn owned_stat(fd: c_int) -> Option<libc::stat> {
    // SAFETY: an all-zero stat is a valid value for fstat to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat fills `st`.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some(st)
}

/// Reads up to `buf.len()` bytes of `fd` from its start.
///
/// pre: none.
pub fn read_at_start(fd: c_int, buf: &mut [u8]) -> Result<usize, Errno> {
    // SAFETY: pread writes at most `buf.len()` bytes into `buf`.
    let n = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
    usize::try_from(n).map_err(|_| Errno::last())
}

/// Makes `buf` the whole of `fd`'s file.
///
/// pre: none.
pub fn replace_contents(fd: c_int, buf: &[u8]) -> Result<(), Errno> {
    // SAFETY: ftruncate changes only the file behind `fd`.
    if unsafe { libc::ftruncate(fd, 0) } != 0 {
        return Err(Errno::last());
    }
    // SAFETY: pwrite reads `buf`'s bytes.
    let n = unsafe { libc::pwrite(fd, buf.as_ptr().cast(), buf.len(), 0) };
    if usize::try_from(n) != Ok(buf.len()) {
        return Err(Errno::last());
    }
    Ok(())
}

/// The process's peak resident memory (`VmHWM` of /proc/self/status).
///
/// pre: none.
pub fn peak_resident() -> Option<usize> {
    let mut buf = [0u8; 4096];
    let n = read_file_start(c"/proc/self/status", &mut buf).ok()?;
    let text = &buf[..n];
    let at = text.windows(6).position(|w| w == b"VmHWM:")? + 6;
    let kib: usize = std::str::from_utf8(&text[at..])
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    kib.checked_mul(1024)
}

/// Writes `buf` to `fd` in one `write` (a control file takes a line whole).
///
/// pre: none.
pub fn write_all(fd: c_int, buf: &[u8]) -> Result<(), Errno> {
    // SAFETY: write reads `buf`'s bytes.
    let n = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
    if usize::try_from(n) != Ok(buf.len()) {
        return Err(Errno::last());
    }
    Ok(())
}

/// An eventfd, close-on-exec and non-blocking.
///
/// pre: none.
pub fn eventfd() -> Result<c_int, Errno> {
    // SAFETY: eventfd takes numbers.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(Errno::last());
    }
    Ok(fd)
}

/// Reads (and so resets) an eventfd's count.
///
/// pre: none.
pub fn read_counter(fd: c_int) -> Result<u64, Errno> {
    let mut v = 0u64;
    // SAFETY: read writes at most the local's eight bytes.
    let n = unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) };
    if n != 8 {
        return Err(Errno::last());
    }
    Ok(v)
}

/// The start of the file `fd` (read from offset 0) into `buf`: how many
/// bytes.
///
/// pre: none.
pub fn pread_start(fd: c_int, buf: &mut [u8]) -> Result<usize, Errno> {
    // SAFETY: pread writes at most `buf.len()` bytes into `buf`.
    let n = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
    usize::try_from(n).map_err(|_| Errno::last())
}

/// A PSI trigger (`trigger`, NUL-terminated: "some 50000 2000000") on the
/// pressure file `path`: a descriptor whose `poll` says `POLLPRI` when it
/// fires, or `None` where it cannot be set (no PSI, no right to write).
///
/// pre: none.
pub fn psi_trigger(path: &CStr, trigger: &[u8]) -> Option<c_int> {
    let flags = libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC;
    // SAFETY: open reads the NUL-terminated path.
    let fd = unsafe { libc::open(path.as_ptr(), flags) };
    if fd < 0 {
        return None;
    }
    // SAFETY: write reads `trigger`'s bytes.
    let n = unsafe { libc::write(fd, trigger.as_ptr().cast(), trigger.len()) };
    if n < 0 {
        // SAFETY: the descriptor opened above, no one else's.
        unsafe { libc::close(fd) };
        return None;
    }
    Some(fd)
}

/// Waits `ms` at most (-1: for ever) for an event on `fds`: how many have
/// one (`revents` says which).
///
/// pre: none (a descriptor that is not open says `POLLNVAL`).
pub fn poll(fds: &mut [libc::pollfd], ms: c_int) -> Result<usize, Errno> {
    // SAFETY: `fds` is a live array of `fds.len()` pollfds.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    if n < 0 {
        return Err(Errno::last());
    }
    Ok(n as usize)
}
