//! The lazy mode's part in a pause (`crate::threads`: the handler and the
//! workers stop around a call the program's threads must make alone, and
//! start again after it).
//!
//! The handler sleeps in its read of the userfaultfd, which only a fault
//! ends: the pause reads a page of its own registered for that (the bell),
//! whose fault the handler answers with the zero page before it returns.
//! A page the kernel then takes back (`MADV_DONTNEED`) rings again. The
//! workers sleep on their lanes' futexes, which a wake ends.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::{active, fd, handler, reserve, uffd, worker, PAGE};
use crate::sys::{self, Errno};
use crate::threads;

/// The bell's address (0: none).
static BELL: AtomicUsize = AtomicUsize::new(0);

/// Maps and registers the bell; the handler must run (it answers the
/// bell's fault). Without one a pause waits for the handler's next fault.
pub fn hang_bell(fd: i32) {
    let Ok(at) = sys::map_noreserve(PAGE) else {
        return;
    };
    // SAFETY: the handler thread runs, and answers every fault. The page is
    // this function's new mapping: dropping its page (one `mlockall`
    // populated) loses nothing.
    let rung = unsafe { uffd::register(fd, at, PAGE, uffd::Mode::Missing) }.is_ok()
        && unsafe { sys::discard_even_locked(at, PAGE) }.is_ok();
    if rung {
        BELL.store(at, Ordering::Release);
    } else {
        // SAFETY: as above; a registration goes with the mapping.
        let _ = unsafe { sys::munmap(at, PAGE) };
    }
}

/// Whether the bell hangs (a pause rings it).
pub fn has_bell() -> bool {
    BELL.load(Ordering::Relaxed) != 0
}

/// Whether a fault at `addr` is the bell's.
#[inline]
pub fn is_bell(addr: usize) -> bool {
    let b = BELL.load(Ordering::Relaxed);
    b != 0 && addr & !(PAGE - 1) == b
}

/// The handler's answer to the bell's fault: the zero page. Where the
/// kernel refuses it, the bell leaves the userfaultfd (which wakes the
/// reader: the kernel answers its fault); the error if that fails too (its
/// reader still waits: the caller must close the descriptor).
pub fn answer(fd: i32) -> Result<(), Errno> {
    let b = BELL.load(Ordering::Relaxed);
    if uffd::zeropage(fd, b, PAGE).is_ok() {
        return Ok(());
    }
    BELL.store(0, Ordering::Relaxed);
    uffd::unregister(fd, b, PAGE)
}

/// Starts the handler and one worker per lane (the handler first: the
/// cache's range and the bell wait on it).
pub fn start_threads() -> bool {
    if !threads::spawn("prezero-fault", handler::run) {
        return false;
    }
    worker::first_lane();
    // Without them nothing is filled or scrubbed ahead: the handler does it
    // for each fault, slower.
    for _ in 0..reserve::lanes() {
        let _ = threads::spawn("prezero-reserve", worker::run);
    }
    true
}

/// Wakes the handler and the workers for a pause (`threads::stopping` is
/// set): each returns at its next look.
pub fn wake_threads() {
    if !active() {
        return;
    }
    reserve::wake_all();
    let b = BELL.load(Ordering::Acquire);
    if b != 0 {
        // SAFETY: the bell is this module's mapping, readable, never
        // unmapped; the handler answers its fault (or closes the descriptor,
        // after which the kernel does).
        unsafe { std::ptr::read_volatile(b as *const u8) };
        // SAFETY: as above; the page is the zero page, whose loss is nothing.
        let _ = unsafe { sys::discard_even_locked(b, PAGE) };
    }
}

/// After a pause: the handler and the workers again, where the lazy mode
/// still runs.
pub fn restart_threads() {
    if active() && fd() >= 0 {
        let _ = start_threads();
    }
}
