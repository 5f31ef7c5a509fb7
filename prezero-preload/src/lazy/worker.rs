//! The reserve's background threads, one per lane, at `SCHED_IDLE` (they
//! run while a core is idle), each bound to its node's CPUs: scrubs the
//! lane's huge pages moved back (streaming stores), fills its empty slots
//! ahead of demand once the lane may fill (to a sixteenth of the memory the
//! program has resident, or whole where a person sized the reserve), and gives the lane back to the
//! kernel when the program has neither faulted nor freed a huge page for
//! the idle time (`PREZERO_IDLE_SECS`); the next fault starts it filling
//! again.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::reserve::{self, DIRTY, EMPTY, FILLING, READY, SCRUBBING, TAKEN};
use super::{lanes, now_ms, stats, IDLE_MS, LAST_ACTIVE};
use crate::sys;
use crate::threads;

/// After a fill or a give-back the kernel refused (no memory, locked
/// memory), the worker waits this long before it tries again.
const BACKOFF_MS: u64 = 5000;

/// The lane the next worker started serves.
static NEXT_LANE: AtomicUsize = AtomicUsize::new(0);

/// The next worker started serves the first lane (all are started anew).
pub fn first_lane() {
    NEXT_LANE.store(0, Ordering::Relaxed);
}

pub fn run() {
    let lane = NEXT_LANE.fetch_add(1, Ordering::Relaxed);
    lanes::bind_worker(lane);
    reserve::serve_lane(lane);
    prezero::ScrubPriority::Idle.apply_to_current_thread();
    let mut backoff_until = 0;
    let mut release_from = 0;
    let mut bound_read = 0;
    let mut look = threads::first_look();
    loop {
        let seen = reserve::work(lane).load(Ordering::Acquire);
        // After `seen`: a wake after these looks ends the wait below.
        threads::sync(&mut look);
        if threads::stopping(threads::Owner::Workers) {
            return;
        }
        let now = now_ms();
        let idle = now.saturating_sub(LAST_ACTIVE.load(Ordering::Relaxed))
            >= IDLE_MS.load(Ordering::Relaxed);
        if idle && now >= release_from {
            // Ready pages first, then the ones still to scrub.
            if let Some(i) =
                reserve::take(lane, READY, TAKEN).or_else(|| reserve::take(lane, DIRTY, SCRUBBING))
            {
                if reserve::drop_pages(i) {
                    stats::RELEASED.fetch_add(1, Ordering::Relaxed);
                } else {
                    // Kept (DIRTY now): the kernel would keep the others too.
                    release_from = now + BACKOFF_MS;
                }
                continue;
            }
        }
        if let Some(i) = reserve::take(lane, DIRTY, SCRUBBING) {
            reserve::scrub(i, false);
            continue;
        }
        // The program's resident memory, which the default reserve is a
        // share of: read again at most every 100 ms.
        if now >= bound_read + 100 {
            bound_read = now;
            reserve::update_bound();
        }
        let may_fill = !idle
            && reserve::filling(lane)
            && now >= backoff_until
            && !reserve::pressed(now)
            && !crate::pressure::pressed();
        if may_fill && !reserve::full(lane) && !reserve::enough() {
            if let Some(i) = reserve::take(lane, EMPTY, FILLING) {
                if !reserve::fill(i, true) {
                    backoff_until = now + BACKOFF_MS;
                }
                continue;
            }
        }
        // Woken by a slot freed or made dirty; else a look at the idle time
        // each second.
        sys::futex_wait(reserve::work(lane), seen, 1000);
    }
}
