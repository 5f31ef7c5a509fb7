//! The reserved range's mappings: reserving it (and each lane's block list)
//! at start, making a lane writable as its blocks reach further, and giving
//! free memory back to the kernel (the cap and the idle limit).

use std::sync::atomic::Ordering;

use super::hooks::hooks;
use super::{now, signal_all, Guard, Lane, WRITABLE};
use crate::blocks::{Block, Kind};
use crate::stats::{self, Count};
use crate::sys::{self, Advice};

/// Bytes given back per `madvise`.
const RELEASE_CHUNK: usize = 64 << 20;
/// The range is made writable this much at a time.
const PROTECT_STEP: usize = 64 << 20;
/// Most blocks: 64K descriptors (2 MiB of list, touched as used).
const MAX_BLOCKS: usize = 1 << 16;

/// Reserves the range for `lanes` lanes of equal length, a power of two (a
/// pointer's lane is then one shift), 2 MiB-aligned: the reservation (for
/// [`unreserve`]), the range's start and the length of a lane; `None` if the
/// kernel refuses. The lanes share what one lane had (twice the memory):
/// an address-space limit judges the range as before.
pub(super) fn reserve(lanes: usize) -> Option<(usize, usize, usize)> {
    let mem = crate::config::mem_total().unwrap_or(16 << 30);
    let whole = (2 * mem).clamp(64 << 30, 1 << 40);
    let per_lane = whole / lanes;
    // The largest power of two not above it, 1 GiB at least.
    let mut len = (1usize << (usize::BITS - 1 - per_lane.leading_zeros())).max(1 << 30);
    // An address-space limit (ulimit -v) is the program's: a reservation that
    // does not fit goes to the next allocator whole rather than eat into it.
    // Without one, a refusal comes from something that cannot place that
    // much (valgrind takes 32 GiB, not 64): try smaller, down to 1 GiB.
    let unlimited = sys::address_space_unlimited();
    let raw = loop {
        // Charged as each part is made writable (ensure_writable), so the
        // kernel's overcommit policy judges a request as it would judge the C
        // library's own mmap of it: a malloc past RAM + swap fails here as it
        // fails without us, instead of succeeding and bringing the OOM killer
        // when the program touches it.
        if let Ok(raw) = sys::reserve(len * lanes + (2 << 20)) {
            break raw;
        }
        if !unlimited || len <= 1 << 30 {
            return None;
        }
        len /= 2;
    };
    // Blocks start 2 MiB-aligned, so transparent huge pages can back them.
    Some((raw, raw.next_multiple_of(2 << 20), len))
}

/// Gives back a reservation of `lanes` lanes of `len` bytes that [`reserve`]
/// made at `raw` and nothing uses.
pub(super) fn unreserve(raw: usize, lanes: usize, len: usize) {
    // SAFETY: the whole reservation, which no block was ever handed out of.
    let _ = unsafe { sys::munmap(raw, len * lanes + (2 << 20)) };
}

/// Maps a block list for one lane; `None` if the kernel refuses.
pub(super) fn block_list() -> Option<&'static mut [Block]> {
    let list_bytes = MAX_BLOCKS * std::mem::size_of::<Block>();
    let list = sys::map_noreserve(list_bytes).ok()?;
    // SAFETY: the mapping is ours alone for the life of the process, zeroed
    // by the kernel, and an all-zero Block is a valid value (start 0, len 0,
    // kind InUse, since 0).
    Some(unsafe { std::slice::from_raw_parts_mut(list as *mut Block, MAX_BLOCKS) })
}

impl Lane {
    /// Makes the lane writable up to `end`; false if the kernel refuses
    /// (overcommit, a mapping limit). `thp`: advise huge pages.
    pub(super) fn ensure_writable(&mut self, end: usize, thp: bool) -> bool {
        if end <= self.writable {
            return true;
        }
        let limit = self.blocks.limit();
        let new = end.next_multiple_of(PROTECT_STEP).min(limit);
        if end > new {
            return false;
        }
        let at = self.writable;
        // SAFETY: [writable, new) is part of our PROT_NONE reservation.
        if unsafe { sys::make_writable(at, new - at) }.is_err() {
            return false;
        }
        if thp {
            // Failure only means small pages.
            let _ = sys::madvise(at, new - at, Advice::HugePage);
        }
        self.writable = new;
        WRITABLE[super::lane_of(at)].store(new, Ordering::Release);
        true
    }
}

/// Gives back (MADV_DONTNEED) one chunk of the oldest free memory freed at or
/// before `before`; false if there is none. Unlocks while the kernel works.
pub(super) fn release_one(g: &mut Guard, before: u64) -> bool {
    // The oldest over every lane (with one lane no extra walk of its list).
    let c = g.cache();
    let lane = if c.n_lanes == 1 {
        0
    } else {
        let Some(lane) = (0..c.n_lanes)
            .filter_map(|i| Some((c.lane(i).blocks.oldest_free(before)?, i)))
            .min()
            .map(|(_, i)| i)
        else {
            return false;
        };
        lane
    };
    let Some((s, l)) = c.lane(lane).blocks.release_take(before, RELEASE_CHUNK) else {
        return false;
    };
    // Unlocked while the kernel drops the pages: the block is Busy, no one
    // else touches it.
    // Counted before the pages go: a program that sees them gone and exits
    // at once (a test watching its RSS) finds them in its stats line.
    stats::CACHE.add(Count::ReleasedBytes, l as u64);
    let ok = g.unlocked(|| {
        // The lazy mode moves its huge pages into its reserve first, scrubbed
        // there instead of faulted anew.
        if let Some(h) = hooks() {
            (h.releasing)(s, l);
        }
        // SAFETY: [s, s + l) is a Busy block of our range: no one else's.
        unsafe { sys::discard(s, l) }.is_ok()
    });
    let c = g.cache().lane(lane);
    if ok {
        c.blocks.busy_done(s, Kind::Fresh);
        // Memory went back (idle, or past the cap): no spare to make again.
        c.spare = 0;
    } else {
        stats::CACHE.sub(Count::ReleasedBytes, l as u64);
        // Kept (mlock'd memory): not idle again before idle_secs, or the
        // scrubber would clear it and fail to give it back in a loop.
        c.blocks.busy_failed(s, now());
    }
    signal_all();
    ok
}
