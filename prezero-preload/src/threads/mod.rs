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
//!   stop and are joined, and the program's next large block or mapping
//!   starts them again from its own thread (`stop.rs`). After a seccomp
//!   filter none starts again.
//! * They exist only while their owner has work or holds memory, and never
//!   at `SCHED_IDLE`: an exit waits for every thread to run once.
//!
//! Each thread looks at [`sync`] at the top of its loop and ends when
//! [`stopping`] says so; its owner wakes it (`wake_all`): the workers by
//! their futexes, the scrubber under its lock, the watcher by a pipe; the
//! handler is not woken (a wake by a fault, as a bell page was, would
//! block the waker where the handler is gone). No wait of theirs is longer
//! than [`guest::CHECK_MS`], so each looks within it.
//!
//! This module names none of the owners: each registers its [`Hooks`]
//! ([`register`]) before it starts a thread of its own, and a look or a
//! stop reaches it only through them. An owner not registered has no
//! thread to wake or start again.
//!
//! Invariants: a slot of `JOINABLE` (or `HANDLER`) holds a joinable thread
//! of this process from before it is created until it is joined, and no
//! thread of ours is ever detached (`slots.rs`); a forked child, which has
//! none of them, empties them. `PAUSE` orders the stops with each other and
//! with [`spawn`] (a thread started during one would miss it), and is held
//! with signals blocked; a thread of ours never waits for it (a stop may be
//! waiting for that thread). Its place among the crate's locks: `lib.rs`.

mod guest;
mod ids;
mod polite;
mod slots;
mod stop;

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU32, Ordering};

use slots::Slot;

use crate::sys;

pub use guest::CHECK_MS;
#[cfg(not(test))]
pub use ids::IdCall;
pub use ids::IdChange;
pub use polite::Polite;
// Only entry/ calls these, and a test build leaves it out.
#[cfg(not(test))]
pub use stop::{changing, setns_needs_one_thread, unshare_needs_one_thread, Scope};

/// Threads of ours at most besides the handler: a worker per lane, a
/// scrubber, a watcher.
const SLOTS: usize = 64;

/// Our threads other than the handler, and the handler, until joined
/// (`slots.rs`).
static JOINABLE: [Slot; SLOTS] = [const { Slot::new() }; SLOTS];
static HANDLER: Slot = Slot::new();
/// Set for good before a seccomp filter is entered (`stop.rs`): no thread
/// of ours starts again in this process (what the filter allows a thread
/// to call cannot be known).
static NEVER: AtomicBool = AtomicBool::new(false);
/// One call of those above at a time, and no thread started meanwhile.
static PAUSE: sys::Mutex = sys::Mutex::new();
/// Threads of ours that have given up their privileges: [`spawn`] (under
/// `PAUSE`, one at a time) waits for the count to pass what it was.
static DROPPED: AtomicU32 = AtomicU32::new(0);
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

/// Who owns a kind of thread: it wakes them, and hands over what they
/// serve before a stop.
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

/// Whether no thread of ours may start again in this process (the program
/// entered a seccomp filter): its owners then make no system call the
/// program would not make itself.
pub fn never() -> bool {
    NEVER.load(Ordering::Acquire)
}

/// `PAUSE` held by the calling thread, signals blocked.
struct Paused(libc::sigset_t);

impl Paused {
    fn take() -> Paused {
        fork_handler();
        // A handler that set ids or faulted on this thread while it holds
        // the lock would wait on itself.
        let mask = sys::uffd::block_signals();
        PAUSE.lock();
        Paused(mask)
    }

    /// [`Paused::take`], or `None` where `no_wait` and it is held.
    fn take_unless(no_wait: bool) -> Option<Paused> {
        if !no_wait {
            return Some(Paused::take());
        }
        fork_handler();
        let mask = sys::uffd::block_signals();
        if PAUSE.try_lock() {
            return Some(Paused(mask));
        }
        sys::uffd::restore_signals(&mask);
        None
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        // SAFETY: `take` locked it on this thread.
        unsafe { PAUSE.unlock() };
        sys::uffd::restore_signals(&self.0);
    }
}

/// At load, while the process has one thread: [`in_child`] registered.
pub fn at_load() {
    fork_handler();
}

/// Registers [`in_child`] once, before `PAUSE` is first taken: a child
/// forked while another thread holds it must find it free. At load
/// ([`at_load`]); here again for a process that loaded the library later.
fn fork_handler() {
    if !AT_FORK.swap(true, Ordering::Relaxed) {
        sys::atfork(None, None, Some(in_child));
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
/// `/proc` cannot say, the program entered a seccomp filter, every slot is
/// taken, or the kernel refused.
pub fn spawn(name: &str, kind: Kind, f: fn()) -> bool {
    // Not while a stop is under way; a thread of ours does not wait for
    // one (it may be the thread the stop waits for).
    let Some(_p) = Paused::take_unless(guest::is_ours()) else {
        return false;
    };
    if NEVER.load(Ordering::Acquire) || !guest::may_spawn() {
        return false;
    }
    // Threads that ended on their own are joined here: their slots free.
    for s in JOINABLE.iter().chain([&HANDLER]) {
        s.reap();
    }
    let slot: &'static Slot = match kind {
        Kind::Handler => &HANDLER,
        Kind::Other => match JOINABLE.iter().find(|s| s.take()) {
            Some(s) => s,
            None => return false,
        },
    };
    if kind == Kind::Handler && !slot.take() {
        return false;
    }
    OWNER.store(sys::getpid(), Ordering::Relaxed);
    let generation = guest::generation();
    let dropped = DROPPED.load(Ordering::Acquire);
    let r = sys::spawn(name, move || {
        slot.started(sys::gettid());
        guest::enter(generation, &DROPPED);
        f();
        slot.ended();
    });
    let Ok(t) = r else {
        slot.give_back();
        return false;
    };
    slot.fill(t);
    // Not back to the program before the thread gave up its privileges:
    // the program may drop its own next, and ours would then hold what it
    // dropped until it ran (seen for 5 ms in a guest under emulation).
    guest::wait_dropped(&DROPPED, dropped);
    true
}

/// A thread of ours, at the top of its loop: every [`CHECK_MS`] one of
/// ours compares its identity with the main thread's (a wider one ends
/// them all).
#[inline]
pub fn sync() {
    guest::sync();
}

/// Why a thread of ours is asked to end. Either way the program's next call
/// that needs one starts another, from its own thread.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum End {
    /// A stop around a call of the program's: what its owner holds stays.
    Stop,
    /// It may be wider than the program now: what it holds goes back to
    /// the kernel.
    Retire,
}

/// Whether a thread of `owner`'s must end now, and why.
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

/// A forked child has none of the parent's threads.
extern "C" fn in_child() {
    for s in JOINABLE.iter().chain([&HANDLER]) {
        s.forget();
    }
    stop::in_child();
    // SAFETY: the child's only thread; a parent's thread that held the
    // lock across the fork is not here.
    unsafe { PAUSE.reset() };
}
