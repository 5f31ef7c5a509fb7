//! How a thread of ours shares the CPU with the program. It never runs at
//! `SCHED_IDLE` (an exit waits for every thread to run once, and the kernel
//! may not give an idle thread a CPU for seconds), so it keeps out of the
//! program's way itself: it works in short pieces, and after a piece in
//! which it was kept from the CPU (others wanted it: its wall time ran
//! ahead of its CPU time) it waits before the next, twice as long each time
//! a piece finds it so, up to [`MAX_BACKOFF_MS`]. On a busy machine it is
//! mostly asleep: the program's `calloc` clears what it takes itself. (The
//! machine's count of running tasks cannot tell: our own threads, woken
//! together, fill it.)

use crate::sys;

/// The first wait after a piece that found the CPU busy.
const MIN_BACKOFF_MS: u64 = 5;
/// The longest wait between pieces while pieces keep finding the CPU busy.
const MAX_BACKOFF_MS: u64 = 160;
/// Time kept from the CPU that counts as busy: more than this, and more
/// than a quarter of the piece.
const BUSY_NS: u64 = 200_000;

/// A thread's share of the CPU: when it may work next.
#[derive(Default)]
pub struct Polite {
    backoff_ms: u64,
    /// Coarse ms before which the thread waits.
    until: u64,
}

impl Polite {
    /// Runs one piece of work, and measures whether the thread was kept
    /// from the CPU meanwhile.
    pub fn run<T>(&mut self, work: impl FnOnce() -> T) -> T {
        let wall = sys::clock_gettime(libc::CLOCK_MONOTONIC);
        let cpu = sys::thread_cpu_ns();
        let r = work();
        let wall = ns_since(wall);
        let cpu = sys::thread_cpu_ns().saturating_sub(cpu);
        let kept = wall.saturating_sub(cpu);
        if kept > BUSY_NS && kept > wall / 4 {
            self.backoff_ms = (self.backoff_ms * 2).clamp(MIN_BACKOFF_MS, MAX_BACKOFF_MS);
            self.until = sys::coarse_ms() + self.backoff_ms;
        } else {
            self.backoff_ms = 0;
        }
        r
    }

    /// How long to wait before the next piece (0: none), at most `max` ms.
    pub fn wait_ms(&self, max: u64) -> u64 {
        self.until.saturating_sub(sys::coarse_ms()).min(max)
    }
}

fn ns_since(t: libc::timespec) -> u64 {
    let now = sys::clock_gettime(libc::CLOCK_MONOTONIC);
    let ns = (now.tv_sec - t.tv_sec) * 1_000_000_000 + (now.tv_nsec - t.tv_nsec);
    u64::try_from(ns).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_piece_on_a_free_cpu_asks_no_wait() {
        let mut p = Polite::default();
        p.run(|| std::hint::black_box((0..10_000u64).sum::<u64>()));
        assert_eq!(p.backoff_ms, 0);
        assert_eq!(p.wait_ms(50), 0);
    }

    #[test]
    fn a_piece_kept_from_the_cpu_waits_and_doubles() {
        let mut p = Polite::default();
        p.run(|| std::thread::sleep(std::time::Duration::from_millis(2)));
        let first = p.backoff_ms;
        assert_eq!(first, MIN_BACKOFF_MS);
        assert!(p.wait_ms(50) > 0);
        p.run(|| std::thread::sleep(std::time::Duration::from_millis(2)));
        assert_eq!(p.backoff_ms, 2 * first);
        assert!(p.wait_ms(5) <= 5);
    }
}
