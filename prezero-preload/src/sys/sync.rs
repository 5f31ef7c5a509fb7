//! The locks that live in statics: a pthread mutex and condition variable,
//! made without allocating, usable before anything is set up.

use std::cell::UnsafeCell;

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

/// A pthread condition variable that lives in a static, beside its [`Mutex`].
pub struct Cond(UnsafeCell<libc::pthread_cond_t>);

// SAFETY: a pthread condition variable is made to be shared between threads;
// it is only reached through the pthread calls below.
unsafe impl Sync for Cond {}

impl Cond {
    pub const fn new() -> Cond {
        Cond(UnsafeCell::new(libc::PTHREAD_COND_INITIALIZER))
    }

    /// Wakes every thread waiting on it.
    ///
    /// pre: none.
    pub fn broadcast(&self) {
        // SAFETY: an initialised condition variable (new or reset).
        unsafe { libc::pthread_cond_broadcast(self.0.get()) };
    }

    /// Waits for a [`Cond::broadcast`] or until `deadline` on
    /// `CLOCK_REALTIME`, with `m` given back meanwhile and held again on
    /// return.
    ///
    /// # Safety
    /// pre: the calling thread holds `m`, and every thread that waits on this
    /// condition waits with `m`.
    pub unsafe fn wait_until(&self, m: &Mutex, deadline: &libc::timespec) {
        // SAFETY: `m` is held by this thread and the one mutex of this
        // condition (pre); the deadline is only read.
        unsafe { libc::pthread_cond_timedwait(self.0.get(), m.0.get(), deadline) };
    }

    /// Makes the condition anew, forgetting its waiters.
    ///
    /// # Safety
    /// pre: no thread waits on it or starts to while this runs (a forked
    /// child's copy, whose waiters were the parent's threads).
    pub unsafe fn reset(&self) {
        // SAFETY: no waiters (pre); default attributes.
        unsafe { libc::pthread_cond_init(self.0.get(), std::ptr::null()) };
    }
}
