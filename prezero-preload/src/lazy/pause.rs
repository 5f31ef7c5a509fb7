//! The lazy mode's threads in `crate::threads`' looks and stops: how they
//! are woken (the workers on their lanes' futexes, which a wake ends; the
//! handler looks at its next poll, within `crate::threads::CHECK_MS`: a
//! wake by a fault of the waker's own, as a bell page was, would block the
//! waker where the handler is gone), what goes before the handler does (the
//! hand-over, `suspend.rs`), and how they start: at the start, and when a
//! suspended lazy mode resumes.
//!
//! The handler reads the userfaultfd from a descriptor table of its own: a
//! program that closes every descriptor by a call we cannot see (a system
//! call made inline) while a child it made without fork handlers keeps a
//! copy would otherwise leave every fault on registered memory waiting
//! while that child lives. Its table holds the userfaultfd and the
//! pagemap's descriptor, nothing of the program's (a pipe the program
//! closes ends for its reader as plainly).

use std::sync::atomic::Ordering;

use super::{
    fd, handler, reserve, serving, suspend, uffd, worker, PopGuard, ON, PAGEMAP, STARTING, STATE,
    SUSPENDED,
};
use crate::sys;
use crate::threads::{self, Kind, Owner};

/// The handler thread's body: [`handler::run`], from a descriptor table of
/// its own.
fn handler_main() {
    sys::keep_descriptors_only(&[fd(), PAGEMAP.load(Ordering::Relaxed)]);
    handler::run();
}

/// Starts the handler and one worker per lane (the handler first: the
/// cache's range waits on it).
pub fn start_threads() -> bool {
    if !threads::spawn("prezero-fault", Kind::Handler, handler_main) {
        return false;
    }
    restart_workers();
    true
}

/// What `crate::threads`' looks and stops ask of the handler, and of the
/// workers.
static HANDLER_HOOKS: threads::Hooks = threads::Hooks {
    wake: looks_at_its_next_poll,
    leaving: Some(suspend::leaving),
    joined: None,
};
static WORKER_HOOKS: threads::Hooks = threads::Hooks {
    wake: reserve::wake_all,
    leaving: None,
    joined: None,
};

/// Registers the handler and the workers with `crate::threads`, at
/// start-up (before either starts).
pub fn register() {
    threads::register(Owner::Handler, &HANDLER_HOOKS);
    threads::register(Owner::Workers, &WORKER_HOOKS);
}

/// The handler is not woken: it looks at `crate::threads` after each poll
/// of the userfaultfd, every `crate::threads::CHECK_MS` at most.
fn looks_at_its_next_poll() {}

/// The workers, one per lane, where the lazy mode serves (after a stop, or
/// at the start). Without them nothing is filled or scrubbed ahead: the
/// handler does it for each fault, slower.
fn restart_workers() {
    if !serving() {
        return;
    }
    worker::first_lane();
    for _ in 0..reserve::lanes() {
        let _ = threads::spawn("prezero-reserve", Kind::Other, worker::run);
    }
}

/// Resumes the lazy mode from a program's thread, if it is suspended: true
/// if it serves again. False where no thread of ours may start from here,
/// or the program has closed the descriptor (then for good).
pub fn resume() -> bool {
    if STATE
        .compare_exchange(SUSPENDED, STARTING, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return STATE.load(Ordering::Acquire) == ON;
    }
    if !super::still_ours() {
        super::stop();
        return false;
    }
    // Active now: neither the workers nor the handler take it for idle.
    super::touch_active();
    if !start_threads() {
        let _ = STATE.compare_exchange(STARTING, SUSPENDED, Ordering::AcqRel, Ordering::Acquire);
        return false;
    }
    let live = go_live();
    crate::pressure::watch();
    live
}

/// The handler started (the state STARTING): the lazy mode serves, and the
/// cache's range is registered, under `POP`, unless the handler has already
/// handed over (it ended: a stop, a retirement), which a registration after
/// would leave with no one to serve it. True if it serves.
pub fn go_live() -> bool {
    let _g = PopGuard::program();
    if STATE
        .compare_exchange(STARTING, ON, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return false;
    }
    if let Some((base, len)) = crate::cache::range() {
        // SAFETY: the handler runs and has not handed over (the state, under
        // POP, which the hand-over holds): it answers every fault.
        if unsafe { uffd::register(fd(), base, len, uffd::Mode::Missing) }.is_ok() {
            let _ = sys::madvise(base, len, sys::Advice::NoHugePage);
        }
    }
    true
}
