//! The cache's `realloc` under the lazy mode (its hook
//! `Hooks::realloc_move`, [`moving`]): a block up to [`MOVE_MAX`] moves
//! with `UFFDIO_MOVE` (no mapping changes), with `POP` held; what the move
//! leaves is copied, under `POP` too (see [`copy_missing`]); a larger one
//! moves with the cache's plain move (`mremap`), after which the cache's
//! range is registered again, `POP` held throughout.

use std::sync::atomic::Ordering;

use super::{active, fd, PopGuard, PAGE, PAGEMAP};
use crate::cache::{self, Moved};
use crate::sys::uffd;
use crate::sys::{self, Errno};

/// The cache's `realloc` moves the program's block `[p, p + old)` to its
/// block at `q` (the hook's contract: `cache/hooks.rs`). The move populates
/// `[q, q + old)` by other than a fault: the fault handler must not
/// meanwhile find a block there empty and drop it, so `POP` is held (with
/// the thread's signals blocked) from before the move until the range is
/// whole and registered again; the cache's plain move under it takes no
/// lock and touches neither block (`mremap`, `mmap`, `mbind`). The kernel
/// does not carry the range's registration over to what `mremap` and the
/// fresh mapping make: registered again as soon as they are made. Where the
/// lazy mode does not run in this process (not started, or a forked child),
/// the plain move alone.
pub(super) fn moving(p: usize, old: usize, q: usize) -> Moved {
    if !active() {
        return cache::move_plain(p, old, q, &|| {});
    }
    let g = PopGuard::program();
    if old <= MOVE_MAX {
        match move_block(&g, p, old, q) {
            // The new block's pages could not be dropped: a page there would
            // pass for one moved, and keep its bytes. The plain move below
            // replaces its mapping instead.
            None => {}
            Some(n) if n < old => {
                // A page shared with a child stopped the move, or the kernel
                // refused it: the rest copied (what the block lacks: the
                // kernel may not have counted all it moved), the guard still
                // held.
                copy_missing(&g, p, old, q);
                return Moved::Filled;
            }
            Some(_) => return Moved::Emptied { remapped: false },
        }
    }
    cache::move_plain(p, old, q, &|| register_cache_again(&g))
}

/// Blocks up to this size move with `UFFDIO_MOVE` when the cache's
/// `realloc` moves them under the lazy mode (see [`move_block`]); larger
/// ones with `mremap`, whose page-table moves cost nothing per page.
const MOVE_MAX: usize = 8 << 20;

/// Moves the pages of the cache's block `[from, from + len)` to the block
/// at `to` (whose own pages are dropped first: the move fills only missing
/// ones), with `POP` held ([`moving`]): the bytes
/// moved from the start (all of `len`, or up to a page shared with a forked
/// child, which a move refuses); `None`, with nothing moved, where `to`'s
/// pages could not be dropped. `UFFDIO_MOVE` changes no mapping (0.3 µs a
/// small page here); `mremap` makes new ones, which the registration then
/// keeps from merging back (about 25 more per 1000 moves of a realloc churn
/// here, till vm.max_map_count).
fn move_block(_: &PopGuard, from: usize, len: usize, to: usize) -> Option<usize> {
    // SAFETY: the block just granted to the caller (the cache's realloc),
    // whose contents it is about to replace.
    unsafe { sys::discard(to, len) }.ok()?;
    // SAFETY: both blocks are the caller's (the program's, and the one just
    // granted it, now without pages), in the cache's range, registered with
    // this descriptor.
    Some(
        match unsafe { uffd::move_range(fd(), to, from, len, uffd::MOVE_SRC_HOLES) } {
            (_, Ok(())) => len,
            (moved, Err(_)) => moved,
        },
    )
}

/// After a move of `[from, from + len)` to `to` ([`move_block`]) that did
/// not say it moved all, with its guard still held: fills the pages `to`
/// lacks with copies of `from`'s, where `from` has pages (a hole there
/// reads zero, as the missing page at `to` does: nothing to copy, and no
/// fault on `from` that would wait on the handler, which waits on `POP`).
/// A page present at `to` came from `from` (its pages were dropped first,
/// and the kernel may report an error for pages it moved: a batch that hit
/// EAGAIN, then EEXIST, with nothing counted); a copy over them from the
/// emptied source would write zeroes over the block's bytes.
///
/// All of it under `POP`: with it given back, the handler serving another
/// thread's fault in the same 2 MiB block filled `to`'s missing pages with
/// zeroes, which then looked moved, and the bytes were lost.
/// `UFFDIO_COPY` fills them without faulting; a page it cannot fill on its
/// own (not registered: a move or a fresh mapping dropped the
/// registration; or a call the kernel refuses) is copied plainly, which a
/// fault the handler serves after its wait for `POP` may delay, never
/// lose.
fn copy_missing(_: &PopGuard, from: usize, len: usize, to: usize) {
    for_runs(to, to + len, false, |a, b| {
        for_runs(from + (a - to), from + (b - to), true, |s, e| {
            fill(to + (s - from), s, e - s);
            true
        });
        true
    });
}

/// `[dst, dst + len)`'s missing pages filled from `src` (see
/// [`copy_missing`]), a page at a time where the range as a whole is
/// refused.
fn fill(mut dst: usize, mut src: usize, len: usize) {
    let end = dst + len;
    let mut whole = true;
    let mut again = 0;
    while dst < end {
        let n = if whole { end - dst } else { PAGE };
        // SAFETY: `src` is the caller's block, present there (for_runs).
        let step = match unsafe { uffd::copy(fd(), dst, src, n) } {
            Ok(done) if done > 0 => done,
            // A page there already (moved).
            Err(Errno(libc::EEXIST)) => PAGE,
            // The mappings changing meanwhile: again, a few times.
            Err(Errno(libc::EAGAIN)) if again < 8 => {
                again += 1;
                continue;
            }
            // Across two mappings, or one not registered: page by page.
            Err(Errno(libc::ENOENT)) if whole => {
                whole = false;
                continue;
            }
            _ => {
                // SAFETY: both blocks are the caller's, disjoint; this
                // page of `src` is present, of `dst` missing.
                unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, PAGE) };
                PAGE
            }
        };
        again = 0;
        dst += step;
        src += step;
    }
}

/// Calls `f(a, b)` for each run `[a, b)` of pages of `[at, end)` that have
/// pages (`present`) or none, in order, while it says to go on; where the
/// kernel cannot say, the whole range as having none (`present`: as
/// having them).
fn for_runs(mut at: usize, end: usize, present: bool, mut f: impl FnMut(usize, usize) -> bool) {
    let pm = PAGEMAP.load(Ordering::Relaxed);
    let any = uffd::PAGE_IS_PRESENT | uffd::PAGE_IS_SWAPPED;
    let mut out = [uffd::Region::default(); 32];
    while at < end {
        let Ok((n, walk_end)) = uffd::scan(pm, at, end, 0, any, any, &mut out) else {
            f(at, end);
            return;
        };
        for r in &out[..n] {
            let (s, e) = ((r.start as usize).max(at), (r.end as usize).min(end));
            let go = if present {
                f(s, e)
            } else {
                s <= at || f(at, s)
            };
            if !go {
                return;
            }
            at = at.max(e);
        }
        if n < out.len() {
            if !present && end > at {
                f(at, end);
            }
            return;
        }
        at = at.max(walk_end);
    }
}

/// Registers the cache's whole range again after `mremap` and
/// `mmap(MAP_FIXED)` changed its mappings, with `POP` held ([`moving`]).
/// The kernel carries no registration over to the mapping a move
/// makes, and clears it on the whole mapping that one merges into, which
/// may take in a neighbour's registered pages: the whole range, then, not
/// only the two parts that moved (mappings already registered are skipped;
/// those that are not merge back with their neighbours).
fn register_cache_again(g: &PopGuard) {
    if let Some((base, len)) = cache::range().filter(|_| g.may_register()) {
        // SAFETY: the handler thread runs (the lazy mode is on, under POP),
        // and answers every fault.
        if unsafe { uffd::register(fd(), base, len, uffd::Mode::Missing) }.is_ok() {
            let _ = sys::madvise(base, len, sys::Advice::NoHugePage);
        }
    }
}
