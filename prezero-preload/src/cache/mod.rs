//! The large-block cache: one reserved address range, the blocks in it
//! ([`Blocks`]), one lock, and the scrubber thread.
//!
//! Concurrency: every change to the blocks happens under the lock
//! (`SHARED.mutex`, see `lock.rs`; its place among the crate's locks:
//! `lib.rs`). Memory is
//! cleared, populated or given back outside it, only while its block is
//! InUse (the caller's: `calloc` clearing what was Dirty) or Busy (the
//! scrubber's or a releasing thread's): no one else may touch a block in
//! either state, and a request that would need a Busy block waits for the
//! event every end of Busy signals, for 2 ms at most (with every core busy
//! the scrubber's step may be preempted for long), then takes the best run
//! around the Busy blocks.
//!
//! The same starvation can catch the scrubber holding the lock itself: a
//! program's `malloc`, `calloc` or `free` then waits a few milliseconds at
//! most, and goes on without it (see `lock.rs`). The threads' steps (requests, frees
//! over the cap, the scrubber, fork) are checked in every interleaving in
//! `interleavings/`.
//!
//! Limits: free memory with pages behind it (Dirty, Clean, Busy) stays under
//! `cap`: a `free` that takes it past gives the oldest back (`MADV_DONTNEED`)
//! before it returns; free memory unused for `idle_secs` goes back too (the
//! scrubber). Memory the program holds is not capped: that is its own.
//!
//! Spare (the scrubber keeps zeroed memory ahead of a program that frees and
//! asks again faster than it clears) and fork: see `scrubber.rs` and `fork.rs`.
//!
//! NUMA: on a machine of several nodes the range is cut in lanes, one per
//! node with memory (bound to it, so its fresh pages come from there) and
//! one unbound (see `nodes.rs`), each with its own blocks. A request takes
//! only from the lane of the calling thread's node (or policy), a freed
//! block goes back to the lane it lies in, and the scrubber clears blocks
//! where they are: pages never pass from one node's lane to another's. On one
//! node there is one lane, and a request costs one more comparison.
//!
//! This file holds the cache, its lock and the range's bounds, and starts
//! it; beside it:
//!
//! * `requests.rs`: the entry points' large path (`alloc`, `free`,
//!   `realloc`, `usable_size`);
//! * `lock.rs`: the lock's holders, and how a program's thread gives up on
//!   a starved scrubber;
//! * `deferred.rs`: the frees left for the lock's next holder;
//! * `range.rs`: the range's mappings: reserved, made writable, given back;
//! * `scrubber.rs`: the scrubber thread, the prefill and the spare;
//! * `fork.rs`: the `pthread_atfork` handlers;
//! * `hooks.rs`: what the lazy mode does at three points of the cache's
//!   work (a block handed out, a block moved by `realloc`, free memory given
//!   back), set by it at start-up: the cache never names it.

mod deferred;
mod fork;
mod hooks;
#[cfg(test)]
mod interleavings;
mod lock;
mod range;
mod requests;
mod scrubber;

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::blocks::{Blocks, PAGE};
use crate::config::Config;
use crate::nodes::{Nodes, MAX_LANES};
use crate::stats::{self, Count};
use crate::sys;
use lock::{lock, signal_all, Guard};

// The lazy mode's way in (see hooks.rs).
pub use hooks::{set_hooks, Hooks, Moved};
pub use requests::move_plain;
pub use scrubber::is_scrubber;

// Only entry/ calls them, and a test build leaves it out.
#[cfg(not(test))]
pub use requests::{alloc, free, realloc, usable_size};

/// One lane of the range: a node's, or the unbound one (see `nodes.rs`).
struct Lane {
    blocks: Blocks,
    /// `[base, writable)` is read-write; the rest of the lane `PROT_NONE`.
    writable: usize,
    /// Clean bytes the scrubber keeps ready: the largest `calloc` that found
    /// Dirty memory to clear since memory last went back (see `Config::spare`).
    spare: usize,
}

struct Cache {
    /// `lanes[..n_lanes]` are in use, in address order.
    lanes: [Option<Lane>; MAX_LANES],
    n_lanes: usize,
    cfg: Config,
    /// A scrubber thread runs in this process.
    scrubber: bool,
    /// The last scrubber could not start (no `/proc`, a seccomp filter, no
    /// thread to be had): nothing is kept.
    helperless: bool,
    /// Prefill still to do (the scrubber does it first), and in which lane.
    prefill: usize,
    prefill_lane: usize,
}

/// The lock, its event, and the cache it guards.
struct Shared {
    mutex: sys::TagMutex,
    event: sys::Event,
    cache: UnsafeCell<Option<Cache>>,
}

// SAFETY: `cache` is only reached through a `Guard`, which holds `mutex`; the
// mutex and the event are made for sharing between threads.
unsafe impl Sync for Shared {}

static SHARED: Shared = Shared {
    mutex: sys::TagMutex::new(),
    event: sys::Event::new(),
    cache: UnsafeCell::new(None),
};

/// The range, readable without the lock (fixed once set): `[BASE, BASE + SPAN)`,
/// lane `i` at `BASE + (i << LANE_SHIFT)`.
static BASE: AtomicUsize = AtomicUsize::new(0);
static SPAN: AtomicUsize = AtomicUsize::new(0);
/// log2 of a lane's length (lanes are powers of two long).
static LANE_SHIFT: AtomicUsize = AtomicUsize::new(0);
/// Each lane's writable end (`Lane::writable`), readable without the lock:
/// the lazy mode's fault handler moves huge pages only below it, and takes
/// no lock a faulting thread might hold.
static WRITABLE: [AtomicUsize; MAX_LANES] = [const { AtomicUsize::new(0) }; MAX_LANES];
/// The nodes the lanes are for (set before STARTED, read after it).
static NODES: std::sync::OnceLock<Nodes> = std::sync::OnceLock::new();
static STARTED: AtomicBool = AtomicBool::new(false);
/// Requests waiting for a Busy block (raised under the lock).
static WAITING: AtomicUsize = AtomicUsize::new(0);
/// Milliseconds on a coarse monotonic clock. Not whole seconds: a block
/// freed at 10.99 s would count as idle for a second at 11.0 s, so memory went
/// back up to a second before PREZERO_IDLE_SECS.
fn now() -> u64 {
    sys::coarse_ms()
}

/// Reserves the range and sets up the cache; false if it cannot (then every
/// request goes to the next allocator).
pub fn start(cfg: Config) -> bool {
    // Before the scrubber can start (here, or at a `free` once the cache
    // serves): a stop must find how to start it again.
    crate::threads::register(crate::threads::Owner::Cache, &SCRUBBER_HOOKS);
    // Before the lazy mode's, which start-up sets up after the cache: under
    // pressure free blocks go back before the reserve.
    crate::pressure::register(&PRESSURE_HOOKS);
    // One lane per node with memory, and the unbound one (one in all on a
    // machine of one node, or where sysfs does not say).
    let nodes = Nodes::read().unwrap_or(Nodes::parse(b"0").expect("one node"));
    let n_lanes = nodes.lanes();
    let Some((raw, base, lane_len)) = range::reserve(n_lanes) else {
        return false;
    };
    let mut lanes: [Option<Lane>; MAX_LANES] = std::array::from_fn(|_| None);
    for (i, slot) in lanes.iter_mut().enumerate().take(n_lanes) {
        let Some(list) = range::block_list() else {
            range::unreserve(raw, n_lanes, lane_len);
            return false;
        };
        let at = base + i * lane_len;
        if let Some(node) = nodes.node_of(i).filter(|_| n_lanes > 1) {
            // Fresh pages of a node's lane come from the node. Refused (a
            // kernel without NUMA), the lane is placed as the kernel places.
            let _ = sys::prefer_node(at, lane_len, node);
        }
        *slot = Some(Lane {
            blocks: Blocks::new(at, at + lane_len, list),
            writable: at,
            spare: 0,
        });
        WRITABLE[i].store(at, Ordering::Release);
    }
    let prefill = cfg.prefill.min(cfg.cap) / PAGE * PAGE;
    let prefill_lane = crate::nodes::caller_lane(&nodes);
    let _ = NODES.set(nodes);
    let g = lock();
    // SAFETY: the mutex is held; nothing has a reference to the cache yet.
    unsafe {
        *SHARED.cache.get() = Some(Cache {
            lanes,
            n_lanes,
            cfg,
            scrubber: false,
            helperless: false,
            prefill,
            prefill_lane,
        })
    };
    BASE.store(base, Ordering::Release);
    LANE_SHIFT.store(lane_len.trailing_zeros() as usize, Ordering::Release);
    SPAN.store(lane_len * n_lanes, Ordering::Release);
    STARTED.store(true, Ordering::Release);
    drop(g);
    // Handlers that take and give back the lock, and start the child anew.
    sys::atfork(
        Some(fork::before_fork),
        Some(fork::after_fork),
        Some(fork::in_child),
    );
    if prefill > 0 {
        ensure_scrubber();
    }
    // The kernels' choice now, while the process has one thread, not in the
    // first calloc that clears (see before_fork).
    let _ = prezero::active_size_classes();
    true
}

/// What `crate::threads`' looks and stops ask of the scrubber.
static SCRUBBER_HOOKS: crate::threads::Hooks = crate::threads::Hooks {
    wake: wake_scrubber,
    leaving: None,
    joined: None,
};

/// Starts the scrubber thread if this process has none.
fn ensure_scrubber() {
    // After a seccomp filter, no system call of ours that the program would
    // not make itself (a filter may kill it): no thread, nothing watched.
    if crate::threads::never() {
        return;
    }
    // The cache holds memory for later from now on.
    crate::pressure::watch();
    {
        // Not to be had: a scrubber holds it, so one exists.
        let Some(mut g) = lock::lock_unless_starved() else {
            return;
        };
        if g.cache().scrubber {
            return;
        }
        g.cache().scrubber = true;
        // Here, not after the spawn: the new scrubber may take the lock at
        // once and be starved holding it, and this free must not wait.
        g.cache().helperless = false;
    }
    if !crate::threads::spawn(
        "prezero-scrub",
        crate::threads::Kind::Other,
        scrubber::scrub,
    ) {
        // No scrubber (none may start here): freed blocks go back at once,
        // as under a cap of 0 (none would give them back later); `calloc`
        // clears what it takes. No scrubber holds the lock.
        let mut g = lock();
        g.cache().scrubber = false;
        g.cache().helperless = true;
    }
}

/// Wakes the scrubber for a look at `crate::threads`, under the lock it
/// looks with (it cannot miss the wake), if the lock is free: the caller
/// may be a signal handler that interrupted this thread inside the cache's
/// lock (`set*id` may be called from one), and waiting on it would be for
/// ever. Where it is taken the scrubber looks at its next wake (a second at
/// most), within the caller's wait.
fn wake_scrubber() {
    if STARTED.load(Ordering::Acquire) && SHARED.mutex.try_lock(lock::PROGRAM) {
        signal_all();
        // SAFETY: locked just above, by this thread.
        unsafe { SHARED.mutex.unlock() };
    }
}

/// What memory pressure asks of the cache (`crate::pressure`).
static PRESSURE_HOOKS: crate::pressure::Hooks = crate::pressure::Hooks {
    give_back: give_back_free,
    trim: Some(trim),
    holds: scrubber_runs,
};

/// Whether the scrubber runs (it does while the cache holds free memory).
fn scrubber_runs() -> bool {
    STARTED.load(Ordering::Acquire) && lock().cache().scrubber
}

/// Gives back every free block with pages (memory is short): a no-op before
/// the cache starts.
fn give_back_free() {
    if !STARTED.load(Ordering::Acquire) {
        return;
    }
    let mut g = lock();
    requests::free_deferred(&mut g);
    while range::release_one(&mut g, u64::MAX) {}
}

/// Gives back the oldest free blocks until what the cache keeps fits its cap
/// again (the room left shrank): a no-op before the cache starts.
fn trim() {
    if !STARTED.load(Ordering::Acquire) {
        return;
    }
    let mut g = lock();
    requests::free_deferred(&mut g);
    loop {
        let c = g.cache();
        if c.held() <= c.cap() || !range::release_one(&mut g, u64::MAX) {
            return;
        }
    }
}

/// Whether `p` is in the range: then it is the cache's. Every `free` in the
/// process asks, so one subtraction and one comparison: SPAN is 0 until the
/// range exists, and is stored after BASE (read it first, Acquire: free on
/// x86). A thread that sees the old SPAN was not handed any of the range.
#[inline(always)]
pub fn owns(p: usize) -> bool {
    let span = SPAN.load(Ordering::Acquire);
    p.wrapping_sub(BASE.load(Ordering::Relaxed)) < span
}

/// The range `[base, base + span)`, once reserved.
pub fn range() -> Option<(usize, usize)> {
    let span = SPAN.load(Ordering::Acquire);
    (span > 0).then(|| (BASE.load(Ordering::Relaxed), span))
}

/// The writable end of the lane `p` lies in, if `p` is in the range and
/// below it. Lock-free (see `WRITABLE`).
pub fn writable_end(p: usize) -> Option<usize> {
    if !owns(p) {
        return None;
    }
    let end = WRITABLE[lane_of(p)].load(Ordering::Acquire);
    (p < end).then_some(end)
}

/// The lane `p` (in the range) lies in: one shift (0 with one lane, whose
/// offsets are all below its length).
fn lane_of(p: usize) -> usize {
    (p - BASE.load(Ordering::Relaxed)) >> LANE_SHIFT.load(Ordering::Relaxed)
}

/// The node lane `lane` is bound to, if it is a node's (never on a machine
/// of one lane).
fn lane_node(lane: usize) -> Option<u32> {
    NODES
        .get()
        .filter(|n| n.lanes() > 1)
        .and_then(|n| n.node_of(lane))
}

/// The lane of the calling thread (its node, or policy): system calls only
/// on a machine of several nodes, made before the lock is taken.
fn caller_lane() -> usize {
    NODES.get().map_or(0, crate::nodes::caller_lane)
}

impl Cache {
    fn lane(&mut self, i: usize) -> &mut Lane {
        self.lanes[i].as_mut().expect("a lane in use")
    }

    /// The lanes in use.
    fn lanes(&mut self) -> impl Iterator<Item = &mut Lane> {
        self.lanes[..self.n_lanes].iter_mut().flatten()
    }

    /// The most free bytes kept: the configured cap, within a quarter of the
    /// room the machine and the memory cgroup have left now (read again each
    /// second); none under memory pressure, nor where no scrubber may start
    /// (nothing would give memory back later).
    fn cap(&self) -> usize {
        if crate::pressure::pressed() || self.helperless || crate::threads::never() {
            return 0;
        }
        self.cfg.cap.min(crate::pressure::room() / 4)
    }

    /// Free bytes with pages behind them, over every lane: what the cap bounds.
    fn held(&mut self) -> usize {
        self.lanes().map(|l| l.blocks.bytes.held()).sum()
    }

    fn peaks(&mut self) {
        let held = self.held();
        let in_use: usize = self.lanes().map(|l| l.blocks.bytes.in_use).sum();
        stats::CACHE.max(Count::PeakHeld, held as u64);
        stats::CACHE.max(Count::PeakInUse, in_use as u64);
    }
}
