//! What the watcher watches, opened on the program's thread that starts it
//! (a PSI trigger is as privileged as its opener: root's may use a short
//! window on any kernel; the watcher itself holds no privilege):
//!
//! * PSI: a trigger on the cgroup v2 `memory.pressure`, and on
//!   `/proc/pressure/memory` for a process in no cgroup of its own;
//! * cgroup v2's `memory.events` (its `high` and `oom` counts);
//! * cgroup v1, which has neither: an eventfd on `memory.pressure_level`
//!   (medium), and one on `memory.usage_in_bytes` crossing [`headroom`]
//!   below the limit (`cgroup.event_control`), so memory goes back before
//!   the limit, not after the kernel killed at it;
//! * the bell pipe a stop writes to.

use std::ffi::CStr;
use std::sync::atomic::{AtomicI32, AtomicU64, AtomicU8, Ordering};

use crate::sys;

/// The PSI trigger: some task stalled on memory for 100 ms within 2 s (an
/// unprivileged trigger's window must be whole 2 s).
const TRIGGER: &[u8] = b"some 100000 2000000\0";

/// What a watched descriptor is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Source {
    Psi,
    /// `memory.events`, and its last `high` + `oom` count.
    Events(u64),
    /// cgroup v1's pressure level, through an eventfd.
    Level,
    /// cgroup v1's usage past its threshold, through an eventfd.
    Usage,
    /// The read end of the pipe a stop writes to (`crate::threads`).
    Bell,
}

/// At most this many descriptors are watched.
pub const MAX: usize = 6;

/// The descriptors opened for the watcher (-1: none), and what each is,
/// for it to take; closed by it as it ends, or by a forked child.
pub static FDS: [AtomicI32; MAX] = [const { AtomicI32::new(-1) }; MAX];
/// What the descriptor in `FDS` at the same index is ([`Source::of`] its code).
pub static KINDS: [AtomicU8; MAX] = [const { AtomicU8::new(0) }; MAX];
/// The bell pipe's write end (-1: none), and the pipe's identity (device,
/// inode): a number the program closed and reused is not written to.
pub static BELL: AtomicI32 = AtomicI32::new(-1);
static BELL_ID: [AtomicU64; 2] = [const { AtomicU64::new(0) }; 2];
/// The v1 threshold (bytes of usage) the `Usage` eventfd fires at.
pub static V1_USAGE_THRESHOLD: AtomicU64 = AtomicU64::new(u64::MAX);

impl Source {
    fn code(self) -> u8 {
        match self {
            Source::Psi => 0,
            Source::Events(_) => 1,
            Source::Level => 2,
            Source::Usage => 3,
            Source::Bell => 4,
        }
    }

    /// The source a code in [`KINDS`] stands for (an `Events` count at 0).
    pub fn of(code: u8) -> Source {
        match code {
            1 => Source::Events(0),
            2 => Source::Level,
            3 => Source::Usage,
            4 => Source::Bell,
            _ => Source::Psi,
        }
    }
}

/// How far below a v1 limit its usage counts as pressure: an eighth of it,
/// 32 MiB at least.
pub fn headroom(limit: usize) -> usize {
    (limit / 8).max(32 << 20)
}

/// Opens every source this process has, into [`FDS`]: how many.
pub fn open() -> usize {
    let mut n = 0;
    let mut add = |fd: Option<i32>, source: Source| {
        if let Some(fd) = fd {
            if n < MAX {
                FDS[n].store(high(fd), Ordering::Relaxed);
                KINDS[n].store(source.code(), Ordering::Relaxed);
                n += 1;
            } else {
                sys::direct::close(fd);
            }
        }
    };
    let mut path = [0u8; 4096];
    add(
        sys::cgroup::v2_file(b"memory.pressure", &mut path)
            .and_then(|p| sys::psi_trigger(p, TRIGGER)),
        Source::Psi,
    );
    let mut path = [0u8; 4096];
    add(
        sys::cgroup::v2_file(b"memory.events", &mut path).and_then(sys::open_read),
        Source::Events(0),
    );
    // The machine's stalls count other cgroups' at their own limits: only
    // for a process in no cgroup of its own.
    let mut path = [0u8; 4096];
    let at_root =
        sys::cgroup::v2_file(b"", &mut path).is_none_or(|p| p.to_bytes() == b"/sys/fs/cgroup/");
    add(
        at_root
            .then(|| sys::psi_trigger(c"/proc/pressure/memory", TRIGGER))
            .flatten(),
        Source::Psi,
    );
    let (level, usage) = v1_events();
    add(level, Source::Level);
    add(usage, Source::Usage);
    add(bell(), Source::Bell);
    n
}

/// cgroup v1's eventfds, where the process is under a v1 memory limit: its
/// pressure level (medium) and its usage crossing [`headroom`] below the
/// limit.
fn v1_events() -> (Option<i32>, Option<i32>) {
    let mut dir = [0u8; 4096];
    let Some((len, limit)) = sys::cgroup::v1_limited(&mut dir) else {
        return (None, None);
    };
    let threshold = limit.saturating_sub(headroom(limit));
    V1_USAGE_THRESHOLD.store(threshold as u64, Ordering::Relaxed);
    let level = event(&dir[..len], b"memory.pressure_level", b"medium");
    let mut num = [0u8; 24];
    let digits = format_number(threshold, &mut num);
    let usage = event(&dir[..len], b"memory.usage_in_bytes", digits);
    (level, usage)
}

/// An eventfd the v1 cgroup at `dir` signals for `file` with `arg`
/// (`cgroup.event_control`'s "EVENTFD FD ARG"), or `None`.
fn event(dir: &[u8], file: &[u8], arg: &[u8]) -> Option<i32> {
    let mut path = [0u8; 4200];
    let target = sys::open_read(join(dir, file, &mut path)?)?;
    let efd = sys::eventfd().ok();
    let mut path = [0u8; 4200];
    let control = join(dir, b"cgroup.event_control", &mut path).and_then(sys::open_write);
    let registered = match (efd, control) {
        (Some(efd), Some(control)) => {
            use std::io::Write;
            let mut line = [0u8; 96];
            let mut w = &mut line[..];
            let _ = write!(w, "{efd} {target} ");
            let _ = w.write_all(arg);
            let used = 96 - w.len();
            sys::write_all(control, &line[..used]).is_ok()
        }
        _ => false,
    };
    for fd in [Some(target), control].into_iter().flatten() {
        sys::direct::close(fd);
    }
    match (registered, efd) {
        (true, efd) => efd,
        (false, Some(efd)) => {
            sys::direct::close(efd);
            None
        }
        (false, None) => None,
    }
}

/// `dir` `/` `file` as a C string in `out`.
fn join<'a>(dir: &[u8], file: &[u8], out: &'a mut [u8]) -> Option<&'a CStr> {
    let mut at = 0;
    for p in [dir, b"/", file, b"\0"] {
        out.get_mut(at..at + p.len())?.copy_from_slice(p);
        at += p.len();
    }
    CStr::from_bytes_until_nul(out).ok()
}

/// `n` in decimal, in `out`.
fn format_number(n: usize, out: &mut [u8; 24]) -> &[u8] {
    use std::io::Write;
    let mut w = &mut out[..];
    let _ = write!(w, "{n}");
    let used = 24 - w.len();
    &out[..used]
}

/// The bell pipe: its read end to watch; the write end kept in [`BELL`].
fn bell() -> Option<i32> {
    let (r, w) = sys::pipe().ok()?;
    let w = high(w);
    if let Ok((dev, ino)) = sys::uffd::identity(w) {
        BELL_ID[0].store(dev, Ordering::Relaxed);
        BELL_ID[1].store(ino, Ordering::Relaxed);
    }
    BELL.store(w, Ordering::SeqCst);
    Some(r)
}

/// Whether `fd` is still the bell pipe (either end).
pub fn is_bell(fd: i32) -> bool {
    sys::uffd::identity(fd).is_ok_and(|(dev, ino)| {
        dev == BELL_ID[0].load(Ordering::Relaxed) && ino == BELL_ID[1].load(Ordering::Relaxed)
    })
}

/// Closes the watched descriptors but the bell's write end (a forked
/// child's copies, or the watcher's own as it ends: the stopping thread may
/// be writing to the bell, and closes it after).
pub fn close_watched() {
    for f in &FDS {
        let fd = f.swap(-1, Ordering::Relaxed);
        if fd >= 0 {
            sys::direct::close(fd);
        }
    }
}

/// The bell's write end closed (the watcher is gone).
pub fn close_bell() {
    let fd = BELL.swap(-1, Ordering::Relaxed);
    if fd >= 0 {
        sys::direct::close(fd);
    }
}

/// `fd` moved to a number of 512 or above (a program that closes or
/// reuses low numbers leaves it alone), or kept where none could be had.
fn high(fd: i32) -> i32 {
    match sys::dup_above(fd, 512) {
        Ok(hi) => {
            sys::direct::close(fd);
            hi
        }
        Err(_) => fd,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_headroom_is_an_eighth_of_the_limit_or_32_mib() {
        assert_eq!(headroom(256 << 20), 32 << 20);
        assert_eq!(headroom(1 << 30), 128 << 20);
        assert_eq!(headroom(64 << 20), 32 << 20);
    }

    #[test]
    fn every_kind_of_source_comes_back_from_its_code() {
        for s in [
            Source::Psi,
            Source::Events(0),
            Source::Level,
            Source::Usage,
            Source::Bell,
        ] {
            assert_eq!(Source::of(s.code()), s);
        }
    }
}
