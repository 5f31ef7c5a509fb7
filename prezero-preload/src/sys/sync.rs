//! The locks that live in statics, made without allocating, usable before
//! anything is set up: a pthread mutex, an event on a futex, and the futex
//! calls themselves.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU32, Ordering::SeqCst};

/// A pthread mutex that lives in a static: made without allocating, usable
/// before anything is set up, and held across `fork` by the cache's
/// [`super::atfork`] handlers.
pub struct Mutex(UnsafeCell<libc::pthread_mutex_t>);

// SAFETY: a pthread mutex is made to be shared between threads; it is only
// reached through the pthread calls below.
unsafe impl Sync for Mutex {}

impl Mutex {
    pub const fn new() -> Mutex {
        Mutex(UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER))
    }

    /// Takes the mutex, waiting for it.
    ///
    /// pre: none (the calling thread holding it already deadlocks, the
    /// default kind's answer: no memory is touched).
    pub fn lock(&self) {
        // SAFETY: an initialised mutex (new), never moved while in use (a static).
        unsafe { libc::pthread_mutex_lock(self.0.get()) };
    }

    /// Takes the mutex if it is free: whether it did.
    ///
    /// pre: none.
    pub fn try_lock(&self) -> bool {
        // SAFETY: as in lock.
        unsafe { libc::pthread_mutex_trylock(self.0.get()) == 0 }
    }

    /// Takes the mutex if it is free by `deadline` on `CLOCK_REALTIME`:
    /// whether it did.
    ///
    /// pre: none.
    pub fn lock_until(&self, deadline: &libc::timespec) -> bool {
        // SAFETY: as in lock; the deadline is only read.
        unsafe { libc::pthread_mutex_timedlock(self.0.get(), deadline) == 0 }
    }

    /// Gives the mutex back.
    ///
    /// # Safety
    /// pre: the calling thread holds it (unlocking another's is undefined).
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

/// Wakes the threads that wait for something to change under a [`Mutex`]:
/// a futex on a count of changes. Unlike a condition variable, it leaves
/// the taking back of the mutex to the waiter, which may give up on it (a
/// program's request does, rather than wait for a starved holder: see the
/// cache's `Guard`).
pub struct Event {
    changes: AtomicU32,
    sleepers: AtomicU32,
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

    /// Waits until a [`Event::signal_all`] after `seen` was read, or `ms`.
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
    let _kept = super::KeepErrno::new();
    let t = libc::timespec {
        tv_sec: (ms / 1000) as libc::time_t,
        tv_nsec: ((ms % 1000) * 1_000_000) as _,
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
