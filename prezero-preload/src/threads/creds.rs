//! Before a `set*id` call of the program, each thread of ours takes the
//! caller's capabilities and securebits: glibc then makes it repeat the
//! call, from the same credentials as the caller's, and it succeeds as the
//! caller's does (and ends with the same ones). Ours keep serving
//! meanwhile: stopping the handler while a program thread faults on
//! registered memory inside a system call (its `read` into a fresh buffer)
//! would leave that thread unable to answer glibc's signal, and the call
//! waiting for ever.
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

/// A thread of ours takes the last credentials asked for, once.
pub(super) fn sync(seen: &mut u32) {
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
    sys::uffd::futex_wake(&TOOK);
}

/// A thread of ours ends: a caller waiting for it counts one fewer.
pub(super) fn left() {
    sys::uffd::futex_wake(&TOOK);
}

/// Runs `call` (a `set*id` of the program's) once every thread of ours has
/// the caller's capabilities and securebits.
pub(super) fn agreeing<T>(call: impl FnOnce() -> T) -> T {
    if !ours() {
        return call();
    }
    let _p = Paused::take();
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
                sys::uffd::futex_wait(&TOOK, took, (until - now).min(100));
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
