//! The reserved range's mappings: reserving it (and the block list) at
//! start, making it writable as blocks reach further, and giving free memory
//! back to the kernel (the cap and the idle limit).

use std::sync::atomic::Ordering;

use super::{limit, now, signal_all, Cache, Guard, SHARED};
use crate::blocks::{Block, Kind};
use crate::stats;
use crate::sys::{self, Advice};

/// Bytes given back per `madvise`.
const RELEASE_CHUNK: usize = 64 << 20;
/// The range is made writable this much at a time.
const PROTECT_STEP: usize = 64 << 20;
/// Most blocks: 64K descriptors (2 MiB of list, touched as used).
const MAX_BLOCKS: usize = 1 << 16;

/// Reserves the range and maps the block list: the range's start and length,
/// and the list; `None` if the kernel refuses.
pub(super) fn reserve() -> Option<(usize, usize, &'static mut [Block])> {
    let mem = crate::config::mem_total().unwrap_or(16 << 30);
    let mut len = (2 * mem).clamp(64 << 30, 1 << 40);
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
        if let Ok(raw) = sys::reserve(len + (2 << 20)) {
            break raw;
        }
        if !unlimited || len <= 1 << 30 {
            return None;
        }
        len /= 2;
    };
    // Blocks start 2 MiB-aligned, so transparent huge pages can back them.
    let base = raw.next_multiple_of(2 << 20);
    let list_bytes = MAX_BLOCKS * std::mem::size_of::<Block>();
    let Ok(list) = sys::map_noreserve(list_bytes) else {
        // SAFETY: the reservation just made, unused.
        let _ = unsafe { sys::munmap(raw, len + (2 << 20)) };
        return None;
    };
    // SAFETY: the mapping is ours alone for the life of the process, zeroed
    // by the kernel, and an all-zero Block is a valid value (start 0, len 0,
    // kind InUse, since 0).
    let list: &'static mut [Block] =
        unsafe { std::slice::from_raw_parts_mut(list as *mut Block, MAX_BLOCKS) };
    Some((base, len, list))
}

impl Cache {
    /// Makes the range writable up to `end`; false if the kernel refuses
    /// (overcommit, a mapping limit).
    pub(super) fn ensure_writable(&mut self, end: usize) -> bool {
        if end <= self.writable {
            return true;
        }
        let limit = limit();
        let new = end.next_multiple_of(PROTECT_STEP).min(limit);
        if end > new {
            return false;
        }
        let at = self.writable;
        // SAFETY: [writable, new) is part of our PROT_NONE reservation.
        if unsafe { sys::make_writable(at, new - at) }.is_err() {
            return false;
        }
        if self.cfg.thp {
            // Failure only means small pages.
            let _ = sys::madvise(at, new - at, Advice::HugePage);
        }
        self.writable = new;
        true
    }
}

/// Gives back (MADV_DONTNEED) one chunk of the oldest free memory freed at or
/// before `before`; false if there is none. Unlocks while the kernel works.
pub(super) fn release_one(g: &mut Guard, before: u64) -> bool {
    let Some((s, l)) = g.cache().blocks.release_take(before, RELEASE_CHUNK) else {
        return false;
    };
    // Unlocked while the kernel drops the pages: the block is Busy, no one
    // else touches it.
    // SAFETY: `g` holds the mutex; it is taken again below, before `g` is used.
    unsafe { SHARED.mutex.unlock() };
    // SAFETY: [s, s + l) is a Busy block of our range: no one else's.
    let ok = unsafe { sys::discard(s, l) }.is_ok();
    SHARED.mutex.lock();
    let c = g.cache();
    if ok {
        c.blocks.busy_done(s, Kind::Fresh);
        stats::RELEASED_BYTES.fetch_add(l as u64, Ordering::Relaxed);
        // Memory went back (idle, or past the cap): no spare to make again.
        c.spare = 0;
    } else {
        // Kept (mlock'd memory): not idle again before idle_secs, or the
        // scrubber would clear it and fail to give it back in a loop.
        c.blocks.busy_failed(s, now());
    }
    signal_all();
    ok
}
