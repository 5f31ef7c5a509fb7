//! The process: its identity, signals, limits and file-creation mask; other
//! processes' pidfds and user namespaces; extended attributes; the auxiliary
//! vector.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::{check, owned};

/// This process's effective uid.
///
/// pre: none.
pub fn geteuid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// Sets the process's file-creation mask; the previous one.
///
/// pre: none (the mask is the whole process's: a file another thread creates
/// meanwhile gets it too).
pub fn umask(mask: libc::mode_t) -> libc::mode_t {
    // SAFETY: umask has no memory-safety preconditions.
    unsafe { libc::umask(mask) }
}

/// Ignores signal `sig` (`SIG_IGN`) in the whole process.
///
/// pre: none (no handler is installed; SIGKILL and SIGSTOP are EINVAL).
pub fn ignore_signal(sig: libc::c_int) -> io::Result<()> {
    // SAFETY: SIG_IGN runs no code of ours.
    if unsafe { libc::signal(sig, libc::SIG_IGN) } == libc::SIG_ERR {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `PR_SET_DUMPABLE`: whether the process may dump core and other uids may
/// reach it through `/proc/PID` (its descriptors) and ptrace.
///
/// pre: none.
pub fn set_dumpable(on: bool) -> io::Result<()> {
    // SAFETY: PR_SET_DUMPABLE takes an integer and touches no memory of ours.
    check(unsafe { libc::prctl(libc::PR_SET_DUMPABLE, libc::c_ulong::from(on), 0, 0, 0) }).map(drop)
}

/// Blocks `signals` in the calling thread and returns a signalfd (nonblocking,
/// close-on-exec) on which they arrive instead. Threads started afterwards
/// inherit the mask, so call it before any.
///
/// pre: none.
pub fn signals_to_fd(signals: &[libc::c_int]) -> io::Result<OwnedFd> {
    // SAFETY: an all-zero sigset_t is valid storage; sigemptyset initialises it.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: writes the local set.
    unsafe { libc::sigemptyset(&mut set) };
    for &s in signals {
        // SAFETY: writes the local set.
        check(unsafe { libc::sigaddset(&mut set, s) })?;
    }
    // SAFETY: reads the set; no old mask is asked for.
    let r = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if r != 0 {
        return Err(io::Error::from_raw_os_error(r));
    }
    // SAFETY: reads the set; makes a new descriptor, which `owned` takes.
    owned(unsafe { libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK) })
}

/// Raises the soft limit on open descriptors (`RLIMIT_NOFILE`) to the hard one.
///
/// pre: none.
pub fn raise_nofile_limit() -> io::Result<()> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the local.
    check(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) })?;
    if r.rlim_cur < r.rlim_max {
        r.rlim_cur = r.rlim_max;
        // SAFETY: setrlimit reads one rlimit from the local.
        check(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) })?;
    }
    Ok(())
}

/// `lsetxattr(2)`: sets extended attribute `name` of `path` (not following a
/// final symbolic link) to `value`.
///
/// pre: none (a path with a NUL in it is EINVAL).
pub fn lsetxattr(path: &Path, name: &CStr, value: &[u8]) -> io::Result<()> {
    let path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: both strings are NUL-terminated; the value is `value.len()` bytes.
    let r = unsafe {
        libc::lsetxattr(
            path.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    check(r).map(drop)
}

/// `pidfd_open(2)`: a pidfd (close-on-exec) for process `pid`, which may since
/// have exited and its pid been reused: prefer a pidfd the kernel ties to the
/// process itself (`SO_PEERPIDFD`).
///
/// pre: none.
pub fn pidfd_open(pid: libc::pid_t) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open has no memory-safety preconditions.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    owned(fd as libc::c_int)
}

/// The user namespace of the process behind `pidfd` (`PIDFD_GET_USER_NAMESPACE`,
/// Linux 6.11).
///
/// pre: none (a descriptor that is no pidfd, or an older kernel, is an error).
pub fn pidfd_user_namespace(pidfd: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    const PIDFD_GET_USER_NAMESPACE: libc::c_ulong = 0xff09; // _IO(0xFF, 9)
                                                            // SAFETY: the ioctl takes no argument and returns a new descriptor or -1.
    owned(unsafe { libc::ioctl(pidfd.as_raw_fd(), PIDFD_GET_USER_NAMESPACE) })
}

/// The namespace that `ns` (a user namespace) was made in (`NS_GET_PARENT`);
/// EPERM at the caller's own namespace or above it.
///
/// pre: none.
pub fn namespace_parent(ns: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    const NS_GET_PARENT: libc::c_ulong = 0xb702; // _IO(0xb7, 2)
                                                 // SAFETY: the ioctl takes no argument and returns a new descriptor or -1.
    owned(unsafe { libc::ioctl(ns.as_raw_fd(), NS_GET_PARENT) })
}

/// The uid (in the caller's namespace) of who made user namespace `ns`
/// (`NS_GET_OWNER_UID`).
///
/// pre: none.
pub fn namespace_owner(ns: BorrowedFd<'_>) -> io::Result<u32> {
    const NS_GET_OWNER_UID: libc::c_ulong = 0xb704; // _IO(0xb7, 4)
    let mut uid: libc::uid_t = 0;
    // SAFETY: NS_GET_OWNER_UID writes one uid_t into the local.
    check(unsafe { libc::ioctl(ns.as_raw_fd(), NS_GET_OWNER_UID, &mut uid) })?;
    Ok(uid)
}

pub use crate::raw::auxval;

/// Puts signal `sig` back to its default action (a CLI that writes into a
/// closed pipe then ends quietly, as other tools do).
///
/// pre: none.
pub fn default_signal(sig: libc::c_int) -> io::Result<()> {
    // SAFETY: SIG_DFL runs no code of ours.
    if unsafe { libc::signal(sig, libc::SIG_DFL) } == libc::SIG_ERR {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Runs `handler` on signal `sig`.
///
/// # Safety
/// pre: `handler` calls only async-signal-safe functions, and touches only
/// what stays valid until the process exits.
pub unsafe fn on_signal(sig: libc::c_int, handler: extern "C" fn(libc::c_int)) -> io::Result<()> {
    let handler = handler as *const () as libc::sighandler_t;
    // SAFETY: the handler is async-signal-safe (pre).
    if unsafe { libc::signal(sig, handler) } == libc::SIG_ERR {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sends signal `sig` to process `pid`.
///
/// pre: none (the kernel checks the permission; a pid reused by another
/// process of ours is the caller's to rule out).
pub fn kill(pid: libc::pid_t, sig: libc::c_int) -> io::Result<()> {
    // SAFETY: kill takes numbers.
    check(unsafe { libc::kill(pid, sig) }).map(drop)
}

/// Waits for child `pid` and reaps it: its wait status, and the resources it
/// used (its peak RSS, its CPU times).
///
/// pre: `pid` is a child of ours nothing else waits for.
pub fn wait_with_usage(pid: libc::pid_t) -> io::Result<(libc::c_int, libc::rusage)> {
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: fills locals; the child is ours to reap (pre).
    check(unsafe { libc::wait4(pid, &mut status, 0, &mut ru) })?;
    Ok((status, ru))
}

/// The resources this process used so far, all its threads.
///
/// pre: none.
pub fn own_usage() -> libc::rusage {
    // SAFETY: an all-zero rusage is a valid value for getrusage to fill.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: fills a local.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    ru
}

/// A new directory, mode 0700, named `template` with its trailing `XXXXXX`
/// made unique (`mkdtemp`).
///
/// pre: none.
pub fn make_temp_dir(template: &Path) -> io::Result<std::path::PathBuf> {
    let mut bytes = template.as_os_str().as_bytes().to_vec();
    bytes.push(0);
    // SAFETY: a NUL-terminated buffer of ours, which mkdtemp rewrites in place.
    let made = unsafe { libc::mkdtemp(bytes.as_mut_ptr().cast()) };
    if made.is_null() {
        return Err(io::Error::last_os_error());
    }
    bytes.pop();
    Ok(std::path::PathBuf::from(
        <std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(bytes),
    ))
}

/// The uid and gid of user `name`, from the system's user database.
///
/// pre: none.
pub fn user_ids(name: &CStr) -> Option<(u32, u32)> {
    // SAFETY: getpwnam reads the NUL-terminated name; its result (static
    // storage) is read at once, before any other call could reuse it.
    let pw = unsafe { libc::getpwnam(name.as_ptr()) };
    if pw.is_null() {
        return None;
    }
    // SAFETY: not NULL: a passwd entry getpwnam filled.
    let pw = unsafe { &*pw };
    Some((pw.pw_uid, pw.pw_gid))
}

/// Whether the file system holding `path` is mounted `noexec`.
///
/// pre: none.
pub fn on_noexec_mount(path: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: an all-zero statvfs is a valid value for statvfs to fill.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a local to fill.
    let r = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    r == 0 && st.f_flag & libc::ST_NOEXEC != 0
}
