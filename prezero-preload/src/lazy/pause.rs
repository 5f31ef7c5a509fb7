//! The lazy mode's threads in `crate::threads`' looks and stops: how they
//! are woken (the handler by its bell, `bell.rs`; the workers on their
//! lanes' futexes, which a wake ends), and started again.

use std::sync::atomic::{AtomicBool, Ordering};

use super::{active, bell, fd, give_up, handler, reserve, worker, Stop};
use crate::sys::Errno;
use crate::threads::{self, Kind, Owner};

/// Whether the handler thread runs (it answers the bell).
static HANDLER_RUNS: AtomicBool = AtomicBool::new(false);

/// The handler thread's body: [`handler::run`], marked running.
fn handler_main() {
    HANDLER_RUNS.store(true, Ordering::Release);
    handler::run();
    HANDLER_RUNS.store(false, Ordering::Release);
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
    joined: None,
    restart: restart_handler,
};
static WORKER_HOOKS: threads::Hooks = threads::Hooks {
    wake: reserve::wake_all,
    joined: None,
    restart: restart_workers,
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

/// After a stop: the handler again, where the lazy mode still runs. Without
/// it no fault would be served: the lazy mode stops instead, and the kernel
/// serves them.
fn restart_handler() {
    if active() && fd() >= 0 && !threads::spawn("prezero-fault", Kind::Handler, handler_main) {
        give_up(Stop::Refused(Errno(libc::EAGAIN)));
    }
}

/// The workers, one per lane (after a stop, or at the start). Without them
/// nothing is filled or scrubbed ahead: the handler does it for each
/// fault, slower.
fn restart_workers() {
    worker::first_lane();
    for _ in 0..reserve::lanes() {
        let _ = threads::spawn("prezero-reserve", Kind::Other, worker::run);
    }
}
