//! The cache's lock and who holds it. The scrubber may be preempted holding
//! it while the program's threads keep every core busy, and nothing lends
//! it the waiter's priority (priority inheritance lends real-time
//! priorities only). When it ran at `SCHED_IDLE` such a hold lasted most of
//! a second and held up every request (a `calloc` of 64 MiB took 441 ms in
//! a CI run); at the ordinary policy it is shorter, and still not bounded.
//!
//! So a program's `malloc`, `calloc` and `free` take the lock through
//! [`lock_unless_starved`]: if one hold of the scrubber's lasted through 2 ms
//! of their wait (a few ms in all, at most), they go on without it: a request
//! to the next allocator, a free leaves its block in `deferred.rs`, a
//! `realloc` that cannot grow in place copies to the next allocator. The
//! lock's word says who holds it, and which hold of the scrubber's
//! (`sys::TagMutex`), set by the step that takes it: no moment in which the
//! scrubber holds it unseen. Still waited for, as long as the scrubber keeps
//! it: a `realloc`'s first look and `malloc_usable_size` (they need the
//! block's length, which only the lock's holder may read), a `free` whose
//! slots are all taken, the kernel's part of a `free` past the cap (the
//! block it gives back is Busy until the lock is its again: a free that
//! finds blocks left makes their frees, and gives back past the cap for
//! them too), `fork`, and the memory pressure thread's give-back.

use std::sync::atomic::{AtomicU32, Ordering};

use super::{Cache, SHARED};
use crate::stats::{self, Count};
use crate::sys;

/// The lock's tag (`sys::TagMutex`) held by a thread of the program (or a
/// helper of the preload's). The scrubber's holds each have their own, from
/// 2 on: a request that sees one tag 2 ms apart saw one hold.
pub(super) const PROGRAM: u32 = 1;

/// The scrubber's holds of the lock so far (its tags: see [`scrubber_tag`]).
static SCRUBBER_HOLDS: AtomicU32 = AtomicU32::new(0);
/// The tag of the hold a request gave up on (0: none): the next requests,
/// while it lasts, give up at once.
static GAVE_UP_ON: AtomicU32 = AtomicU32::new(0);

/// The tag of the scrubber's next hold.
fn scrubber_tag() -> u32 {
    let n = SCRUBBER_HOLDS.fetch_add(1, Ordering::Relaxed);
    2 + n % (sys::TagMutex::MAX_TAG - 1)
}

/// Whether the lock's holder `tag` is the scrubber.
fn is_scrubber(tag: u32) -> bool {
    tag > PROGRAM
}
/// How long a program's request waits for a lock the scrubber holds, and for
/// a Busy block.
pub(super) const REQUEST_WAIT_MS: u64 = 2;

/// The cache's lock held; the cache through it. `scrubber`: by the scrubber
/// thread.
pub(super) struct Guard {
    scrubber: bool,
}

impl Guard {
    /// The cache the lock guards: reached only through a guard.
    pub(super) fn cache(&mut self) -> &mut Cache {
        // SAFETY: the mutex is held while the guard lives, so this is the only
        // reference; `started()` checked the cache exists before any guard.
        unsafe { (*SHARED.cache.get()).as_mut().expect("the cache is set up") }
    }

    /// Runs `f` with the lock let go, and takes it again for this holder.
    pub(super) fn unlocked<R>(&mut self, f: impl FnOnce() -> R) -> R {
        // SAFETY: this guard holds the mutex; it is taken again below before
        // the guard is used or dropped.
        unsafe { let_go() };
        let r = f();
        take(self.scrubber);
        r
    }

    /// Waits for a signal or `ms` milliseconds, the lock let go meanwhile;
    /// not at all while a free is left for the holder (`deferred.rs`).
    pub(super) fn wait_ms(&mut self, ms: u64) {
        // Read under the lock: a signal after it ends the wait. A free left
        // before it is in its slot, and found here.
        let seen = SHARED.event.seen();
        if super::deferred::any_left() {
            return;
        }
        self.unlocked(|| SHARED.event.wait(seen, ms));
    }

    /// [`Guard::wait_ms`] for a request: `None` if, to take the lock again,
    /// a program's thread would wait for a starved scrubber (see
    /// [`lock_unless_starved`]); the scrubber's prefill always takes it.
    pub(super) fn wait_unless_starved(self, ms: u64) -> Option<Guard> {
        let (scrubber, seen) = (self.scrubber, SHARED.event.seen());
        drop(self);
        SHARED.event.wait(seen, ms);
        if scrubber {
            Some(lock_as_scrubber())
        } else {
            lock_unless_starved()
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        // SAFETY: this guard holds the mutex, and is not used again.
        unsafe { let_go() };
    }
}

/// Takes the mutex, the scrubber's holds counted.
fn take(scrubber: bool) {
    if scrubber {
        SHARED.mutex.lock(scrubber_tag());
        sys::injected_stall();
    } else {
        SHARED.mutex.lock(PROGRAM);
    }
}

/// Gives the mutex back.
///
/// # Safety
/// pre: the calling thread holds the mutex.
unsafe fn let_go() {
    // SAFETY: held by this thread (pre).
    unsafe { SHARED.mutex.unlock() };
}

/// The lock, waited for as long as its holder keeps it.
pub(super) fn lock() -> Guard {
    take(false);
    Guard { scrubber: false }
}

/// The lock, for the scrubber thread.
pub(super) fn lock_as_scrubber() -> Guard {
    take(true);
    Guard { scrubber: true }
}

/// The lock, for a program's `malloc`, `calloc` or `free`: `None` if one
/// hold of the scrubber's lasted through [`REQUEST_WAIT_MS`] of waiting (a
/// running scrubber holds it for microseconds), or since another request
/// gave up on it. Held by threads of the program, the lock is waited for:
/// that wait is the program's own.
pub(super) fn lock_unless_starved() -> Option<Guard> {
    if SHARED.mutex.try_lock(PROGRAM) {
        return Some(Guard { scrubber: false });
    }
    let mut seen = SHARED.mutex.holder();
    let starved = |tag: Option<u32>| {
        let tag = tag.filter(|&t| is_scrubber(t))?;
        stats::CACHE.add(Count::AroundScrubber, 1);
        GAVE_UP_ON.store(tag, Ordering::Relaxed);
        Some(())
    };
    if seen == Some(GAVE_UP_ON.load(Ordering::Relaxed)) && starved(seen).is_some() {
        return None;
    }
    loop {
        if SHARED
            .mutex
            .lock_within(PROGRAM, REQUEST_WAIT_MS * 1_000_000)
        {
            return Some(Guard { scrubber: false });
        }
        let now = SHARED.mutex.holder();
        if now == seen && starved(now).is_some() {
            return None;
        }
        seen = now;
    }
}

/// Wakes every thread waiting for a change (see `sys::Event`).
pub(super) fn signal_all() {
    SHARED.event.signal_all();
}
