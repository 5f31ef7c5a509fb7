//! Pool counters and the hand-out latency histogram.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Sub-buckets per power of two: quantiles are exact to within 19%.
const SUB: usize = 4;
const BUCKETS: usize = 64 * SUB;

/// A lock-free log-linear histogram of nanoseconds.
pub(crate) struct Histogram {
    buckets: Box<[AtomicU64; BUCKETS]>,
    max: AtomicU64,
}

impl Histogram {
    pub(crate) fn new() -> Histogram {
        Histogram {
            buckets: Box::new(std::array::from_fn(|_| AtomicU64::new(0))),
            max: AtomicU64::new(0),
        }
    }

    fn bucket(ns: u64) -> usize {
        if ns < SUB as u64 {
            return ns as usize;
        }
        let log = 63 - ns.leading_zeros() as usize;
        let frac = ((ns >> (log - 2)) & (SUB as u64 - 1)) as usize;
        (log * SUB + frac).min(BUCKETS - 1)
    }

    /// Upper bound of a bucket, in ns.
    fn bound(b: usize) -> u64 {
        if b < SUB {
            return b as u64;
        }
        let (log, frac) = (b / SUB, b % SUB);
        ((SUB + frac + 1) as u64) << (log - 2)
    }

    pub(crate) fn record(&self, d: Duration) {
        let ns = d.as_nanos().min(u64::MAX as u128) as u64;
        // Relaxed: counters only; readers want an approximate snapshot.
        self.buckets[Self::bucket(ns)].fetch_add(1, Ordering::Relaxed);
        self.max.fetch_max(ns, Ordering::Relaxed);
    }

    /// The `q` quantile (0..=1) in ns, as a bucket's upper bound.
    pub(crate) fn quantile(&self, q: f64) -> u64 {
        let counts: Vec<u64> = self
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return 0;
        }
        let target = ((total as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (b, &c) in counts.iter().enumerate() {
            seen += c;
            if seen >= target {
                return Self::bound(b).min(self.max());
            }
        }
        self.max()
    }

    pub(crate) fn max(&self) -> u64 {
        self.max.load(Ordering::Relaxed)
    }
}

/// Event counters of a pool. Relaxed atomics: each is independent and only read
/// for reporting.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) bytes_scrubbed: AtomicU64,
    pub(crate) bytes_cleared_hot: AtomicU64,
    pub(crate) bytes_cleared_cold: AtomicU64,
    pub(crate) bytes_fresh: AtomicU64,
    pub(crate) served_zeroed: AtomicU64,
    pub(crate) served_released: AtomicU64,
    pub(crate) served_hot: AtomicU64,
    pub(crate) served_cold: AtomicU64,
    pub(crate) served_fresh: AtomicU64,
    pub(crate) served_unzeroed: AtomicU64,
}

impl Counters {
    pub(crate) fn add(c: &AtomicU64, n: usize) {
        c.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// A snapshot of a pool.
///
/// `zeroed + dirty + scrubbing + in_use == mapped` (in chunks); `released` is
/// part of `zeroed`, `hot` part of `dirty`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolStats {
    /// Bytes per chunk.
    pub chunk_size: usize,
    /// Chunks mapped (backed or released).
    pub mapped: usize,
    /// Chunks known zero, ready for `alloc_zeroed`.
    pub zeroed: usize,
    /// Of `zeroed`: chunks whose pages were given back to the kernel by `trim`.
    pub released: usize,
    /// Chunks freed and not yet cleared.
    pub dirty: usize,
    /// Of `dirty`: chunks used recently enough to be cleared in cache on reuse.
    pub hot: usize,
    /// Chunks a scrubber is clearing now.
    pub scrubbing: usize,
    /// Chunks handed out.
    pub in_use: usize,
    /// Of `in_use`: chunks handed out as raw pointers (`Chunk::into_raw`).
    pub raw: usize,
    /// Bytes cleared by scrubbers in the background.
    pub bytes_scrubbed: u64,
    /// Bytes cleared on the allocating thread with ordinary stores (hot reuse).
    pub bytes_cleared_hot: u64,
    /// Bytes cleared on the allocating thread with streaming stores (cold).
    pub bytes_cleared_cold: u64,
    /// Bytes mapped fresh from the kernel (zero without clearing).
    pub bytes_fresh: u64,
    /// Zeroed hand-outs served from scrubbed or prefilled chunks (the warm path).
    pub served_zeroed: u64,
    /// Zeroed hand-outs of trimmed chunks (the kernel refaults them).
    pub served_released: u64,
    /// Zeroed hand-outs cleared synchronously in cache.
    pub served_hot: u64,
    /// Zeroed hand-outs cleared synchronously with streaming stores.
    pub served_cold: u64,
    /// Hand-outs of freshly mapped chunks.
    pub served_fresh: u64,
    /// `alloc()` hand-outs (contents not cleared).
    pub served_unzeroed: u64,
    /// Hand-out latency (`alloc_zeroed`, `alloc`), median, in ns (within 19%).
    pub latency_p50_ns: u64,
    /// 99th percentile hand-out latency, in ns (within 19%).
    pub latency_p99_ns: u64,
    /// Longest hand-out, in ns.
    pub latency_max_ns: u64,
    /// The scheduling policy the scrubbers actually run under.
    pub scrubber_priority: &'static str,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_ascend_and_bound_their_values() {
        let mut last = 0;
        for ns in [
            0u64,
            1,
            3,
            4,
            5,
            7,
            8,
            100,
            1000,
            4095,
            4096,
            1 << 20,
            u64::MAX / 2,
        ] {
            let b = Histogram::bucket(ns);
            assert!(b >= last);
            last = b;
            if b < BUCKETS - 1 {
                assert!(Histogram::bound(b) >= ns, "{ns} above its bucket bound");
                assert!(
                    Histogram::bound(b) as f64 <= (ns as f64 * 1.26).max(4.0),
                    "{ns}: bound too loose"
                );
            }
        }
    }

    #[test]
    fn quantiles() {
        let h = Histogram::new();
        for i in 1..=100u64 {
            h.record(Duration::from_nanos(i * 1000));
        }
        let p50 = h.quantile(0.5);
        assert!((50_000..=62_000).contains(&p50), "{p50}");
        assert_eq!(h.max(), 100_000);
        assert!(h.quantile(0.99) <= 100_000);
    }
}
