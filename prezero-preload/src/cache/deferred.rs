//! Frees left for the lock's next holder: a program's `free` that found the
//! lock kept by a starved scrubber (see `lock.rs`) leaves its block here and
//! returns. The next `free` that takes the lock, or the scrubber's next
//! loop, makes those frees first. Addresses in slots of a static, without
//! the lock: nothing allocated, nothing counted beside them (a count a forked
//! child copied halfway could not be right: a flag that may be set in vain
//! says only when to look), and a free that finds every slot taken waits for
//! the lock as before.
//!
//! A block left here stays InUse until then: no one is handed it, scrubs it
//! or gives it back, and the thread that left it no longer touches it.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Frees left at once, at most: a starved scrubber runs again within about
/// a second, and a program frees few blocks of 64 KiB or more in that time
/// (2 KiB of addresses).
const SLOTS: usize = 256;

/// The blocks left (0: an empty slot; no block starts at 0).
static LEFT: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
/// Set after a slot is filled, cleared before the slots are read: a free's
/// look at them is one load while none was left (set in vain, it costs one
/// read of the slots).
static MAYBE_LEFT: AtomicBool = AtomicBool::new(false);

/// Leaves the free of the block at `p` for the lock's next holder: false if
/// every slot is taken (the caller then waits for the lock).
pub(super) fn leave(p: usize) -> bool {
    let left = LEFT.iter().any(|slot| {
        // Release: the program's last writes to the block come before the
        // holder that takes it hands it out again.
        slot.load(Ordering::Relaxed) == 0
            && slot
                .compare_exchange(0, p, Ordering::Release, Ordering::Relaxed)
                .is_ok()
    });
    if left {
        MAYBE_LEFT.store(true, Ordering::Release);
    }
    left
}

/// Whether a free is left.
pub(super) fn any_left() -> bool {
    LEFT.iter().any(|slot| slot.load(Ordering::Relaxed) != 0)
}

/// Empties the slots, handing each block left to `free`: the caller holds the
/// lock. A slot being filled now is found by a later holder (its flag comes
/// after this one's clearing).
pub(super) fn take_each(mut free: impl FnMut(usize)) {
    if !MAYBE_LEFT.load(Ordering::Relaxed) || !MAYBE_LEFT.swap(false, Ordering::Acquire) {
        return;
    }
    for slot in &LEFT {
        if slot.load(Ordering::Relaxed) == 0 {
            continue;
        }
        let p = slot.swap(0, Ordering::Acquire);
        if p != 0 {
            free(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One test touches the statics (the slots are the process's).
    #[test]
    fn every_free_left_is_taken_once() {
        let base = 1usize << 40;
        assert!(!any_left());
        for i in 0..SLOTS {
            assert!(leave(base + i * 4096));
        }
        assert!(!leave(base + SLOTS * 4096), "every slot is taken");
        let mut seen = Vec::new();
        take_each(|p| seen.push(p));
        seen.sort_unstable();
        assert_eq!(
            seen,
            (0..SLOTS).map(|i| base + i * 4096).collect::<Vec<_>>()
        );
        assert!(!any_left());
        // Threads leave while this one takes: each block comes out once.
        let threads = if cfg!(miri) { 2 } else { 4 };
        let per = if cfg!(miri) { 20 } else { 2000 };
        let mut seen = Vec::new();
        std::thread::scope(|s| {
            for t in 0..threads {
                s.spawn(move || {
                    for i in 0..per {
                        let p = base + (t * per + i + 1) * 4096;
                        while !leave(p) {
                            std::thread::yield_now();
                        }
                    }
                });
            }
            while seen.len() < threads * per {
                take_each(|p| seen.push(p));
            }
        });
        take_each(|p| seen.push(p));
        seen.sort_unstable();
        let all: Vec<usize> = (1..=threads * per).map(|i| base + i * 4096).collect();
        assert_eq!(seen, all);
        assert!(!any_left());
    }
}
