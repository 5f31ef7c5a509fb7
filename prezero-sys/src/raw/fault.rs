//! Injected failures, for tests: built only with the feature `fault-injection`
//! (off by default), which the preload's `tests/faults.rs` builds into a
//! shared object of its own. `PREZERO_FAULT` names the calls of `raw` to
//! fail:
//!
//! * `KIND:N[,KIND:N...]`: the Nth call of each kind in this process fails
//!   as the kernel would fail it (`raw` gives the errno), without being
//!   made; `KIND:N+`: the Nth and every call after it (a memory cgroup at
//!   its limit fails every call that allocates). Kinds: `mmap`, `madvise`, `mremap`, `munmap`, `mprotect`,
//!   `thread` (the creation of the scrubber and of the lazy mode's handler
//!   and worker), and the lazy mode's (`raw/uffd.rs`): `userfaultfd`
//!   (opening one, then its handshake), `uffd_register`, `uffd_copy`
//!   (`UFFDIO_COPY` and `UFFDIO_ZEROPAGE`), `uffd_move`, `uffd_wake`
//!   (`UFFDIO_WAKE` and `UFFDIO_UNREGISTER`), `pagemap` (opening it, then
//!   each scan). The program's own `mmap`, `munmap`, `mremap` and
//!   `madvise`, which the lazy mode passes on, are not the preload's: never
//!   failed.
//! * `stall:N`: not a call that fails but a holder that stalls: the Nth
//!   time the scrubber takes the cache's lock it keeps it 3 s, as a
//!   scrubber preempted while the program's threads keep every core busy
//!   may.
//! * `count` (alone, or among those): nothing more fails.
//!
//! Either way each kind's calls are counted and printed at exit, so a test
//! knows which N a real run reaches, and whether the one it named came.
//!
//! The variable is read at the first call of any kind, with `getenv` and
//! without allocating, as everything here runs inside `malloc`. A forked
//! child counts on from its parent's numbers.

use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::AtomicU8;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

use crate::raw as sys;

/// The calls a fault can be injected into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Mmap,
    Madvise,
    Mremap,
    Munmap,
    Mprotect,
    Thread,
    Userfaultfd,
    UffdRegister,
    UffdCopy,
    UffdMove,
    UffdWake,
    Pagemap,
    Stall,
}

const KINDS: [(Kind, &[u8]); 13] = [
    (Kind::Mmap, b"mmap"),
    (Kind::Madvise, b"madvise"),
    (Kind::Mremap, b"mremap"),
    (Kind::Munmap, b"munmap"),
    (Kind::Mprotect, b"mprotect"),
    (Kind::Thread, b"thread"),
    (Kind::Userfaultfd, b"userfaultfd"),
    (Kind::UffdRegister, b"uffd_register"),
    (Kind::UffdCopy, b"uffd_copy"),
    (Kind::UffdMove, b"uffd_move"),
    (Kind::UffdWake, b"uffd_wake"),
    (Kind::Pagemap, b"pagemap"),
    (Kind::Stall, b"stall"),
];

/// Calls made of each kind, in `KINDS`' order.
static CALLS: [AtomicU64; KINDS.len()] = [const { AtomicU64::new(0) }; KINDS.len()];
/// The call of each kind that fails (0: none).
static FAIL_AT: [AtomicU64; KINDS.len()] = [const { AtomicU64::new(0) }; KINDS.len()];
/// Whether every call of the kind after that one fails too (`KIND:N+`).
static FAIL_ON: [AtomicBool; KINDS.len()] = [const { AtomicBool::new(false) }; KINDS.len()];

const UNREAD: u8 = 0;
const READING: u8 = 1;
const READ: u8 = 2;
static PLAN: AtomicU8 = AtomicU8::new(UNREAD);

/// Whether this call of `kind` is to fail; counts it.
pub fn fails(kind: Kind) -> bool {
    read_plan();
    let i = kind as usize;
    let n = CALLS[i].fetch_add(1, Relaxed) + 1;
    let at = FAIL_AT[i].load(Relaxed);
    n == at || (at != 0 && n > at && FAIL_ON[i].load(Relaxed))
}

/// Reads `PREZERO_FAULT` once. A thread that comes while another reads it
/// waits: no call of its may be counted before the plan is known.
fn read_plan() {
    match PLAN.compare_exchange(UNREAD, READING, Acquire, Acquire) {
        Ok(_) => {}
        Err(READ) => return,
        Err(_) => {
            while PLAN.load(Acquire) != READ {
                std::hint::spin_loop();
            }
            return;
        }
    }
    // SAFETY: nothing in this process changes PREZERO_FAULT.
    let text = unsafe { sys::getenv(c"PREZERO_FAULT") }.unwrap_or(b"");
    if !text.is_empty() {
        sys::atexit(print_counts);
    }
    for item in text.split(|&b| b == b',') {
        if let Some((i, n, on)) = parse(item) {
            FAIL_AT[i].store(n, Relaxed);
            FAIL_ON[i].store(on, Relaxed);
        }
    }
    // Release: a thread that sees READ sees FAIL_AT.
    PLAN.store(READ, Release);
}

/// `KIND:N` or `KIND:N+` as the index of the kind, N (at least 1) and
/// whether the calls after the Nth fail too.
fn parse(item: &[u8]) -> Option<(usize, u64, bool)> {
    let (item, on) = match item.strip_suffix(b"+") {
        Some(item) => (item, true),
        None => (item, false),
    };
    let colon = item.iter().position(|&b| b == b':')?;
    let (name, num) = (&item[..colon], &item[colon + 1..]);
    let i = KINDS.iter().position(|(_, k)| *k == name)?;
    if num.is_empty() || !num.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = num.iter().try_fold(0u64, |n, &d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })?;
    (n > 0).then_some((i, n, on))
}

/// The line printed at exit: `prezero-preload: pid P: calls: mmap A madvise
/// B ... stall L`, each kind and its count in `KINDS`' order.
extern "C" fn print_counts() {
    use std::io::Write;
    let mut buf = [0u8; 512];
    let mut w = &mut buf[..];
    let _ = write!(w, "prezero-preload: pid {}: calls:", sys::getpid());
    for (i, (_, name)) in KINDS.iter().enumerate() {
        let name = std::str::from_utf8(name).unwrap_or("?");
        let _ = write!(w, " {name} {}", CALLS[i].load(Relaxed));
    }
    let _ = writeln!(w);
    let used = 512 - w.len();
    sys::write_stderr(&buf[..used]);
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn a_plan_names_a_kind_and_a_call() {
        assert_eq!(parse(b"mmap:1"), Some((0, 1, false)));
        assert_eq!(parse(b"thread:12"), Some((5, 12, false)));
        assert_eq!(parse(b"uffd_move:3"), Some((9, 3, false)));
        assert_eq!(parse(b"uffd_wake:8+"), Some((10, 8, true)));
        for bad in [
            &b"mmap"[..],
            b"mmap:",
            b"mmap:0",
            b"mmap:-1",
            b"mmap:1x",
            b"mmap:+",
            b"mmap:1++",
            b"brk:1",
            b":3",
            b"mmap:99999999999999999999999",
        ] {
            assert_eq!(parse(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
