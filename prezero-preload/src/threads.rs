//! The preload's own threads (the lazy mode's fault handler and reserve
//! workers, the cache's scrubber, the pressure watcher), and the calls they
//! step aside for: the ones a process may make only as the program's
//! threads alone.
//!
//! * `unshare` and `setns` of a user namespace: the kernel refuses them
//!   (EINVAL) to a process of more than one thread (bubblewrap, `unshare -U`).
//! * glibc's `set*id` and `setgroups`: glibc makes every thread repeat the
//!   call, and aborts the process if one fails; a thread of ours lacks the
//!   capability the program gave its calling thread alone (a setpriv-style
//!   drop: `PR_SET_KEEPCAPS`, `setresuid`, `capset` of `CAP_SETGID`,
//!   `setresgid`).
//!
//! Around such a call every thread of ours is asked to stop ([`stopping`]),
//! woken by its owner, and joined; after it, each owner starts its threads
//! again ([`Owner`]), with the caller's credentials, as a thread the program
//! started then would have. A fault in the lazy mode's memory meanwhile
//! waits for the handler to return: the length of the call.
//!
//! Invariants: a slot of `THREADS` holds a joinable thread of this process
//! that nobody else joins or detaches (a forked child, which has none of
//! them, empties them); `STOPPING` is set only by the holder of `PAUSE`,
//! and only while it joins.

use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicUsize, Ordering};

use crate::sys;

/// Threads of ours at most: a handler, a worker per lane, a scrubber, a
/// watcher.
const SLOTS: usize = 64;
/// How long a pause waits for a thread of ours to end (a scrubber inside a
/// scrub chunk, a handler inside a fault): longer means it is stuck, and the
/// program's call goes ahead as it would have without the pause.
const JOIN_MS: u64 = 2000;

/// Our running threads' `pthread_t` (0: a free slot).
static THREADS: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
/// Set while a pause stops our threads: each returns at its next look.
static STOPPING: AtomicBool = AtomicBool::new(false);
/// The owners whose threads a pause stopped, to start again after it.
static STOPPED: AtomicU32 = AtomicU32::new(0);
/// One pause at a time: two program threads may set ids at once.
static PAUSE: sys::Mutex = sys::Mutex::new();
static AT_FORK: AtomicBool = AtomicBool::new(false);
/// The process whose threads the slots hold: a `vfork` child shares the
/// slots (the memory) but not the threads, and pauses nothing.
static OWNER: AtomicI32 = AtomicI32::new(0);

/// Who owns a kind of thread: it wakes them for a pause, and starts them
/// again after.
#[derive(Clone, Copy)]
pub enum Owner {
    /// The lazy mode's handler and workers.
    Lazy = 1,
    /// The cache's scrubber.
    Cache = 2,
    /// The pressure watcher.
    Pressure = 4,
}

/// Starts a thread of ours named `name` running `f`, with every signal
/// blocked (a program's handler run on it could touch registered memory
/// and wait on itself, or on a lock this thread holds).
pub fn spawn(name: &str, f: fn()) -> bool {
    if !AT_FORK.swap(true, Ordering::Relaxed) {
        sys::atfork(None, None, Some(in_child));
    }
    let old = sys::uffd::block_signals();
    let r = sys::spawn(name, f);
    sys::uffd::restore_signals(&old);
    let Ok(t) = r else { return false };
    OWNER.store(sys::getpid(), Ordering::Relaxed);
    let t = t as usize;
    if !THREADS.iter().any(|s| {
        s.compare_exchange(0, t, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }) {
        // No slot: never joined, so a pause cannot stop it.
        sys::detach(t as libc::pthread_t);
    }
    true
}

/// Whether a pause asks our threads to return now.
#[inline]
pub fn stopping() -> bool {
    STOPPING.load(Ordering::SeqCst)
}

/// A thread of `owner`'s returns for a pause: its owner starts it again.
pub fn stopped(owner: Owner) {
    STOPPED.fetch_or(owner as u32, Ordering::AcqRel);
}

/// Runs `call` with none of our threads running: stopped, joined, and
/// started again after it.
pub fn alone<T>(call: impl FnOnce() -> T) -> T {
    if OWNER.load(Ordering::Relaxed) != sys::getpid() {
        return call();
    }
    // Signals blocked while `PAUSE` is held: a handler that sets ids on
    // this thread would wait on it for ever.
    let mask = sys::uffd::block_signals();
    PAUSE.lock();
    let any = THREADS.iter().any(|s| s.load(Ordering::Acquire) != 0);
    if any {
        STOPPING.store(true, Ordering::SeqCst);
        crate::lazy::wake_threads();
        crate::cache::wake_scrubber();
        crate::pressure::wake();
        for s in &THREADS {
            let t = s.load(Ordering::Acquire);
            if t != 0 && sys::join(t as libc::pthread_t, JOIN_MS) {
                s.store(0, Ordering::Release);
            }
        }
        STOPPING.store(false, Ordering::Release);
        wait_single();
    }
    let r = call();
    // The call's errno, kept from what starting the threads again sets.
    let errno = sys::Errno::last();
    if any {
        let owners = STOPPED.swap(0, Ordering::AcqRel);
        if owners & Owner::Lazy as u32 != 0 {
            crate::lazy::restart_threads();
        }
        if owners & Owner::Cache as u32 != 0 {
            crate::cache::restart_scrubber();
        }
        if owners & Owner::Pressure as u32 != 0 {
            crate::pressure::watch();
        }
    }
    // SAFETY: this thread locked it above.
    unsafe { PAUSE.unlock() };
    sys::uffd::restore_signals(&mask);
    sys::set_errno(errno.0);
    r
}

/// A thread joined has ended for glibc, and may still be leaving the
/// kernel's thread group: a user namespace asked for in that moment is
/// refused. Waits (20 ms at most) until the kernel counts no thread of ours.
fn wait_single() {
    for _ in 0..20 {
        if sys::threads_in_process().is_none_or(|n| n <= program_threads()) {
            return;
        }
        sys::sleep_ms(1);
    }
}

/// The program's own threads: those the kernel counts less any of ours
/// still in a slot (one that did not stop).
fn program_threads() -> usize {
    let left = THREADS
        .iter()
        .filter(|s| s.load(Ordering::Relaxed) != 0)
        .count();
    sys::threads_in_process()
        .unwrap_or(1)
        .saturating_sub(left)
        .max(1)
}

/// A forked child has none of the parent's threads.
extern "C" fn in_child() {
    for s in &THREADS {
        s.store(0, Ordering::Relaxed);
    }
    STOPPED.store(0, Ordering::Relaxed);
    // SAFETY: the child's only thread; a parent's thread that held the
    // lock across the fork is not here.
    unsafe { PAUSE.reset() };
}

/// Whether `flags` of `unshare` or `setns` ask what only a single-threaded
/// process may have: a user namespace (which implies the other two), or its
/// own filesystem attributes.
fn needs_one_thread(flags: c_int) -> bool {
    flags & (libc::CLONE_NEWUSER | libc::CLONE_FS | libc::CLONE_THREAD) != 0
}

#[cfg(not(test))]
mod entry {
    //! The C entry points: each calls the C library's with our threads
    //! stopped.
    use std::ffi::c_int;

    use super::{alone, needs_one_thread};
    use crate::sys::next_symbol;

    /// The next definition of `name` (the C library's), as type `F`.
    macro_rules! next_fn {
        ($name:expr, $ty:ty) => {{
            static AT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let mut at = AT.load(std::sync::atomic::Ordering::Relaxed);
            if at == 0 {
                at = next_symbol($name).unwrap_or(0);
                AT.store(at, std::sync::atomic::Ordering::Relaxed);
            }
            // SAFETY: the next definition of the C function of that name,
            // whose signature the type states.
            (at != 0).then(|| unsafe { std::mem::transmute::<usize, $ty>(at) })
        }};
    }

    fn missing() -> c_int {
        crate::sys::set_errno(libc::ENOSYS);
        -1
    }

    /// `set*id` entry points, each the C library's with our threads stopped.
    macro_rules! set_ids {
        ($($name:ident $c_name:literal ( $($arg:ident : $t:ty),* )),* $(,)?) => {$(
            /// # Safety
            /// As the C function of this name.
            #[no_mangle]
            pub unsafe extern "C" fn $name($($arg: $t),*) -> c_int {
                match next_fn!($c_name, unsafe extern "C" fn($($t),*) -> c_int) {
                    // SAFETY: the caller's arguments, as the function takes them.
                    Some(f) => alone(|| unsafe { f($($arg),*) }),
                    None => missing(),
                }
            }
        )*};
    }

    set_ids! {
        setuid c"setuid" (uid: libc::uid_t),
        setgid c"setgid" (gid: libc::gid_t),
        seteuid c"seteuid" (uid: libc::uid_t),
        setegid c"setegid" (gid: libc::gid_t),
        setreuid c"setreuid" (r: libc::uid_t, e: libc::uid_t),
        setregid c"setregid" (r: libc::gid_t, e: libc::gid_t),
        setresuid c"setresuid" (r: libc::uid_t, e: libc::uid_t, s: libc::uid_t),
        setresgid c"setresgid" (r: libc::gid_t, e: libc::gid_t, s: libc::gid_t),
        setgroups c"setgroups" (n: usize, list: *const libc::gid_t),
    }

    /// # Safety
    /// As C's `unshare`.
    #[no_mangle]
    pub unsafe extern "C" fn unshare(flags: c_int) -> c_int {
        match next_fn!(c"unshare", unsafe extern "C" fn(c_int) -> c_int) {
            // SAFETY: the caller's argument.
            Some(f) if needs_one_thread(flags) => alone(|| unsafe { f(flags) }),
            // SAFETY: as above.
            Some(f) => unsafe { f(flags) },
            None => missing(),
        }
    }

    /// # Safety
    /// As C's `setns`.
    #[no_mangle]
    pub unsafe extern "C" fn setns(fd: c_int, kind: c_int) -> c_int {
        match next_fn!(c"setns", unsafe extern "C" fn(c_int, c_int) -> c_int) {
            // SAFETY: the caller's arguments. A descriptor's namespace of
            // any kind (0) may be a user namespace.
            Some(f) if kind == 0 || needs_one_thread(kind) => alone(|| unsafe { f(fd, kind) }),
            // SAFETY: as above.
            Some(f) => unsafe { f(fd, kind) },
            None => missing(),
        }
    }
}
