//! Memory pressure, as the kernel reports it: a thread that watches PSI,
//! the memory cgroup's events (v2) or its pressure level and usage (v1,
//! through eventfds), as `sources.rs` lists them. When one fires, what the
//! preload holds beyond what the program uses goes back to the kernel at
//! once (the cache's free blocks, the lazy reserve's slots), and for
//! [`PRESSED_MS`] after the last event nothing is filled or kept ahead:
//! frees go back as if the cap were 0, no spare, no reserve fill, no huge
//! page moved back into the reserve.
//!
//! Each second without an event it also looks at the numbers itself, for
//! kernels that report no pressure (Debian's boot with PSI off unless given
//! `psi=1`): MemAvailable under a sixteenth of the memory, or the memory
//! cgroup's room under [`LOW_ROOM`], is pressure too.
//!
//! The marks `MADV_FREE` leaves on zeroed memory already let the kernel's
//! reclaim take it without this thread; this one gives back what is not
//! zeroed yet (the scrubber's backlog) and stops the filling that would
//! compete with the program's neighbours.
//!
//! Started once a process holds something for later (its cache's first
//! free, its lazy reserve), never in a process that only asks for small
//! blocks; a forked child starts its own. It ends when no holder has held
//! anything or run a thread ([`Hooks::holds`]) for two of its looks, and
//! the next holder starts it again.
//!
//! What goes back is the holders' to say: the cache and the lazy mode each
//! register their [`Hooks`] at start-up ([`register`]), and this module
//! names neither.

mod sources;

use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU64, AtomicUsize, Ordering};

use crate::sys;

use sources::Source;

/// How long after the last event nothing is filled ahead.
const PRESSED_MS: u64 = 5000;

/// Looks (a second apart) that found nothing held before the watcher ends:
/// a program that freed everything and then grows past its room is still
/// seen short, and its next frees kept to that.
const IDLE_LOOKS: u32 = 2;

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
    /// Whether the holder holds memory or runs a thread: the watcher ends
    /// when none does.
    pub holds: fn() -> bool,
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
    sys::coarse_ms()
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
    leaving: None,
    joined: Some(joined),
};

/// Starts this process's watcher, once, with its sources opened by the
/// calling thread.
pub fn watch() {
    if crate::threads::never() {
        return;
    }
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
    let _kept = sys::KeepErrno::new();
    sources::open();
    // Every signal blocked (as each of ours): a program's handler run on it
    // could wait on the lazy mode's handler, which may wait on the cache's
    // lock this holds.
    if !crate::threads::spawn("prezero-psi", crate::threads::Kind::Other, run) {
        sources::close_watched();
        sources::close_bell();
        WATCHER.store(0, Ordering::Relaxed);
    }
}

/// A forked child: its copies of the descriptors closed, and no watcher
/// until it holds memory of its own.
pub fn in_child() {
    sources::close_watched();
    sources::close_bell();
    WATCHER.store(0, Ordering::Relaxed);
}

/// After a stop joined the watcher: its bell goes too (the watcher started
/// again makes another).
fn joined() {
    if WATCHER.load(Ordering::Relaxed) == 0 {
        sources::close_bell();
    }
}

/// Wakes the watcher for a look at `crate::threads`.
fn wake() {
    let fd = sources::BELL.load(Ordering::SeqCst);
    if fd >= 0 && WATCHER.load(Ordering::Relaxed) == sys::getpid() && sources::is_bell(fd) {
        let _ = sys::write_byte(fd);
    }
}

/// The watcher's descriptors, as `sources.rs` opened them.
struct Watched {
    fds: [libc::pollfd; sources::MAX],
    what: [Source; sources::MAX],
    n: usize,
}

impl Watched {
    fn take() -> Watched {
        let mut w = Watched {
            fds: [libc::pollfd {
                fd: -1,
                events: libc::POLLPRI,
                revents: 0,
            }; sources::MAX],
            what: [Source::Psi; sources::MAX],
            n: 0,
        };
        for i in 0..sources::MAX {
            let fd = sources::FDS[i].load(Ordering::Relaxed);
            if fd < 0 {
                continue;
            }
            let n = w.n;
            w.fds[n].fd = fd;
            w.what[n] = match Source::of(sources::KINDS[i].load(Ordering::Relaxed)) {
                Source::Events(_) => Source::Events(limit_events(fd).unwrap_or(0)),
                s => s,
            };
            if matches!(w.what[n], Source::Bell | Source::Level | Source::Usage) {
                w.fds[n].events = libc::POLLIN;
            }
            w.n += 1;
        }
        w
    }

    /// Waits `ms` at most for an event: whether one says memory is short.
    fn poll(&mut self, ms: i32) -> bool {
        // A descriptor the program closed says POLLNVAL, and is dropped.
        let r = sys::poll(&mut self.fds[..self.n], ms).unwrap_or(0);
        let mut fired = false;
        let mut i = 0;
        while r > 0 && i < self.n {
            let ev = self.fds[i].revents;
            let (short, dead) = look(&mut self.what[i], self.fds[i].fd, ev);
            fired |= short;
            if dead {
                // Dropped; closed unless the program closed it (its number
                // may be the program's file now).
                if ev & libc::POLLNVAL == 0 {
                    sys::direct::close(self.fds[i].fd);
                }
                if let Some(slot) = sources::FDS
                    .iter()
                    .find(|f| f.load(Ordering::Relaxed) == self.fds[i].fd)
                {
                    slot.store(-1, Ordering::Relaxed);
                }
                self.n -= 1;
                self.fds.swap(i, self.n);
                self.what.swap(i, self.n);
                continue;
            }
            i += 1;
        }
        fired
    }
}

/// What event `ev` on `fd` (a source of kind `what`) says: whether memory
/// is short, and whether the descriptor is dead (to be dropped).
fn look(what: &mut Source, fd: i32, ev: libc::c_short) -> (bool, bool) {
    if ev == 0 {
        return (false, false);
    }
    let dead = ev & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0;
    match *what {
        // A trigger fires with POLLPRI alone; a cgroup removed answers
        // POLLERR on every poll from then on.
        Source::Psi => (ev == libc::POLLPRI, dead),
        // A change says POLLPRI | POLLERR; reading it takes the change, so
        // the next poll waits again.
        Source::Events(last) => match limit_events(fd) {
            Some(now) if ev & libc::POLLNVAL == 0 => {
                *what = Source::Events(now);
                (now > last, false)
            }
            _ => (false, true),
        },
        // The eventfd's count read (and so reset); the usage's fires both
        // ways across its threshold: short only above it.
        Source::Level | Source::Usage if !dead => {
            if sys::read_counter(fd).is_err() {
                return (false, false);
            }
            let short = *what == Source::Level
                || sys::cgroup::v1_usage().is_some_and(|u| {
                    u as u64 >= sources::V1_USAGE_THRESHOLD.load(Ordering::Relaxed)
                });
            (short, false)
        }
        // Read at the loop's top; a number the program reused is its file,
        // dropped and left open.
        Source::Bell if !dead && sources::is_bell(fd) => {
            sys::drain(fd);
            (false, false)
        }
        _ => (false, true),
    }
}

fn run() {
    let mut watched = Watched::take();
    // The room at once: a reserve's first fill is a share of it.
    if low() {
        press();
    }
    let mut looked = now_ms();
    let mut idle_looks = 0;
    loop {
        crate::threads::sync();
        if crate::threads::stopping(crate::threads::Owner::Pressure).is_some() {
            break;
        }
        let mut fired = watched.poll(crate::threads::CHECK_MS as i32);
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
            idle_looks = if holders().any(|h| (h.holds)()) {
                0
            } else {
                idle_looks + 1
            };
        }
        if fired {
            press();
        }
        if idle_looks >= IDLE_LOOKS {
            // Nothing held ahead, no thread of a holder's, for as many
            // looks: nothing to watch for (the next holder starts it again;
            // the room it keeps to is read again then).
            break;
        }
    }
    sources::close_watched();
    WATCHER.store(0, Ordering::Relaxed);
}
/// Whether memory is short by the numbers: MemAvailable under a sixteenth
/// of MemTotal, or the memory cgroup's room under [`LOW_ROOM`]. Notes the
/// room left ([`room`]).
fn low() -> bool {
    use crate::sys::meminfo;
    let available = meminfo(b"MemAvailable:");
    let short = match (available, meminfo(b"MemTotal:")) {
        (Some(a), Some(t)) => a < t / 16,
        _ => false,
    };
    let cgroup = sys::cgroup::room();
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
