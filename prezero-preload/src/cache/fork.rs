//! Fork: the lock is taken around `fork` (`pthread_atfork`), so the child
//! starts with consistent blocks; it has no scrubber thread (one starts at
//! its first large `free`), and what the parent's was doing is Dirty again.

use std::sync::atomic::Ordering;

use super::lock::PROGRAM;
use super::{SHARED, STARTED, WAITING};
use crate::stats;

/// Before `fork`, in the forking thread: takes the lock, so the child's
/// blocks are consistent.
pub(super) extern "C" fn before_fork() {
    if STARTED.load(Ordering::Acquire) {
        // The clearing kernels' choice is made once, lazily, under a
        // `OnceLock`: forked while another thread makes it, the child would
        // wait for it forever. Made here, before the fork, it is done.
        let _ = prezero::active_size_classes();
        // `after_fork`/`in_child` unlock it.
        SHARED.mutex.lock(PROGRAM);
    }
}

/// After `fork`, in the parent: gives the lock back.
pub(super) extern "C" fn after_fork() {
    if STARTED.load(Ordering::Acquire) {
        // SAFETY: locked by before_fork in this thread.
        unsafe { SHARED.mutex.unlock() };
    }
}

/// After `fork`, in the child: starts its cache anew, without a scrubber.
pub(super) extern "C" fn in_child() {
    crate::pressure::in_child();
    if !STARTED.load(Ordering::Acquire) {
        return;
    }
    // The parent's sleepers do not exist here.
    SHARED.event.reset();
    // SAFETY: the child's only thread holds the lock (before_fork), under
    // which the cache is ours alone.
    let c = unsafe { &mut *SHARED.cache.get() }
        .as_mut()
        .expect("started");
    c.scrubber = false;
    // A prefill the parent's scrubber had not begun is the parent's: the
    // child is not the program `PREZERO_PREFILL_PID` names.
    c.prefill = 0;
    for lane in c.lanes() {
        lane.spare = 0;
        lane.blocks.abandon_busy();
    }
    // The parent's waiting threads do not exist here.
    WAITING.store(0, Ordering::Relaxed);
    stats::CACHE.reset();
    // SAFETY: locked by before_fork, in the thread the child began as.
    unsafe { SHARED.mutex.unlock() };
}
