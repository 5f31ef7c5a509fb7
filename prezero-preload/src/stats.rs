//! Counters of what the cache did, and the line `PREZERO_STATS=1` prints at
//! exit (formatted into a stack buffer: exit may run with the heap in any state).

use std::io::Write;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

pub static SERVED: AtomicU64 = AtomicU64::new(0);
pub static SERVED_BYTES: AtomicU64 = AtomicU64::new(0);
/// Bytes handed out whose pages were present (Clean or Dirty): no fault.
pub static POPULATED_BYTES: AtomicU64 = AtomicU64::new(0);
/// Of those, bytes `calloc` cleared itself (Dirty: the scrubber had not got there).
pub static INLINE_CLEARED: AtomicU64 = AtomicU64::new(0);
pub static SCRUBBED_BYTES: AtomicU64 = AtomicU64::new(0);
pub static SCRUB_NS: AtomicU64 = AtomicU64::new(0);
/// Bytes the scrubber populated as a spare (see `Config::spare`).
pub static SPARE_BYTES: AtomicU64 = AtomicU64::new(0);
/// Bytes given back to the kernel (cap, idle).
pub static RELEASED_BYTES: AtomicU64 = AtomicU64::new(0);
/// Large requests the cache could not serve (handed to the next allocator).
pub static FALLBACKS: AtomicU64 = AtomicU64::new(0);
/// `realloc`s that moved pages with mremap instead of copying.
pub static REMAPS: AtomicU64 = AtomicU64::new(0);
/// Frees of pointers in the range that are not a block handed out (ignored).
pub static BAD_FREES: AtomicU64 = AtomicU64::new(0);
/// `malloc`, `calloc` and `free` calls that went on without the lock a
/// starved scrubber kept (to the next allocator, or a free left for later).
pub static AROUND_SCRUBBER: AtomicU64 = AtomicU64::new(0);
pub static PEAK_HELD: AtomicUsize = AtomicUsize::new(0);
pub static PEAK_IN_USE: AtomicUsize = AtomicUsize::new(0);

/// A forked child starts its own account: its line says what it did.
pub fn reset() {
    for c in [
        &SERVED,
        &SERVED_BYTES,
        &POPULATED_BYTES,
        &INLINE_CLEARED,
        &SCRUBBED_BYTES,
        &SCRUB_NS,
        &SPARE_BYTES,
        &RELEASED_BYTES,
        &FALLBACKS,
        &REMAPS,
        &BAD_FREES,
        &AROUND_SCRUBBER,
    ] {
        c.store(0, Relaxed);
    }
    PEAK_HELD.store(0, Relaxed);
    PEAK_IN_USE.store(0, Relaxed);
}

fn gib(b: u64) -> f64 {
    b as f64 / (1u64 << 30) as f64
}

/// Writes the summary line to stderr, if the process asked the cache for
/// anything (a shell or helper that never did stays quiet); a note of the
/// memory pressure events it saw at its end, if any.
pub fn print() {
    if SERVED.load(Relaxed) == 0 && FALLBACKS.load(Relaxed) == 0 {
        return;
    }
    const LEN: usize = 768;
    let mut buf = [0u8; LEN];
    let mut w = &mut buf[..];
    let scrubbed = SCRUBBED_BYTES.load(Relaxed);
    let ns = SCRUB_NS.load(Relaxed).max(1);
    let _ = writeln!(
        w,
        "prezero-preload: pid {}: {} large blocks served ({:.2} GiB, {:.2} GiB from the cache \
         populated: ~{} page faults avoided; {:.2} GiB cleared by calloc itself), scrubbed \
         {:.2} GiB at {:.1} GB/s, populated {:.2} GiB spare, gave back {:.2} GiB, peak held {:.2} GiB beyond {:.2} GiB in \
         use, {} to the next allocator, {} realloc by mremap, {} bad frees",
        std::process::id(),
        SERVED.load(Relaxed),
        gib(SERVED_BYTES.load(Relaxed)),
        gib(POPULATED_BYTES.load(Relaxed)),
        POPULATED_BYTES.load(Relaxed) / 4096,
        gib(INLINE_CLEARED.load(Relaxed)),
        gib(scrubbed),
        scrubbed as f64 / ns as f64,
        gib(SPARE_BYTES.load(Relaxed)),
        gib(RELEASED_BYTES.load(Relaxed)),
        gib(PEAK_HELD.load(Relaxed) as u64),
        gib(PEAK_IN_USE.load(Relaxed) as u64),
        FALLBACKS.load(Relaxed),
        REMAPS.load(Relaxed),
        BAD_FREES.load(Relaxed),
    );
    // Notes, each where it has something to say: each replaces the newline.
    let events = crate::pressure::EVENTS.load(Relaxed);
    if events > 0 {
        let used = LEN - w.len() - 1;
        w = &mut buf[used..];
        let _ = writeln!(w, "; {events} memory pressure events (all held went back)");
    }
    let around = AROUND_SCRUBBER.load(Relaxed);
    if around > 0 {
        let used = LEN - w.len() - 1;
        w = &mut buf[used..];
        let _ = writeln!(w, "; {around} calls went around a starved scrubber");
    }
    let used = LEN - w.len();
    crate::sys::write_stderr(&buf[..used]);
}
