//! The lazy mode's part of the OS layer, in its manner (numbers in,
//! numbers out, no allocation, each call's precondition on a `pre:` line):
//! userfaultfd (opening one, its API handshake, registering ranges, the
//! ioctls that fill or move pages, reading fault messages), the pagemap scan
//! that says which pages are present and which are huge, and the signal
//! mask. The C headers of the machines that build this predate
//! `UFFDIO_MOVE` (6.8) and `PAGEMAP_SCAN` (6.7): the numbers are the kernel's
//! uapi, written out.
//!
//! A test build fails chosen calls here as `sys`'s (`fault.rs`): opening a
//! userfaultfd or its handshake (`userfaultfd`), registering a range
//! (`uffd_register`), filling pages (`uffd_copy`: `UFFDIO_COPY` and
//! `UFFDIO_ZEROPAGE`), moving them (`uffd_move`), and opening or scanning
//! the pagemap (`pagemap`). Not `UFFDIO_WAKE`, `UFFDIO_UNREGISTER` or the
//! read of fault messages: the kernel fails those only for a bad argument or
//! a descriptor gone, and a failed wake would leave a thread waiting forever,
//! not test a path the handler has.

use std::ffi::c_int;

use super::Errno;

/// `_IOC(dir, type, nr, size)` of the kernel's uapi.
const fn ioc(dir: u64, ty: u64, nr: u64, size: usize) -> u64 {
    (dir << 30) | ((size as u64) << 16) | (ty << 8) | nr
}
const IOC_WRITE: u64 = 1;
const IOC_READ: u64 = 2;
const UFFDIO: u64 = 0xAA;

const USERFAULTFD_IOC_NEW: u64 = ioc(0, UFFDIO, 0x00, 0);
const UFFDIO_API: u64 = ioc(IOC_READ | IOC_WRITE, UFFDIO, 0x3F, 24);
const UFFDIO_REGISTER: u64 = ioc(IOC_READ | IOC_WRITE, UFFDIO, 0x00, 32);
const UFFDIO_UNREGISTER: u64 = ioc(IOC_READ, UFFDIO, 0x01, 16);
const UFFDIO_WAKE: u64 = ioc(IOC_READ, UFFDIO, 0x02, 16);
const UFFDIO_COPY: u64 = ioc(IOC_READ | IOC_WRITE, UFFDIO, 0x03, 40);
const UFFDIO_ZEROPAGE: u64 = ioc(IOC_READ | IOC_WRITE, UFFDIO, 0x04, 32);
const UFFDIO_MOVE: u64 = ioc(IOC_READ | IOC_WRITE, UFFDIO, 0x05, 40);
const PAGEMAP_SCAN: u64 = ioc(IOC_READ | IOC_WRITE, b'f' as u64, 16, 96);

const UFFD_API: u64 = 0xAA;
const UFFD_FEATURE_MOVE: u64 = 1 << 16;
/// Fault messages name the faulting thread (Linux 4.14).
const UFFD_FEATURE_THREAD_ID: u64 = 1 << 8;
pub const UFFD_EVENT_PAGEFAULT: u8 = 0x12;
pub const UFFD_PAGEFAULT_FLAG_WRITE: u64 = 1;

/// Pagemap scan categories.
pub const PAGE_IS_PRESENT: u64 = 1 << 3;
pub const PAGE_IS_SWAPPED: u64 = 1 << 4;
pub const PAGE_IS_HUGE: u64 = 1 << 6;
/// A guard region's marker (`MADV_GUARD_INSTALL`), known to the scan from
/// Linux 6.14 (EINVAL before).
pub const PAGE_IS_GUARD: u64 = 1 << 8;

/// What a range is registered for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Faults on pages never present reach the handler (`MODE_MISSING`).
    Missing,
    /// Only write-protection faults, which nothing here arms: the range is
    /// registered so that `UFFDIO_MOVE` may land in it (`MODE_WP`).
    WriteProtect,
}

/// `struct uffd_msg`: the fields a page fault fills.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct Msg {
    pub event: u8,
    reserved: [u8; 7],
    pub flags: u64,
    pub address: u64,
    feat: u64,
}

impl Msg {
    /// The faulting thread's id (`UFFD_FEATURE_THREAD_ID`: the first four
    /// bytes of `feat`); 0 where the kernel did not say.
    pub fn thread(&self) -> u32 {
        let b = self.feat.to_ne_bytes();
        u32::from_ne_bytes([b[0], b[1], b[2], b[3]])
    }
}

/// `struct page_region`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct Region {
    pub start: u64,
    pub end: u64,
    pub categories: u64,
}

#[repr(C)]
struct ScanArg {
    size: u64,
    flags: u64,
    start: u64,
    end: u64,
    walk_end: u64,
    vec: u64,
    vec_len: u64,
    max_pages: u64,
    category_inverted: u64,
    category_mask: u64,
    category_anyof_mask: u64,
    return_mask: u64,
}

fn ioctl(fd: c_int, req: u64, arg: *mut u8) -> Result<(), Errno> {
    // SAFETY: every caller passes a request of this file and a pointer to the
    // argument struct that request's number says, sized as it says.
    if unsafe { libc::ioctl(fd, req as libc::c_ulong, arg) } != 0 {
        return Err(Errno::last());
    }
    Ok(())
}

/// Why no userfaultfd could be had: the device's answer and the system
/// call's (`None`: not made, under a seccomp filter).
#[derive(Clone, Copy, Debug)]
pub struct Refused {
    pub device: Errno,
    pub syscall: Option<Errno>,
}

/// Whether a seccomp filter confines this thread (`Seccomp: 2` in
/// /proc/thread-self/status: filters are per thread): it may kill the
/// process for a system call it does not allow, as systemd's
/// `SystemCallFilter=` does by default. Where the file cannot be read, as if
/// one did.
fn under_seccomp_filter() -> bool {
    let mut buf = [0u8; 4096];
    let Ok(n) = super::read_file_start(c"/proc/thread-self/status", &mut buf) else {
        return true;
    };
    let key = b"\nSeccomp:\t";
    buf[..n]
        .windows(key.len() + 1)
        .any(|w| w.starts_with(key) && w[key.len()] == b'2')
}

/// A new userfaultfd that also takes faults from the kernel's own accesses
/// (`read(2)` into registered memory), close-on-exec, blocking reads:
/// `/dev/userfaultfd` first (its file mode is the permission), then the
/// system call (CAP_SYS_PTRACE, or vm.unprivileged_userfaultfd=1), never
/// under a seccomp filter, which could kill the program for it.
///
/// pre: none.
pub fn open() -> Result<c_int, Refused> {
    // What a user without access to either gets.
    inject!(
        Userfaultfd,
        libc::EPERM,
        Err(Refused {
            device: Errno(libc::EACCES),
            syscall: Some(Errno(libc::EPERM)),
        })
    );
    // SAFETY: open reads the NUL-terminated path; the descriptor is new.
    let dev = unsafe { libc::open(c"/dev/userfaultfd".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    let device = if dev >= 0 {
        // SAFETY: the device's one ioctl, whose argument is the new file's flags.
        let fd = unsafe { libc::ioctl(dev, USERFAULTFD_IOC_NEW as libc::c_ulong, libc::O_CLOEXEC) };
        let e = Errno::last();
        close(dev);
        if fd >= 0 {
            return Ok(fd);
        }
        e
    } else {
        Errno::last()
    };
    if under_seccomp_filter() {
        return Err(Refused {
            device,
            syscall: None,
        });
    }
    // Not UFFD_USER_MODE_ONLY: a kernel access would fail with EFAULT.
    // SAFETY: userfaultfd(2) takes flags only.
    let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC) };
    if fd >= 0 {
        return Ok(fd as c_int);
    }
    Err(Refused {
        device,
        syscall: Some(Errno::last()),
    })
}

/// The API handshake, asking for `UFFDIO_MOVE`: EINVAL from a kernel that
/// does not know it (before 6.8).
///
/// pre: `fd` is a userfaultfd not yet through its handshake.
pub fn handshake(fd: c_int) -> Result<(), Errno> {
    // What a kernel before 6.8 answers.
    inject!(Userfaultfd, libc::EINVAL);
    let mut api = [UFFD_API, UFFD_FEATURE_MOVE | UFFD_FEATURE_THREAD_ID, 0u64];
    ioctl(fd, UFFDIO_API, api.as_mut_ptr().cast())?;
    if api[1] & UFFD_FEATURE_MOVE == 0 {
        return Err(Errno(libc::EINVAL));
    }
    Ok(())
}

/// Registers `[start, start + len)` with `fd`.
///
/// # Safety
/// pre: with [`Mode::Missing`], a thread of this process answers every fault
/// `fd` reports (until the range is unregistered or `fd` closed): the
/// faulting thread waits for that answer.
pub unsafe fn register(fd: c_int, start: usize, len: usize, mode: Mode) -> Result<(), Errno> {
    inject!(UffdRegister, libc::ENOMEM);
    let m: u64 = match mode {
        Mode::Missing => 1,
        Mode::WriteProtect => 2,
    };
    let mut arg = [start as u64, len as u64, m, 0];
    ioctl(fd, UFFDIO_REGISTER, arg.as_mut_ptr().cast())
}

/// Unregisters `[start, start + len)`, then wakes every fault waiting
/// there: the kernel serves them, and its faults, again. The kernel's own
/// wake at unregister comes before it takes the mapping's lock, so a fault
/// taken under the per-VMA lock can queue after it and would wait for ever
/// (a JVM's pretouch hung 1 run in 10); `UFFDIO_WAKE` needs no registration.
///
/// pre: none (the range's contents stay as they are).
pub fn unregister(fd: c_int, start: usize, len: usize) -> Result<(), Errno> {
    inject!(UffdWake, libc::ENOMEM);
    let mut arg = [start as u64, len as u64];
    ioctl(fd, UFFDIO_UNREGISTER, arg.as_mut_ptr().cast())?;
    // A wake that fails leaves the fault to the reader, which serves it
    // or hands it to the kernel as any.
    let _ = wake(fd, start, len);
    Ok(())
}

/// Wakes the threads waiting on a fault in `[start, start + len)`: they
/// fault again.
///
/// pre: none.
pub fn wake(fd: c_int, start: usize, len: usize) -> Result<(), Errno> {
    inject!(UffdWake, libc::ENOMEM);
    let mut arg = [start as u64, len as u64];
    ioctl(fd, UFFDIO_WAKE, arg.as_mut_ptr().cast())
}

/// Maps copies of `[src, src + len)` at the missing pages of
/// `[dst, dst + len)` (pages of their own: no second fault on the write that
/// follows) and wakes their waiters: the bytes filled. A page present stops
/// it: EEXIST if it is the first, else the bytes before it.
///
/// # Safety
/// pre: `[src, src + len)` is readable.
pub unsafe fn copy(fd: c_int, dst: usize, src: usize, len: usize) -> Result<usize, Errno> {
    inject!(UffdCopy, libc::ENOMEM);
    let mut arg = [dst as u64, src as u64, len as u64, 0, 0];
    let r = ioctl(fd, UFFDIO_COPY, arg.as_mut_ptr().cast());
    filled(r, arg[4], len)
}

/// Maps the shared zero page at the missing pages of `[dst, dst + len)` and
/// wakes their waiters: the bytes filled, as [`copy`].
///
/// pre: none (a missing page reads zero either way).
pub fn zeropage(fd: c_int, dst: usize, len: usize) -> Result<usize, Errno> {
    inject!(UffdCopy, libc::ENOMEM);
    let mut arg = [dst as u64, len as u64, 0, 0];
    let r = ioctl(fd, UFFDIO_ZEROPAGE, arg.as_mut_ptr().cast());
    filled(r, arg[3], len)
}

/// A fill's outcome: all of `len`, or (EAGAIN) the part the kernel filled
/// and woke before it stopped, as its count field says.
fn filled(r: Result<(), Errno>, count: u64, len: usize) -> Result<usize, Errno> {
    match r {
        Ok(()) => Ok(len),
        Err(Errno(libc::EAGAIN)) if (count as i64) > 0 => Ok(count as usize),
        Err(e) => Err(e),
    }
}

/// `UFFDIO_MOVE`'s mode: leave the threads waiting at the destination
/// asleep (nothing waits on a page moved into the reserve).
pub const MOVE_DONT_WAKE: u64 = 1;
/// `UFFDIO_MOVE`'s mode: pages missing in the source are skipped, not an error.
pub const MOVE_SRC_HOLES: u64 = 2;

/// Moves the pages of `[src, src + len)` to `[dst, dst + len)` (the page
/// tables' entries, no copy: a PMD-mapped huge page moves whole when both
/// ends are 2 MiB-aligned and `dst`'s page-table slot is empty), and wakes
/// the waiters at `dst` unless `mode` has [`MOVE_DONT_WAKE`]. The bytes
/// moved, and the error that stopped it (EBUSY: a page shared with a child).
///
/// # Safety
/// pre: the caller owns both ranges: nothing else reads `src` (it becomes
/// missing) or expects `dst` to stay missing; `dst` lies in a range
/// registered with `fd`.
pub unsafe fn move_range(
    fd: c_int,
    dst: usize,
    src: usize,
    len: usize,
    mode: u64,
) -> (usize, Result<(), Errno>) {
    // What a page shared with a child gives, before any moved.
    inject!(UffdMove, libc::EBUSY, (0, Err(Errno(libc::EBUSY))));
    let mut arg = [dst as u64, src as u64, len as u64, mode, 0];
    let r = ioctl(fd, UFFDIO_MOVE, arg.as_mut_ptr().cast());
    let moved = arg[4] as i64;
    match r {
        Ok(()) => (len, Ok(())),
        Err(e) => (usize::try_from(moved).unwrap_or(0), Err(e)),
    }
}

/// Reads fault messages into `buf`, waiting for one: how many. EIO where
/// the read gave no whole message (no userfaultfd's answer: its end, or
/// another file's bytes).
///
/// pre: none.
pub fn read(fd: c_int, buf: &mut [Msg]) -> Result<usize, Errno> {
    let size = std::mem::size_of::<Msg>();
    // SAFETY: read writes at most the buffer's bytes, whole messages.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), std::mem::size_of_val(buf)) };
    if n < 0 {
        return Err(Errno::last());
    }
    let n = n as usize;
    if n == 0 || !n.is_multiple_of(size) {
        return Err(Errno(libc::EIO));
    }
    Ok(n / size)
}

/// Makes reads of `fd` return EAGAIN where nothing waits (a userfaultfd's
/// `poll` answers only for a non-blocking one: a blocking one says POLLERR
/// at once).
///
/// pre: none.
pub fn set_nonblocking(fd: c_int) -> Result<(), Errno> {
    // SAFETY: fcntl reads and sets the flags of a descriptor of ours.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(Errno::last());
    }
    Ok(())
}

/// Whether `fd` has something to read within `ms` milliseconds (an error,
/// a closed descriptor: true, for the read to say).
///
/// pre: none.
pub fn readable_within(fd: c_int, ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll reads and writes the one local pollfd.
    unsafe { libc::poll(&mut p, 1, ms) != 0 }
}

/// Which file `fd` is (its device and inode): a descriptor number the
/// program closed and opened again names another.
///
/// pre: none.
pub fn identity(fd: c_int) -> Result<(u64, u64), Errno> {
    // SAFETY: fstat writes the struct it is given, a local.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(Errno::last());
    }
    Ok((st.st_dev, st.st_ino))
}

/// Opens this process's pagemap, for [`scan`].
///
/// pre: none.
pub fn open_pagemap() -> Result<c_int, Errno> {
    inject!(Pagemap, libc::EACCES);
    // SAFETY: open reads the NUL-terminated path.
    let fd = unsafe {
        libc::open(
            c"/proc/self/pagemap".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(Errno::last());
    }
    Ok(fd)
}

/// The runs of pages in `[start, end)` that have every category of `all`
/// and one of `any`, with their categories among `ret`, into `out`: how
/// many, and where the walk stopped (short of `end` when `out` filled).
///
/// pre: none (a read of this process's own page tables).
pub fn scan(
    pagemap: c_int,
    start: usize,
    end: usize,
    all: u64,
    any: u64,
    ret: u64,
    out: &mut [Region],
) -> Result<(usize, usize), Errno> {
    scan_with(pagemap, start, end, 0, all, any, ret, out)
}

/// The runs of pages in `[start, end)` neither present nor swapped out
/// (never touched, or dropped), into `out`: how many, and where the walk
/// stopped.
///
/// pre: none (a read of this process's own page tables).
pub fn scan_missing(
    pagemap: c_int,
    start: usize,
    end: usize,
    out: &mut [Region],
) -> Result<(usize, usize), Errno> {
    let here = PAGE_IS_PRESENT | PAGE_IS_SWAPPED;
    scan_with(pagemap, start, end, here, here, 0, here, out)
}

/// `PAGEMAP_SCAN` with the categories of `inverted` counted when absent.
#[allow(clippy::too_many_arguments)]
fn scan_with(
    pagemap: c_int,
    start: usize,
    end: usize,
    inverted: u64,
    all: u64,
    any: u64,
    ret: u64,
    out: &mut [Region],
) -> Result<(usize, usize), Errno> {
    inject!(Pagemap, libc::ENOMEM);
    let mut arg = ScanArg {
        size: std::mem::size_of::<ScanArg>() as u64,
        flags: 0,
        start: start as u64,
        end: end as u64,
        walk_end: 0,
        vec: out.as_mut_ptr() as u64,
        vec_len: out.len() as u64,
        max_pages: 0,
        category_inverted: inverted,
        category_mask: all,
        category_anyof_mask: any,
        return_mask: ret,
    };
    // SAFETY: the argument and the output vector are this call's, sized as
    // the argument says.
    let n = unsafe { libc::ioctl(pagemap, PAGEMAP_SCAN as libc::c_ulong, &mut arg) };
    if n < 0 {
        return Err(Errno::last());
    }
    Ok((n as usize, arg.walk_end as usize))
}

// The system call, not the C library's `close`, which the preload
// interposes (its `entry/lazy.rs`).
pub use super::direct::close;

/// Blocks every signal in the calling thread: the old mask.
///
/// pre: none.
pub fn block_signals() -> libc::sigset_t {
    // SAFETY: an all-zero sigset_t is valid storage; sigfillset fills it.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as for all; pthread_sigmask writes it.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: writes the local set.
    unsafe { libc::sigfillset(&mut all) };
    // SAFETY: reads one local set and writes the other.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old) };
    old
}

/// Gives the calling thread back the mask [`block_signals`] returned.
///
/// pre: none.
pub fn restore_signals(old: &libc::sigset_t) {
    // SAFETY: a mask read from this thread.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, old, std::ptr::null_mut()) };
}
