//! The program's requests that reach the cache: the entry points' large
//! path (`alloc`, `free`, `realloc`, `usable_size`), and the taking of a
//! block that the prefill shares with them.

use std::ffi::c_void;
use std::sync::atomic::Ordering;

use super::hooks::{hooks, Moved};
use super::lock::{lock_as_scrubber, lock_unless_starved, REQUEST_WAIT_MS};
use super::range::release_one;
use super::{
    caller_lane, deferred, ensure_scrubber, lane_node, lane_of, lock, now, signal_all, Guard,
    WAITING,
};
use crate::blocks::{Alloc, Kind, Piece, PAGE};
use crate::stats::{self, Count};
use crate::sys::{self, Advice, NotMoved};

/// `size` bytes aligned to `align` from the cache, zero if `zeroed`, in the
/// calling thread's lane; null if the cache cannot serve (the caller asks
/// the next allocator).
pub fn alloc(size: usize, align: usize, zeroed: bool) -> *mut c_void {
    // The lazy mode, if asked for, starts with the process's first large
    // block, before any of its pages is touched.
    if let Some(h) = hooks() {
        (h.before_alloc)();
    }
    take(caller_lane(), size, align, zeroed, true)
}

/// [`alloc`] in lane `lane`, for the program (`counted`: its statistics and
/// peaks) or for the cache itself (the prefill, which is no request of the
/// program's).
pub(super) fn take(
    lane: usize,
    size: usize,
    align: usize,
    zeroed: bool,
    counted: bool,
) -> *mut c_void {
    let mut waited = false;
    let mut since: Option<std::time::Instant> = None;
    // Held from a wake-up to the look after it: the scrubber, which starts no
    // step while a request waits, cannot start one in between either. The
    // prefill (not `counted`) is the scrubber's own.
    let held = if counted {
        lock_unless_starved()
    } else {
        Some(lock_as_scrubber())
    };
    let Some(mut g) = held else {
        return std::ptr::null_mut();
    };
    let granted = loop {
        let c = g.cache();
        let (thp, spare, cap) = (c.cfg.thp, c.cfg.spare, c.cfg.cap);
        let l = c.lane(lane);
        let Some(reach) = l
            .blocks
            .top()
            .checked_add(size)
            .and_then(|r| r.checked_add(align.max(PAGE)))
        else {
            return std::ptr::null_mut();
        };
        // The cache's own range beyond top: what the program uses is not
        // capped, only what it has freed.
        let room = if l.ensure_writable(reach.min(l.blocks.limit()), thp) {
            usize::MAX
        } else {
            l.writable - l.blocks.top()
        };
        let a = if waited {
            l.blocks.alloc_around_busy(size, align, zeroed, room)
        } else {
            l.blocks.alloc(size, align, zeroed, room)
        };
        match a {
            Alloc::Granted {
                start,
                len,
                pieces,
                n,
            } => {
                debug_assert!(l.blocks.check());
                if counted {
                    // Freed and asked for again faster than the scrubber
                    // clears: keep this much zeroed ahead, in this lane, from
                    // now on. Only if the cap holds it beside the block the
                    // program frees next: else that free gives the spare back
                    // at once.
                    let dirty = pieces[..n].iter().any(|p| p.2 == Kind::Dirty);
                    if zeroed && dirty && spare && len <= cap / 2 {
                        l.spare = l.spare.max(len);
                        signal_all();
                    }
                    c.peaks();
                }
                break (start, len, pieces, n);
            }
            // One step of the scrubber (~0.3 ms on a core of its own), then
            // around it: with the program's threads on every core the step
            // may be preempted (at SCHED_IDLE it took most of a second, and
            // a calloc with it).
            Alloc::Wait => {
                // While a request waits the scrubber starts no new step, so
                // the block is whole when this wakes.
                let t = *since.get_or_insert_with(std::time::Instant::now);
                WAITING.fetch_add(1, Ordering::Relaxed);
                let woken = g.wait_unless_starved(REQUEST_WAIT_MS);
                WAITING.fetch_sub(1, Ordering::Relaxed);
                g = match woken {
                    Some(g) => g,
                    None => return std::ptr::null_mut(),
                };
                waited = t.elapsed() >= std::time::Duration::from_millis(REQUEST_WAIT_MS);
            }
            Alloc::Full => return std::ptr::null_mut(),
        }
    };
    drop(g);
    let (start, len, pieces, n) = granted;
    // SAFETY: the pieces are the block just handed to this caller, writable
    // (ensure_writable), and no one else's.
    let populated = unsafe { clear_dirty(&pieces[..n], zeroed, counted) };
    if !counted {
        return start as *mut c_void;
    }
    stats::CACHE.add(Count::Served, 1);
    stats::CACHE.add(Count::ServedBytes, len as u64);
    stats::CACHE.add(Count::PopulatedBytes, populated);
    start as *mut c_void
}

/// Clears the dirty pieces of a block granted `zeroed`, in the calling
/// thread; the bytes of its pieces that were already populated.
///
/// # Safety
///
/// Every piece is part of a block just handed to the caller: writable, and
/// no one else's.
unsafe fn clear_dirty(pieces: &[Piece], zeroed: bool, counted: bool) -> u64 {
    let mut populated = 0u64;
    for &(s, l, kind) in pieces {
        match kind {
            Kind::Dirty | Kind::Clean => populated += l as u64,
            _ => {}
        }
        if zeroed && kind == Kind::Dirty {
            // The caller is about to use it: ordinary stores while it fits a
            // cache, streaming past that (the profile decides: memory about to be
            // touched is best zeroed hot).
            // SAFETY: [s, s + l) is part of the block just handed to this
            // caller, writable, and no one else's (the function's contract).
            let _ = unsafe { prezero::clear_raw_with(s as *mut u8, l, prezero::Temperature::Hot) };
            if counted {
                stats::CACHE.add(Count::InlineCleared, l as u64);
            }
        }
    }
    populated
}

/// Takes back the block at `p` (in the range). A pointer that is not a block
/// handed out is counted and ignored: never a corruption. `extern "C"` (it
/// cannot unwind), so the C `free` ends in a jump here, not a call.
pub extern "C" fn free(p: usize) {
    let mut g = match lock_unless_starved() {
        Some(g) => g,
        None if deferred::leave(p) => {
            // The scrubber, if it waits once it lets go, takes it at once.
            signal_all();
            return;
        }
        None => lock(),
    };
    free_deferred(&mut g);
    free_block(&mut g, p);
    // Past the cap: the oldest free memory goes back before this returns.
    let cap = g.cache().cap();
    while g.cache().held() > cap {
        if !release_one(&mut g, u64::MAX) {
            break;
        }
    }
    let start_scrubber = !g.cache().scrubber;
    signal_all();
    drop(g);
    if start_scrubber {
        ensure_scrubber();
    }
}

/// Makes the frees left in `deferred.rs` (the caller holds the lock, and
/// gives back what takes the cache past its cap).
pub(super) fn free_deferred(g: &mut Guard) {
    deferred::take_each(|p| free_block(g, p));
}

/// Takes back the block at `p`, the lock held (a pointer that is not a block
/// handed out is counted).
fn free_block(g: &mut Guard, p: usize) {
    let c = g.cache();
    let l = c.lane(lane_of(p));
    if l.blocks.free(p, now()).is_none() {
        stats::CACHE.add(Count::BadFrees, 1);
        return;
    }
    debug_assert!(l.blocks.check());
    c.peaks();
}

/// Bytes usable at `p`, if it is a block handed out.
pub fn usable_size(p: usize) -> Option<usize> {
    lock().cache().lane(lane_of(p)).blocks.in_use_len(p)
}

/// `realloc` of the block at `p` to `size` bytes: shrunk or grown in place,
/// or its pages moved (mremap, no copy; a copy where the kernel cannot) to a
/// new block. `None`: `p` is not a block handed out. `Some(Err(old))`: the
/// cache has no room, or the lock a starved scrubber kept (the caller copies
/// the block's `old` bytes to the next allocator, without asking its length
/// again under that lock).
pub fn realloc(p: usize, size: usize, threshold: usize) -> Option<Result<*mut c_void, usize>> {
    // The block's pages stay on their node: grown in place, or moved to a
    // block of the same lane.
    let lane = lane_of(p);
    let old = {
        let mut g = lock();
        let c = g.cache();
        let thp = c.cfg.thp;
        let l = c.lane(lane);
        let old = l.blocks.in_use_len(p)?;
        if size <= old {
            // Shrinking by less than the threshold keeps the block whole.
            if old - size >= threshold {
                l.blocks.shrink(p, size, now());
                signal_all();
            }
            return Some(Ok(p as *mut c_void));
        }
        let Some(reach) = p.checked_add(size) else {
            // Past the address space: no room (the caller asks the next
            // allocator, which refuses with ENOMEM), not "not ours".
            return Some(Err(old));
        };
        let reach = reach.min(l.blocks.limit());
        let room = if l.ensure_writable(reach, thp) {
            usize::MAX
        } else {
            0
        };
        if l.blocks.grow(p, size, room) {
            c.peaks();
            return Some(Ok(p as *mut c_void));
        }
        old
    };
    let q = take(lane, size, PAGE, false, true);
    if q.is_null() {
        return Some(Err(old));
    }
    // The range never has a hole: an mmap on another thread cannot land
    // inside it (it could between an mremap that unmaps and an mmap
    // MAP_FIXED that fills the hole again, which then replaced that thread's
    // mapping with ours).
    let moved = match hooks() {
        // The lazy mode's: its own move, or the plain one with its lock held.
        Some(h) => (h.realloc_move)(p, old, q as usize),
        None => move_plain(p, old, q as usize, &|| {}),
    };
    match moved {
        Moved::Emptied { remapped } => {
            let mut g = lock();
            if remapped && g.cache().cfg.thp {
                let _ = sys::madvise(p, old, Advice::HugePage);
            }
            // The fresh mapping has no policy: its lane's node again.
            if let Some(node) = lane_node(lane).filter(|_| remapped) {
                let _ = sys::prefer_node(p, old, node);
            }
            g.cache().lane(lane).blocks.free_fresh(p);
            stats::CACHE.add(Count::Remaps, 1);
            signal_all();
        }
        Moved::Filled => free(p),
        Moved::Lost => return Some(Err(old)),
        Moved::Copy => {
            // mremap refused: copy.
            // SAFETY: both blocks are this thread's, disjoint, `old` bytes long at least.
            unsafe { std::ptr::copy_nonoverlapping(p as *const u8, q.cast::<u8>(), old) };
            free(p);
        }
    }
    Some(Ok(q))
}

/// `realloc`'s plain move of the block `[p, p + old)` to the block at `q`
/// (see `Hooks::realloc_move`): its pages remapped (`mremap`), or
/// [`Moved::Copy`] where the kernel refuses. `again` runs as soon as the
/// kernel has changed the range's mappings, before anything else here
/// touches them (the lazy mode registers them again). The cache's lock is
/// not held here, and `again` does not take it.
pub fn move_plain(p: usize, old: usize, q: usize, again: &dyn Fn()) -> Moved {
    // SAFETY: [p, p + old) and [q, q + old) are two disjoint blocks of our
    // range this thread owns (the program's, and the one just granted).
    match unsafe { sys::remap_pages(p, old, q) } {
        Ok(()) => {
            // The vacated part keeps the moved pages' mapping (its offset and
            // flags differ from its neighbours'), which the kernel will not
            // merge: a fresh mapping in its place merges again, or every move
            // would leave mappings behind until the process reaches
            // vm.max_map_count and its own mmap calls fail. MAP_FIXED over a
            // mapping replaces it in one step (still no hole); if it fails the
            // empty mapping stays, usable.
            // SAFETY: [p, p + old) is in our range, mapped, with no pages, and
            // still this thread's (InUse until the caller's free_fresh).
            let remapped = unsafe { sys::map_fresh_over(p, old) }.is_ok();
            again();
            Moved::Emptied { remapped }
        }
        // Part of q is another mapping now: q stays in use for ever (never
        // handed out, scrubbed or given back), and the caller copies p to the
        // next allocator.
        Err(NotMoved::Lost) => Moved::Lost,
        Err(NotMoved::Remapped) => {
            again();
            // The fresh mapping at q has no policy: its lane's node again.
            if let Some(node) = lane_node(lane_of(p)) {
                let _ = sys::prefer_node(q, old, node);
            }
            Moved::Copy
        }
        Err(NotMoved::Refused) => Moved::Copy,
    }
}
