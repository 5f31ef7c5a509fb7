//! The handler's bell. The handler sleeps in its read of the userfaultfd,
//! which only a fault ends: a page of its own is registered for that (the
//! bell), and reading it is a fault the handler answers with the zero page
//! before it looks at `crate::threads`. The page is dropped before each ring
//! (a page `mlockall` or an earlier ring left there would not fault). The
//! handler takes the bell down as it ends (unregistered, a ring made
//! meanwhile is woken and served by the kernel): no ring waits on a handler
//! that is gone. One page, mapped once, hung again when the handler starts
//! again.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::{uffd, PAGE};
use crate::sys::{self, Errno};

/// The bell's address while it hangs (0: none).
static BELL: AtomicUsize = AtomicUsize::new(0);
/// The bell's page, mapped once (0: not yet).
static MAPPED: AtomicUsize = AtomicUsize::new(0);

/// Maps (once) and registers the bell; the handler must run (it answers
/// the bell's fault). Without one a look waits for the handler's next
/// fault, a fraction of a second at most.
pub fn hang_bell(fd: i32) {
    let at = match MAPPED.load(Ordering::Acquire) {
        0 => match sys::map_noreserve(PAGE) {
            Ok(at) => {
                MAPPED.store(at, Ordering::Release);
                at
            }
            Err(_) => return,
        },
        at => at,
    };
    // SAFETY: the handler thread runs, and answers every fault.
    if unsafe { uffd::register(fd, at, PAGE, uffd::Mode::Missing) }.is_ok() {
        BELL.store(at, Ordering::Release);
    }
}

/// The handler, ending: the bell no longer hangs (a ring made meanwhile is
/// woken by the unregistering, and served by the kernel).
pub fn take_down(fd: i32) {
    let b = BELL.swap(0, Ordering::AcqRel);
    if b != 0 {
        let _ = uffd::unregister(fd, b, PAGE);
    }
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

/// Rings the bell, if it hangs: the handler's read ends with its fault.
/// Not from the handler (only it answers). Two rings at once are one: each
/// fault is answered with the zero page, or woken where the other's put it
/// there first (`answer`).
pub fn ring() {
    let b = BELL.load(Ordering::Acquire);
    if b != 0 {
        // SAFETY: the bell is this module's mapping, never unmapped, whose
        // zero page (if any) is nothing to lose.
        let _ = unsafe { sys::discard_even_locked(b, PAGE) };
        // SAFETY: as above, readable; the handler answers its fault, or
        // takes the bell down as it ends, which wakes it.
        unsafe { std::ptr::read_volatile(b as *const u8) };
    }
}
