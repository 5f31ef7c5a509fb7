//! Memory pressure, as the kernel reports it: a thread that watches PSI (a
//! trigger on the memory cgroup's `memory.pressure` under v2, and on
//! `/proc/pressure/memory` where the process may write one: root, or
//! anyone from Linux 6.4 with a window of whole 2 s) and the cgroup's
//! `memory.events` (its `high` and `max` counts). When one fires, what the
//! preload holds beyond what the program uses goes back to the kernel at
//! once (the cache's free blocks, the lazy reserve's slots), and for
//! [`PRESSED_MS`] after the last event nothing is filled or kept ahead:
//! frees go back as if the cap were 0, no spare, no reserve fill, no huge
//! page moved back into the reserve.
//!
//! Each second without an event it also looks at the numbers itself, for
//! kernels that report no pressure (Debian's boot with PSI off unless given
//! `psi=1`; cgroup v1 has neither file): MemAvailable under a sixteenth of
//! the memory, or the memory cgroup's room under [`LOW_ROOM`], is pressure
//! too.
//!
//! The marks `MADV_FREE` leaves on zeroed memory already let the kernel's
//! reclaim take it without this thread; this one gives back what is not
//! zeroed yet (the scrubber's backlog) and stops the filling that would
//! compete with the program's neighbours.
//!
//! Started once a process holds something for later (its cache's first
//! free, its lazy reserve), never in a process that only asks for small
//! blocks; a forked child starts its own.

use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

use crate::sys;

/// How long after the last event nothing is filled ahead.
const PRESSED_MS: u64 = 5000;
/// The PSI trigger: some task stalled on memory for 50 ms within 2 s (an
/// unprivileged trigger's window must be whole 2 s).
const TRIGGER: &[u8] = b"some 50000 2000000\0";

/// A memory cgroup with less room than this is short of memory.
const LOW_ROOM: usize = 64 << 20;

/// The process whose thread watches (0: none yet; a forked child's differs).
static WATCHER: AtomicI32 = AtomicI32::new(0);
/// Until when (coarse ms) the machine is pressed.
static UNTIL: AtomicU64 = AtomicU64::new(0);
/// Events seen, for the stats line.
pub static EVENTS: AtomicU64 = AtomicU64::new(0);

fn now_ms() -> u64 {
    let t = sys::clock_gettime(libc::CLOCK_MONOTONIC_COARSE);
    t.tv_sec as u64 * 1000 + t.tv_nsec as u64 / 1_000_000
}

/// Whether memory is short now (an event within [`PRESSED_MS`]).
pub fn pressed() -> bool {
    now_ms() < UNTIL.load(Ordering::Relaxed)
}

/// Starts this process's watcher, once.
pub fn watch() {
    let me = sys::getpid();
    let seen = WATCHER.load(Ordering::Relaxed);
    if seen == me
        || WATCHER
            .compare_exchange(seen, me, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
    {
        return;
    }
    // Every signal blocked: a program's handler run on it could wait on the
    // lazy mode's handler, which may wait on the cache's lock this holds.
    let old = sys::uffd::block_signals();
    let _ = sys::spawn("prezero-psi", run);
    sys::uffd::restore_signals(&old);
}

/// What a watched descriptor is.
#[derive(Clone, Copy, PartialEq)]
enum Source {
    Psi,
    /// `memory.events`, and its last `high` + `max` count.
    Events(u64),
}

fn run() {
    let mut fds = [libc::pollfd {
        fd: -1,
        events: libc::POLLPRI,
        revents: 0,
    }; 3];
    let mut what = [Source::Psi; 3];
    let mut n = 0;
    let mut path = [0u8; 4096];
    let cgroup = crate::cgroup::v2_file(b"memory.pressure", &mut path)
        .and_then(|p| sys::psi_trigger(p, TRIGGER));
    let mut path = [0u8; 4096];
    let events = crate::cgroup::v2_file(b"memory.events", &mut path).and_then(sys::open_read);
    for (fd, source) in [
        (cgroup, Source::Psi),
        (
            sys::psi_trigger(c"/proc/pressure/memory", TRIGGER),
            Source::Psi,
        ),
        (events, Source::Events(0)),
    ] {
        if let Some(fd) = fd {
            fds[n].fd = fd;
            what[n] = match source {
                Source::Events(_) => Source::Events(limit_events(fd)),
                s => s,
            };
            n += 1;
        }
    }
    loop {
        // SAFETY: `fds[..n]` are live pollfds of this thread.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), n as libc::nfds_t, 1000) };
        if r < 0 {
            continue;
        }
        if r == 0 {
            if low() {
                press();
            }
            continue;
        }
        let mut fired = false;
        for i in 0..n {
            if fds[i].revents == 0 {
                continue;
            }
            match what[i] {
                Source::Psi => fired |= fds[i].revents & libc::POLLPRI != 0,
                Source::Events(last) => {
                    let now = limit_events(fds[i].fd);
                    fired |= now > last;
                    what[i] = Source::Events(now);
                }
            }
        }
        if fired {
            press();
        }
    }
}

/// Whether memory is short by the numbers: MemAvailable under a sixteenth
/// of MemTotal, or the memory cgroup's room under [`LOW_ROOM`].
fn low() -> bool {
    use crate::config::meminfo;
    let short = match (meminfo(b"MemAvailable:"), meminfo(b"MemTotal:")) {
        (Some(a), Some(t)) => a < t / 16,
        _ => false,
    };
    short || crate::cgroup::room().is_some_and(|r| r < LOW_ROOM)
}

/// The `high` and `max` counts of a `memory.events` descriptor, read again.
fn limit_events(fd: i32) -> u64 {
    let mut buf = [0u8; 512];
    let Ok(n) = sys::pread_start(fd, &mut buf) else {
        return 0;
    };
    buf[..n]
        .split(|&b| b == b'\n')
        .filter_map(|l| {
            let rest = l
                .strip_prefix(b"high ")
                .or_else(|| l.strip_prefix(b"max "))?;
            std::str::from_utf8(rest).ok()?.trim().parse::<u64>().ok()
        })
        .sum()
}

/// Memory is short: everything held ahead goes back now, nothing is filled
/// for a while.
fn press() {
    let now = now_ms();
    let last = UNTIL.swap(now + PRESSED_MS, Ordering::Relaxed);
    // A burst of events (memory.events changes at each reclaim past high):
    // one give-back per 100 ms; meanwhile nothing is kept anyway.
    if now + PRESSED_MS < last + 100 {
        return;
    }
    EVENTS.fetch_add(1, Ordering::Relaxed);
    crate::cache::give_back_free();
    crate::lazy::give_back();
}
