//! The allocation-free half of the OS layer: the calls the preload makes
//! from inside `malloc`, where nothing may allocate. Each is a small function
//! with its precondition on a `pre:` line, as the top level has them, but
//! these take and return numbers, C strings and the caller's stack buffers
//! only, and fail with an [`Errno`], never an `io::Error`. `spawn` alone
//! allocates (std's thread creation); its caller holds no lock of the
//! preload's. By subject: `uffd.rs` the lazy mode's userfaultfd, pagemap and
//! signal-mask calls; `sync.rs` the locks that live in statics and the futex;
//! `identity.rs` who a thread is, from `/proc`; `direct.rs` system calls made
//! past the functions the preload interposes; `file.rs`, `numa.rs`,
//! `thread.rs` files read into stack buffers, placement, threads.
//!
//! A wrapper is safe unless a wrong argument could break memory or a
//! descriptor still in use; then it is an `unsafe fn` and its `pre:` line is
//! the obligation. Addresses are numbers (`usize`), as the cache keeps them.
//! In a test build (`fault-injection`) the calls that can fail can be made
//! to (`fault.rs`).

use std::ffi::{c_int, c_void, CStr};

/// A failed call's errno.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Errno(pub c_int);

/// Returns the failure the test build's plan injects into this call
/// (`fault.rs`: the call is not made, the errno is the kernel's for it);
/// nothing in a normal build. With a third argument, that value is the
/// failure returned.
macro_rules! inject {
    ($kind:ident, $errno:expr) => {
        inject!($kind, $errno, Err(crate::raw::Errno($errno)))
    };
    ($kind:ident, $errno:expr, $failure:expr) => {
        #[cfg(feature = "fault-injection")]
        if crate::raw::fault::fails(crate::raw::fault::Kind::$kind) {
            crate::raw::set_errno($errno);
            return $failure;
        }
    };
}

#[cfg(feature = "fault-injection")]
mod fault;

/// Testing only (`PREZERO_FAULT=stall:N`, see `fault.rs`): the scrubber,
/// having taken the cache's lock, keeps it 3 s.
#[inline(always)]
pub fn injected_stall() {
    #[cfg(feature = "fault-injection")]
    if fault::fails(fault::Kind::Stall) {
        std::thread::sleep(std::time::Duration::from_secs(3));
    }
}
pub mod cgroup;
pub mod direct;
mod file;
mod identity;
mod numa;
mod procfs;
mod sync;
mod thread;
pub mod uffd;

pub use file::*;
pub use identity::Identity;
pub use numa::*;
pub use procfs::{each_in_list, meminfo, thp_mode, ThpMode};
pub use sync::{futex_wait, futex_wake, Event, Mutex, TagMutex};
pub use thread::*;

impl From<Errno> for std::io::Error {
    /// The std layer's form of the same failure.
    fn from(e: Errno) -> std::io::Error {
        std::io::Error::from_raw_os_error(e.0)
    }
}

impl Errno {
    /// The calling thread's errno, read just after a call failed.
    #[inline]
    pub fn last() -> Errno {
        // SAFETY: no preconditions: the address of this thread's errno.
        let at = unsafe { libc::__errno_location() };
        // SAFETY: the calling thread's errno, always valid to read.
        Errno(unsafe { *at })
    }
}

/// Sets the calling thread's errno: how a C caller learns why it got NULL.
///
/// pre: none.
#[inline]
pub fn set_errno(e: c_int) {
    // SAFETY: no preconditions: the address of this thread's errno.
    let at = unsafe { libc::__errno_location() };
    // SAFETY: the calling thread's errno, always valid to write.
    unsafe { *at = e };
}

/// The process's resident memory that is its own (not file pages or
/// shared memory), in bytes: `/proc/self/statm`'s resident less shared.
pub fn resident_private() -> Option<usize> {
    let _kept = KeepErrno::new();
    let mut buf = [0u8; 256];
    let n = read_file_start(c"/proc/self/statm", &mut buf).ok()?;
    let mut fields = buf[..n].split(|&b| b == b' ').skip(1);
    let mut page_count = || -> Option<usize> {
        std::str::from_utf8(fields.next()?)
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    let (resident, shared) = (page_count()?, page_count()?);
    // SAFETY: sysconf reads a constant of the system; no memory is passed.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).ok()?;
    Some(resident.saturating_sub(shared) * page)
}

/// The calling thread's errno, put back as it was when this is dropped:
/// the C library's `free` promises to keep it, and our reads of `/proc`
/// and `/sys` inside `malloc` and `free` may fail.
pub struct KeepErrno(c_int);

impl KeepErrno {
    // A `Default` would hide that this reads errno at the call.
    #[allow(clippy::new_without_default)]
    #[inline]
    pub fn new() -> KeepErrno {
        KeepErrno(Errno::last().0)
    }
}

impl Drop for KeepErrno {
    #[inline]
    fn drop(&mut self) {
        set_errno(self.0);
    }
}

/// A system call's result: its value, or the errno it failed with.
fn checked(r: libc::c_long) -> Result<usize, Errno> {
    if r == -1 {
        return Err(Errno::last());
    }
    Ok(r as usize)
}

/// The kernel's `mmap(2)`, not the C library's: this library exports `mmap`
/// itself (`entry/lazy.rs`), and the C library's name would resolve to
/// that. So do `munmap`, `mremap` and `madvise` below.
///
/// # Safety
/// pre: with `MAP_FIXED` in `flags`, `[addr, addr + len)` is the caller's to
/// replace (what was mapped there is gone).
pub unsafe fn mmap_raw(
    addr: usize,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: libc::off_t,
) -> Result<usize, Errno> {
    // SAFETY: the kernel checks every argument; MAP_FIXED is the caller's (pre).
    checked(unsafe { libc::syscall(libc::SYS_mmap, addr, len, prot, flags, fd, off) })
}

/// The kernel's `munmap(2)` (see [`mmap_raw`]).
///
/// # Safety
/// pre: nothing uses `[addr, addr + len)` any more.
pub unsafe fn munmap_raw(addr: usize, len: usize) -> Result<(), Errno> {
    // SAFETY: the range is unused (pre).
    checked(unsafe { libc::syscall(libc::SYS_munmap, addr, len) }).map(drop)
}

/// The kernel's `mremap(2)` (see [`mmap_raw`]); `to` is read only with
/// `MREMAP_FIXED`.
///
/// # Safety
/// pre: the caller owns `[from, from + old)`, and with `MREMAP_FIXED`
/// `[to, to + new)` too (what was mapped there is gone).
pub unsafe fn mremap_raw(
    from: usize,
    old: usize,
    new: usize,
    flags: c_int,
    to: usize,
) -> Result<usize, Errno> {
    // SAFETY: both ranges are the caller's (pre).
    checked(unsafe { libc::syscall(libc::SYS_mremap, from, old, new, flags, to) })
}

/// The kernel's `madvise(2)` (see [`mmap_raw`]).
///
/// # Safety
/// pre: advice that drops contents (`MADV_DONTNEED`, `MADV_FREE`,
/// `MADV_REMOVE`) only on memory nothing else still reads.
pub unsafe fn madvise_raw(addr: usize, len: usize, advice: c_int) -> Result<(), Errno> {
    // SAFETY: the kernel checks the range; dropped contents are unused (pre).
    checked(unsafe { libc::syscall(libc::SYS_madvise, addr, len, advice) }).map(drop)
}

/// A new private anonymous mapping of `len` bytes where the kernel picks.
///
/// pre: no `MAP_FIXED` in `flags` (the callers below pass none): without it
/// the kernel takes a free range, which aliases nothing.
fn map_anon(len: usize, prot: c_int, flags: c_int) -> Result<usize, Errno> {
    inject!(Mmap, libc::ENOMEM);
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | flags;
    // SAFETY: a fresh mapping at an address the kernel picks (no MAP_FIXED).
    unsafe { mmap_raw(0, len, prot, flags, -1, 0) }
}

/// `len` bytes of address space, inaccessible (`PROT_NONE`), where the kernel
/// picks. Not `MAP_NORESERVE`: an inaccessible private mapping is not charged,
/// and without the flag each part [`make_writable`] opens is, so the kernel's
/// overcommit policy judges it as it would judge the C library's own `mmap`.
///
/// pre: none.
pub fn reserve(len: usize) -> Result<usize, Errno> {
    map_anon(len, libc::PROT_NONE, 0)
}

/// `len` bytes of zeroed read-write memory where the kernel picks, charged
/// to no one until touched (`MAP_NORESERVE`).
///
/// pre: none.
pub fn map_noreserve(len: usize) -> Result<usize, Errno> {
    map_anon(len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_NORESERVE)
}

/// `len` bytes that read as zero and are never written (`PROT_READ`): each
/// page maps the kernel's shared zero page when first read.
///
/// pre: none.
pub fn map_zeroes(len: usize) -> Result<usize, Errno> {
    map_anon(len, libc::PROT_READ, libc::MAP_NORESERVE)
}

/// Maps fresh private read-write memory exactly over `[addr, addr + len)`
/// (`MAP_FIXED`): what was there is replaced in one step, with no hole
/// another thread's `mmap` could land in.
///
/// # Safety
/// pre: `[addr, addr + len)` is a mapping of the caller's, and nothing uses
/// its contents (they become untouched zero pages).
pub unsafe fn map_fresh_over(addr: usize, len: usize) -> Result<(), Errno> {
    inject!(Mmap, libc::ENOMEM);
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED;
    // SAFETY: the range is the caller's and unused (pre).
    unsafe { mmap_raw(addr, len, prot, flags, -1, 0) }.map(drop)
}

/// Unmaps `[addr, addr + len)`.
///
/// # Safety
/// pre: the range is a mapping this crate made, and nothing uses it any more.
pub unsafe fn munmap(addr: usize, len: usize) -> Result<(), Errno> {
    inject!(Munmap, libc::EINVAL);
    // SAFETY: the range is ours and unused (pre).
    unsafe { munmap_raw(addr, len) }
}

/// Makes `[addr, addr + len)` readable and writable (`mprotect`).
///
/// # Safety
/// pre: the range is part of this crate's own reservation: anywhere else it
/// could take execute permission from code, or open memory meant to stay
/// read-only to writes.
pub unsafe fn make_writable(addr: usize, len: usize) -> Result<(), Errno> {
    inject!(Mprotect, libc::ENOMEM);
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    // SAFETY: the range is our reservation's (pre).
    if unsafe { libc::mprotect(addr as *mut c_void, len, prot) } != 0 {
        return Err(Errno::last());
    }
    Ok(())
}

/// Advice that keeps a range's contents: safe to give any range.
#[derive(Clone, Copy, Debug)]
pub enum Advice {
    /// `MADV_HUGEPAGE`: back the range with transparent huge pages where possible.
    HugePage,
    /// `MADV_NOHUGEPAGE`: never fault transparent huge pages in.
    NoHugePage,
    /// `MADV_DONTFORK`: a forked child does not get the range.
    DontFork,
    /// `MADV_POPULATE_WRITE`: fault every page in writable, contents unchanged
    /// (EINVAL before Linux 5.14, which does not know it).
    PopulateWrite,
}

/// `madvise(2)` with advice that keeps contents.
///
/// pre: none: the kernel checks the range, and neither advice changes a
/// byte, so a wrong range is an error, never undefined behaviour.
pub fn madvise(addr: usize, len: usize, advice: Advice) -> Result<(), Errno> {
    inject!(Madvise, libc::ENOMEM);
    let advice = match advice {
        Advice::HugePage => libc::MADV_HUGEPAGE,
        Advice::NoHugePage => libc::MADV_NOHUGEPAGE,
        Advice::DontFork => libc::MADV_DONTFORK,
        Advice::PopulateWrite => libc::MADV_POPULATE_WRITE,
    };
    // SAFETY: each value only hints, populates or leaves the range out of a
    // child, leaving every byte as it was.
    unsafe { madvise_raw(addr, len, advice) }
}

/// `madvise(MADV_FREE)` of zeroed memory held for later: the kernel may take
/// its pages back under pressure, without swap, and a page it took reads
/// zero again; one it left keeps its zeroes, and a write to it needs no
/// fault. `[addr, addr + len)` shrinks to its 2 MiB-aligned interior where
/// `whole_huge` (a part of a huge page marked free splits it).
///
/// # Safety
/// pre: the range lies in private anonymous mappings this crate made, reads
/// zero, and nothing writes it while this runs (a write after it keeps the
/// page).
pub unsafe fn free_lazily(addr: usize, len: usize, whole_huge: bool) -> Result<(), Errno> {
    inject!(Madvise, libc::EINVAL);
    let (start, end) = if whole_huge {
        const HUGE: usize = 2 << 20;
        (addr.next_multiple_of(HUGE), (addr + len) & !(HUGE - 1))
    } else {
        (addr, addr + len)
    };
    if start >= end {
        return Ok(());
    }
    // In steps of 2 MiB: the call holds the mapping's lock, and a caller
    // preempted inside it keeps the program's own mapping calls waiting
    // until it runs again (at SCHED_IDLE a whole 8 MiB scrub step in one
    // call held a calloc for 1.3 s behind two spinning threads).
    // The steps end on 2 MiB boundaries, so that none splits a huge page
    // the range holds whole.
    let mut at = start;
    while at < end {
        let stop = (at | ((2 << 20) - 1)).saturating_add(1).min(end);
        // SAFETY: zero memory of ours (pre): taken or not, it reads zero.
        unsafe { madvise_raw(at, stop - at, libc::MADV_FREE) }?;
        at = stop;
    }
    Ok(())
}

/// `madvise(MADV_DONTNEED)`: the range's pages go back to the kernel and read
/// zero on the next touch.
///
/// # Safety
/// pre: `[addr, addr + len)` lies in private anonymous mappings this crate
/// made, and nothing else reads or writes it while this runs (its contents
/// vanish).
pub unsafe fn discard(addr: usize, len: usize) -> Result<(), Errno> {
    // What the kernel says of mlock'd memory.
    inject!(Madvise, libc::EINVAL);
    // SAFETY: the range is ours and no one else's meanwhile (pre).
    unsafe { madvise_raw(addr, len, libc::MADV_DONTNEED) }
}

/// [`discard`], also where the program locked the range (`mlock`,
/// `mlockall`: EINVAL), with `MADV_DONTNEED_LOCKED` (Linux 5.18): the
/// lazy mode's reserve, whose pages must go when it says they went.
///
/// # Safety
/// As [`discard`].
pub unsafe fn discard_even_locked(addr: usize, len: usize) -> Result<(), Errno> {
    // SAFETY: the caller's range, as discard takes it (pre).
    match unsafe { discard(addr, len) } {
        Err(Errno(libc::EINVAL)) => {
            inject!(Madvise, libc::EINVAL);
            // SAFETY: as above.
            unsafe { madvise_raw(addr, len, libc::MADV_DONTNEED_LOCKED) }
        }
        r => r,
    }
}

/// What [`remap_pages`] left when it moved nothing.
#[derive(Debug, PartialEq, Eq)]
pub enum NotMoved {
    /// Both ranges are as they were.
    Refused,
    /// The kernel unmapped `to` before it refused (6.12 does: `mremap` checks
    /// the source after it unmaps the destination, and a source that spans
    /// two mappings is EFAULT), and `to` is a fresh mapping again.
    Remapped,
    /// As `Remapped`, but another thread's mapping landed in the hole before
    /// it was mapped again: `to` is not wholly ours any more, and must never
    /// be used, handed out or unmapped.
    Lost,
}

/// Moves the pages of `[from, from + len)` over `[to, to + len)`, replacing
/// what was mapped there in the same call (`mremap` with `MREMAP_MAYMOVE |
/// MREMAP_FIXED | MREMAP_DONTUNMAP`); `from` stays mapped, with no pages
/// behind it (zero when next touched). `from` is never a hole; `to` is not
/// one either once this returns, unless [`NotMoved::Lost`] says why.
///
/// # Safety
/// pre: both ranges are the caller's, in private anonymous mappings this
/// crate made, disjoint, and nothing else uses either while this runs.
pub unsafe fn remap_pages(from: usize, len: usize, to: usize) -> Result<(), NotMoved> {
    inject!(Mremap, libc::ENOMEM, Err(NotMoved::Refused));
    let flags = libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED | libc::MREMAP_DONTUNMAP;
    // SAFETY: both ranges are the caller's, disjoint and unused (pre).
    if let Ok(p) = unsafe { mremap_raw(from, len, len, flags, to) } {
        return if p == to {
            Ok(())
        } else {
            Err(NotMoved::Refused)
        };
    }
    // SAFETY: MADV_NORMAL drops nothing; ENOMEM says part of it is unmapped.
    if unsafe { madvise_raw(to, len, libc::MADV_NORMAL) } != Err(Errno(libc::ENOMEM)) {
        return Err(NotMoved::Refused);
    }
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE;
    // SAFETY: NOREPLACE maps only where nothing is mapped: the hole the
    // failed call left in the caller's range (pre), or nothing.
    match unsafe { mmap_raw(to, len, prot, flags, -1, 0) } {
        Ok(p) if p == to => Err(NotMoved::Remapped),
        Ok(p) => {
            // A kernel that takes NOREPLACE as a hint (before 4.17) mapped
            // elsewhere: that mapping is this call's alone.
            // SAFETY: made just above, used by nothing.
            let _ = unsafe { munmap_raw(p, len) };
            Err(NotMoved::Lost)
        }
        Err(_) => Err(NotMoved::Lost),
    }
}

/// Whether this process's address space is unlimited (`RLIMIT_AS`, what
/// `ulimit -v` sets); false if the limit cannot be read.
///
/// pre: none.
pub fn address_space_unlimited() -> bool {
    unlimited(libc::RLIMIT_AS)
}

/// Whether the program turned transparent huge pages off for itself
/// (`PR_SET_THP_DISABLE`, which `prctl(PR_GET_THP_DISABLE)` reads back).
///
/// pre: none.
pub fn thp_disabled() -> bool {
    // SAFETY: prctl with this option reads one flag of the process.
    unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) == 1 }
}

/// Whether this process's private writable memory is unlimited
/// (`RLIMIT_DATA`, what `prlimit --data` sets); false if it cannot be read.
///
/// pre: none.
pub fn data_unlimited() -> bool {
    unlimited(libc::RLIMIT_DATA)
}

fn unlimited(resource: libc::__rlimit_resource_t) -> bool {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into a local.
    let read = unsafe { libc::getrlimit(resource, &mut limit) } == 0;
    read && limit.rlim_cur == libc::RLIM_INFINITY
}

/// The time on `clock` (zero if the clock is unknown).
///
/// pre: none.
pub fn clock_gettime(clock: libc::clockid_t) -> libc::timespec {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into a local.
    unsafe { libc::clock_gettime(clock, &mut t) };
    t
}

/// Registers `prepare` to run in the forking thread before `fork`, `parent`
/// after it in the parent and `child` in the child (`pthread_atfork`).
///
/// pre: none (the handlers are safe functions).
pub fn atfork(
    prepare: Option<extern "C" fn()>,
    parent: Option<extern "C" fn()>,
    child: Option<extern "C" fn()>,
) {
    let unsafe_fn = |f: extern "C" fn()| f as unsafe extern "C" fn();
    // SAFETY: registers functions of the signature pthread_atfork calls; it
    // stores only the pointers.
    unsafe {
        libc::pthread_atfork(
            prepare.map(unsafe_fn),
            parent.map(unsafe_fn),
            child.map(unsafe_fn),
        )
    };
}

/// Registers `f` to run at `exit`.
///
/// pre: none (`f` is a safe function).
pub fn atexit(f: extern "C" fn()) {
    // SAFETY: registers a function of the signature atexit calls.
    unsafe { libc::atexit(f) };
}

/// An entry of the auxiliary vector (`AT_HWCAP`, `AT_HWCAP2`); 0 if absent.
///
/// pre: none.
pub fn auxval(kind: libc::c_ulong) -> u64 {
    // SAFETY: getauxval has no preconditions.
    unsafe { libc::getauxval(kind) as u64 }
}

/// Ends the process at once with `code`: no exit handlers, no flush
/// (`_exit`, safe in a signal handler).
///
/// pre: none.
pub fn exit_now(code: c_int) -> ! {
    // SAFETY: _exit takes a number and does not return.
    unsafe { libc::_exit(code) }
}

/// This process's id.
///
/// pre: none.
pub fn getpid() -> libc::pid_t {
    // SAFETY: getpid has no preconditions.
    unsafe { libc::getpid() }
}

/// The value of environment variable `name`, if set, without its NUL.
///
/// # Safety
/// pre: nothing changes the variable (`setenv`, `putenv`, `unsetenv`) while
/// the bytes returned are in use: they are the environment's own.
pub unsafe fn getenv(name: &CStr) -> Option<&'static [u8]> {
    // SAFETY: getenv only reads the NUL-terminated name.
    let p = unsafe { libc::getenv(name.as_ptr()) };
    // SAFETY: getenv returns NULL or a NUL-terminated string, which lives as
    // long as the environment entry (pre).
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_bytes())
}

/// Milliseconds on the coarse monotonic clock (the vDSO's, a tick's
/// resolution): what the preload's waits and idle times count in.
///
/// pre: none.
pub fn coarse_ms() -> u64 {
    let t = clock_gettime(libc::CLOCK_MONOTONIC_COARSE);
    t.tv_sec as u64 * 1000 + t.tv_nsec as u64 / 1_000_000
}

/// The calling thread's id.
///
/// pre: none.
pub fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// The C library's text for `e` ("Operation not permitted"), for the one
/// line a failure prints.
///
/// pre: none.
pub fn strerror(e: Errno) -> &'static str {
    // SAFETY: glibc's strerror returns a string of its static table for every
    // errno it knows (the kernel's, which are the ones printed here); it is
    // only read.
    let p = unsafe { libc::strerror(e.0) };
    if p.is_null() {
        return "unknown error";
    }
    // SAFETY: a NUL-terminated string that lives as long as the process.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .unwrap_or("unknown error")
}

/// A copy of descriptor `fd` numbered `min` or above, close-on-exec
/// (`fcntl(F_DUPFD_CLOEXEC)`).
///
/// pre: none (a new descriptor; `fd` stays open).
pub fn dup_above(fd: c_int, min: c_int) -> Result<c_int, Errno> {
    // SAFETY: fcntl duplicates a descriptor into a new one; nothing else
    // changes.
    let r = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, min) };
    if r < 0 {
        return Err(Errno::last());
    }
    Ok(r)
}

/// Writes `buf` to standard error, as much as one `write` takes.
///
/// pre: none.
pub fn write_stderr(buf: &[u8]) {
    // SAFETY: write(2) only reads `buf`; descriptor 2 is the process's, and a
    // closed one is an error.
    let r = unsafe { libc::write(2, buf.as_ptr().cast(), buf.len()) };
    if r >= 0 || Errno::last() != Errno(libc::EBADF) {
        return;
    }
    // A thread of ours with a descriptor table of its own (the handler):
    // the process's standard error, opened anew through the main thread's.
    // SAFETY: a C string; the flags take no mode.
    let fd = unsafe {
        libc::open(
            c"/proc/self/fd/2".as_ptr(),
            libc::O_WRONLY | libc::O_CLOEXEC,
        )
    };
    if fd >= 0 {
        // SAFETY: as above, to the descriptor just opened.
        unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
        direct::close(fd);
    }
}

/// The base page size (4 KiB on x86_64, 4/16/64 KiB on aarch64).
///
/// pre: none.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(v).ok().filter(|&v| v > 0).unwrap_or(4096)
}

/// The address of the next definition of the symbol `name` after this
/// library in the lookup order (`dlsym(RTLD_NEXT)`), if there is one. The
/// C library's `dlsym` may call `malloc` itself: the start-up arena serves it.
///
/// pre: none.
pub fn next_symbol(name: &CStr) -> Option<usize> {
    // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name only reads it.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
    (!p.is_null()).then_some(p as usize)
}
