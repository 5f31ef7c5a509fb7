//! Memory pressure, as the kernel reports it: a thread that watches PSI (a
//! trigger on the memory cgroup's `memory.pressure` under v2, and on
//! `/proc/pressure/memory` where the process may write one: root, or
//! anyone from Linux 6.4 with a window of whole 2 s) and the cgroup's
//! `memory.events` (its `high` and `oom` counts). When one fires, what the
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
//!
//! What goes back is the holders' to say: the cache and the lazy mode each
//! register their [`Hooks`] at start-up ([`register`]), and this module
//! names neither.

use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU64, AtomicUsize, Ordering};

use crate::sys;

/// How long after the last event nothing is filled ahead.
const PRESSED_MS: u64 = 5000;
/// The PSI trigger: some task stalled on memory for 100 ms within 2 s (an
/// unprivileged trigger's window must be whole 2 s).
const TRIGGER: &[u8] = b"some 100000 2000000\0";

/// A memory cgroup with less room than this is short of memory.
const LOW_ROOM: usize = 64 << 20;

/// The process whose thread watches (0: none yet; a forked child's differs).
static WATCHER: AtomicI32 = AtomicI32::new(0);
/// Until when (coarse ms) the machine is pressed.
static UNTIL: AtomicU64 = AtomicU64::new(0);
/// Events seen, for the stats line.
pub static EVENTS: AtomicU64 = AtomicU64::new(0);
/// The memory left, the smaller of MemAvailable and the memory cgroup's
/// room, as last read (by the first caller, then each second by the
/// watcher); [`UNREAD`] before.
static ROOM: AtomicUsize = AtomicUsize::new(UNREAD);
const UNREAD: usize = 0;

/// What a holder of memory kept ahead does under pressure, registered once
/// ([`register`]). Each runs on the watcher, with signals blocked and no
/// lock of this module's held; it may take the holder's own lock, allocates
/// nothing, and does nothing before the holder has started.
pub struct Hooks {
    /// Memory is short: everything held ahead goes back.
    pub give_back: fn(),
    /// A second without an event (the room may have shrunk): no more is
    /// kept than the holder's share of it.
    pub trim: Option<fn()>,
}

/// The holders' hooks, in the order registered (null: a free slot): the
/// cache's, then the lazy mode's. Static pointers, not `OnceLock`s: a
/// child forked while another thread set one would wait for that thread
/// for ever.
static HOLDERS: [AtomicPtr<Hooks>; 2] = [const { AtomicPtr::new(std::ptr::null_mut()) }; 2];

/// Registers a holder's hooks, before it holds anything; again, the same
/// ones, changes nothing.
pub fn register(hooks: &'static Hooks) {
    let h = std::ptr::from_ref(hooks).cast_mut();
    let kept = HOLDERS.iter().any(|slot| {
        match slot.compare_exchange(std::ptr::null_mut(), h, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => true,
            Err(there) => there == h,
        }
    });
    debug_assert!(kept, "a third holder: HOLDERS has room for two");
}

/// The holders' hooks, in the order registered.
fn holders() -> impl Iterator<Item = &'static Hooks> {
    HOLDERS.iter().filter_map(|slot| {
        let h = slot.load(Ordering::Acquire);
        // SAFETY: null, or a `&'static Hooks` (`register`), never written
        // through.
        unsafe { h.as_ref() }
    })
}

/// The memory the machine and the memory cgroup have left (`usize::MAX`
/// where neither says), read again each second: what caps and reserves
/// are shares of.
pub fn room() -> usize {
    match ROOM.load(Ordering::Relaxed) {
        UNREAD => {
            let _kept = sys::KeepErrno::new();
            low();
            ROOM.load(Ordering::Relaxed)
        }
        r => r,
    }
}

fn now_ms() -> u64 {
    let t = sys::clock_gettime(libc::CLOCK_MONOTONIC_COARSE);
    t.tv_sec as u64 * 1000 + t.tv_nsec as u64 / 1_000_000
}

/// Whether memory is short now (an event within [`PRESSED_MS`]); no clock
/// read in a process that never saw one.
pub fn pressed() -> bool {
    let until = UNTIL.load(Ordering::Relaxed);
    until != 0 && now_ms() < until
}

/// What `crate::threads`' looks and stops ask of the watcher.
static WATCHER_HOOKS: crate::threads::Hooks = crate::threads::Hooks {
    wake,
    joined: Some(joined),
    restart: watch,
};

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
    crate::threads::register(crate::threads::Owner::Pressure, &WATCHER_HOOKS);
    // Every signal blocked (as each of ours): a program's handler run on it
    // could wait on the lazy mode's handler, which may wait on the cache's
    // lock this holds.
    let _ = crate::threads::spawn("prezero-psi", crate::threads::Kind::Other, run);
}

/// What a watched descriptor is.
#[derive(Clone, Copy, PartialEq)]
enum Source {
    Psi,
    /// `memory.events`, and its last `high` + `oom` count.
    Events(u64),
    /// The read end of the pipe a pause writes to (`crate::threads`).
    Bell,
}

/// The watcher's descriptors (-1: none), for a forked child to close: it
/// has copies and no watcher.
static FDS: [AtomicI32; 4] = [const { AtomicI32::new(-1) }; 4];
/// The bell pipe's write end (-1: none), and the pipe's identity (device,
/// inode): a number the program closed and reused is not written to.
static BELL: AtomicI32 = AtomicI32::new(-1);
static BELL_ID: [AtomicU64; 2] = [const { AtomicU64::new(0) }; 2];

/// Whether `fd` is still the bell pipe (either end).
fn is_bell(fd: i32) -> bool {
    sys::uffd::identity(fd).is_ok_and(|(dev, ino)| {
        dev == BELL_ID[0].load(Ordering::Relaxed) && ino == BELL_ID[1].load(Ordering::Relaxed)
    })
}

/// Closes the watcher's descriptors but the bell's write end (a forked
/// child's copies, or the watcher's own as it returns for a stop: the
/// stopping thread may be writing to the bell, and closes it after).
fn close_watched() {
    for f in &FDS {
        let fd = f.swap(-1, Ordering::Relaxed);
        if fd >= 0 {
            sys::uffd::close(fd);
        }
    }
}

/// The bell's write end closed (the watcher is gone).
fn close_bell() {
    let fd = BELL.swap(-1, Ordering::Relaxed);
    if fd >= 0 {
        sys::uffd::close(fd);
    }
}

/// A forked child: its copies of the descriptors closed, and no watcher
/// until it holds memory of its own.
pub fn in_child() {
    close_watched();
    close_bell();
    WATCHER.store(0, Ordering::Relaxed);
}

/// After a stop joined the watcher: its bell goes too (the watcher started
/// again makes another).
fn joined() {
    if WATCHER.load(Ordering::Relaxed) == 0 {
        close_bell();
    }
}

/// Wakes the watcher for a look at `crate::threads`.
fn wake() {
    let fd = BELL.load(Ordering::SeqCst);
    if fd >= 0 && WATCHER.load(Ordering::Relaxed) == sys::getpid() && is_bell(fd) {
        let _ = sys::write_byte(fd);
    }
}

/// `fd` moved to a number of 512 or above (a program that closes or
/// reuses low numbers leaves it alone), or kept where none could be had.
fn high(fd: i32) -> i32 {
    match sys::dup_above(fd, 512) {
        Ok(hi) => {
            sys::uffd::close(fd);
            hi
        }
        Err(_) => fd,
    }
}

fn run() {
    let mut fds = [libc::pollfd {
        fd: -1,
        events: libc::POLLPRI,
        revents: 0,
    }; 4];
    let mut what = [Source::Psi; 4];
    let mut n = 0;
    let mut path = [0u8; 4096];
    let cgroup = crate::cgroup::v2_file(b"memory.pressure", &mut path)
        .and_then(|p| sys::psi_trigger(p, TRIGGER));
    let mut path = [0u8; 4096];
    let events = crate::cgroup::v2_file(b"memory.events", &mut path).and_then(sys::open_read);
    // The machine's stalls count other cgroups' at their own limits: only
    // for a process in no cgroup of its own.
    let mut path = [0u8; 4096];
    let at_root =
        crate::cgroup::v2_file(b"", &mut path).is_none_or(|p| p.to_bytes() == b"/sys/fs/cgroup/");
    let system = at_root
        .then(|| sys::psi_trigger(c"/proc/pressure/memory", TRIGGER))
        .flatten();
    let bell = sys::pipe().ok().map(|(r, w)| {
        let w = high(w);
        if let Ok((dev, ino)) = sys::uffd::identity(w) {
            BELL_ID[0].store(dev, Ordering::Relaxed);
            BELL_ID[1].store(ino, Ordering::Relaxed);
        }
        BELL.store(w, Ordering::SeqCst);
        r
    });
    for (fd, source) in [
        (cgroup, Source::Psi),
        (system, Source::Psi),
        (events, Source::Events(0)),
        (bell, Source::Bell),
    ] {
        if let Some(fd) = fd {
            let fd = high(fd);
            FDS[n].store(fd, Ordering::Relaxed);
            fds[n].fd = fd;
            if source == Source::Bell {
                fds[n].events = libc::POLLIN;
            }
            what[n] = match source {
                Source::Events(_) => Source::Events(limit_events(fd).unwrap_or(0)),
                s => s,
            };
            n += 1;
        }
    }
    // The room at once: a reserve's first fill is a share of it.
    if low() {
        press();
    }
    let mut looked = now_ms();
    let mut look = crate::threads::first_look();
    loop {
        // After the bell is set up: a look asked for before it was found
        // none.
        crate::threads::sync(&mut look);
        if crate::threads::stopping(crate::threads::Owner::Pressure) {
            close_watched();
            WATCHER.store(0, Ordering::Relaxed);
            return;
        }
        // SAFETY: `fds[..n]` are pollfds of this thread (a descriptor the
        // program closed says POLLNVAL, and is dropped).
        let r = unsafe { libc::poll(fds.as_mut_ptr(), n as libc::nfds_t, 1000) };
        let mut fired = false;
        let mut i = 0;
        while r > 0 && i < n {
            let ev = fds[i].revents;
            let dead = match what[i] {
                // A trigger fires with POLLPRI alone; a cgroup removed
                // answers POLLERR on every poll from then on.
                Source::Psi => {
                    fired |= ev == libc::POLLPRI;
                    ev & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0
                }
                // A change says POLLPRI | POLLERR; reading it takes the
                // change, so the next poll waits again.
                Source::Events(last) if ev != 0 => match limit_events(fds[i].fd) {
                    Some(now) if ev & libc::POLLNVAL == 0 => {
                        fired |= now > last;
                        what[i] = Source::Events(now);
                        false
                    }
                    _ => true,
                },
                Source::Events(_) => false,
                // Read at the loop's top; a number the program reused is
                // its file, dropped and left open.
                Source::Bell if ev != 0 => {
                    if ev & libc::POLLNVAL != 0 || !is_bell(fds[i].fd) {
                        fds[i].revents = libc::POLLNVAL;
                        true
                    } else {
                        sys::drain(fds[i].fd);
                        false
                    }
                }
                Source::Bell => false,
            };
            if dead {
                // Dropped; closed unless the program closed it (its number
                // may be the program's file now).
                if fds[i].revents & libc::POLLNVAL == 0 {
                    sys::uffd::close(fds[i].fd);
                }
                n -= 1;
                fds.swap(i, n);
                what.swap(i, n);
                FDS[i].store(fds[i].fd, Ordering::Relaxed);
                FDS[n].store(-1, Ordering::Relaxed);
                fds[n].fd = -1;
                continue;
            }
            i += 1;
        }
        // The numbers once a second, whatever else happens.
        let now = now_ms();
        if now >= looked + 1000 {
            looked = now;
            fired |= low();
            if !fired {
                // The room may have shrunk: each holder keeps no more than
                // its share.
                for trim in holders().filter_map(|h| h.trim) {
                    trim();
                }
            }
        }
        if fired {
            press();
        }
    }
}

/// Whether memory is short by the numbers: MemAvailable under a sixteenth
/// of MemTotal, or the memory cgroup's room under [`LOW_ROOM`]. Notes the
/// room left ([`room`]).
fn low() -> bool {
    use crate::config::meminfo;
    let available = meminfo(b"MemAvailable:");
    let short = match (available, meminfo(b"MemTotal:")) {
        (Some(a), Some(t)) => a < t / 16,
        _ => false,
    };
    let cgroup = crate::cgroup::room();
    let room = available
        .unwrap_or(usize::MAX)
        .min(cgroup.unwrap_or(usize::MAX));
    ROOM.store(room.max(UNREAD + 1), Ordering::Relaxed);
    short || cgroup.is_some_and(|r| r < LOW_ROOM)
}

/// The `high` and `oom` counts of a `memory.events` descriptor, read
/// again; `None` where it cannot be read (the cgroup is gone). Not `max`:
/// a cgroup at its limit with page cache counts one at each reclaim, and
/// the room it has left, file pages counted, says more (`low`).
fn limit_events(fd: i32) -> Option<u64> {
    let mut buf = [0u8; 512];
    let n = sys::pread_start(fd, &mut buf).ok()?;
    let count = |l: &[u8]| {
        let rest = l
            .strip_prefix(b"high ")
            .or_else(|| l.strip_prefix(b"oom "))?;
        std::str::from_utf8(rest).ok()?.trim().parse::<u64>().ok()
    };
    Some(buf[..n].split(|&b| b == b'\n').filter_map(count).sum())
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
    for h in holders() {
        (h.give_back)();
    }
}
