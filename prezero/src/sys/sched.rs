//! Thread ids and scheduling priority: the one place the pool's scrubbers and
//! the service's worker are put at, and lifted from, idle priority.

use std::io;

use crate::pool::ScrubPriority;

/// A thread's kernel id (0 names the calling thread where a call takes one).
pub type Tid = libc::pid_t;

/// The calling thread's kernel id.
///
/// pre: none.
pub fn gettid() -> Tid {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

/// Puts thread `tid` (0: the calling thread) at `priority`: `Idle` is
/// `SCHED_IDLE`, or nice 19 where the policy is refused; `Nice19` is nice 19;
/// `Normal` changes nothing. Returns the scheduling in force, as the pool's
/// stats report it.
///
/// pre: none (a tid that names no thread of ours is refused: ESRCH, or EPERM
/// for another user's).
pub fn set_priority(tid: Tid, priority: ScrubPriority) -> &'static str {
    match priority {
        ScrubPriority::Idle if set_policy(tid, libc::SCHED_IDLE).is_ok() => "SCHED_IDLE",
        ScrubPriority::Idle if set_nice(tid, 19).is_ok() => "nice 19 (SCHED_IDLE refused)",
        ScrubPriority::Idle => "normal (SCHED_IDLE and nice 19 refused)",
        ScrubPriority::Nice19 if set_nice(tid, 19).is_ok() => "nice 19",
        ScrubPriority::Nice19 => "normal (nice 19 refused)",
        ScrubPriority::Normal => "normal",
    }
}

/// Lifts thread `tid` (0: the calling thread) to the normal policy at nice 0.
/// Both are tried; the first refusal is the error (without `CAP_SYS_NICE` a
/// thread cannot leave `SCHED_IDLE` or lower its nice value).
///
/// pre: none (as [`set_priority`]).
pub fn set_normal_priority(tid: Tid) -> io::Result<()> {
    let policy = set_sched_normal(tid);
    let nice = set_nice(tid, 0);
    policy.and(nice)
}

/// Puts thread `tid` back under the normal policy, leaving its nice value (e.g.
/// a `SCHED_IDLE` scrubber that must finish promptly on shutdown even when every
/// core is busy).
///
/// pre: none (as [`set_priority`]).
pub fn set_sched_normal(tid: Tid) -> io::Result<()> {
    set_policy(tid, libc::SCHED_OTHER)
}

/// Sets thread `tid`'s scheduling policy (one without a static priority).
///
/// pre: `policy` is `SCHED_OTHER`, `SCHED_BATCH` or `SCHED_IDLE`.
fn set_policy(tid: Tid, policy: libc::c_int) -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid sched_param; the kernel validates the tid.
    if unsafe { libc::sched_setscheduler(tid, policy, &param) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sets thread `tid`'s nice value (0: the calling thread; Linux keeps nice per
/// thread). Lowering it needs `CAP_SYS_NICE`.
///
/// pre: none (as [`set_priority`]).
fn set_nice(tid: Tid, nice: libc::c_int) -> io::Result<()> {
    let tid = if tid == 0 { gettid() } else { tid };
    // SAFETY: setpriority has no memory-safety preconditions.
    let r = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
