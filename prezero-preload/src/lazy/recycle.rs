//! Freed memory's huge pages back into the reserve: where the cache gives a
//! freed block back (the cap, idle), its whole PMD-mapped huge pages move
//! into empty slots of their node's lane (a page-table entry each, no copy),
//! to be scrubbed there
//! (about a third of what the kernel's fault of a fresh one costs here),
//! before the cache drops the rest. A huge page that is split, shared with a
//! child (`EBUSY`), or finds the reserve full is left to the cache's drop.
//!
//! Only from the cache's `free`: a move refuses pages pinned, not pages the
//! kernel holds a reference to (a pipe's, after `vmsplice`), which then see
//! the next owner's bytes. Any allocator reuses freed memory, and `prezero
//! run` without `--lazy` already does: a program may not `vmsplice` a block
//! and free it before the reader is done. It may unmap its own mapping
//! then, and the kernel keeps the page for the pipe; so the program's
//! `munmap` and `madvise` leave its pages to the kernel (`mappings.rs`).

use std::sync::atomic::Ordering;

use super::reserve::{self, DIRTY, EMPTY, INCOMING};
use super::stats::Count;
use super::{active, fd, is_empty, lanes, stats, touch_active, HUGE, PAGEMAP};
use crate::sys::uffd::{self, Region};

/// Below this much room (MemAvailable, or the memory cgroup's), freed
/// pages go back to the kernel rather than into the reserve: until they
/// are scrubbed they are dirty, and only a thread of ours can give them
/// back, which in a small memory cgroup may come after the kernel's OOM
/// killer (a 256 MiB cgroup under TCG lost a program that way).
const RECYCLE_ROOM: usize = 512 << 20;

/// Moves the whole huge pages of `[start, start + len)` into the reserve.
/// A no-op where the lazy mode does not run in this process.
///
/// The caller (the cache, giving a freed block back: its hook
/// `Hooks::releasing`) is about to drop the range's contents: nothing reads
/// them after, so moving them out first changes nothing it could see.
pub(super) fn recycle(start: usize, len: usize) {
    let lo = start.next_multiple_of(HUGE);
    let hi = (start + len) & !(HUGE - 1);
    // Under memory pressure they go back to the kernel instead.
    if lo >= hi || !active() || crate::pressure::pressed() {
        return;
    }
    if crate::pressure::room() < RECYCLE_ROOM {
        return;
    }
    // One lane, full: no walk.
    if lanes::count() == 1 && !reserve::takes_back(0) {
        return;
    }
    let (fd, pm) = (fd(), PAGEMAP.load(Ordering::Relaxed));
    let mut out = [Region::default(); 32];
    let mut at = lo;
    let mut moved = 0;
    'walk: while at < hi {
        let huge = uffd::PAGE_IS_HUGE;
        let Ok((n, walk_end)) = uffd::scan(pm, at, hi, huge, uffd::PAGE_IS_PRESENT, huge, &mut out)
        else {
            break;
        };
        for r in &out[..n] {
            let mut b = (r.start as usize).next_multiple_of(HUGE);
            while b + HUGE <= r.end as usize {
                // A page whose node the kernel cannot say is left to the drop.
                let Some(lane) = lanes::of_page(b).filter(|&l| reserve::takes_back(l)) else {
                    b += HUGE;
                    continue;
                };
                let Some(slot) = reserve::take(lane, EMPTY, INCOMING) else {
                    // One lane full: the others may have room.
                    if lanes::count() == 1 {
                        break 'walk;
                    }
                    b += HUGE;
                    continue;
                };
                // SAFETY: the slot is ours (INCOMING), empty, in the reserve
                // registered with this descriptor; the block's contents are
                // the caller's to drop (see above).
                let (m, r) = unsafe {
                    uffd::move_range(fd, reserve::slot_addr(slot), b, HUGE, uffd::MOVE_DONT_WAKE)
                };
                match r {
                    Ok(()) => {
                        reserve::set(slot, DIRTY);
                        moved += 1;
                    }
                    // Nothing moved, as the slot shows (the kernel may report
                    // an error for a move it made).
                    Err(_) if m == 0 && is_empty(reserve::slot_addr(slot), HUGE) => {
                        reserve::set(slot, EMPTY)
                    }
                    Err(_) => {
                        reserve::drop_pages(slot);
                    }
                }
                b += HUGE;
            }
        }
        if n < out.len() {
            break;
        }
        at = walk_end.max(at + HUGE);
    }
    if moved > 0 {
        stats::LAZY.add(Count::Recycled, moved as u64);
        touch_active();
    }
}
