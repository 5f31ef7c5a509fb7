//! Thread ids and scheduling policy and nice values: the calls with which
//! [`ScrubPriority`](crate::pool::ScrubPriority) puts the pool's scrubbers and
//! the service's worker at idle priority, and lifts them from it.

use std::io;

/// A thread's kernel id (0 names the calling thread where a call takes one).
pub type Tid = libc::pid_t;

/// The calling thread's kernel id.
///
/// pre: none.
pub fn gettid() -> Tid {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

/// Lifts thread `tid` (0: the calling thread) to the normal policy at nice 0.
/// Both are tried; the first refusal is the error (without `CAP_SYS_NICE` a
/// thread cannot leave `SCHED_IDLE` or lower its nice value).
///
/// pre: none (a tid that names no thread of ours is refused: ESRCH, or EPERM
/// for another user's).
pub fn set_normal_priority(tid: Tid) -> io::Result<()> {
    let policy = set_sched_normal(tid);
    let nice = set_nice(tid, 0);
    policy.and(nice)
}

/// Puts thread `tid` back under the normal policy, leaving its nice value (e.g.
/// a `SCHED_IDLE` scrubber that must finish promptly on shutdown even when every
/// core is busy).
///
/// pre: none (a tid that names no thread of ours is refused: ESRCH, or EPERM
/// for another user's).
pub fn set_sched_normal(tid: Tid) -> io::Result<()> {
    set_policy(tid, libc::SCHED_OTHER)
}

/// Sets thread `tid`'s scheduling policy (one without a static priority).
///
/// pre: `policy` is `SCHED_OTHER`, `SCHED_BATCH` or `SCHED_IDLE`.
pub fn set_policy(tid: Tid, policy: libc::c_int) -> io::Result<()> {
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
/// pre: none (a tid that names no thread of ours is refused: ESRCH, or EPERM
/// for another user's).
pub fn set_nice(tid: Tid, nice: libc::c_int) -> io::Result<()> {
    let tid = if tid == 0 { gettid() } else { tid };
    // SAFETY: setpriority has no memory-safety preconditions.
    let r = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `clock_gettime` of `clock` in nanoseconds (the raw layer's reading).
fn clock_ns(clock: libc::clockid_t) -> u64 {
    let ts = crate::raw::clock_gettime(clock);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Nanoseconds of `CLOCK_MONOTONIC`: the same clock in a forked child as in
/// its parent (what `Instant` reads, as a number that can be shared).
///
/// pre: none.
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// The CPU time the calling thread has used.
///
/// pre: none.
pub fn thread_cpu_time() -> std::time::Duration {
    std::time::Duration::from_nanos(clock_ns(libc::CLOCK_THREAD_CPUTIME_ID))
}
