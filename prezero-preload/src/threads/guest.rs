//! A thread of ours is a guest in the program's process: it holds no
//! privilege and lacks no restriction that the program's main thread has.
//!
//! * Started only from a thread whose identity, capabilities aside, is the
//!   main thread's ([`may_spawn`]): it inherits the ids, groups, seccomp
//!   filters, Landlock domain and namespaces from its creator.
//! * Its first act ([`enter`]) gives up every capability (bounding and
//!   ambient sets too) and sets `no_new_privs`; it never needs one (its
//!   descriptors were opened before, by the program's thread).
//! * Every [`CHECK_MS`] one of ours reads the main thread's identity and
//!   compares its own ([`sync`]): where ours is wider (the program changed
//!   who it is by a call we cannot see, a system call made inline), every
//!   thread of ours ends ([`retire`]), giving back what it held; the
//!   program's next call that needs one starts it again, from its own
//!   thread, with what it is then.
//!
//! A change we can see (glibc's `set*id`, `syscall(2)`, `prctl`,
//! `unshare`...) stops our threads before it (`stop.rs`); the program's
//! next need starts them again. Where `/proc` cannot be read, nothing can tell: no thread of
//! ours starts.

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::sys::{self, Identity};

/// How often the main thread's identity is compared with ours.
pub const CHECK_MS: u64 = 30;

/// Bumped when every thread of ours must end; a thread started at an older
/// one has retired.
static GENERATION: AtomicU32 = AtomicU32::new(0);
/// When (coarse ms) the last comparison was made.
static CHECKED: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// This thread is one of ours, started at this generation (`u32::MAX`:
    /// a program's thread).
    static STARTED_AT: Cell<u32> = const { Cell::new(u32::MAX) };
    /// Who this thread of ours is, read after it gave up its privileges.
    static OWN: Cell<Option<Identity>> = const { Cell::new(None) };
}

/// The generation threads started now belong to.
pub(super) fn generation() -> u32 {
    GENERATION.load(Ordering::Acquire)
}

/// Whether the calling thread is one of ours.
pub(super) fn is_ours() -> bool {
    STARTED_AT.get() != u32::MAX
}

/// Whether the calling thread (one of ours) must end: its generation
/// retired.
pub(super) fn retired() -> bool {
    let at = STARTED_AT.get();
    at != u32::MAX && at != GENERATION.load(Ordering::Acquire)
}

/// Every thread of ours ends, each giving back what it holds, woken now
/// (none waits longer than [`CHECK_MS`] anyway).
pub(super) fn retire() {
    GENERATION.fetch_add(1, Ordering::AcqRel);
    super::wake_all();
}

/// Whether a thread started from the calling one would be no wider than
/// the main thread: true from a thread of ours not retired; from a
/// program's thread, if its identity, without capabilities and with
/// `no_new_privs`, is no wider than the main thread's.
pub(super) fn may_spawn() -> bool {
    if is_ours() {
        return !retired();
    }
    let (Some(me), Some(main)) = (Identity::of(0), Identity::of(sys::getpid() as u32)) else {
        return false;
    };
    // The same filters as the main thread's, not more: a TSYNC filter of
    // another thread's fails on a thread whose filters are not its own's
    // ancestors.
    me.seccomp == main.seccomp && as_ours(me).wider_than(&main).is_none()
}

/// `id` as a thread of ours has it after [`enter`]: no capability (but the
/// bounding set where dropping from it needs a capability `id` has not),
/// `no_new_privs`.
fn as_ours(id: Identity) -> Identity {
    const CAP_SETPCAP: u64 = 1 << 8;
    let bounding = if id.caps[2] & CAP_SETPCAP != 0 {
        0
    } else {
        id.caps[3]
    };
    Identity {
        caps: [0, 0, 0, bounding, 0],
        no_new_privs: true,
        ..id
    }
}

/// A thread of ours, first: gives up every
/// privilege (and says so on `dropped`, which its starter waits on), takes
/// a short slice (a wake, an exit, is served soon), and checks that it is
/// no wider than the main thread (else every thread of ours ends).
pub(super) fn enter(generation: u32, dropped: &AtomicU32) {
    STARTED_AT.set(generation);
    sys::drop_privileges();
    dropped.fetch_add(1, Ordering::AcqRel);
    sys::futex_wake(dropped);
    sys::short_slice();
    let own = Identity::of(0);
    OWN.set(own);
    let main = Identity::of(sys::getpid() as u32);
    match (own, main) {
        (Some(own), Some(main)) if own.wider_than(&main).is_none() => {}
        _ => retire(),
    }
}

/// The starter of a thread of ours: waits until `dropped` has passed
/// `before` (the thread gave up its privileges), 2 s at most (a thread the
/// kernel does not run for that long is caught by the next look instead).
pub(super) fn wait_dropped(dropped: &AtomicU32, before: u32) {
    let until = sys::coarse_ms() + 2000;
    loop {
        let now = dropped.load(Ordering::Acquire);
        let t = sys::coarse_ms();
        if now != before || t >= until {
            return;
        }
        sys::futex_wait(dropped, now, (until - t).min(100));
    }
}

/// A thread of ours, at the top of its loop: every [`CHECK_MS`] one of
/// them compares its identity with the main thread's, and where it is
/// wider, every thread of ours ends.
pub(super) fn sync() {
    let now = sys::coarse_ms();
    let last = CHECKED.load(Ordering::Relaxed);
    if now < last + CHECK_MS
        || CHECKED
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
    {
        return;
    }
    let wider = match (OWN.get(), Identity::of(sys::getpid() as u32)) {
        (Some(own), Some(main)) => own.wider_than(&main).is_some(),
        _ => true,
    };
    if wider && !retired() {
        retire();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ours_hold_no_capability_and_take_no_new_privilege() {
        let root = Identity {
            caps: [0, !0, !0, !0, 0],
            ..Identity::default()
        };
        let ours = as_ours(root);
        assert_eq!(ours.caps, [0; 5]);
        assert!(ours.no_new_privs);
        assert_eq!(ours.wider_than(&root), None);
        // Without CAP_SETPCAP the bounding set stays as it was.
        let plain = Identity {
            caps: [0, 0, 0, 0x3ff, 0],
            ..Identity::default()
        };
        assert_eq!(as_ours(plain).caps[3], 0x3ff);
    }

    #[test]
    fn a_program_thread_is_not_ours() {
        assert!(!is_ours());
        assert!(!retired());
    }
}
