//! The lazy mode steps aside and comes back. It is suspended when its
//! threads end: the program is about to change who it is (a stop around
//! the call, `crate::threads`), it may have changed by a call we could not
//! see (they retire), or it is idle with the reserve empty (the handler
//! would only copy zeroes, as slow as the kernel's own fault). Suspended,
//! nothing is registered: every range it served, the cache's and the
//! program's mappings, is unregistered (which wakes their faults; the
//! kernel serves them from then on) and its table forgotten. The program's
//! next large block or mapping resumes it, from the program's own thread
//! (`pause.rs`): the handler and workers start again, and the cache's range
//! is registered again; mappings made before stay the kernel's.
//!
//! The handler serves faults until the hand-over is done: a thread waiting
//! on one may hold `POP`, which the hand-over needs.

use std::sync::atomic::Ordering;

use super::{fd, uffd, PopGuard, ON, OWNER, STARTING, STATE, SUSPENDED};
use crate::sys;

/// Hands everything registered with `fd` to the kernel and forgets the
/// table (`POP` held); where the lazy mode served, it is suspended.
pub fn hand_over(g: &mut PopGuard, fd: i32) {
    for from in [ON, STARTING] {
        let _ = STATE.compare_exchange(from, SUSPENDED, Ordering::AcqRel, Ordering::Acquire);
    }
    if let Some((base, len)) = crate::cache::range() {
        let _ = uffd::unregister(fd, base, len);
    }
    let t = g.table();
    for i in 0..t.len() {
        let r = t.get(i);
        let _ = uffd::unregister(fd, r.start, r.end - r.start);
    }
    t.clear();
}

/// A program's thread, in a stop before the handler goes: hands over.
pub fn leaving() {
    let state = STATE.load(Ordering::Acquire);
    if matches!(state, ON | STARTING) && OWNER.load(Ordering::Relaxed) == sys::getpid() {
        hand_over(&mut PopGuard::program(), fd());
    }
}
