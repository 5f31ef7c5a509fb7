//! Short-lived child processes that work in another cgroup, so the kernel
//! charges what they do (the pages they fault in, the CPU they run) to that
//! cgroup: `prezero serve` populates and scrubs a tenant's memory this way.
//!
//! The child is a fork (`clone3`, no `CLONE_VM`): it has its own copy of the
//! address space, so nothing done to it (the OOM killer choosing it, a
//! cpuset rebinding or migrating its memory) reaches the parent's, and it
//! shares with the parent exactly what is mapped `MAP_SHARED`. A cgroup v2
//! child is created inside its cgroup (`CLONE_INTO_CGROUP`, Linux 5.7): it
//! never runs elsewhere, and no migration takes place (a migration into a
//! cgroup with a cpuset rebinds the migrating process's memory policies).
//! The parent keeps a pidfd, waits with a deadline, and kills a child that
//! overstays (a frozen or throttled cgroup cannot hold the parent).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use super::check;

/// `CLONE_INTO_CGROUP` (bit 33: libc's constant is an `int`, which it overflows).
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// `struct clone_args` of `clone3(2)`, as far as `CLONE_INTO_CGROUP` (v2 of
/// the structure, 88 bytes).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// A child made by [`fork_into`]: killed and reaped on drop if not waited for.
pub struct Child {
    pid: libc::pid_t,
    pidfd: OwnedFd,
    reaped: bool,
}

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChildExit {
    /// Its exit status (`_exit`'s value), or `None` if a signal ended it.
    pub code: Option<i32>,
    /// The CPU it used, user and system (`wait4`'s rusage).
    pub cpu: Duration,
    /// Killed by the parent for overstaying its deadline or a stop.
    pub killed: bool,
}

/// Forks a child that runs `work` and exits with its value: inside the cgroup
/// v2 directory `cgroup` from its first instruction, or (`None`) where the
/// caller is. EBUSY, ENOENT, EOPNOTSUPP and the like are the kernel refusing
/// that cgroup (one with controllers in its subtree, one removed, a kernel
/// before 5.7).
///
/// # Safety
/// `work` runs in a copy of a process that may have other threads: it must
/// make only system calls and plain memory accesses (no allocation, no lock
/// another thread may have held at the fork, no thread-local the C library
/// keeps per thread id) and must not unwind. The memory it changes is the
/// child's own copy, except `MAP_SHARED` mappings, which are the parent's too.
pub unsafe fn fork_into(
    cgroup: Option<BorrowedFd<'_>>,
    work: impl FnOnce() -> i32,
) -> io::Result<Child> {
    let mut pidfd: libc::c_int = -1;
    let mut args = CloneArgs {
        flags: libc::CLONE_PIDFD as u64,
        pidfd: std::ptr::addr_of_mut!(pidfd) as u64,
        ..CloneArgs::default()
    };
    if let Some(dir) = cgroup {
        args.flags |= CLONE_INTO_CGROUP;
        args.cgroup = dir.as_raw_fd() as u64;
    }
    // SAFETY: `args` is a valid clone_args of the size given; no CLONE_VM, so
    // the child returns here on its own copy of this stack, like fork(2).
    let r = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            std::ptr::addr_of!(args),
            std::mem::size_of::<CloneArgs>(),
        )
    };
    if r == 0 {
        // The child: its parent's death (the thread that made it) ends it too.
        // SAFETY: prctl with integer arguments; no memory is passed.
        unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
        let code = work();
        // SAFETY: ends the child's own thread group, running no atexit
        // handler of the parent's.
        unsafe { libc::_exit(code) };
    }
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Child {
        pid: r as libc::pid_t,
        // SAFETY: clone3 wrote a new descriptor that nothing else owns.
        pidfd: unsafe { OwnedFd::from_raw_fd(pidfd) },
        reaped: false,
    })
}

impl Child {
    /// The child's pid.
    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// Waits for the child to end, looking at `stop` every 10 ms; at
    /// `deadline`, or once `stop` says so, it is killed (SIGKILL, which also
    /// ends a frozen task) and waited for.
    pub fn wait(mut self, deadline: Instant, stop: impl Fn() -> bool) -> io::Result<ChildExit> {
        let mut killed = false;
        loop {
            let mut fds = [super::pollfd_in(self.pidfd.as_raw_fd())];
            super::poll(&mut fds, 10)?;
            if fds[0].revents != 0 {
                break;
            }
            if !killed && (Instant::now() >= deadline || stop()) {
                self.kill()?;
                killed = true;
            }
        }
        let mut exit = self.reap()?;
        exit.killed = killed;
        Ok(exit)
    }

    fn kill(&self) -> io::Result<()> {
        // SAFETY: a pidfd of our own child, which is not reaped yet.
        let r = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.pidfd.as_raw_fd(),
                libc::SIGKILL,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        check(r as libc::c_int).map(drop)
    }

    /// `wait4` on the child (exit signal 0: `__WALL`), with its CPU time.
    fn reap(&mut self) -> io::Result<ChildExit> {
        let mut status = 0;
        // SAFETY: rusage is plain data; wait4 writes it.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        loop {
            // SAFETY: our own unreaped child; the pointers are to locals.
            let r = unsafe { libc::wait4(self.pid, &mut status, libc::__WALL, &mut ru) };
            if r == self.pid {
                break;
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        self.reaped = true;
        let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
        Ok(ChildExit {
            code: libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)),
            cpu: tv(ru.ru_utime) + tv(ru.ru_stime),
            killed: false,
        })
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if !self.reaped {
            let _ = self.kill();
            let _ = self.reap();
        }
    }
}

/// Whether the process behind `pidfd` still runs (so the pid it had when the
/// pidfd was made names it still): a signal 0 through the pidfd.
///
/// pre: none.
pub fn pidfd_alive(pidfd: BorrowedFd<'_>) -> bool {
    // SAFETY: signal 0 checks only; no memory is passed.
    let r = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            0,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    r == 0
}

/// `struct open_how` of `openat2(2)` (libc's cannot be built outside it).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// `openat2(2)` of `path` below the directory `dir` (`RESOLVE_BENEATH`: no
/// `..` out of it, no absolute path, no symbolic or magic link), with open
/// `flags` (close-on-exec added): a path from another process stays inside.
///
/// pre: none (`path` with a NUL byte is EINVAL).
pub fn open_beneath(dir: BorrowedFd<'_>, path: &[u8], flags: libc::c_int) -> io::Result<OwnedFd> {
    let path =
        std::ffi::CString::new(path).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let how = OpenHow {
        flags: (flags | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve: libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS,
    };
    // SAFETY: `path` is NUL-terminated and `how` a valid open_how of the size given.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            path.as_ptr(),
            std::ptr::addr_of!(how),
            std::mem::size_of::<OpenHow>(),
        )
    };
    super::owned(fd as libc::c_int)
}

/// Writes all of `bytes` to `fd` with one `write(2)`, allocation-free (for a
/// forked child: a cgroup's `cgroup.procs`).
///
/// pre: none.
pub fn write_all_once(fd: BorrowedFd<'_>, bytes: &[u8]) -> io::Result<()> {
    // SAFETY: the buffer is valid for its length.
    let n = unsafe { libc::write(fd.as_raw_fd(), bytes.as_ptr().cast(), bytes.len()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n as usize != bytes.len() {
        return Err(io::Error::from_raw_os_error(libc::EIO));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `e` is a call this kernel (or an emulator: qemu-user has no
    /// clone3 or openat2) does not have: the test skips, saying so.
    fn missing(e: &std::io::Error, call: &str) -> bool {
        let gone = e.raw_os_error() == Some(libc::ENOSYS);
        if gone {
            prezero_testkit::skip("machine", format!("{call} is not implemented here"));
        }
        gone
    }

    #[test]
    fn a_child_runs_its_work_and_is_reaped_with_its_status() {
        // SAFETY: the work only returns a value.
        let child = match unsafe { fork_into(None, || 7) } {
            Err(e) if missing(&e, "clone3") => return,
            r => r.unwrap(),
        };
        let exit = child
            .wait(Instant::now() + Duration::from_secs(10), || false)
            .unwrap();
        assert_eq!(exit.code, Some(7));
        assert!(!exit.killed);
    }

    #[test]
    fn a_child_that_overstays_is_killed() {
        let work = || {
            // SAFETY: sleep has no preconditions.
            unsafe { libc::sleep(30) };
            0
        };
        // SAFETY: the work only sleeps (a system call).
        let child = match unsafe { fork_into(None, work) } {
            Err(e) if missing(&e, "clone3") => return,
            r => r.unwrap(),
        };
        let t = Instant::now();
        let exit = child
            .wait(Instant::now() + Duration::from_millis(50), || false)
            .unwrap();
        assert!(exit.killed && exit.code.is_none(), "{exit:?}");
        assert!(t.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn a_path_cannot_leave_its_directory() {
        let root = std::fs::File::open("/proc/self").unwrap();
        use std::os::fd::AsFd;
        if let Err(e) = open_beneath(root.as_fd(), b"status", libc::O_RDONLY) {
            if missing(&e, "openat2") {
                return;
            }
        }
        let up = open_beneath(root.as_fd(), b"../self/status", libc::O_RDONLY);
        assert!(up.is_err());
        let abs = open_beneath(root.as_fd(), b"/etc/passwd", libc::O_RDONLY);
        assert!(abs.is_err());
        assert!(open_beneath(root.as_fd(), b"status", libc::O_RDONLY).is_ok());
        assert!(open_beneath(root.as_fd(), b"st\0atus", libc::O_RDONLY).is_err());
    }
}
