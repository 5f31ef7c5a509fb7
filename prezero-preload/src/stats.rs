//! Counters of what the cache did, and the line `PREZERO_STATS=1` prints at
//! exit (formatted into a stack buffer: exit may run with the heap in any state).

use std::io::Write;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// What the cache counts: one counter each, in [`CACHE`].
#[derive(Clone, Copy)]
pub enum Count {
    /// Large blocks the cache handed out.
    Served,
    /// Their bytes.
    ServedBytes,
    /// Bytes handed out whose pages were present (Clean or Dirty): no fault.
    PopulatedBytes,
    /// Of those, bytes `calloc` cleared itself (Dirty: the scrubber had not got there).
    InlineCleared,
    /// Bytes the scrubber cleared.
    ScrubbedBytes,
    /// Nanoseconds the scrubber spent clearing them.
    ScrubNs,
    /// Bytes the scrubber populated as a spare (see `Config::spare`).
    SpareBytes,
    /// Bytes given back to the kernel (cap, idle).
    ReleasedBytes,
    /// Large requests the cache could not serve (handed to the next allocator).
    Fallbacks,
    /// `realloc`s that moved pages with mremap instead of copying.
    Remaps,
    /// Frees of pointers in the range that are not a block handed out (ignored).
    BadFrees,
    /// `malloc`, `calloc` and `free` calls that went on without the lock a
    /// starved scrubber kept (to the next allocator, or a free left for later).
    AroundScrubber,
    /// The most free bytes with pages behind them held at once (a maximum).
    PeakHeld,
    /// The most bytes handed out at once (a maximum).
    PeakInUse,
}

impl Count {
    /// How many there are: the last one's index, plus one.
    pub const N: usize = Count::PeakInUse as usize + 1;
}

impl From<Count> for usize {
    fn from(c: Count) -> usize {
        c as usize
    }
}

/// Counters named by the variants of `C`, an enum of `N` counts (the
/// cache's [`Count`], the lazy mode's): one atomic each, changed with
/// `Relaxed` (a count orders nothing), read once at exit.
pub struct Counters<C, const N: usize>([AtomicU64; N], PhantomData<C>);

impl<C: Copy + Into<usize>, const N: usize> Counters<C, N> {
    /// Every count at zero.
    pub const fn new() -> Self {
        Counters([const { AtomicU64::new(0) }; N], PhantomData)
    }

    /// Adds `n` to `c`.
    #[inline]
    pub fn add(&self, c: C, n: u64) {
        self.0[c.into()].fetch_add(n, Relaxed);
    }

    /// Takes `n` from `c` (a count made too early).
    pub fn sub(&self, c: C, n: u64) {
        self.0[c.into()].fetch_sub(n, Relaxed);
    }

    /// Raises `c` to `n` if it is below (a peak).
    pub fn max(&self, c: C, n: u64) {
        self.0[c.into()].fetch_max(n, Relaxed);
    }

    /// The count so far.
    pub fn get(&self, c: C) -> u64 {
        self.0[c.into()].load(Relaxed)
    }

    /// A forked child starts its own account: its line says what it did.
    /// Every counter is in the array, so none can be left out.
    pub fn reset(&self) {
        for c in &self.0 {
            c.store(0, Relaxed);
        }
    }
}

/// What the cache did in this process: the counters' one owner.
pub static CACHE: Counters<Count, { Count::N }> = Counters::new();

fn gib(b: u64) -> f64 {
    b as f64 / (1u64 << 30) as f64
}

/// Writes the summary line to stderr, if the process asked the cache for
/// anything (a shell or helper that never did stays quiet); a note of the
/// memory pressure events it saw at its end, if any.
pub fn print() {
    use Count::*;
    let c = |k| CACHE.get(k);
    if c(Served) == 0 && c(Fallbacks) == 0 {
        return;
    }
    const LEN: usize = 768;
    let mut buf = [0u8; LEN];
    let mut w = &mut buf[..];
    let scrubbed = c(ScrubbedBytes);
    let ns = c(ScrubNs).max(1);
    let _ = writeln!(
        w,
        "prezero-preload: pid {}: {} large blocks served ({:.2} GiB, {:.2} GiB from the cache \
         populated: ~{} page faults avoided; {:.2} GiB cleared by calloc itself), scrubbed \
         {:.2} GiB at {:.1} GB/s, populated {:.2} GiB spare, gave back {:.2} GiB, peak held {:.2} GiB beyond {:.2} GiB in \
         use, {} to the next allocator, {} realloc by mremap, {} bad frees",
        std::process::id(),
        c(Served),
        gib(c(ServedBytes)),
        gib(c(PopulatedBytes)),
        c(PopulatedBytes) / 4096,
        gib(c(InlineCleared)),
        gib(scrubbed),
        scrubbed as f64 / ns as f64,
        gib(c(SpareBytes)),
        gib(c(ReleasedBytes)),
        gib(c(PeakHeld)),
        gib(c(PeakInUse)),
        c(Fallbacks),
        c(Remaps),
        c(BadFrees),
    );
    // Notes, each where it has something to say: each replaces the newline.
    let events = crate::pressure::EVENTS.load(Relaxed);
    if events > 0 {
        let used = LEN - w.len() - 1;
        w = &mut buf[used..];
        let _ = writeln!(w, "; {events} memory pressure events (all held went back)");
    }
    let around = c(AroundScrubber);
    if around > 0 {
        let used = LEN - w.len() - 1;
        w = &mut buf[used..];
        let _ = writeln!(w, "; {around} calls went around a starved scrubber");
    }
    let used = LEN - w.len();
    crate::sys::write_stderr(&buf[..used]);
}
