//! The threads part of the OS layer: starting and joining the preload's
//! threads, counting the process's, a pipe that wakes one, and a thread's
//! credentials (capabilities, securebits), which are per thread; in `sys`'s
//! manner (numbers in, numbers out, no allocation but thread creation).

use std::ffi::c_int;

use super::{clock_gettime, read_file_start, Errno};

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

/// Lets thread `t` end on its own, never joined.
///
/// pre: as [`join`].
pub fn detach(t: libc::pthread_t) {
    // SAFETY: `t` is joinable and not joined (pre).
    unsafe { libc::pthread_detach(t) };
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

/// A thread's capabilities: `capget(2)`'s two `__user_cap_data_struct`s
/// (effective, permitted, inheritable; low then high 32 bits).
pub type Caps = [u32; 6];

const CAP_VERSION_3: u32 = 0x2008_0522;

/// The calling thread's capabilities.
///
/// pre: none.
pub fn caps() -> Result<Caps, Errno> {
    caps_of(0)
}

/// Thread `tid`'s capabilities (0: the calling thread's); an error where
/// it is gone.
///
/// pre: none.
pub fn caps_of(tid: u32) -> Result<Caps, Errno> {
    let mut head = [CAP_VERSION_3, tid];
    let mut data: Caps = [0; 6];
    // SAFETY: capget writes two data structs (six u32) into the local array
    // for the header's version 3; pid 0 is the calling thread, another a
    // thread whose capabilities it reads.
    let r = unsafe { libc::syscall(libc::SYS_capget, head.as_mut_ptr(), data.as_mut_ptr()) };
    if r != 0 {
        return Err(Errno::last());
    }
    Ok(data)
}

/// Sets the calling thread's capabilities (the kernel refuses to raise
/// what it does not permit).
///
/// pre: none.
pub fn set_caps(caps: &Caps) -> Result<(), Errno> {
    let mut head = [CAP_VERSION_3, 0u32];
    // SAFETY: capset reads the header and two data structs from locals.
    let r = unsafe { libc::syscall(libc::SYS_capset, head.as_mut_ptr(), caps.as_ptr()) };
    if r != 0 {
        return Err(Errno::last());
    }
    Ok(())
}

/// The calling thread's securebits (`PR_GET_SECUREBITS`: keep-caps among
/// them), or `None` where they cannot be read.
///
/// pre: none.
pub fn securebits() -> Option<u32> {
    // SAFETY: prctl with this option reads one value of the calling thread.
    let r = unsafe { libc::prctl(libc::PR_GET_SECUREBITS, 0, 0, 0, 0) };
    u32::try_from(r).ok()
}

/// Makes the calling thread's securebits `bits`: the keep-caps bit alone
/// needs no privilege (`PR_SET_KEEPCAPS`), the others `CAP_SETPCAP`.
///
/// pre: none.
pub fn set_securebits(bits: u32) -> Result<(), Errno> {
    if securebits() == Some(bits) {
        return Ok(());
    }
    const KEEP_CAPS: u32 = 1 << 4;
    let only_keep_caps = securebits().is_some_and(|b| (b ^ bits) & !KEEP_CAPS == 0);
    let r = if only_keep_caps {
        let keep = u64::from(bits & KEEP_CAPS != 0);
        // SAFETY: prctl with this option changes a flag of the calling thread.
        unsafe { libc::prctl(libc::PR_SET_KEEPCAPS, keep, 0, 0, 0) }
    } else {
        // SAFETY: prctl with this option changes flags of the calling thread.
        unsafe { libc::prctl(libc::PR_SET_SECUREBITS, u64::from(bits), 0, 0, 0) }
    };
    if r != 0 {
        return Err(Errno::last());
    }
    Ok(())
}
