//! The locks that live in statics, made without allocating, usable before
//! anything is set up: a pthread mutex, a mutex on a futex that says who
//! holds it, an event on a futex, and the futex calls themselves.

use std::cell::UnsafeCell;
use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};

/// A pthread mutex that lives in a static: made without allocating, usable
/// before anything is set up.
pub struct Mutex(UnsafeCell<libc::pthread_mutex_t>);

// SAFETY: a pthread mutex is made to be shared between threads; it is only
// reached through the pthread calls below.
unsafe impl Sync for Mutex {}

impl Default for Mutex {
    fn default() -> Mutex {
        Mutex::new()
    }
}

impl Mutex {
    pub const fn new() -> Mutex {
        Mutex(UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER))
    }

    /// Takes the mutex, waiting for it.
    ///
    /// pre: none (the calling thread holding it already deadlocks, the
    /// default kind's answer: no memory is touched).
    #[inline]
    pub fn lock(&self) {
        // SAFETY: an initialised mutex (new), never moved while in use (a static).
        unsafe { libc::pthread_mutex_lock(self.0.get()) };
    }

    /// Takes the mutex if it is free: whether it did.
    ///
    /// pre: none.
    #[inline]
    pub fn try_lock(&self) -> bool {
        // SAFETY: as in lock.
        unsafe { libc::pthread_mutex_trylock(self.0.get()) == 0 }
    }

    /// Gives the mutex back.
    ///
    /// # Safety
    /// pre: the calling thread holds it (unlocking another's is undefined).
    #[inline]
    pub unsafe fn unlock(&self) {
        // SAFETY: held by this thread (pre).
        unsafe { libc::pthread_mutex_unlock(self.0.get()) };
    }

    /// Makes the mutex free again, whoever held it: in a forked child, where
    /// the parent's thread that held it does not exist.
    ///
    /// # Safety
    /// pre: the caller is a forked child's only thread, before anything of
    /// this crate in it uses the mutex.
    pub unsafe fn reset(&self) {
        // SAFETY: no other thread exists to hold or wait on it (pre): a
        // fresh initialiser written over it, as the C library does for its
        // own locks in a child.
        unsafe { self.0.get().write(libc::PTHREAD_MUTEX_INITIALIZER) };
    }
}

/// A mutex on a futex whose word also says who holds it: a tag the taker
/// gives (1 to [`TagMutex::MAX_TAG`]), written by the same atomic step that
/// takes it, so a waiter can tell whom it waits for (the cache gives up on a
/// starved scrubber, and only on it). Waits are on `CLOCK_MONOTONIC`, in
/// slices of [`TagMutex::SLICE_NS`], and an unlock wakes every sleeper: a
/// thread woken that does not run (a starved one) keeps no other waiting.
/// Held across `fork` by the cache's atfork handlers.
pub struct TagMutex(AtomicU32);

/// The word's bit that says a thread may sleep on it (the unlock wakes one).
const SLEEPERS: u32 = 1 << 31;

impl Default for TagMutex {
    fn default() -> TagMutex {
        TagMutex::new()
    }
}

impl TagMutex {
    /// The longest sleep between two looks at the word.
    const SLICE_NS: u64 = 2_000_000;
    /// The largest tag.
    pub const MAX_TAG: u32 = SLEEPERS - 1;

    pub const fn new() -> TagMutex {
        TagMutex(AtomicU32::new(0))
    }

    /// Takes the mutex if it is free, as `tag`: whether it did.
    ///
    /// pre: none.
    #[inline]
    pub fn try_lock(&self, tag: u32) -> bool {
        debug_assert!(tag != 0 && tag <= Self::MAX_TAG);
        self.0.compare_exchange(0, tag, Acquire, Relaxed).is_ok()
    }

    /// Takes the mutex as `tag`, waiting for it.
    ///
    /// pre: none (the calling thread holding it already waits for ever).
    #[inline]
    pub fn lock(&self, tag: u32) {
        while !self.lock_within(tag, u64::MAX) {}
    }

    /// Takes the mutex as `tag` if it is free within `ns` nanoseconds:
    /// whether it did.
    ///
    /// pre: none.
    pub fn lock_within(&self, tag: u32, ns: u64) -> bool {
        if self.try_lock(tag) {
            return true;
        }
        let start = now_ns();
        loop {
            let w = self.0.load(Relaxed);
            if w == 0 {
                // Taken marked: a thread may sleep on it still, which this
                // one's unlock must wake.
                if self
                    .0
                    .compare_exchange(0, tag | SLEEPERS, Acquire, Relaxed)
                    .is_ok()
                {
                    return true;
                }
                continue;
            }
            if w & SLEEPERS == 0
                && self
                    .0
                    .compare_exchange(w, w | SLEEPERS, Relaxed, Relaxed)
                    .is_err()
            {
                continue;
            }
            let waited = now_ns().saturating_sub(start);
            if waited >= ns {
                return false;
            }
            futex_wait_ns(&self.0, w | SLEEPERS, (ns - waited).min(Self::SLICE_NS));
        }
    }

    /// The tag of the thread that holds the mutex now, if one does.
    pub fn holder(&self) -> Option<u32> {
        let tag = self.0.load(Relaxed) & !SLEEPERS;
        (tag != 0).then_some(tag)
    }

    /// Gives the mutex back, and wakes the sleepers if one may sleep.
    ///
    /// # Safety
    /// pre: the calling thread holds it, or is a forked child's only thread
    /// and its parent's thread that forked held it.
    #[inline]
    pub unsafe fn unlock(&self) {
        if self.0.swap(0, Release) & SLEEPERS != 0 {
            futex_wake(&self.0);
        }
    }
}

/// Nanoseconds on the monotonic clock.
fn now_ns() -> u64 {
    let t = super::clock_gettime(libc::CLOCK_MONOTONIC);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Wakes the threads that wait for something to change under a lock:
/// a futex on a count of changes. Unlike a condition variable, it leaves
/// the taking back of the mutex to the waiter, which may give up on it (a
/// program's request does, rather than wait for a starved holder: see the
/// cache's `Guard`).
pub struct Event {
    changes: AtomicU32,
    sleepers: AtomicU32,
}

impl Default for Event {
    fn default() -> Event {
        Event::new()
    }
}

impl Event {
    pub const fn new() -> Event {
        Event {
            changes: AtomicU32::new(0),
            sleepers: AtomicU32::new(0),
        }
    }

    /// The count of changes now: read before the mutex is let go, and
    /// handed to [`Event::wait`], so a change after it cannot be missed.
    pub fn seen(&self) -> u32 {
        self.changes.load(SeqCst)
    }

    /// Waits until a [`Event::signal_all`] after `seen` was read, or `ms`
    /// (or less: a signal to the thread ends it too).
    ///
    /// pre: none (the caller lets its mutex go first, or it waits with it).
    pub fn wait(&self, seen: u32, ms: u64) {
        // Counted before the futex reads the count: a signal that sees no
        // sleeper changed the count first, and the futex returns at once.
        self.sleepers.fetch_add(1, SeqCst);
        futex_wait(&self.changes, seen, ms);
        self.sleepers.fetch_sub(1, SeqCst);
    }

    /// Wakes every waiter; a system call only if one sleeps.
    ///
    /// pre: none.
    pub fn signal_all(&self) {
        self.changes.fetch_add(1, SeqCst);
        if self.sleepers.load(SeqCst) > 0 {
            futex_wake(&self.changes);
        }
    }

    /// Forgets the sleepers: in a forked child, whose sleepers were the
    /// parent's threads.
    ///
    /// pre: the caller is a forked child's only thread.
    pub fn reset(&self) {
        self.sleepers.store(0, SeqCst);
    }
}

/// Waits while `word` holds `expected`, for a [`futex_wake`] or `ms`;
/// errno as it was (a `malloc` that waited succeeds without a trace).
///
/// pre: none.
pub fn futex_wait(word: &AtomicU32, expected: u32, ms: u64) {
    futex_wait_ns(word, expected, ms.saturating_mul(1_000_000));
}

/// [`futex_wait`] for `ns` nanoseconds.
fn futex_wait_ns(word: &AtomicU32, expected: u32, ns: u64) {
    let _kept = super::KeepErrno::new();
    let t = libc::timespec {
        tv_sec: (ns / 1_000_000_000).min(i32::MAX as u64) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as _,
    };
    // SAFETY: a private futex wait on a live atomic with a local timeout.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            &t as *const libc::timespec,
        )
    };
}

/// Wakes the threads waiting on `word`.
///
/// pre: none.
pub fn futex_wake(word: &AtomicU32) {
    // SAFETY: a private futex wake on a live atomic.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            i32::MAX,
        )
    };
}

#[cfg(test)]
mod tests {
    use super::TagMutex;
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

    #[test]
    fn a_tag_mutex_says_who_holds_it_and_times_out() {
        let m = TagMutex::new();
        assert_eq!(m.holder(), None);
        assert!(m.try_lock(2));
        assert_eq!(m.holder(), Some(2));
        assert!(!m.try_lock(1));
        assert!(!m.lock_within(1, 1_000_000), "held: the wait times out");
        assert_eq!(m.holder(), Some(2), "the tag stays through a waiter's mark");
        // SAFETY: held by this thread.
        unsafe { m.unlock() };
        assert!(m.lock_within(1, 1_000_000));
        assert_eq!(m.holder(), Some(1));
        // SAFETY: held by this thread.
        unsafe { m.unlock() };
        assert_eq!(m.holder(), None);
    }

    /// Threads that take it in turns: each count is made under it alone,
    /// none is lost, and every waiter gets it in the end.
    #[test]
    fn a_tag_mutex_excludes() {
        static M: TagMutex = TagMutex::new();
        static COUNT: AtomicU64 = AtomicU64::new(0);
        let (threads, per) = if cfg!(miri) { (3, 30) } else { (4, 20_000) };
        std::thread::scope(|s| {
            for t in 0..threads {
                s.spawn(move || {
                    for i in 0..per {
                        let tag = 1 + (t as u32 % 2);
                        if i % 3 == 0 {
                            while !M.lock_within(tag, 100_000) {}
                        } else {
                            M.lock(tag);
                        }
                        assert_eq!(M.holder(), Some(tag));
                        // Not an atomic increment: the mutex is what keeps it whole.
                        let n = COUNT.load(Relaxed);
                        std::hint::spin_loop();
                        COUNT.store(n + 1, Relaxed);
                        // SAFETY: held by this thread.
                        unsafe { M.unlock() };
                    }
                });
            }
        });
        assert_eq!(COUNT.load(Relaxed), (threads * per) as u64);
        assert_eq!(M.holder(), None);
    }
}
