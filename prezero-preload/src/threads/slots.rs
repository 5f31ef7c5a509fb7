//! Where the preload's threads are kept until they are joined: a slot each,
//! taken before the thread is created, marked by the thread as its last act,
//! and emptied only by a join (the next start's, or a stop's). A thread
//! that ends on its own is therefore joined all the same, and a stop knows
//! every thread of ours that may still run: none is detached. With every
//! slot taken no thread starts.
//!
//! Every call here but [`Slot::ended`] runs under `PAUSE` (`mod.rs`).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};

use crate::sys;

/// A slot taken for a thread about to be created.
const TAKEN: usize = 1;
/// How long a start waits to join a thread that said it has ended.
const REAP_MS: u64 = 2000;

/// One thread of ours: its `pthread_t` (0: free, [`TAKEN`]: being made),
/// and whether it has ended (it only returns after).
pub struct Slot {
    thread: AtomicUsize,
    /// Its thread id, once it runs (0: not yet).
    tid: AtomicU32,
    done: AtomicBool,
}

impl Slot {
    /// An empty slot (a static's initial value).
    pub const fn new() -> Slot {
        Slot {
            thread: AtomicUsize::new(0),
            tid: AtomicU32::new(0),
            done: AtomicBool::new(false),
        }
    }

    /// Takes the slot if it is free.
    pub fn take(&self) -> bool {
        let taken = self
            .thread
            .compare_exchange(0, TAKEN, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok();
        if taken {
            self.done.store(false, Ordering::Release);
            self.tid.store(0, Ordering::Release);
        }
        taken
    }

    /// The thread's first act: its id, for [`Slot::running`].
    pub fn started(&self, tid: u32) {
        self.tid.store(tid, Ordering::Release);
    }

    /// The id of the slot's thread, if one runs there.
    pub fn running(&self) -> Option<u32> {
        let t = self.thread.load(Ordering::Acquire);
        let tid = self.tid.load(Ordering::Acquire);
        (t != 0 && tid != 0 && !self.done.load(Ordering::Acquire)).then_some(tid)
    }

    /// The thread made for the slot taken.
    pub fn fill(&self, t: libc::pthread_t) {
        self.thread.store(t as usize, Ordering::Release);
    }

    /// The slot taken, no thread made: free again.
    pub fn give_back(&self) {
        self.thread.store(0, Ordering::Release);
    }

    /// The thread's last act: it has ended, and only returns now.
    pub fn ended(&self) {
        self.done.store(true, Ordering::Release);
    }

    /// Joins the thread if it has ended (it is about to be gone): the slot
    /// is free after.
    pub fn reap(&self) {
        if self.done.load(Ordering::Acquire) {
            self.join(REAP_MS);
        }
    }

    /// Waits `ms` at most for the thread to end, and joins it: true if the
    /// slot is free after (it held none, or the thread is gone).
    pub fn join(&self, ms: u64) -> bool {
        let t = self.thread.load(Ordering::Acquire);
        if t == 0 || t == TAKEN {
            return t == 0;
        }
        // `sys::join`'s pre: a joinable thread of this process that nobody
        // else joins (only the holder of `PAUSE` joins; a slot's thread is
        // never detached).
        let joined = sys::join(t as libc::pthread_t, ms);
        if joined {
            self.thread.store(0, Ordering::Release);
        }
        joined
    }

    /// A forked child: the parent's threads are not here.
    pub fn forget(&self) {
        self.thread.store(0, Ordering::Relaxed);
        self.tid.store(0, Ordering::Relaxed);
        self.done.store(false, Ordering::Relaxed);
    }
}
