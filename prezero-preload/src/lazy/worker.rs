//! The reserve's background threads, one per lane, each bound to its node's
//! CPUs and out of the program's way (`crate::threads::Polite`: after a
//! piece of work in which the CPU was busy it waits): scrubs the
//! lane's huge pages moved back (streaming stores), fills its empty slots
//! ahead of demand once the lane may fill (to a sixteenth of the memory the
//! program has resident, or whole where a person sized the reserve), and gives the lane back to the
//! kernel when the program has neither faulted nor freed a huge page for
//! the idle time (`PREZERO_IDLE_SECS`); the next fault starts it filling
//! again. They live while the lazy mode serves (the handler's), and end
//! with it; retiring (the program may have changed who it is), each gives
//! its lane back first.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::reserve::{self, DIRTY, EMPTY, FILLING, READY, SCRUBBING, TAKEN};
use super::stats::Count;
use super::{lanes, now_ms, stats, LAST_ACTIVE, SETTINGS};
use crate::sys;
use crate::threads::{self, End, Owner, Polite, CHECK_MS};

/// After a fill or a give-back the kernel refused (no memory, locked
/// memory), the worker waits this long before it tries again.
const BACKOFF_MS: u64 = 5000;

/// The lane the next worker started serves.
static NEXT_LANE: AtomicUsize = AtomicUsize::new(0);

/// The next worker started serves the first lane (all are started anew).
pub fn first_lane() {
    NEXT_LANE.store(0, Ordering::Relaxed);
}

/// A worker's body: it takes the next lane, binds itself to its node's
/// CPUs, and scrubs, fills and gives back that lane until it is asked to
/// end or the lazy mode stops.
pub fn run() {
    let lane = NEXT_LANE.fetch_add(1, Ordering::Relaxed);
    lanes::bind_worker(lane);
    reserve::serve_lane(lane);
    let mut polite = Polite::default();
    let mut backoff_until = 0;
    let mut release_from = 0;
    let mut bound_read = 0;
    loop {
        let seen = reserve::work(lane).load(Ordering::Acquire);
        // After `seen`: a wake after these looks ends the wait below.
        threads::sync();
        let end = threads::stopping(Owner::Workers);
        if end.is_some() || !super::serving() {
            // No page moves back into a lane without a worker.
            reserve::unserve_lane(lane);
            if end != Some(End::Stop) {
                reserve::give_back_lane(lane);
            }
            // Stopped for good on the handler, whose table is its own: the
            // program's copy of the descriptor goes here.
            super::close_left();
            return;
        }
        let now = now_ms();
        let idle = now.saturating_sub(LAST_ACTIVE.load(Ordering::Relaxed))
            >= SETTINGS.idle_ms.load(Ordering::Relaxed);
        if idle && now >= release_from {
            // Ready pages first, then the ones still to scrub.
            if let Some(i) =
                reserve::take(lane, READY, TAKEN).or_else(|| reserve::take(lane, DIRTY, SCRUBBING))
            {
                if reserve::drop_pages(i) {
                    stats::LAZY.add(Count::Released, 1);
                } else {
                    // Kept (DIRTY now): the kernel would keep the others too.
                    release_from = now + BACKOFF_MS;
                }
                continue;
            }
        }
        let busy = polite.wait_ms(CHECK_MS);
        if busy > 0 {
            // The CPU was busy at the last piece: the program's first.
            sys::futex_wait(reserve::work(lane), seen, busy);
            continue;
        }
        if let Some(i) = reserve::take(lane, DIRTY, SCRUBBING) {
            polite.run(|| reserve::scrub(i, false));
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
                if !polite.run(|| reserve::fill(i, true)) {
                    backoff_until = now + BACKOFF_MS;
                }
                continue;
            }
        }
        // Woken by a slot freed or made dirty; else a look each CHECK_MS
        // (at `crate::threads`, and at the idle time).
        sys::futex_wait(reserve::work(lane), seen, CHECK_MS);
    }
}
