//! The preload's own threads (the lazy mode's fault handler and reserve
//! workers, the cache's scrubber, the pressure watcher): guests in the
//! program's process.
//!
//! * They hold no privilege the program's main thread lacks and lack no
//!   restriction it has (`guest.rs`): started from a thread that is the
//!   main thread's equal, they give up every capability first, and end
//!   within [`guest::CHECK_MS`] of a change they could not see.
//! * A change they can see (`set*id`, which glibc makes every thread
//!   repeat; a seccomp filter or Landlock ruleset, the bounding set, a
//!   namespace, by the C library or `syscall(2)`), and a call the kernel
//!   allows only a single-threaded process, runs with none of them: they
//!   stop, are joined, and start again after it from the calling thread
//!   (`stop.rs`).
//! * They exist only while their owner has work or holds memory, and never
//!   at `SCHED_IDLE`: an exit waits for every thread to run once.
//!
//! Each thread looks at [`sync`] at the top of its loop and ends when
//! [`stopping`] says so; its owner wakes it (`wake_all`): the handler by a
//! fault on its bell page, the workers by their futexes, the scrubber under
//! its lock, the watcher by a pipe. No wait of theirs is longer than
//! [`guest::CHECK_MS`], so one of them always looks.
//!
//! This module names none of the owners: each registers its [`Hooks`]
//! ([`register`]) before it starts a thread of its own, and a look or a
//! stop reaches it only through them. An owner not registered has no
//! thread to wake or start again.
//!
//! Invariants: `LIVE` counts our threads from before they are created to
//! after their last look; a slot of `JOINABLE` (or `HANDLER`) holds a
//! joinable thread of this process that nobody else joins or detaches (a
//! forked child, which has none of them, empties them); `PAUSE` orders
//! these calls with each other and with [`spawn`] (a thread started during
//! one would miss it), and is held with signals blocked.

mod guest;
mod polite;
mod stop;

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicUsize, Ordering};

use crate::sys;

pub use guest::CHECK_MS;
pub use polite::Polite;
// Only entry/ calls these, and a test build leaves it out.
#[cfg(not(test))]
pub use stop::{changing, setns_needs_one_thread, unshare_needs_one_thread, Scope};

/// Threads of ours at most besides the handler: a worker per lane, a
/// scrubber, a watcher.
const SLOTS: usize = 64;

/// Our running threads other than the handler (their `pthread_t`; 0: a
/// free slot), and the handler.
static JOINABLE: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
static HANDLER: AtomicUsize = AtomicUsize::new(0);
/// Our threads that may still look at [`sync`].
static LIVE: AtomicU32 = AtomicU32::new(0);
/// One call of those above at a time, and no thread started meanwhile.
static PAUSE: sys::Mutex = sys::Mutex::new();
/// The thread holding `PAUSE` (it starts threads again under it).
static PAUSER: AtomicU32 = AtomicU32::new(0);
static AT_FORK: AtomicBool = AtomicBool::new(false);
/// The process whose threads the slots hold: a `vfork` child shares the
/// slots (the memory) but not the threads, and touches none of them.
static OWNER: AtomicI32 = AtomicI32::new(0);

/// What a thread of ours is, for a stop: the handler goes last (the others
/// may fault on registered memory it serves) and comes back first.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Handler,
    Other,
}

/// Who owns a kind of thread: it wakes them, and starts them again after
/// a stop.
#[derive(Clone, Copy)]
pub enum Owner {
    /// The lazy mode's fault handler.
    Handler = 1,
    /// The lazy mode's reserve workers.
    Workers = 2,
    /// The cache's scrubber.
    Cache = 4,
    /// The pressure watcher.
    Pressure = 8,
}

impl Owner {
    /// Its slot in `HOOKS`.
    fn slot(self) -> usize {
        (self as u32).trailing_zeros() as usize
    }
}

/// What an owner does for a look or a stop, registered once ([`register`]).
/// Each runs with `PAUSE` held and signals blocked, allocates nothing but
/// what starting a thread takes, and does nothing in a process where the
/// owner's threads never started.
pub struct Hooks {
    /// Wakes its threads for a look at [`sync`] or [`stopping`].
    pub wake: fn(),
    /// In a stop, before the handler is asked to return (the program's
    /// threads may still fault on what it serves): hands that to the
    /// kernel.
    pub leaving: Option<fn()>,
    /// After a stop joined our threads, before the call: what they left
    /// behind goes.
    pub joined: Option<fn()>,
    /// After the call, where its threads returned for the stop: starts
    /// them again.
    pub restart: fn(),
}

/// Each owner's hooks, by [`Owner::slot`] (null: not registered). A static
/// pointer, not a `OnceLock`: a child forked while another thread set one
/// would wait for that thread for ever.
static HOOKS: [AtomicPtr<Hooks>; 4] = [const { AtomicPtr::new(std::ptr::null_mut()) }; 4];

/// Sets `owner`'s hooks, before it starts a thread; again, the same ones,
/// changes nothing.
pub fn register(owner: Owner, hooks: &'static Hooks) {
    HOOKS[owner.slot()].store(std::ptr::from_ref(hooks).cast_mut(), Ordering::Release);
}

/// `owner`'s hooks, if it registered them.
fn hooks(owner: Owner) -> Option<&'static Hooks> {
    let p = HOOKS[owner.slot()].load(Ordering::Acquire);
    // SAFETY: null, or a `&'static Hooks` (`register`), never written
    // through.
    unsafe { p.as_ref() }
}

/// Wakes the threads of `owners`, in that order.
fn wake(owners: &[Owner]) {
    for h in owners.iter().filter_map(|&o| hooks(o)) {
        (h.wake)();
    }
}

/// `PAUSE` held by the calling thread, signals blocked.
struct Paused(libc::sigset_t);

impl Paused {
    fn take() -> Paused {
        // A handler that set ids or faulted on this thread while it holds
        // the lock would wait on itself.
        let mask = sys::uffd::block_signals();
        PAUSE.lock();
        PAUSER.store(sys::gettid(), Ordering::Relaxed);
        Paused(mask)
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        PAUSER.store(0, Ordering::Relaxed);
        // SAFETY: `take` locked it on this thread.
        unsafe { PAUSE.unlock() };
        sys::uffd::restore_signals(&self.0);
    }
}

/// Whether this process's threads are the ones the slots hold.
fn ours() -> bool {
    OWNER.load(Ordering::Relaxed) == sys::getpid()
}

/// Starts a thread of ours named `name` running `f`, with every signal
/// blocked (a program's handler run on it could touch registered memory
/// and wait on itself, or on a lock this thread holds). False where none
/// may start: the calling thread is wider than the program's main thread
/// (it kept what the main thread gave up, or lacks a filter it entered),
/// `/proc` cannot say, or the kernel refused.
pub fn spawn(name: &str, kind: Kind, f: fn()) -> bool {
    if !AT_FORK.swap(true, Ordering::Relaxed) {
        sys::atfork(None, None, Some(in_child));
    }
    // Not while a call above is under way, unless it is this thread's,
    // starting threads again.
    let _p = (PAUSER.load(Ordering::Relaxed) != sys::gettid()).then(Paused::take);
    if !guest::may_spawn() {
        return false;
    }
    OWNER.store(sys::getpid(), Ordering::Relaxed);
    LIVE.fetch_add(1, Ordering::AcqRel);
    let generation = guest::generation();
    let r = sys::spawn(name, move || {
        guest::enter(generation);
        f();
        LIVE.fetch_sub(1, Ordering::AcqRel);
    });
    let Ok(t) = r else {
        LIVE.fetch_sub(1, Ordering::AcqRel);
        return false;
    };
    let t = t as usize;
    let kept = match kind {
        Kind::Handler => HANDLER
            .compare_exchange(0, t, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok(),
        Kind::Other => JOINABLE.iter().any(|s| {
            s.compare_exchange(0, t, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        }),
    };
    if !kept {
        // No slot (a handler not joined before is still there): never
        // joined, so a stop cannot wait for it.
        sys::detach(t as libc::pthread_t);
    }
    true
}

/// A thread of ours, at the top of its loop: every [`CHECK_MS`] one of
/// ours compares its identity with the main thread's (a wider one ends
/// them all).
#[inline]
pub fn sync() {
    guest::sync();
}

/// Why a thread of ours is asked to end.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum End {
    /// A stop around a call of the program's: it starts again after it,
    /// and keeps what its owner holds.
    Stop,
    /// It may be wider than the program now: what it holds goes back to
    /// the kernel; the program's next call that needs one starts another.
    Retire,
}

/// Whether a thread of `owner`'s must end now, and why. A stop counts it,
/// to start it again after the call.
pub fn stopping(owner: Owner) -> Option<End> {
    if stop::stopping(owner) {
        return Some(End::Stop);
    }
    guest::retired().then_some(End::Retire)
}

/// Wakes every thread of ours for a look at [`sync`] or [`stopping`].
fn wake_all() {
    wake(&[
        Owner::Workers,
        Owner::Handler,
        Owner::Cache,
        Owner::Pressure,
    ]);
}

/// Wakes every thread of ours but the caller's kind: the handler does not
/// ring its own bell (only it answers), the others are woken either way.
fn wake_others() {
    // SAFETY: pthread_self has no precondition.
    let me = unsafe { libc::pthread_self() } as usize;
    if HANDLER.load(Ordering::Acquire) == me {
        wake(&[Owner::Workers, Owner::Cache, Owner::Pressure]);
    } else {
        wake_all();
    }
}

/// A forked child has none of the parent's threads.
extern "C" fn in_child() {
    for s in JOINABLE.iter().chain([&HANDLER]) {
        s.store(0, Ordering::Relaxed);
    }
    LIVE.store(0, Ordering::Relaxed);
    PAUSER.store(0, Ordering::Relaxed);
    stop::in_child();
    // SAFETY: the child's only thread; a parent's thread that held the
    // lock across the fork is not here.
    unsafe { PAUSE.reset() };
}
