//! The lazy mode's threads in `crate::threads`' looks and stops: how they
//! are woken (the handler by its bell, `bell.rs`; the workers on their
//! lanes' futexes, which a wake ends), what goes before the handler does
//! (the hand-over, `suspend.rs`), and how they start again: at the start,
//! and when a suspended lazy mode resumes.
//!
//! The handler reads the userfaultfd from a descriptor table of its own: a
//! program that closes every descriptor by a call we cannot see (a system
//! call made inline) while a child it made without fork handlers keeps a
//! copy would otherwise leave every fault on registered memory waiting
//! while that child lives. Its table holds the userfaultfd and the
//! pagemap's descriptor, nothing of the program's (a pipe the program
//! closes ends for its reader as plainly).

use std::sync::atomic::{AtomicBool, Ordering};

use super::{
    bell, fd, handler, reserve, serving, suspend, uffd, worker, ON, PAGEMAP, STARTING, STATE,
    SUSPENDED,
};
use crate::sys;
use crate::threads::{self, Kind, Owner};

/// Whether the handler thread runs (it answers the bell).
static HANDLER_RUNS: AtomicBool = AtomicBool::new(false);

/// The handler thread's body: [`handler::run`], from a descriptor table of
/// its own, marked running.
fn handler_main() {
    let fd = fd();
    sys::keep_descriptors_only(&[fd, PAGEMAP.load(Ordering::Relaxed)]);
    HANDLER_RUNS.store(true, Ordering::Release);
    handler::run();
    HANDLER_RUNS.store(false, Ordering::Release);
    bell::take_down(fd);
}

/// Starts the handler and one worker per lane (the handler first: the
/// cache's range and the bell wait on it).
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
    wake: wake_handler,
    leaving: Some(suspend::leaving),
    joined: None,
    restart: restart_handler,
};
static WORKER_HOOKS: threads::Hooks = threads::Hooks {
    wake: reserve::wake_all,
    leaving: None,
    joined: None,
    restart: workers_follow_the_handler,
};

/// Registers the handler and the workers with `crate::threads`, at
/// start-up (before either starts).
pub fn register() {
    threads::register(Owner::Handler, &HANDLER_HOOKS);
    threads::register(Owner::Workers, &WORKER_HOOKS);
}

/// Wakes the handler for a look at `crate::threads`: rings the bell, which
/// only a running handler answers.
fn wake_handler() {
    if HANDLER_RUNS.load(Ordering::Acquire) {
        bell::ring();
    }
}

/// After a stop: the lazy mode again, with its threads (it was suspended
/// before the handler went).
fn restart_handler() {
    let _ = resume();
}

/// After a stop: nothing of the workers' own; the handler's restart (the
/// lazy mode resumed) starts them.
fn workers_follow_the_handler() {}

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
    // Before the cache's range is registered: a fault there needs them.
    STATE.store(ON, Ordering::Release);
    if !start_threads() {
        STATE.store(SUSPENDED, Ordering::Release);
        return false;
    }
    bell::hang_bell(fd());
    if let Some((base, len)) = crate::cache::range() {
        // SAFETY: the handler thread runs, and answers every fault.
        let _ = unsafe { uffd::register(fd(), base, len, uffd::Mode::Missing) };
    }
    crate::pressure::watch();
    true
}
