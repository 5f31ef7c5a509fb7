//! Around a call that changes who the program is (`set*id`, a seccomp
//! filter, a Landlock ruleset, the bounding set, a namespace), or one the
//! kernel allows only a single-threaded process (`unshare` or `setns` of a
//! user, mount or time namespace, `unshare` of its memory): our threads
//! stop, are joined, the call runs, and they start again after it from the
//! calling thread, which they take after. The others go first, then the
//! handler, which serves their faults on registered memory until they are
//! gone, and before it goes hands what it serves to the kernel (its
//! owner's `leaving` hook): a program thread faulting there meanwhile, in
//! the kernel, would otherwise never answer glibc's `set*id` signal.
//!
//! A thread that does not end within [`JOIN_MS`] (held up elsewhere) is
//! left running. A call every thread must repeat (glibc's `set*id`) then
//! does not run: it would abort the program on ours; the caller gets
//! `EAGAIN`, as from a `setuid` the kernel refused for the moment.

use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};

use super::{guest, hooks, ours, wake, wake_all, Owner, Paused, HANDLER, JOINABLE};
use crate::sys;

/// How long a stop waits for a thread of ours to end.
const JOIN_MS: u64 = 2000;

/// What a stop asks: nothing, the threads other than the handler to
/// return, or the handler too.
const RUN: u8 = 0;
const OTHERS: u8 = 1;
const ALL: u8 = 2;
static STOPPING: AtomicU8 = AtomicU8::new(RUN);
/// The owners whose threads returned for the stop, to start again.
static STOPPED: AtomicU32 = AtomicU32::new(0);

/// Every owner, in the order its threads start again after a stop: the
/// handler first.
const OWNERS: [Owner; 4] = [
    Owner::Handler,
    Owner::Workers,
    Owner::Cache,
    Owner::Pressure,
];

/// Whether a stop asks a thread of `owner`'s to return now; if so it is
/// counted, to be started again.
pub fn stopping(owner: Owner) -> bool {
    let level = if matches!(owner, Owner::Handler) {
        ALL
    } else {
        OTHERS
    };
    let stop = STOPPING.load(Ordering::SeqCst) >= level;
    if stop {
        STOPPED.fetch_or(owner as u32, Ordering::AcqRel);
    }
    stop
}

/// Whose identity a call changes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Every thread's: glibc's `set*id` (each thread repeats it), or a call
    /// the kernel allows only a single-threaded process.
    Process,
    /// The calling thread's alone (a system call made directly, `prctl`,
    /// `seccomp`): ours follow only the main thread's.
    Thread,
}

/// Runs `call`, which changes who the program is (`scope`), with none of
/// our threads running; `refused` instead where one of ours would still be
/// there for a `Process` call.
pub fn changing<T>(scope: Scope, call: impl FnOnce() -> T, refused: impl FnOnce() -> T) -> T {
    let main = sys::gettid() == sys::getpid() as u32;
    if !ours() || guest::is_ours() || (scope == Scope::Thread && !main) {
        return call();
    }
    let _p = Paused::take();
    if !stop_all() && scope == Scope::Process {
        return refused();
    }
    let r = call();
    // Starting threads again may set errno; the call's is the program's.
    let errno = sys::Errno::last();
    let stopped = STOPPED.swap(0, Ordering::AcqRel);
    for &o in &OWNERS {
        if stopped & o as u32 != 0 {
            // Registered: a thread of its returned for the stop.
            if let Some(h) = hooks(o) {
                (h.restart)();
            }
        }
    }
    sys::set_errno(errno.0);
    r
}

/// Stops and joins every thread of ours (the caller holds `PAUSE`): false
/// if one is still there after [`JOIN_MS`].
fn stop_all() -> bool {
    let before = sys::threads_in_process();
    let mut joined = 0;
    let mut left = 0;
    STOPPING.store(OTHERS, Ordering::SeqCst);
    wake_all();
    for s in &JOINABLE {
        let t = s.load(Ordering::Acquire);
        if t == 0 {
            continue;
        }
        if sys::join(t as libc::pthread_t, JOIN_MS) {
            s.store(0, Ordering::Release);
            joined += 1;
        } else {
            left += 1;
        }
    }
    let handler = HANDLER.load(Ordering::Acquire);
    if handler != 0 {
        for h in OWNERS.iter().filter_map(|&o| hooks(o)) {
            if let Some(f) = h.leaving {
                f();
            }
        }
    }
    STOPPING.store(ALL, Ordering::SeqCst);
    if handler != 0 {
        // The lazy mode's threads, as `wake_all` wakes them.
        wake(&[Owner::Workers, Owner::Handler]);
        if sys::join(handler as libc::pthread_t, JOIN_MS) {
            HANDLER.store(0, Ordering::Release);
            joined += 1;
        } else {
            left += 1;
        }
    }
    STOPPING.store(RUN, Ordering::SeqCst);
    for h in OWNERS.iter().filter_map(|&o| hooks(o)) {
        if let Some(f) = h.joined {
            f();
        }
    }
    if let Some(n) = before {
        wait_gone(n.saturating_sub(joined));
    }
    left == 0
}

/// A thread joined has ended for glibc, and may still be leaving the
/// kernel's thread group, which then refuses a user namespace: waits (20
/// ms at most) until the kernel counts `left` threads or fewer.
fn wait_gone(left: usize) {
    for _ in 0..20 {
        if sys::threads_in_process().is_none_or(|n| n <= left) {
            return;
        }
        sys::sleep_ms(1);
    }
}

/// Whether `flags` of `unshare` ask what only a single-threaded process may
/// have: a user namespace (which implies the thread group), its signal
/// handlers or its memory.
pub fn unshare_needs_one_thread(flags: libc::c_int) -> bool {
    let one = libc::CLONE_NEWUSER | libc::CLONE_THREAD | libc::CLONE_SIGHAND | libc::CLONE_VM;
    flags & one != 0
}

/// Whether `setns` of namespace type `kind` may need a single-threaded
/// process: a user, mount or time namespace, or any (0: the descriptor's
/// own type, which may be one of them; a pidfd's set of types).
pub fn setns_needs_one_thread(kind: libc::c_int) -> bool {
    let one = libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWTIME;
    kind == 0 || kind & one != 0
}

/// A forked child: no stop under way.
pub(super) fn in_child() {
    STOPPING.store(RUN, Ordering::Relaxed);
    STOPPED.store(0, Ordering::Relaxed);
}
