//! Around a call that changes who the program is (`set*id`, a seccomp
//! filter, a Landlock ruleset, the bounding set, a namespace), or one the
//! kernel allows only a single-threaded process (`unshare` or `setns` of a
//! user, mount or time namespace, `unshare` of its memory): our threads
//! stop and are joined, then the call runs. They are not started again
//! here: the program's next call that needs one starts it, from its own
//! thread, which it takes after (a program that calls `seteuid` in a loop
//! pays the stop once). The others go first, then the handler, which serves
//! their faults on registered memory until they are gone, and before it
//! goes hands what it serves to the kernel (its owner's `leaving` hook): a
//! program thread faulting there meanwhile, in the kernel, would otherwise
//! never answer glibc's `set*id` signal.
//!
//! A seccomp filter is more: what it allows a thread to call cannot be
//! known, so no thread of ours starts again in the process, and nothing of
//! ours makes a system call after the filter is entered.
//!
//! A thread that does not end within [`JOIN_MS`] (held up elsewhere) is
//! left running. A call every thread must repeat (glibc's `set*id`) then
//! does not run: it would abort the program on ours; the caller gets
//! `EAGAIN`, as from a `setuid` the kernel refused for the moment.

use std::sync::atomic::{AtomicU8, Ordering};

use super::{
    guest, hooks, ours, wake, wake_all, IdChange, Owner, Paused, Slot, HANDLER, JOINABLE, NEVER,
};
use crate::sys::{self, Identity};

/// How long a stop waits for a thread of ours to end.
const JOIN_MS: u64 = 2000;

/// What a stop asks: nothing, the threads other than the handler to
/// return, or the handler too.
const RUN: u8 = 0;
const OTHERS: u8 = 1;
const ALL: u8 = 2;
static STOPPING: AtomicU8 = AtomicU8::new(RUN);

/// Every owner, the handler first.
const OWNERS: [Owner; 4] = [
    Owner::Handler,
    Owner::Workers,
    Owner::Cache,
    Owner::Pressure,
];

/// Whether a stop asks a thread of `owner`'s to return now.
pub fn stopping(owner: Owner) -> bool {
    let level = if matches!(owner, Owner::Handler) {
        ALL
    } else {
        OTHERS
    };
    STOPPING.load(Ordering::SeqCst) >= level
}

/// Whose identity a call changes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Every thread's: glibc's `set*id` (each thread repeats it), or a call
    /// the kernel allows only a single-threaded process.
    Process,
    /// The calling thread's alone (a system call made directly, `prctl`):
    /// ours follow only the main thread's.
    Thread,
    /// A seccomp filter entered, by any thread, with `TSYNC` or not.
    Seccomp,
}

/// Runs `call`, which changes who the program is (`scope`), with none of
/// our threads running; `refused` instead where one of ours would still be
/// there for a `Process` call. A `set*id` call (`ids`) that ours can repeat
/// as they are runs with them (glibc makes them repeat it).
pub fn changing<T>(
    scope: Scope,
    ids: Option<IdChange>,
    call: impl FnOnce() -> T,
    refused: impl FnOnce() -> T,
) -> T {
    let main = sys::gettid() == sys::getpid() as u32;
    if guest::is_ours() || (scope == Scope::Thread && !main) {
        return call();
    }
    // Taken before `ours` is looked at: a first thread being started now
    // finishes first, and is stopped.
    let p = Paused::take();
    let repeat = ids.is_some_and(|c| ours_can_repeat(&c));
    let left = ours() && !repeat && !stop_all();
    if scope == Scope::Seccomp {
        // Nothing of ours after the filter: the lock and the signal mask go
        // first, and no thread of ours starts again.
        NEVER.store(true, Ordering::Release);
        crate::sys::forbid_numa_calls();
        drop(p);
        return call();
    }
    if left && scope == Scope::Process {
        return refused();
    }
    let r = call();
    // Letting go of the lock may set errno; the call's is the program's.
    let errno = sys::Errno::last();
    drop(p);
    sys::set_errno(errno.0);
    r
}

/// Whether every thread of ours can repeat the `set*id` call `c` without a
/// capability (their ids are one's: those it was started with, as every
/// glibc `set*id` changed them since).
fn ours_can_repeat(c: &IdChange) -> bool {
    let tid = JOINABLE.iter().chain([&HANDLER]).find_map(Slot::running);
    tid.and_then(Identity::of)
        .is_some_and(|id| c.alike_for(&id.ids))
}

/// Stops and joins every thread of ours (the caller holds `PAUSE`): false
/// if one is still there after [`JOIN_MS`].
fn stop_all() -> bool {
    let slots = || JOINABLE.iter().chain([&HANDLER]);
    // Ended on their own (or none): joined at once, nothing to stop.
    let running = slots().filter(|s| !s.join(0)).count();
    if running == 0 {
        return true;
    }
    let before = sys::threads_in_process();
    STOPPING.store(OTHERS, Ordering::SeqCst);
    wake_all();
    let mut left = JOINABLE.iter().filter(|s| !s.join(JOIN_MS)).count();
    for h in OWNERS.iter().filter_map(|&o| hooks(o)) {
        if let Some(f) = h.leaving {
            f();
        }
    }
    STOPPING.store(ALL, Ordering::SeqCst);
    // The lazy mode's threads, as `wake_all` wakes them.
    wake(&[Owner::Workers, Owner::Handler]);
    left += usize::from(!HANDLER.join(JOIN_MS));
    STOPPING.store(RUN, Ordering::SeqCst);
    for h in OWNERS.iter().filter_map(|&o| hooks(o)) {
        if let Some(f) = h.joined {
            f();
        }
    }
    if let Some(n) = before {
        wait_gone(n.saturating_sub(running - left));
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
}
