//! The lazy mode's threads in `crate::threads`' looks and stops: how they
//! are woken, and started again.
//!
//! The handler sleeps in its read of the userfaultfd, which only a fault
//! ends: a page of its own is registered for that (the bell), and reading
//! it is a fault the handler answers with the zero page before it looks.
//! The page is dropped before each ring (a page `mlockall` or an earlier
//! ring left there would not fault). The workers sleep on their lanes'
//! futexes, which a wake ends.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::{active, fd, give_up, handler, reserve, uffd, worker, Stop, PAGE};
use crate::sys::{self, Errno};
use crate::threads::{self, Kind, Owner};

/// The bell's address (0: none).
static BELL: AtomicUsize = AtomicUsize::new(0);
/// Whether the handler thread runs (it answers the bell).
static HANDLER_RUNS: AtomicBool = AtomicBool::new(false);

/// Maps and registers the bell; the handler must run (it answers the
/// bell's fault). Without one a look waits for the handler's next fault.
pub fn hang_bell(fd: i32) {
    let Ok(at) = sys::map_noreserve(PAGE) else {
        return;
    };
    // SAFETY: the handler thread runs, and answers every fault.
    let registered = unsafe { uffd::register(fd, at, PAGE, uffd::Mode::Missing) }.is_ok();
    if registered {
        BELL.store(at, Ordering::Release);
    } else {
        // SAFETY: the page is this function's new mapping, used by no one.
        let _ = unsafe { sys::munmap(at, PAGE) };
    }
}

/// Whether the bell hangs (a stop rings it).
pub fn has_bell() -> bool {
    BELL.load(Ordering::Relaxed) != 0
}

/// Whether a fault at `addr` is the bell's.
#[inline]
pub fn is_bell(addr: usize) -> bool {
    let b = BELL.load(Ordering::Relaxed);
    b != 0 && addr & !(PAGE - 1) == b
}

/// The handler's answer to the bell's fault: the zero page, or a wake
/// where a page is there already (a ring the reader gave up on, after a
/// signal, and made again). Where the kernel refuses both, the bell leaves
/// the userfaultfd (which wakes the reader: the kernel answers its fault);
/// the error if that fails too (its reader still waits: the caller must
/// close the descriptor).
pub fn answer(fd: i32) -> Result<(), Errno> {
    let b = BELL.load(Ordering::Relaxed);
    match uffd::zeropage(fd, b, PAGE) {
        Ok(_) => return Ok(()),
        Err(Errno(libc::EEXIST)) if uffd::wake(fd, b, PAGE).is_ok() => return Ok(()),
        Err(_) => {}
    }
    BELL.store(0, Ordering::Relaxed);
    uffd::unregister(fd, b, PAGE)
}

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

/// Wakes the handler for a look at `crate::threads`.
fn wake_handler() {
    let b = BELL.load(Ordering::Acquire);
    if b != 0 && HANDLER_RUNS.load(Ordering::Acquire) {
        // SAFETY: the bell is this module's mapping, never unmapped, whose
        // zero page (if any) is nothing to lose; the caller holds
        // `threads::PAUSE`, so no other ring reads it meanwhile.
        let _ = unsafe { sys::discard_even_locked(b, PAGE) };
        // SAFETY: as above, readable; the handler answers its fault (or
        // closes the descriptor, after which the kernel does).
        unsafe { std::ptr::read_volatile(b as *const u8) };
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
