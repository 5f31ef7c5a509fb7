//! The threads part of the OS layer: starting and joining the preload's
//! threads, counting the process's, a pipe that wakes one, and what a
//! thread of ours gives up (its privileges) and asks of the scheduler; in
//! `sys`'s manner (numbers in, numbers out, no allocation but thread
//! creation).

use std::ffi::c_int;

use super::{clock_gettime, direct, read_file_start, Errno};

/// Starts a thread named `name` running `f` (`pthread_create` through std,
/// which allocates: its small blocks go to the next allocator): joinable,
/// its `pthread_t` the caller's to join or detach.
///
/// pre: none.
pub fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> Result<libc::pthread_t, Errno> {
    use std::os::unix::thread::JoinHandleExt;
    inject!(Thread, libc::EAGAIN);
    std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .map(JoinHandleExt::into_pthread_t)
        .map_err(|e| Errno(e.raw_os_error().unwrap_or(libc::EAGAIN)))
}

/// Waits until thread `t` of this process has ended (its `pthread_join`),
/// `timeout_ms` at most: false if it runs on (not joined then).
///
/// pre: `t` is a joinable thread of this process not yet joined.
pub fn join(t: libc::pthread_t, timeout_ms: u64) -> bool {
    let mut until = clock_gettime(libc::CLOCK_REALTIME);
    let ns = until.tv_nsec as u64 + (timeout_ms % 1000) * 1_000_000;
    until.tv_sec += (timeout_ms / 1000 + ns / 1_000_000_000) as libc::time_t;
    until.tv_nsec = (ns % 1_000_000_000) as _;
    // SAFETY: `t` is joinable and not joined (pre); the result is not read.
    unsafe { libc::pthread_timedjoin_np(t, std::ptr::null_mut(), &until) == 0 }
}

/// How many threads the kernel counts in this process (`/proc/self/stat`'s
/// twentieth field), `None` if it cannot be read.
///
/// pre: none.
pub fn threads_in_process() -> Option<usize> {
    let mut buf = [0u8; 1024];
    let n = read_file_start(c"/proc/self/stat", &mut buf).ok()?;
    // After the command's closing parenthesis (the name may hold any byte):
    // the state, the third field.
    let rest = &buf[buf[..n].iter().rposition(|&b| b == b')')? + 2..n];
    let field = rest.split(|&b| b == b' ').nth(17)?;
    std::str::from_utf8(field).ok()?.parse().ok()
}

/// A pipe, both ends close-on-exec and non-blocking: (read, write).
///
/// pre: none.
pub fn pipe() -> Result<(c_int, c_int), Errno> {
    let mut fds = [-1; 2];
    // SAFETY: pipe2 writes the two descriptors into the local array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        return Err(Errno::last());
    }
    Ok((fds[0], fds[1]))
}

/// Writes one byte to `fd` (a pipe's write end).
///
/// pre: none.
pub fn write_byte(fd: c_int) -> Result<(), Errno> {
    // SAFETY: write reads one byte of the local.
    if unsafe { libc::write(fd, [1u8].as_ptr().cast(), 1) } != 1 {
        return Err(Errno::last());
    }
    Ok(())
}

/// Reads what waits in `fd` (a non-blocking pipe's read end), and drops it.
///
/// pre: none.
pub fn drain(fd: c_int) {
    let mut buf = [0u8; 64];
    // SAFETY: read writes at most the local buffer's bytes.
    while unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) } > 0 {}
}

/// Sleeps `ms` milliseconds (a signal may end it early).
///
/// pre: none.
pub fn sleep_ms(ms: u64) {
    let t = libc::timespec {
        tv_sec: (ms / 1000) as libc::time_t,
        tv_nsec: ((ms % 1000) * 1_000_000) as _,
    };
    // SAFETY: nanosleep reads the local timespec; no remainder is asked for.
    unsafe { libc::nanosleep(&t, std::ptr::null_mut()) };
}

/// Gives the calling thread a descriptor table of its own that holds only
/// `keep` (at their numbers): what the program closes from then on, by any
/// route, it does not close for this thread, and this thread holds none of
/// the program's files open. Where the kernel refuses, the thread keeps the
/// process's table.
///
/// pre: the calling thread is one of this crate's own, and uses no other
/// descriptor after.
pub fn keep_descriptors_only(keep: &[c_int]) {
    // Directly: the C library's `unshare` is ours (`entry/`).
    // SAFETY: unshare takes a number.
    let r = unsafe { direct::syscall6(libc::SYS_unshare, [libc::CLONE_FILES as _, 0, 0, 0, 0, 0]) };
    if r != 0 {
        return;
    }
    OWN_TABLE.set(true);
    let mut sorted = [-1; 4];
    let n = keep.len().min(sorted.len());
    sorted[..n].copy_from_slice(&keep[..n]);
    sorted[..n].sort_unstable();
    let mut from: c_int = 0;
    for &k in sorted[..n].iter().filter(|&&k| k >= 0) {
        if k > from {
            close_range(from, k - 1);
        }
        from = from.max(k + 1);
    }
    close_range(from, c_int::MAX);
}

thread_local! {
    /// The calling thread has a descriptor table of its own.
    static OWN_TABLE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the calling thread has a descriptor table of its own
/// ([`keep_descriptors_only`]): closing one of its descriptors does not
/// close the program's.
///
/// pre: none.
pub fn own_descriptors() -> bool {
    OWN_TABLE.get()
}

/// Closes the calling thread's descriptors `[lo, hi]`, directly.
fn close_range(lo: c_int, hi: c_int) {
    // SAFETY: close_range takes numbers; the caller's table is its own.
    let _ = unsafe { direct::syscall6(libc::SYS_close_range, [lo as _, hi as _, 0, 0, 0, 0]) };
}

/// Gives up every privilege the calling thread holds: its bounding set
/// (while it still has `CAP_SETPCAP`, which that needs), its ambient,
/// inheritable, permitted and effective sets, and any new one an `execve`
/// could grant (`no_new_privs`). Each step is a direct system call (the C
/// library's `prctl` and `syscall` are ours: `entry/`); one the kernel
/// refuses leaves that part as it was.
///
/// pre: the calling thread is one of this crate's own.
pub fn drop_privileges() {
    for cap in 0..64 {
        match direct::prctl(libc::PR_CAPBSET_READ, cap) {
            Ok(1) => {
                let _ = direct::prctl(libc::PR_CAPBSET_DROP, cap);
            }
            Ok(_) => {}
            // Past the last capability this kernel knows.
            Err(_) => break,
        }
    }
    let _ = direct::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL as _);
    let head = [CAP_VERSION_3, 0u32];
    let none = [0u32; 6];
    // SAFETY: capset reads the header and two data structs (six u32) from
    // the locals.
    let _ = unsafe {
        direct::syscall6(
            libc::SYS_capset,
            [head.as_ptr() as _, none.as_ptr() as _, 0, 0, 0, 0],
        )
    };
    let _ = direct::prctl(libc::PR_SET_NO_NEW_PRIVS, 1);
}

const CAP_VERSION_3: u32 = 0x2008_0522;

/// `struct sched_attr`, as `sched_setattr(2)` takes it.
#[repr(C)]
#[derive(Default)]
struct SchedAttr {
    size: u32,
    policy: u32,
    flags: u64,
    nice: i32,
    priority: u32,
    runtime: u64,
    deadline: u64,
    period: u64,
}

/// The slice the calling thread asks for (`sched_runtime`, Linux 6.12's
/// EEVDF): short, so that a thread of ours woken (to end, at an exit) runs
/// within a fraction of a millisecond even beside busy ones.
const SLICE_NS: u64 = 100_000;

/// The calling thread at the ordinary policy with a short slice: a thread
/// of ours never starves (an exit waits for each thread to run once) and
/// never takes a real-time priority the program's thread had. Where the
/// kernel knows no slice (before 6.12), the policy alone.
///
/// pre: the calling thread is one of this crate's own.
pub fn short_slice() {
    let mut attr = SchedAttr::default();
    let size = std::mem::size_of::<SchedAttr>() as u32;
    // SAFETY: sched_getattr writes at most `size` bytes into the local.
    let got = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            0,
            &mut attr as *mut SchedAttr,
            size,
            0,
        )
    };
    if got != 0 {
        return;
    }
    attr.size = size;
    attr.flags = 0;
    if !matches!(attr.policy as i32, libc::SCHED_OTHER | libc::SCHED_BATCH) {
        attr.policy = libc::SCHED_OTHER as u32;
        attr.priority = 0;
        attr.nice = attr.nice.max(0);
    }
    attr.runtime = SLICE_NS;
    // SAFETY: sched_setattr reads the local.
    let set = |a: &SchedAttr| unsafe { libc::syscall(libc::SYS_sched_setattr, 0, a, 0) };
    if set(&attr) != 0 {
        attr.runtime = 0;
        let _ = set(&attr);
    }
}

/// The calling thread's CPU time (ns).
///
/// pre: none.
pub fn thread_cpu_ns() -> u64 {
    let t = clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}
