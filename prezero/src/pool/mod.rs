//! A pool of pre-zeroed chunks with a background scrubber: Linux's
//! "Prezeroing V2" (2004) in user space.
//!
//! Freed chunks are dirty; a scrubber thread at idle priority clears them with
//! streaming stores while a core is free, between watermarks, so `alloc_zeroed`
//! usually finds a zero chunk and costs a list pop. The rule of Linux's
//! "Prezeroing V2" review decides how a chunk that must be cleared on the spot
//! is cleared: one handed out recently
//! (still in cache, about to be touched again) with ordinary stores, anything
//! older with streaming stores.
//!
//! # Concurrency
//!
//! One mutex guards the bookkeeping ([`state::State`]); it is held only to move a
//! chunk between lists, never while memory is cleared or mapped. A chunk's bytes
//! are touched by exactly one party at a time, decided by its phase under the
//! lock: its owner while `InUse`, one scrubber while `Scrubbing`, nobody
//! otherwise. The invariant `zeroed + dirty + scrubbing + in_use == mapped` is
//! checked after every change in debug builds, and the transitions are checked
//! exhaustively in `state.rs`'s tests. `alloc_zeroed_timeout`'s waiters are
//! counted (SeqCst) and woken after every change that ends exhaustion; the
//! threads' steps (takers, waiters, frees, the scrubber, trim, shutdown) are
//! checked in every interleaving in `interleavings.rs`.
//!
//! Chunks hold an `Arc` of the pool's shared part, so they stay valid after the
//! [`Pool`] is dropped; raw chunks (`Chunk::into_raw`) still outstanding at drop
//! keep the memory mapped for the rest of the process (leaked, never unmapped
//! under a user).

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::clear::KernelFn;
use crate::error::{Error, Result};
use crate::region::{PageKind, Region};

mod builder;
#[cfg(test)]
mod interleavings;
mod scrubber;
mod state;
mod stats;
#[cfg(test)]
mod tests;

pub use builder::PoolBuilder;
pub use scrubber::{FreeRunning, ScrubPriority};
pub use stats::PoolStats;

use state::{Refused, Source, State};
use stats::{Counters, Histogram};

/// The two clearing kernels a pool uses, chosen once for its chunk size.
struct Kernels {
    hot: KernelFn,
    cold: KernelFn,
}

/// What the pool, its chunks and its scrubbers share.
pub(crate) struct Shared {
    chunk_size: usize,
    backing: PageKind,
    max_chunks: usize,
    low: usize,
    high: usize,
    verify: bool,
    /// Chunks handed out more recently than this many hand-outs ago are hot.
    hot_chunks: u64,
    kernels: Kernels,
    state: Mutex<State>,
    /// The mappings, by chunk id. Only grown; unmapped when the last user drops.
    regions: Mutex<Vec<Region>>,
    /// Wakes scrubbers: dirty chunks appeared, or shutdown.
    scrub_wake: Condvar,
    /// Wakes `alloc_zeroed_timeout` waiters: a chunk was freed or scrubbed.
    chunk_ready: Condvar,
    /// Threads inside `alloc_zeroed_timeout`: frees and scrubs skip the wake-up
    /// system call when there are none.
    waiters: AtomicUsize,
    /// Set at shutdown; scrubbers check it between bounded steps.
    stop: AtomicBool,
    counters: Counters,
    latency: Histogram,
    /// More than one NUMA node has memory: chunks are kept apart by node.
    multi_node: bool,
    priority: Mutex<&'static str>,
    /// Kernel thread ids of the scrubbers, to lift them out of `SCHED_IDLE` at shutdown.
    scrubber_tids: Mutex<Vec<crate::sys::Tid>>,
}

/// What a pool is built with ([`Shared::new`]); everything else starts empty.
struct Settings {
    chunk_size: usize,
    backing: PageKind,
    max_chunks: usize,
    low: usize,
    high: usize,
    verify: bool,
    hot_chunks: u64,
    kernels: Kernels,
    multi_node: bool,
}

impl Shared {
    /// A pool of no chunk yet, no scrubber and nothing counted.
    fn new(s: Settings) -> Shared {
        Shared {
            chunk_size: s.chunk_size,
            backing: s.backing,
            max_chunks: s.max_chunks,
            low: s.low,
            high: s.high,
            verify: s.verify,
            hot_chunks: s.hot_chunks,
            kernels: s.kernels,
            state: Mutex::new(State::default()),
            regions: Mutex::new(Vec::new()),
            scrub_wake: Condvar::new(),
            chunk_ready: Condvar::new(),
            waiters: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            counters: Counters::default(),
            latency: Histogram::new(),
            multi_node: s.multi_node,
            priority: Mutex::new("none (no scrubber)"),
            scrubber_tids: Mutex::new(Vec::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the lists half-moved: every
        // State method completes its move before anything that could panic.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn check(&self, s: &State) {
        debug_assert!(s.check(), "pool invariant broken: {:?}", s.counts());
    }

    /// The calling thread's node, where chunks are kept apart by node (no
    /// system call on a machine of one node): its policy's one node or its
    /// CPU's, or [`SPREAD`] for a policy that spreads pages (interleave,
    /// several nodes), whose chunks go only to threads that spread too.
    fn caller_node(&self) -> Option<u32> {
        if self.multi_node {
            Some(crate::numa::caller_node().unwrap_or(SPREAD))
        } else {
            None
        }
    }

    /// Registers a new mapping as a chunk, in use (handed out now, ending a
    /// `grow`) or zeroed (prefill), its pages on `node`.
    fn adopt(&self, region: Region, in_use: bool, node: Option<u32>) -> usize {
        let addr = region.as_ptr() as usize;
        let mut regions = self.regions.lock().unwrap_or_else(|e| e.into_inner());
        let mut s = self.lock();
        if in_use {
            // In the same critical section as `add`, so capacity is never overrun.
            s.growing -= 1;
        }
        let id = s.add(addr, in_use, node);
        debug_assert_eq!(id, regions.len());
        regions.push(region);
        self.check(&s);
        id
    }

    fn chunk_ptr(&self, s: &State, id: usize) -> NonNull<u8> {
        // The address came from a successful mmap, so it is not null.
        NonNull::new(s.slots[id].addr as *mut u8).expect("mapped chunks are not null")
    }

    /// Frees `id` (from a `Chunk` drop or `free_raw`) and wakes whoever waits.
    fn free(&self, id: usize, raw: bool) -> std::result::Result<(), Refused> {
        let mut s = self.lock();
        s.free(id, raw, self.hot_chunks)?;
        let wake = s.wants_scrub(self.low, self.high);
        self.check(&s);
        drop(s);
        if wake {
            self.scrub_wake.notify_one();
        }
        self.wake_waiters();
        Ok(())
    }

    /// Wakes `alloc_zeroed_timeout` callers, if any: after every change that
    /// ends exhaustion (a free, a scrub done, a grow given up). A waiter
    /// registers before it looks at the lists, and looks last under the lock
    /// its wait releases, so a chunk made available after that look is always
    /// followed by this wake-up, which its wait receives.
    fn wake_waiters(&self) {
        // Ordering: SeqCst pairs with the waiter's SeqCst increment, so either the
        // waiter sees the chunk on its next look or we see the waiter here.
        if self.waiters.load(Ordering::SeqCst) > 0 {
            self.chunk_ready.notify_all();
        }
    }

    fn hand_out(self: &Arc<Self>, zeroed: bool) -> Result<Chunk> {
        let start = Instant::now();
        // A chunk of the taker's node only: its pages stay where they are.
        let node = self.caller_node();
        let taken = {
            let mut s = self.lock();
            let t = if zeroed {
                s.take_zeroed(self.hot_chunks, node)
            } else {
                s.take_any(self.hot_chunks, node)
            };
            let room = s.has_room(self.max_chunks);
            // At capacity with nothing of its node: another node's chunk, whose
            // pages `prepare` drops.
            let t = match (t, node) {
                (None, Some(n)) if !room => s.take_foreign(self.hot_chunks, n),
                (t, _) => t,
            };
            let r = match t {
                Some((id, src)) => Some((id, src, self.chunk_ptr(&s, id))),
                None if room => {
                    s.growing += 1;
                    None
                }
                None => {
                    return Err(Error::Exhausted {
                        capacity: self.max_chunks * self.chunk_size,
                    })
                }
            };
            if zeroed && s.wants_scrub(self.low, self.high) {
                self.scrub_wake.notify_one();
            }
            self.check(&s);
            r
        };
        let (id, ptr) = match taken {
            Some((id, src, ptr)) => {
                self.prepare(ptr, src, zeroed);
                (id, ptr)
            }
            None => self.grow(node)?,
        };
        let chunk = Chunk {
            shared: Arc::clone(self),
            id,
            ptr,
            len: self.chunk_size,
        };
        if zeroed && self.verify {
            if let Some(offset) = crate::verify::first_nonzero(&chunk) {
                // Dropping the chunk returns it dirty: it is cleared before any reuse.
                return Err(Error::NotZero { offset });
            }
        }
        self.latency.record(start.elapsed());
        Ok(chunk)
    }

    /// Clears a chunk taken from the lists as its source requires, and counts it.
    fn prepare(&self, ptr: NonNull<u8>, src: Source, zeroed: bool) {
        let c = &self.counters;
        let n = self.chunk_size;
        if src == Source::Foreign {
            // SAFETY: the chunk is InUse and owned by this call until returned
            // as a Chunk; it is `chunk_size` bytes of our own anonymous mapping.
            // Without its pages it reads zero, and the taker's touches fault
            // them in on its node.
            if unsafe { crate::sys::discard(ptr.as_ptr(), n) }.is_err() {
                // Kept pages (mlock): cleared like a cold chunk, left where they are.
                // SAFETY: as above.
                unsafe { self.kernels.cold.run(ptr.as_ptr(), n) };
            }
            Counters::add(&c.served_fresh, 1);
            return Counters::add(&c.bytes_fresh, n);
        }
        if !zeroed {
            Counters::add(&c.served_unzeroed, 1);
            return;
        }
        let (kernel, served, bytes) = match src {
            Source::Zeroed => return Counters::add(&c.served_zeroed, 1),
            Source::Released => return Counters::add(&c.served_released, 1),
            Source::Hot => (self.kernels.hot, &c.served_hot, &c.bytes_cleared_hot),
            Source::Cold => (self.kernels.cold, &c.served_cold, &c.bytes_cleared_cold),
            Source::Foreign => unreachable!("handled above"),
        };
        // SAFETY: the chunk is InUse and owned by this call until returned as a
        // Chunk; it is `chunk_size` bytes of our mapping.
        unsafe { kernel.run(ptr.as_ptr(), n) };
        Counters::add(served, 1);
        Counters::add(bytes, n);
    }

    /// Maps a new chunk (already counted in `growing`) for a taker on `node`,
    /// whose touches place its pages: fresh pages are zero.
    fn grow(&self, node: Option<u32>) -> Result<(usize, NonNull<u8>)> {
        let r = match Region::new(self.chunk_size, self.backing) {
            Ok(r) => r,
            Err(e) => {
                self.lock().growing -= 1;
                // The room this grow held is free again: a waiter may grow.
                self.wake_waiters();
                return Err(e);
            }
        };
        let ptr = NonNull::new(r.as_ptr()).expect("mapped regions are not null");
        let id = self.adopt(r, true, node);
        Counters::add(&self.counters.served_fresh, 1);
        Counters::add(&self.counters.bytes_fresh, self.chunk_size);
        Ok((id, ptr))
    }
}

/// The node key of chunks whose pages a spreading policy placed: no node.
pub(crate) const SPREAD: u32 = u32::MAX;

/// A pool of pre-zeroed chunks. `Send + Sync`: share it by reference or `Arc`.
pub struct Pool {
    shared: Arc<Shared>,
    scrubbers: Vec<JoinHandle<()>>,
}

impl Pool {
    /// A builder with the defaults (2 MiB THP chunks, 1 GiB capacity, 1 scrubber).
    pub fn builder() -> PoolBuilder {
        PoolBuilder::default()
    }

    /// A chunk every byte of which reads zero: a hot recently-freed chunk cleared
    /// in cache, else a zeroed one, else a dirty one cleared now with streaming
    /// stores, else a trimmed one, else fresh memory while under capacity, else
    /// `Error::Exhausted`. Never waits for a scrub in progress.
    ///
    /// # Panics
    /// In verify mode, if the chunk about to be handed out is not all zero (a bug,
    /// in prezero or in a caller writing to memory it gave back): loudly, never
    /// handing out the memory. [`Pool::try_alloc_zeroed`] returns it as an error.
    pub fn alloc_zeroed(&self) -> Result<Chunk> {
        loud(self.try_alloc_zeroed())
    }

    /// [`Pool::alloc_zeroed`] with a verify failure as `Error::NotZero` (for the C ABI).
    pub fn try_alloc_zeroed(&self) -> Result<Chunk> {
        self.shared.hand_out(true)
    }

    /// Like [`Pool::alloc_zeroed`], but when the pool is exhausted waits up to
    /// `timeout` for a chunk to be freed or scrubbed.
    ///
    /// # Panics
    /// As [`Pool::alloc_zeroed`], in verify mode.
    pub fn alloc_zeroed_timeout(&self, timeout: Duration) -> Result<Chunk> {
        loud(self.try_alloc_zeroed_timeout(timeout))
    }

    /// [`Pool::alloc_zeroed_timeout`] with a verify failure as `Error::NotZero`.
    pub fn try_alloc_zeroed_timeout(&self, timeout: Duration) -> Result<Chunk> {
        let deadline = Instant::now() + timeout;
        let shared = &self.shared;
        match shared.hand_out(true) {
            Err(Error::Exhausted { .. }) => {}
            r => return r,
        }
        shared.waiters.fetch_add(1, Ordering::SeqCst);
        let r = loop {
            match shared.hand_out(true) {
                Err(Error::Exhausted { .. }) if Instant::now() < deadline => {
                    // Looked at again under the lock the wait releases: what was
                    // freed since hand_out looked is taken on the next turn, and
                    // what is freed after this is followed by a wake-up this wait
                    // receives (checked in every interleaving: interleavings.rs).
                    let s = shared.lock();
                    if s.exhausted(shared.max_chunks) {
                        let left = deadline.saturating_duration_since(Instant::now());
                        let _ = shared.chunk_ready.wait_timeout(s, left);
                    }
                }
                r => break r,
            }
        };
        shared.waiters.fetch_sub(1, Ordering::SeqCst);
        r
    }

    /// A chunk whose contents are whatever this process last wrote there (or
    /// zero): for callers that overwrite it whole. Takes dirty chunks first, so
    /// the zeroed ones stay for `alloc_zeroed`.
    pub fn alloc(&self) -> Result<Chunk> {
        self.shared.hand_out(false)
    }

    /// Returns a chunk given out by [`Chunk::into_raw`]. A pointer that is not an
    /// outstanding raw chunk of this pool (foreign, inside a chunk, freed twice)
    /// is an error and changes nothing.
    pub fn free_raw(&self, ptr: *mut u8) -> Result<()> {
        let id = self.shared.lock().id_of(ptr as usize);
        let refused = match id {
            None => Refused::Unknown,
            Some(id) => match self.shared.free(id, true) {
                Ok(()) => return Ok(()),
                Err(r) => r,
            },
        };
        Err(Error::invalid(match refused {
            Refused::Unknown => format!("{ptr:p} is not the start of a chunk of this pool"),
            Refused::NotInUse => format!("{ptr:p} is not handed out (freed twice?)"),
            Refused::WrongOwner => format!("{ptr:p} is owned by a Chunk, not a raw pointer"),
        }))
    }

    /// Gives the pages of chunks not in use back to the kernel until at most
    /// `keep_bytes` of the pool are backed by memory: dirty chunks first, then
    /// zeroed ones. Trimmed chunks stay mapped and read zero (MADV_DONTNEED), so
    /// they are never scrubbed again. Returns the bytes given back.
    pub fn trim(&self, keep_bytes: usize) -> Result<usize> {
        let keep = keep_bytes / self.shared.chunk_size;
        let mut given = 0;
        let mut s = self.shared.lock();
        while s.backed_chunks() > keep {
            let Some(id) = s.trim_victim() else { break };
            let ptr = s.slots[id].addr as *mut u8;
            // SAFETY: the chunk is a slot of the pool's own anonymous mapping, and
            // not in use: the lock stays held, so it is in transit and nobody
            // else may see it.
            let r = unsafe { crate::sys::discard(ptr, self.shared.chunk_size) };
            s.released(id);
            self.shared.check(&s);
            r.map_err(|e| Error::os("madvise(MADV_DONTNEED)", e))?;
            given += self.shared.chunk_size;
        }
        Ok(given)
    }

    /// Counts, counters and latencies, now.
    pub fn stats(&self) -> PoolStats {
        let c = self.shared.lock().counts();
        let k = &self.shared.counters;
        let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        let h = &self.shared.latency;
        PoolStats {
            chunk_size: self.shared.chunk_size,
            mapped: c.mapped,
            zeroed: c.zeroed + c.released,
            released: c.released,
            dirty: c.dirty + c.hot,
            hot: c.hot,
            scrubbing: c.scrubbing,
            in_use: c.in_use,
            raw: c.raw,
            bytes_scrubbed: get(&k.bytes_scrubbed),
            bytes_cleared_hot: get(&k.bytes_cleared_hot),
            bytes_cleared_cold: get(&k.bytes_cleared_cold),
            bytes_fresh: get(&k.bytes_fresh),
            served_zeroed: get(&k.served_zeroed),
            served_released: get(&k.served_released),
            served_hot: get(&k.served_hot),
            served_cold: get(&k.served_cold),
            served_fresh: get(&k.served_fresh),
            served_unzeroed: get(&k.served_unzeroed),
            latency_p50_ns: h.quantile(0.50),
            latency_p99_ns: h.quantile(0.99),
            latency_max_ns: h.max(),
            scrubber_priority: *self
                .shared
                .priority
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        }
    }

    /// Bytes per chunk.
    pub fn chunk_size(&self) -> usize {
        self.shared.chunk_size
    }
}

/// Verify mode's loud failure for the Rust API.
fn loud(r: Result<Chunk>) -> Result<Chunk> {
    r.map_err(|e| match e {
        Error::NotZero { offset } => {
            panic!("prezero pool verify: chunk handed out with byte {offset} non-zero")
        }
        e => e,
    })
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        {
            let mut s = self.shared.lock();
            s.shutdown = true;
        }
        self.shared.scrub_wake.notify_all();
        // An idle-priority scrubber may not run at all while the machine is busy:
        // give it normal priority so it sees the stop flag and exits now.
        for &tid in self
            .shared
            .scrubber_tids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            let _ = crate::sys::set_sched_normal(tid);
        }
        for h in self.scrubbers.drain(..) {
            let _ = h.join();
        }
        if self.shared.lock().counts().raw > 0 {
            // Raw chunks may still be in use through pointers we cannot track:
            // keep every mapping alive for the rest of the process.
            std::mem::forget(Arc::clone(&self.shared));
        }
    }
}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool")
            .field("stats", &self.stats())
            .finish()
    }
}

/// A chunk of a [`Pool`]: `chunk_size` bytes, exclusively yours until dropped,
/// when it goes back to the pool as dirty. Valid even after the pool is dropped.
pub struct Chunk {
    shared: Arc<Shared>,
    id: usize,
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a Chunk owns its bytes exclusively (phase InUse), like a Box<[u8]>.
unsafe impl Send for Chunk {}
// SAFETY: shared references give shared access only.
unsafe impl Sync for Chunk {}

impl Chunk {
    /// Gives up the chunk as a raw pointer to `len` bytes, for FFI and allocator
    /// integration; return it with [`Pool::free_raw`] (until then it stays
    /// valid, even after the pool is dropped).
    pub fn into_raw(self) -> NonNull<u8> {
        self.shared.lock().make_raw(self.id);
        let ptr = self.ptr;
        // Skip Drop (which would free the chunk); the Arc is released normally.
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is never used again, so reading the Arc out moves it.
        drop(unsafe { std::ptr::read(&this.shared) });
        ptr
    }
}

impl Deref for Chunk {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: while InUse the chunk's `len` bytes are ours alone, and mapped.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for Chunk {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` is unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Chunk {
    fn drop(&mut self) {
        let r = self.shared.free(self.id, false);
        debug_assert!(r.is_ok(), "a Chunk's own free was refused: {r:?}");
    }
}

impl fmt::Debug for Chunk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Chunk")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}
