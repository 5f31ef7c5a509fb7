//! Before a `set*id` call of the program, each thread of ours takes the
//! caller's capabilities and securebits: glibc then makes it repeat the
//! call, from the same credentials as the caller's, and it succeeds as the
//! caller's does (and ends with the same ones). Ours keep serving
//! meanwhile: stopping the handler while a program thread faults on
//! registered memory inside a system call (its `read` into a fresh buffer)
//! would leave that thread unable to answer glibc's signal, and the call
//! waiting for ever.
//!
//! After the call, ours hold no capability that caller drops later on its
//! own thread (libcap's drop after a `set*id`): each narrows its set to the
//! caller's every 200 ms, and never widens it but for a `set*id`.
//!
//! A generation number asks for the look; each thread that took the
//! credentials counts itself in `TOOK`, and the caller waits for all of
//! them (a bounded time: a thread that cannot take them, or does not come,
//! leaves the call to fail on it as it would have).

use std::sync::atomic::{AtomicU32, Ordering};

use super::{ours, wake_all, Paused, LIVE};
use crate::sys;

/// How long a call waits for our threads to take the credentials.
const WAIT_MS: u64 = 2000;

/// The look asked for last.
static GENERATION: AtomicU32 = AtomicU32::new(0);
/// Threads that took this generation's credentials (a futex the caller
/// waits on).
static TOOK: AtomicU32 = AtomicU32::new(0);
/// The caller's capabilities and securebits, written before the
/// generation's bump (Release) and read after it (Acquire).
static CAPS: [AtomicU32; 6] = [const { AtomicU32::new(0) }; 6];
static SECUREBITS: AtomicU32 = AtomicU32::new(0);

/// The look asked for last: where a thread of ours started now starts (it
/// has its creator's credentials, newer than any asked for before).
pub(super) fn generation() -> u32 {
    GENERATION.load(Ordering::Acquire)
}

/// The program's thread that made the last `set*id` call (0: none yet).
static CALLER: AtomicU32 = AtomicU32::new(0);
/// How often a thread of ours looks at that thread's capabilities.
const NARROW_MS: u64 = 200;

thread_local! {
    /// When this thread of ours last looked (coarse ms).
    static NARROWED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// A thread of ours takes the last credentials asked for, once; and holds
/// no capability the program's last `set*id` caller has dropped since (a
/// drop after it, `capset` on that thread alone: libcap's), looked at every
/// [`NARROW_MS`]. It never takes one that thread gained: only a `set*id`'s
/// look gives ours more.
pub(super) fn sync(seen: &mut u32) {
    narrow();
    let generation = GENERATION.load(Ordering::Acquire);
    if *seen == generation {
        return;
    }
    *seen = generation;
    let caps: sys::Caps = std::array::from_fn(|i| CAPS[i].load(Ordering::Relaxed));
    // Securebits first: setting them may need a capability the new set
    // drops. Either may fail (the caller's are more than ours): the call
    // then fails on this thread as it would have without the look.
    let _ = sys::set_securebits(SECUREBITS.load(Ordering::Relaxed));
    let _ = sys::set_caps(&caps);
    TOOK.fetch_add(1, Ordering::AcqRel);
    sys::futex_wake(&TOOK);
}

/// This thread's capabilities, less those the last `set*id` caller lacks.
fn narrow() {
    let caller = CALLER.load(Ordering::Relaxed);
    if caller == 0 {
        return;
    }
    let now = coarse_ms();
    if now < NARROWED.get() + NARROW_MS {
        return;
    }
    NARROWED.set(now);
    // A caller gone: what it had is not known; ours keep theirs.
    let (Ok(theirs), Ok(mine)) = (sys::caps_of(caller), sys::caps()) else {
        return;
    };
    let fewer: sys::Caps = std::array::from_fn(|i| mine[i] & theirs[i]);
    if fewer != mine {
        let _ = sys::set_caps(&fewer);
    }
}

fn coarse_ms() -> u64 {
    let t = sys::clock_gettime(libc::CLOCK_MONOTONIC_COARSE);
    t.tv_sec as u64 * 1000 + t.tv_nsec as u64 / 1_000_000
}

/// A thread of ours ends: a caller waiting for it counts one fewer.
pub(super) fn left() {
    sys::futex_wake(&TOOK);
}

/// Runs `call` (a `set*id` of the program's) once every thread of ours has
/// the caller's capabilities and securebits.
pub fn agreeing<T>(call: impl FnOnce() -> T) -> T {
    if !ours() {
        return call();
    }
    let _p = Paused::take();
    CALLER.store(sys::gettid(), Ordering::Relaxed);
    if LIVE.load(Ordering::Acquire) > 0 {
        if let (Ok(caps), Some(bits)) = (sys::caps(), sys::securebits()) {
            for (c, v) in CAPS.iter().zip(caps) {
                c.store(v, Ordering::Relaxed);
            }
            SECUREBITS.store(bits, Ordering::Relaxed);
            TOOK.store(0, Ordering::Release);
            GENERATION.fetch_add(1, Ordering::AcqRel);
            wake_all();
            let until = now_ms() + WAIT_MS;
            loop {
                let took = TOOK.load(Ordering::Acquire);
                let now = now_ms();
                if took >= LIVE.load(Ordering::Acquire) || now >= until {
                    break;
                }
                sys::futex_wait(&TOOK, took, (until - now).min(100));
            }
        }
    }
    // The lock dropped after it keeps errno: the call's is the program's.
    call()
}

fn now_ms() -> u64 {
    let t = sys::clock_gettime(libc::CLOCK_MONOTONIC);
    t.tv_sec as u64 * 1000 + t.tv_nsec as u64 / 1_000_000
}
