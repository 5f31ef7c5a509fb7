//! The large-block cache: one reserved address range, the blocks in it
//! ([`Blocks`]), one lock, and the scrubber thread.
//!
//! Concurrency: every change to the blocks happens under `LOCK`. Memory is
//! cleared, populated or given back outside it, only while its block is
//! InUse (the caller's: `calloc` clearing what was Dirty) or Busy (the
//! scrubber's or a releasing thread's): no one else may touch a block in
//! either state, and a request that would need a Busy block waits on `LOCK`'s
//! condition variable, which every end of Busy signals, for 2 ms at most
//! (the scrubber is at `SCHED_IDLE`: with every core busy its step can take
//! most of a second), then takes the best run around the Busy blocks.
//!
//! Limits: free memory with pages behind it (Dirty, Clean, Busy) stays under
//! `cap`: a `free` that takes it past gives the oldest back (`MADV_DONTNEED`)
//! before it returns; free memory unused for `idle_secs` goes back too (the
//! scrubber). Memory the program holds is not capped: that is its own.
//!
//! Spare (opt-in, `Config::spare`): a `calloc` that had to clear Dirty
//! memory itself shows the program frees and asks again faster than the
//! scrubber clears (numpy's `del a; a = np.zeros(n)`). If the cap holds two
//! blocks of that size, the scrubber, when nothing is Dirty, then populates
//! fresh memory at the end of the range until the longest Clean block is
//! that long, so the next request takes zeroes while the block just freed
//! is scrubbed. Memory going back (idle, cap) ends the spare.
//!
//! Fork: the lock is taken around `fork` (`pthread_atfork`), so the child
//! starts with consistent blocks; it has no scrubber thread (one starts at
//! its first large `free`), and what the parent's was doing is Dirty again.

use std::cell::UnsafeCell;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::blocks::{Alloc, Block, Blocks, Kind, PAGE};
use crate::config::Config;
use crate::stats;
use crate::sys::{self, Advice, Errno};

/// Bytes the scrubber clears between looks at the lock: ~0.3 ms of streaming
/// stores, so a request waiting on a Busy block waits little.
const SCRUB_CHUNK: usize = 8 << 20;
/// Bytes given back per `madvise`.
const RELEASE_CHUNK: usize = 64 << 20;
/// The range is made writable this much at a time.
const PROTECT_STEP: usize = 64 << 20;
/// Most blocks: 64K descriptors (2 MiB of list, touched as used).
const MAX_BLOCKS: usize = 1 << 16;

struct Cache {
    blocks: Blocks,
    cfg: Config,
    /// `[base, writable)` is read-write; the rest of the range `PROT_NONE`.
    writable: usize,
    /// A scrubber thread runs in this process.
    scrubber: bool,
    /// Prefill still to do (the scrubber does it first).
    prefill: usize,
    /// Clean bytes the scrubber keeps ready: the largest `calloc` that found
    /// Dirty memory to clear since memory last went back (see `Config::spare`).
    spare: usize,
}

/// The lock, its condition, and the cache it guards.
struct Shared {
    mutex: sys::Mutex,
    cond: sys::Cond,
    cache: UnsafeCell<Option<Cache>>,
}

// SAFETY: `cache` is only reached through `lock()`, which holds `mutex`; the
// mutex and the condition are made for sharing between threads.
unsafe impl Sync for Shared {}

static SHARED: Shared = Shared {
    mutex: sys::Mutex::new(),
    cond: sys::Cond::new(),
    cache: UnsafeCell::new(None),
};

/// The range, readable without the lock (fixed once set): `[BASE, BASE + SPAN)`.
static BASE: AtomicUsize = AtomicUsize::new(0);
static SPAN: AtomicUsize = AtomicUsize::new(0);
static STARTED: AtomicBool = AtomicBool::new(false);
/// Requests waiting for a Busy block (changed under the lock).
static WAITING: AtomicUsize = AtomicUsize::new(0);

/// `LOCK` held; the cache through it.
struct Guard;

impl Guard {
    fn cache(&mut self) -> &mut Cache {
        // SAFETY: the mutex is held while the guard lives, so this is the only
        // reference; `started()` checked the cache exists before any guard.
        unsafe { (*SHARED.cache.get()).as_mut().expect("the cache is set up") }
    }

    /// Waits for a signal (a Busy block done, a free) or `secs`.
    fn wait(&mut self, secs: u64) {
        self.wait_ms(secs.saturating_mul(1000));
    }

    /// Waits for a signal or `ms` milliseconds.
    fn wait_ms(&mut self, ms: u64) {
        let mut until = sys::clock_gettime(libc::CLOCK_REALTIME);
        let ns = until.tv_nsec as u64 + (ms % 1000) * 1_000_000;
        until.tv_sec += (ms / 1000 + ns / 1_000_000_000) as libc::time_t;
        until.tv_nsec = (ns % 1_000_000_000) as _;
        // SAFETY: this guard holds the mutex, the only one the condition is
        // waited on with; the wait gives it back and takes it again.
        unsafe { SHARED.cond.wait_until(&SHARED.mutex, &until) };
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        // SAFETY: this guard locked the mutex.
        unsafe { SHARED.mutex.unlock() };
    }
}

fn lock() -> Guard {
    SHARED.mutex.lock();
    Guard
}

fn signal_all() {
    SHARED.cond.broadcast();
}

/// Milliseconds on a coarse monotonic clock. Not whole seconds: a block
/// freed at 10.99 s would count as idle for a second at 11.0 s, so memory went
/// back up to a second before PREZERO_IDLE_SECS.
fn now() -> u64 {
    let t = sys::clock_gettime(libc::CLOCK_MONOTONIC_COARSE);
    t.tv_sec as u64 * 1000 + t.tv_nsec as u64 / 1_000_000
}

/// Reserves the range and sets up the cache; false if it cannot (then every
/// request goes to the next allocator).
pub fn start(cfg: Config) -> bool {
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
            return false;
        }
        len /= 2;
    };
    // Blocks start 2 MiB-aligned, so transparent huge pages can back them.
    let base = raw.next_multiple_of(2 << 20);
    let list_bytes = MAX_BLOCKS * std::mem::size_of::<Block>();
    let Ok(list) = sys::map_noreserve(list_bytes) else {
        // SAFETY: the reservation just made, unused.
        let _ = unsafe { sys::munmap(raw, len + (2 << 20)) };
        return false;
    };
    // SAFETY: the mapping is ours alone for the life of the process, zeroed
    // by the kernel, and an all-zero Block is a valid value (start 0, len 0,
    // kind InUse, since 0).
    let list: &'static mut [Block] =
        unsafe { std::slice::from_raw_parts_mut(list as *mut Block, MAX_BLOCKS) };
    let prefill = cfg.prefill.min(cfg.cap) / PAGE * PAGE;
    let g = lock();
    // SAFETY: the mutex is held; nothing has a reference to the cache yet.
    unsafe {
        *SHARED.cache.get() = Some(Cache {
            blocks: Blocks::new(base, base + len, list),
            cfg,
            writable: base,
            scrubber: false,
            prefill,
            spare: 0,
        })
    };
    BASE.store(base, Ordering::Release);
    SPAN.store(len, Ordering::Release);
    STARTED.store(true, Ordering::Release);
    drop(g);
    // Handlers that take and give back the lock, and start the child anew.
    sys::atfork(before_fork, after_fork, in_child);
    if prefill > 0 {
        ensure_scrubber();
    }
    // The kernels' choice now, while the process has one thread, not in the
    // first calloc that clears (see before_fork).
    let _ = prezero::active_profile();
    true
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

fn limit() -> usize {
    BASE.load(Ordering::Relaxed) + SPAN.load(Ordering::Relaxed)
}

impl Cache {
    /// Makes the range writable up to `end`; false if the kernel refuses
    /// (overcommit, a mapping limit).
    fn ensure_writable(&mut self, end: usize) -> bool {
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

    fn peaks(&self) {
        stats::PEAK_HELD.fetch_max(self.blocks.bytes.held(), Ordering::Relaxed);
        stats::PEAK_IN_USE.fetch_max(self.blocks.bytes.in_use, Ordering::Relaxed);
    }
}

/// `size` bytes aligned to `align` from the cache, zero if `zeroed`; null if
/// the cache cannot serve (the caller asks the next allocator).
pub fn alloc(size: usize, align: usize, zeroed: bool) -> *mut c_void {
    take(size, align, zeroed, true)
}

/// [`alloc`] for the program (`counted`: its statistics and peaks) or for the
/// cache itself (the prefill, which is no request of the program's).
fn take(size: usize, align: usize, zeroed: bool, counted: bool) -> *mut c_void {
    let mut waited = false;
    let mut since: Option<std::time::Instant> = None;
    let granted = loop {
        let mut g = lock();
        let c = g.cache();
        let Some(reach) = c
            .blocks
            .top()
            .checked_add(size)
            .and_then(|r| r.checked_add(align.max(PAGE)))
        else {
            return std::ptr::null_mut();
        };
        // The cache's own range beyond top: what the program uses is not
        // capped, only what it has freed.
        let room = if c.ensure_writable(reach.min(limit())) {
            usize::MAX
        } else {
            c.writable - c.blocks.top()
        };
        let a = if waited {
            c.blocks.alloc_around_busy(size, align, zeroed, room)
        } else {
            c.blocks.alloc(size, align, zeroed, room)
        };
        match a {
            Alloc::Granted {
                start,
                len,
                pieces,
                n,
            } => {
                debug_assert!(c.blocks.check());
                if counted {
                    c.peaks();
                    // Freed and asked for again faster than the scrubber
                    // clears: keep this much zeroed ahead from now on. Only
                    // if the cap holds it beside the block the program frees
                    // next: else that free gives the spare back at once.
                    let dirty = pieces[..n].iter().any(|p| p.2 == Kind::Dirty);
                    if zeroed && dirty && c.cfg.spare && len <= c.cfg.cap / 2 {
                        c.spare = c.spare.max(len);
                        signal_all();
                    }
                }
                break (start, len, pieces, n);
            }
            // One step of the scrubber (~0.3 ms on a core of its own), then
            // around it: at SCHED_IDLE, with the program's threads on every
            // core, the step took up to most of a second and a calloc with it.
            Alloc::Wait => {
                // While a request waits the scrubber starts no new step, so
                // the block is whole when this wakes.
                let t = *since.get_or_insert_with(std::time::Instant::now);
                WAITING.fetch_add(1, Ordering::Relaxed);
                g.wait_ms(2);
                WAITING.fetch_sub(1, Ordering::Relaxed);
                waited = t.elapsed() >= std::time::Duration::from_millis(2);
            }
            Alloc::Full => return std::ptr::null_mut(),
        }
    };
    let (start, len, pieces, n) = granted;
    let mut populated = 0u64;
    for &(s, l, kind) in &pieces[..n] {
        match kind {
            Kind::Dirty | Kind::Clean => populated += l as u64,
            _ => {}
        }
        if zeroed && kind == Kind::Dirty {
            // The caller is about to use it: ordinary stores while it fits a
            // cache, streaming past that (the profile decides, seed 003).
            // SAFETY: [s, s + l) is part of the block just handed to this
            // caller, writable (ensure_writable), and no one else's.
            let _ = unsafe { prezero::clear_raw_with(s as *mut u8, l, prezero::Temperature::Hot) };
            if counted {
                stats::INLINE_CLEARED.fetch_add(l as u64, Ordering::Relaxed);
            }
        }
    }
    if !counted {
        return start as *mut c_void;
    }
    stats::SERVED.fetch_add(1, Ordering::Relaxed);
    stats::SERVED_BYTES.fetch_add(len as u64, Ordering::Relaxed);
    stats::POPULATED_BYTES.fetch_add(populated, Ordering::Relaxed);
    start as *mut c_void
}

/// Takes back the block at `p` (in the range). A pointer that is not a block
/// handed out is counted and ignored: never a corruption. `extern "C"` (it
/// cannot unwind), so the C `free` ends in a jump here, not a call.
pub extern "C" fn free(p: usize) {
    let mut g = lock();
    let c = g.cache();
    if c.blocks.free(p, now()).is_none() {
        stats::BAD_FREES.fetch_add(1, Ordering::Relaxed);
        return;
    }
    debug_assert!(c.blocks.check());
    c.peaks();
    let cap = c.cfg.cap;
    // Past the cap: the oldest free memory goes back before this returns.
    while g.cache().blocks.bytes.held() > cap {
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

/// Gives back (MADV_DONTNEED) one chunk of the oldest free memory freed at or
/// before `before`; false if there is none. Unlocks while the kernel works.
fn release_one(g: &mut Guard, before: u64) -> bool {
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

/// Bytes usable at `p`, if it is a block handed out.
pub fn usable_size(p: usize) -> Option<usize> {
    lock().cache().blocks.in_use_len(p)
}

/// `realloc` of the block at `p` to `size` bytes: shrunk or grown in place,
/// or its pages moved (mremap, no copy; a copy where the kernel cannot) to a
/// new block. `None`: `p` is not a block handed out. `Some(null)`: the cache
/// has no room (the caller copies to the next allocator).
pub fn realloc(p: usize, size: usize, threshold: usize) -> Option<*mut c_void> {
    let old = {
        let mut g = lock();
        let c = g.cache();
        let old = c.blocks.in_use_len(p)?;
        if size <= old {
            // Shrinking by less than the threshold keeps the block whole.
            if old - size >= threshold {
                c.blocks.shrink(p, size, now());
                signal_all();
            }
            return Some(p as *mut c_void);
        }
        let Some(reach) = p.checked_add(size) else {
            // Past the address space: no room (the caller asks the next
            // allocator, which refuses with ENOMEM), not "not ours".
            return Some(std::ptr::null_mut());
        };
        let reach = reach.min(limit());
        let room = if c.ensure_writable(reach) {
            usize::MAX
        } else {
            0
        };
        if c.blocks.grow(p, size, room) {
            c.peaks();
            return Some(p as *mut c_void);
        }
        old
    };
    let q = alloc(size, PAGE, false);
    if q.is_null() {
        return Some(q);
    }
    // The range never has a hole: an mmap on another thread cannot land
    // inside it (it could between an mremap that unmaps and an mmap
    // MAP_FIXED that fills the hole again, which then replaced that thread's
    // mapping with ours).
    // SAFETY: [p, p + old) and [q, q + old) are two disjoint blocks of our
    // range this thread owns (the program's, and the one just granted).
    let moved = unsafe { sys::move_pages(p, old, q as usize) }.is_ok();
    if moved {
        // The vacated part keeps the moved pages' mapping (its offset and
        // flags differ from its neighbours'), which the kernel will not merge:
        // a fresh mapping in its place merges again, or every move would leave
        // mappings behind until the process reaches vm.max_map_count and its
        // own mmap calls fail. MAP_FIXED over a mapping replaces it in one
        // step (still no hole); if it fails the empty mapping stays, usable.
        // SAFETY: [p, p + old) is in our range, mapped, with no pages, and
        // still this thread's (InUse until free_fresh below).
        let again = unsafe { sys::map_fresh_over(p, old) }.is_ok();
        let mut g = lock();
        if again && g.cache().cfg.thp {
            let _ = sys::madvise(p, old, Advice::HugePage);
        }
        g.cache().blocks.free_fresh(p);
        stats::REMAPS.fetch_add(1, Ordering::Relaxed);
        signal_all();
        return Some(q);
    }
    // mremap refused: copy.
    // SAFETY: both blocks are this thread's, disjoint, `old` bytes long at least.
    unsafe { std::ptr::copy_nonoverlapping(p as *const u8, q.cast::<u8>(), old) };
    free(p);
    Some(q)
}

/// Starts the scrubber thread if this process has none.
fn ensure_scrubber() {
    {
        let mut g = lock();
        if g.cache().scrubber {
            return;
        }
        g.cache().scrubber = true;
    }
    let spawned = std::thread::Builder::new()
        .name("prezero-scrub".into())
        .spawn(scrub);
    if spawned.is_err() {
        // No scrubber: freed blocks stay Dirty; `calloc` clears what it takes.
        lock().cache().scrubber = false;
    }
}

/// The scrubber: at `SCHED_IDLE`, prefills, gives idle memory back, clears
/// Dirty blocks with streaming stores, and populates the spare.
fn scrub() {
    prezero::ScrubPriority::Idle.apply_to_current_thread();
    let mut g = lock();
    let prefill = std::mem::take(&mut g.cache().prefill);
    if prefill > 0 {
        drop(g);
        do_prefill(prefill);
        g = lock();
    }
    loop {
        let idle = g.cache().cfg.idle_secs;
        if release_one(&mut g, now().saturating_sub(idle.saturating_mul(1000))) {
            continue;
        }
        if WAITING.load(Ordering::Relaxed) > 0 {
            // A request waits for the step just done: let it take the block
            // before the next step makes part of it Busy again.
            g.wait_ms(1);
            continue;
        }
        if let Some((s, l)) = g.cache().blocks.scrub_take(SCRUB_CHUNK) {
            drop(g);
            let t = std::time::Instant::now();
            // SAFETY: [s, s + l) is a Busy block of our range: the scrubber's
            // alone until busy_done.
            let _ = unsafe { prezero::clear_raw_with(s as *mut u8, l, prezero::Temperature::Cold) };
            stats::SCRUB_NS.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
            stats::SCRUBBED_BYTES.fetch_add(l as u64, Ordering::Relaxed);
            g = lock();
            g.cache().blocks.busy_done(s, Kind::Clean);
            signal_all();
            continue;
        }
        if let Some((s, l)) = spare_take(&mut g) {
            drop(g);
            // [s, s + l) is a Busy block of our range, without pages (Fresh
            // or beyond top): the scrubber's alone until busy_done. The
            // kernel's pages are zero, so populated it is Clean.
            let populated = sys::madvise(s, l, Advice::PopulateWrite);
            let ok = populated.is_ok();
            let unknown = populated == Err(Errno(libc::EINVAL));
            if !ok {
                // SAFETY: as above; drops what was populated before the failure.
                let _ = unsafe { sys::discard(s, l) };
            }
            g = lock();
            let c = g.cache();
            if ok {
                stats::SPARE_BYTES.fetch_add(l as u64, Ordering::Relaxed);
                c.blocks.busy_done(s, Kind::Clean);
                c.peaks();
            } else {
                c.spare = 0;
                // A kernel before 5.14 has no MADV_POPULATE_WRITE: no spare.
                c.cfg.spare &= !unknown;
                c.blocks.busy_done(s, Kind::Fresh);
            }
            signal_all();
            continue;
        }
        g.wait(1);
    }
}

/// The next piece of the spare to populate, now Busy: what the longest Clean
/// block lacks, within the cap, a scrub chunk at most (a request that needs
/// it waits little).
fn spare_take(g: &mut Guard) -> Option<(usize, usize)> {
    let c = g.cache();
    if c.spare == 0 {
        // No spare wanted (the usual case): no walk of the block list.
        return None;
    }
    let chunk = c
        .spare
        .saturating_sub(c.blocks.largest_clean())
        .min(c.cfg.cap.saturating_sub(c.blocks.bytes.held()))
        .min(SCRUB_CHUNK);
    if chunk < PAGE {
        return None;
    }
    let top = c.blocks.top();
    let room = if c.blocks.ends_fresh() || c.ensure_writable(top.saturating_add(chunk).min(limit()))
    {
        chunk
    } else {
        c.writable - top
    };
    c.blocks.fresh_take(chunk, room, now())
}

/// Populates `bytes` of the range (the kernel zeroes fresh pages, `alloc`
/// clears any Dirty piece, here, in the background) and leaves them Clean for
/// the first requests.
fn do_prefill(bytes: usize) {
    // Zeroed: the program may have freed blocks before this thread got a core,
    // and the cheapest run for a plain request starts on such a Dirty block.
    // Populating does not clear what is already there, so a Dirty piece marked
    // Clean below would reach a later calloc unzeroed.
    let p = take(bytes, 2 << 20, true, false);
    if p.is_null() {
        return;
    }
    // The block just granted to this thread, writable.
    let ok = sys::madvise(p as usize, bytes, Advice::PopulateWrite).is_ok();
    let mut g = lock();
    let c = g.cache();
    if ok {
        c.blocks.free_clean(p as usize, now());
    } else {
        c.blocks.free_fresh(p as usize);
    }
    signal_all();
}

extern "C" fn before_fork() {
    if STARTED.load(Ordering::Acquire) {
        // The clearing kernels' choice is made once, lazily, under a
        // `OnceLock`: forked while another thread makes it, the child would
        // wait for it forever. Made here, before the fork, it is done.
        let _ = prezero::active_profile();
        // `after_fork`/`in_child` unlock it.
        SHARED.mutex.lock();
    }
}

extern "C" fn after_fork() {
    if STARTED.load(Ordering::Acquire) {
        // SAFETY: locked by before_fork in this thread.
        unsafe { SHARED.mutex.unlock() };
    }
}

extern "C" fn in_child() {
    if !STARTED.load(Ordering::Acquire) {
        return;
    }
    // SAFETY: the child's only thread holds the lock (before_fork); the
    // parent's waiters do not exist here, so the condition starts anew.
    unsafe {
        SHARED.cond.reset();
        let c = (*SHARED.cache.get()).as_mut().expect("started");
        c.scrubber = false;
        c.spare = 0;
        // A prefill the parent's scrubber had not begun is the parent's: the
        // child is not the program `PREZERO_PREFILL_PID` names.
        c.prefill = 0;
        c.blocks.abandon_busy();
        // The parent's waiting threads do not exist here.
        WAITING.store(0, Ordering::Relaxed);
        stats::reset();
        SHARED.mutex.unlock();
    }
}
