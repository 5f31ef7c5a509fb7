//! The scrubber thread: it prefills, gives idle memory back, clears Dirty
//! blocks with streaming stores, and populates the spare, a piece at a time,
//! out of the program's way (`crate::threads::Polite`: after a piece in
//! which the CPU was busy it waits). It exists while the cache holds memory
//! or has work: with nothing free and nothing to do it ends, and the next
//! `free` starts another. Asked to retire (the program may have changed who
//! it is), it gives back everything free before it ends.
//!
//! Spare (opt-in, `Config::spare`): a `calloc` that had to clear Dirty
//! memory itself shows the program frees and asks again faster than the
//! scrubber clears (numpy's `del a; a = np.zeros(n)`). If the cap holds two
//! blocks of that size, the scrubber, when nothing is Dirty, then populates
//! fresh memory at the end of the range until the longest Clean block is
//! that long, so the next request takes zeroes while the block just freed
//! is scrubbed. Memory going back (idle, cap) ends the spare.

use std::sync::atomic::{AtomicU32, Ordering};

use super::lock::lock_as_scrubber;
use super::range::release_one;
use super::requests::{free_deferred, take};
use super::{now, signal_all, Guard, WAITING};
use crate::blocks::{Kind, PAGE};
use crate::stats::{self, Count};
use crate::sys::{self, Advice, Errno};
use crate::threads::{self, End, Owner, Polite, CHECK_MS};

/// Bytes the prefill populates between looks at `crate::threads`: some
/// 1-2 ms of the kernel's faults.
const PREFILL_STEP: usize = 8 << 20;

/// Bytes the scrubber clears between looks at the lock: ~0.3 ms of streaming
/// stores, so a request waiting on a Busy block waits little.
const SCRUB_CHUNK: usize = 8 << 20;

/// The scrubber thread's id: the lazy mode's handler serves its populating
/// fills huge pages at once.
static TID: AtomicU32 = AtomicU32::new(0);

/// Whether `tid` is this process's scrubber.
pub fn is_scrubber(tid: u32) -> bool {
    tid != 0 && TID.load(Ordering::Relaxed) == tid
}

/// The scrubber: prefills, gives idle memory back, clears Dirty blocks
/// with streaming stores, and populates the spare; ends when the cache holds
/// nothing and has nothing to do.
pub(super) fn scrub() {
    TID.store(sys::gettid(), Ordering::Relaxed);
    let mut polite = Polite::default();
    let mut g = lock_as_scrubber();
    let prefill = std::mem::take(&mut g.cache().prefill);
    let prefill_lane = g.cache().prefill_lane;
    if prefill > 0 {
        drop(g);
        do_prefill(prefill_lane, prefill, &mut polite);
        g = lock_as_scrubber();
    }
    loop {
        // Under the lock, which a look takes to wake this thread.
        threads::sync();
        if let Some(end) = threads::stopping(Owner::Cache) {
            if end == End::Retire {
                give_back_all(&mut g);
            }
            g.cache().scrubber = false;
            return;
        }
        // Frees a program's thread left while this thread kept the lock;
        // then the cap as `free` keeps it.
        free_deferred(&mut g);
        let cap = g.cache().cap();
        if g.cache().held() > cap && release_one(&mut g, u64::MAX) {
            continue;
        }
        let idle = g.cache().cfg.idle_secs;
        let free = Free::of(&g.cache().cfg);
        if release_one(&mut g, now().saturating_sub(idle.saturating_mul(1000))) {
            continue;
        }
        if WAITING.load(Ordering::Relaxed) > 0 {
            // A request waits for the step just done: let it take the block
            // before the next step makes part of it Busy again.
            g.wait_ms(1);
            continue;
        }
        let busy = polite.wait_ms(CHECK_MS);
        if busy > 0 {
            // The CPU was busy at the last piece: the program's first.
            g.wait_ms(busy);
            continue;
        }
        // The oldest Dirty block of any lane, cleared where it is: its pages
        // stay on their node.
        let c = g.cache();
        let dirtiest = if c.n_lanes == 1 {
            Some((0, 0))
        } else {
            (0..c.n_lanes)
                .filter_map(|i| Some((c.lane(i).blocks.oldest_dirty()?, i)))
                .min()
        };
        if let Some((s, l, lane)) = dirtiest.and_then(|(_, i)| {
            Some(c.lane(i).blocks.scrub_take(SCRUB_CHUNK)?).map(|(s, l)| (s, l, i))
        }) {
            drop(g);
            let t = std::time::Instant::now();
            let run = prezero::FreeRunning::start();
            // SAFETY: [s, s + l) is a Busy block of our range: the scrubber's
            // alone until busy_done.
            let _ = polite.run(|| unsafe {
                prezero::clear_raw_with(s as *mut u8, l, prezero::Temperature::Cold)
            });
            if run.still() {
                // SAFETY: as above, and zero now.
                unsafe { mark_free(s, l, free) };
            }
            stats::CACHE.add(Count::ScrubNs, t.elapsed().as_nanos() as u64);
            stats::CACHE.add(Count::ScrubbedBytes, l as u64);
            g = lock_as_scrubber();
            g.cache().lane(lane).blocks.busy_done(s, Kind::Clean);
            signal_all();
            continue;
        }
        if let Some((s, l, lane)) = spare_take(&mut g) {
            drop(g);
            populate_spare(s, l, lane, free, &mut polite);
            g = lock_as_scrubber();
            continue;
        }
        if g.cache().held() == 0 {
            // Nothing held, nothing to do: no thread of ours waits for work
            // (the next `free` starts one).
            g.cache().scrubber = false;
            return;
        }
        // Free blocks kept for reuse, until they have been idle long enough
        // to go back.
        g.wait_ms(CHECK_MS);
    }
}

/// Gives back every free block (a retiring scrubber: the program may have
/// changed who it is, and no thread of ours keeps memory for it).
fn give_back_all(g: &mut Guard) {
    free_deferred(g);
    while release_one(g, u64::MAX) {}
}

/// Populates the spare `[s, s + l)` of lane `lane` (Busy, the scrubber's),
/// and marks it Clean, or Fresh where the kernel refused.
fn populate_spare(s: usize, l: usize, lane: usize, free: Free, polite: &mut Polite) {
    // [s, s + l) is a Busy block of our range, without pages (Fresh or
    // beyond top): the scrubber's alone until busy_done. The kernel's pages
    // are zero, so populated it is Clean.
    let run = prezero::FreeRunning::start();
    let populated = polite.run(|| sys::madvise(s, l, Advice::PopulateWrite));
    let ok = populated.is_ok();
    if ok && run.still() {
        // SAFETY: as above; the kernel's pages are zero.
        unsafe { mark_free(s, l, free) };
    }
    let unknown = populated == Err(Errno(libc::EINVAL));
    if !ok {
        // SAFETY: as above; drops what was populated before the failure.
        let _ = unsafe { sys::discard(s, l) };
    }
    let mut g = lock_as_scrubber();
    let c = g.cache();
    // A kernel before 5.14 has no MADV_POPULATE_WRITE: no spare.
    c.cfg.spare &= !unknown;
    let lanes = c.lane(lane);
    if ok {
        stats::CACHE.add(Count::SpareBytes, l as u64);
        lanes.blocks.busy_done(s, Kind::Clean);
        c.peaks();
    } else {
        lanes.spare = 0;
        lanes.blocks.busy_done(s, Kind::Fresh);
    }
    signal_all();
}

/// The next piece of a lane's spare to populate, now Busy, and the lane:
/// what its longest Clean block lacks, within the cap, a scrub chunk at most
/// (a request that needs it waits little). Populated by this thread, in a
/// node's lane it lands on the node (the lane's policy); in the unbound one
/// where the process's policy puts it.
fn spare_take(g: &mut Guard) -> Option<(usize, usize, usize)> {
    if crate::pressure::pressed() {
        return None;
    }
    let c = g.cache();
    let free_cap = c.cap().saturating_sub(c.held());
    let thp = c.cfg.thp;
    // Not in the unbound lane of several: populated by this thread its pages
    // would follow this thread's policy, not the program's threads'.
    let lanes = if c.n_lanes == 1 { 1 } else { c.n_lanes - 1 };
    for lane in 0..lanes {
        let l = c.lane(lane);
        // No spare wanted (the usual case): no walk of the block list.
        if l.spare == 0 {
            continue;
        }
        let chunk = l
            .spare
            .saturating_sub(l.blocks.largest_clean())
            .min(free_cap)
            .min(SCRUB_CHUNK);
        if chunk < PAGE {
            continue;
        }
        let top = l.blocks.top();
        let end = top.saturating_add(chunk).min(l.blocks.limit());
        let room = if l.blocks.ends_fresh() || l.ensure_writable(end, thp) {
            chunk
        } else {
            l.writable - top
        };
        if let Some((s, n)) = l.blocks.fresh_take(chunk, room, now()) {
            return Some((s, n, lane));
        }
    }
    None
}

/// Populates `bytes` of the range (the kernel zeroes fresh pages, `alloc`
/// clears any Dirty piece, here, in the background) and leaves them Clean for
/// the first requests.
fn do_prefill(lane: usize, bytes: usize, polite: &mut Polite) {
    // Zeroed: the program may have freed blocks before this thread got a core,
    // and the cheapest run for a plain request starts on such a Dirty block.
    // Populating does not clear what is already there, so a Dirty piece marked
    // Clean below would reach a later calloc unzeroed.
    let p = take(lane, bytes, 2 << 20, true, false);
    if p.is_null() {
        return;
    }
    // The block just granted to this thread, writable; in steps, between
    // which it looks at `crate::threads` (a stop ends the prefill there).
    let run = prezero::FreeRunning::start();
    let mut ok = true;
    for at in (0..bytes).step_by(PREFILL_STEP) {
        threads::sync();
        loop {
            let wait = polite.wait_ms(CHECK_MS);
            if wait == 0 || threads::stopping(Owner::Cache).is_some() {
                break;
            }
            sys::sleep_ms(wait);
            threads::sync();
        }
        let len = PREFILL_STEP.min(bytes - at);
        ok = threads::stopping(Owner::Cache).is_none()
            && polite
                .run(|| sys::madvise(p as usize + at, len, Advice::PopulateWrite))
                .is_ok();
        if !ok {
            break;
        }
    }
    let free = Free::of(&lock_as_scrubber().cache().cfg);
    if ok && run.still() {
        // SAFETY: the block is this thread's, and zero (taken zeroed).
        unsafe { mark_free(p as usize, bytes, free) };
    }
    let mut g = lock_as_scrubber();
    let l = g.cache().lane(lane);
    if ok {
        l.blocks.free_clean(p as usize, now());
    } else {
        l.blocks.free_fresh(p as usize);
    }
    signal_all();
}

/// How zeroed blocks the cache holds are marked free (`MADV_FREE`), so that
/// the kernel can take them back under pressure.
#[derive(Clone, Copy)]
enum Free {
    /// Each block whole.
    Whole,
    /// The 2 MiB-aligned interior only: a part of a huge page marked free
    /// splits it (the range asks for huge pages).
    HugeInterior,
}

impl Free {
    fn of(cfg: &crate::config::Config) -> Free {
        if cfg.thp {
            Free::HugeInterior
        } else {
            Free::Whole
        }
    }
}

/// Marks the zeroed block `[s, s + l)` free as `free` says.
///
/// # Safety
/// pre: the block is the calling thread's (Busy, or just granted), zero, and
/// nothing writes it while this runs.
unsafe fn mark_free(s: usize, l: usize, free: Free) {
    // SAFETY: as the caller promises (pre).
    let _ = unsafe { sys::free_lazily(s, l, matches!(free, Free::HugeInterior)) };
}
