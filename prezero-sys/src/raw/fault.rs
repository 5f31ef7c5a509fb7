//! Injected failures, for tests: built only with the feature `fault-injection`
//! (off by default), which the preload's `tests/faults.rs` builds into a
//! shared object of its own. `PREZERO_FAULT` names the calls of `raw` to
//! fail:
//!
//! * `KIND:N[,KIND:N...]`, `KIND:N+`: as every plan of `crate::fault`
//!   reads it; each call fails as the kernel would fail it (`raw` gives
//!   the errno), without being made. Kinds: `mmap`, `madvise`, `mremap`,
//!   `munmap`, `mprotect`, `thread` (the creation of the scrubber and of
//!   the lazy mode's handler and worker), and the lazy mode's
//!   (`raw/uffd.rs`): `userfaultfd` (opening one, then its handshake),
//!   `uffd_register`, `uffd_copy` (`UFFDIO_COPY` and `UFFDIO_ZEROPAGE`),
//!   `uffd_move`, `uffd_wake` (`UFFDIO_WAKE` and `UFFDIO_UNREGISTER`),
//!   `pagemap` (opening it, then each scan). The program's own `mmap`,
//!   `munmap`, `mremap` and `madvise`, which the lazy mode passes on, are
//!   not the preload's: never failed.
//! * `stall:N`: not a call that fails but a holder that stalls: the Nth
//!   time the scrubber takes the cache's lock it keeps it 3 s, as a
//!   scrubber preempted while the program's threads keep every core busy
//!   may.
//! * `count` (alone, or among those): nothing more fails.
//!
//! Either way each kind's calls are counted and printed at exit, so a test
//! knows which N a real run reaches, and whether the one it named came.

use crate::fault::Plan;
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

/// Each kind's name in a plan, in `Kind`'s order.
const KINDS: [&[u8]; 13] = [
    b"mmap",
    b"madvise",
    b"mremap",
    b"munmap",
    b"mprotect",
    b"thread",
    b"userfaultfd",
    b"uffd_register",
    b"uffd_copy",
    b"uffd_move",
    b"uffd_wake",
    b"pagemap",
    b"stall",
];

// A name for every kind, the last kind's the last.
const _: () = assert!(Kind::Stall as usize + 1 == KINDS.len());

/// The raw layer's plan.
static PLAN: Plan<{ KINDS.len() }> = Plan::new(c"PREZERO_FAULT", KINDS, Some(print_counts));

/// Whether this call of `kind` is to fail; counts it.
pub fn fails(kind: Kind) -> bool {
    PLAN.call(kind as usize).1
}

/// The line printed at exit: `prezero-preload: pid P: calls: mmap A madvise
/// B ... stall L`, each kind and its count in `KINDS`' order.
extern "C" fn print_counts() {
    use std::io::Write;
    let mut buf = [0u8; 512];
    let mut w = &mut buf[..];
    let _ = write!(w, "prezero-preload: pid {}: calls:", sys::getpid());
    for (i, name) in KINDS.iter().enumerate() {
        let name = std::str::from_utf8(name).unwrap_or("?");
        let _ = write!(w, " {name} {}", PLAN.calls(i));
    }
    let _ = writeln!(w);
    let used = 512 - w.len();
    sys::write_stderr(&buf[..used]);
}
