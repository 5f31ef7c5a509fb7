//! Blocks the handler's readahead moved in ahead of a fault, which the
//! program may never touch: plainly they would have no pages, and `mincore`
//! would say so. Their addresses are kept (the last [`KEPT`]); before the
//! program's `mincore` reads residency in a range, each of them there that
//! still reads all zero goes back to the reserve, zeroed, and the block is
//! empty again (as plainly, the program's next touch faults it in). A block
//! the program wrote goes back where it was.
//!
//! The taking back holds `POP` and marks the block in flux: a fault there
//! meanwhile waits for `POP` (the handler's usual wait is bounded, then it
//! serves the page alone: a page put there would stop the move back). The
//! holder touches no registered memory while it holds it (the reserve's
//! registration arms no faults), so the wait ends.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::reserve::{self, EMPTY, INCOMING};
use super::{active, fd, is_empty, is_huge, lanes, stats, PopGuard, HUGE};
use crate::sys::uffd;

/// Blocks moved ahead that are kept for a `mincore`.
const KEPT: usize = 64;

static AHEAD: [AtomicUsize; KEPT] = [const { AtomicUsize::new(0) }; KEPT];
static NEXT: AtomicUsize = AtomicUsize::new(0);
/// The block being taken back (0: none).
static FLUX: AtomicUsize = AtomicUsize::new(0);

/// The handler moved `block` in ahead of a fault.
pub fn moved_ahead(block: usize) {
    let i = NEXT.fetch_add(1, Ordering::Relaxed) % KEPT;
    AHEAD[i].store(block, Ordering::Relaxed);
}

/// Whether `block` is being taken back: a fault there waits for `POP`.
#[inline]
pub fn in_flux(block: usize) -> bool {
    FLUX.load(Ordering::Acquire) == block
}

/// Before the program reads the residency of `[lo, hi)`: the blocks there
/// moved ahead and still all zero go back to the reserve.
pub fn take_back(lo: usize, hi: usize) {
    let within = |b: usize| b != 0 && lo <= b && b.saturating_add(HUGE) <= hi;
    if !active() || !AHEAD.iter().any(|a| within(a.load(Ordering::Relaxed))) {
        return;
    }
    let mut g = PopGuard::program();
    for a in &AHEAD {
        let b = a.load(Ordering::Relaxed);
        if within(b) {
            a.store(0, Ordering::Relaxed);
            take_back_one(&mut g, b);
        }
    }
}

/// Block `b`, if it is still a registered block of one huge page, all zero.
fn take_back_one(g: &mut PopGuard, b: usize) {
    // Gone since (unmapped, moved, given to the kernel) or split: left alone.
    let registered = g.table().find(b).is_some_and(|r| b + HUGE <= r.end)
        || crate::cache::writable_end(b).is_some_and(|end| b + HUGE <= end);
    if !registered || !is_huge(b) {
        return;
    }
    let Some(lane) = lanes::of_page(b) else {
        return;
    };
    let Some(slot) = reserve::take(lane, EMPTY, INCOMING) else {
        return;
    };
    let to = reserve::slot_addr(slot);
    FLUX.store(b, Ordering::Release);
    // SAFETY: the slot is ours (INCOMING) and empty; the block's page moves
    // whole (a page-table entry): a write before the move is in it, one
    // after faults, and waits (in flux) until it is back or the block empty.
    let (_, r) = unsafe { uffd::move_pages(fd(), to, b, HUGE, uffd::MOVE_DONT_WAKE) };
    // The kernel may report an error for a move it made: the pages say.
    let moved = r.is_ok() || (is_empty(b, HUGE) && !is_empty(to, HUGE));
    if !moved {
        reserve::set(slot, EMPTY);
    } else if all_zero(to) {
        reserve::keep_zeroed(slot);
        stats::TAKEN_BACK.fetch_add(1, Ordering::Relaxed);
    } else {
        // Written: back where it was. The block is empty (no fault was
        // served there meanwhile), so the move cannot find a page there.
        // SAFETY: the slot holds the block's page, the block is missing.
        let (_, r) = unsafe { uffd::move_pages(fd(), b, to, HUGE, uffd::MOVE_DONT_WAKE) };
        let back = r.is_ok() || (is_empty(to, HUGE) && !is_empty(b, HUGE));
        if back {
            reserve::set(slot, EMPTY);
        } else {
            // Never seen; the bytes must not be lost: copied back instead.
            // SAFETY: as above; the copy fills the block's missing pages.
            let _ = unsafe { uffd::copy(fd(), b, to, HUGE) };
            let _ = reserve::drop_pages(slot);
        }
    }
    FLUX.store(0, Ordering::Release);
    // Faults that came meanwhile wait on the handler, which serves them
    // once `POP` is free.
}

/// Whether the reserve's slot at `at` reads zero in every byte.
fn all_zero(at: usize) -> bool {
    // SAFETY: the slot is ours (INCOMING) and present (a page moved in
    // whole); nothing else reads or writes it.
    let bytes = unsafe { std::slice::from_raw_parts(at as *const u64, HUGE / 8) };
    bytes.iter().all(|&w| w == 0)
}
