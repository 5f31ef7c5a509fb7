//! The reserve's background thread, at `SCHED_IDLE` (it runs while a core
//! is idle): scrubs the huge pages moved back (streaming stores), fills empty
//! slots ahead of demand once the process may fill, and gives the reserve
//! back to the kernel when the program has neither faulted nor freed a huge
//! page for the idle time (`PREZERO_IDLE_SECS`); the next fault starts it
//! filling again.

use std::sync::atomic::Ordering;

use super::reserve::{self, DIRTY, EMPTY, FILLING, READY, SCRUBBING, TAKEN};
use super::{now_ms, stats, FILL, IDLE_MS, LAST_ACTIVE};
use crate::sys::uffd;

/// After a fill or a give-back the kernel refused (no memory, locked
/// memory), the worker waits this long before it tries again.
const BACKOFF_MS: u64 = 5000;

pub fn run() {
    prezero::ScrubPriority::Idle.apply_to_current_thread();
    let mut backoff_until = 0;
    let mut release_from = 0;
    loop {
        let seen = reserve::WORK.load(Ordering::Acquire);
        let now = now_ms();
        let idle = now.saturating_sub(LAST_ACTIVE.load(Ordering::Relaxed))
            >= IDLE_MS.load(Ordering::Relaxed);
        if idle && now >= release_from {
            // Ready pages first, then the ones still to scrub.
            if let Some(i) = reserve::take(READY, TAKEN).or_else(|| reserve::take(DIRTY, SCRUBBING))
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
        if let Some(i) = reserve::take(DIRTY, SCRUBBING) {
            reserve::scrub(i, false);
            continue;
        }
        let may_fill =
            !idle && FILL.load(Ordering::Relaxed) && now >= backoff_until && !reserve::pressed(now);
        if may_fill && reserve::held() < reserve::slots() {
            if let Some(i) = reserve::take(EMPTY, FILLING) {
                if !reserve::fill(i) {
                    backoff_until = now + BACKOFF_MS;
                }
                continue;
            }
        }
        // Woken by a slot freed or made dirty; else a look at the idle time
        // each second.
        uffd::futex_wait(&reserve::WORK, seen, 1000);
    }
}
