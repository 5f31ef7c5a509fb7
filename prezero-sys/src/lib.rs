//! The workspace's one OS layer: every call prezero makes into libc (the
//! system calls std has no safe form of), the `/proc` and sysfs readers, and
//! the `PREZERO_*` variables. Each wrapper has its precondition on a `pre:`
//! line, as mimalloc's `prim` layer has them. The library, the preload, the
//! service, the C ABI and the CLI call these; none keeps a wrapper of its own.
//!
//! Keeping them in one place makes the contact surface with the kernel small
//! enough to audit, and gives every failure the name of its call. A wrapper is
//! safe unless a wrong argument could break memory or a descriptor the caller
//! still uses (then it is an `unsafe fn` and its `pre:` line is the
//! obligation); a bad range or descriptor is otherwise the kernel's error,
//! not undefined behaviour.
//!
//! Two layers, as rustix has them:
//!
//! * [`raw`]: allocation-free calls that take and return numbers, C strings
//!   and the caller's stack buffers, and fail with an [`raw::Errno`]. The
//!   preload runs inside `malloc` and calls only these.
//! * this top level: `io::Result`s, `OwnedFd`s, `std::fs` readers, by subject:
//!   * `mem.rs`: mappings (`mmap`, `munmap`, `madvise`, `mincore`, `/proc/self/smaps`);
//!   * `fd.rs`: files and descriptors (memfds, seals, leases, punching, `fstat`,
//!     eventfds, `poll`);
//!   * `socket.rs`: unix sockets (addresses, connecting, descriptors passed,
//!     peer credentials);
//!   * `numa.rs`: memory policies, page placement, CPU affinity;
//!   * `sched.rs`: thread ids and scheduling priority;
//!   * `process.rs`: the process (identity, signals, limits, namespaces, xattrs,
//!     the auxiliary vector);
//!   * `child.rs`: short-lived children forked into a cgroup, waited for with a
//!     deadline, and the calls they and their makers need (`openat2` beneath a
//!     directory, a pidfd's liveness).
//!
//! Beside them, [`size`] reads and writes byte sizes (the one parser, which
//! allocates nothing) and [`env`] is the `PREZERO_*` contract between `prezero
//! run` and the preload. Chosen calls can be made to fail for tests, by one
//! mechanism (`fault.rs`) with a switch per layer: the top level's in debug
//! builds (`PREZERO_SYS_FAULT`), the raw layer's in a `fault-injection`
//! build (`PREZERO_FAULT`, `raw/fault.rs`).

mod child;
pub mod env;
#[cfg(any(debug_assertions, feature = "fault-injection"))]
mod fault;
mod fd;
mod mem;
mod numa;
mod process;
pub mod raw;
mod sched;
pub mod size;
mod socket;

pub use child::*;
pub use fd::*;
pub use mem::*;
pub use numa::*;
pub use process::*;
pub use sched::*;
pub use socket::*;

use std::fs;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;

/// -1 from a call is its errno; anything else its result.
///
/// pre: `r` is what a call that sets errno on failure returned, just now.
fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r)
}

/// The descriptor a call just returned, now owned (or its errno, for -1).
///
/// pre: `r` is what a call that makes a new descriptor returned, so nothing
/// else owns it.
fn owned(r: libc::c_int) -> io::Result<OwnedFd> {
    let fd = check(r)?;
    // SAFETY: the kernel just made `fd` (pre); nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub use raw::page_size;

/// Online logical CPUs this process may run on.
///
/// pre: none.
pub fn online_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// A sysfs/procfs file as trimmed text, or `None` if it is missing or unreadable.
///
/// pre: none.
pub fn read_text(path: impl AsRef<Path>) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_owned())
}

/// A sysfs/procfs file holding one unsigned number.
///
/// pre: none.
pub fn read_usize(path: impl AsRef<Path>) -> Option<usize> {
    read_text(path)?.parse().ok()
}

/// `MemAvailable` of `/proc/meminfo` in bytes (0 if unreadable).
///
/// pre: none.
pub fn mem_available() -> usize {
    raw::meminfo(b"MemAvailable:").unwrap_or(0)
}

/// A field of `/proc/cpuinfo` (the first CPU's), as text: `"model name"`,
/// `"vendor_id"`.
///
/// pre: none.
pub fn cpuinfo_field(name: &str) -> Option<String> {
    let text = read_text("/proc/cpuinfo")?;
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == name).then(|| v.trim().to_owned())
    })
}

/// Writes a sysfs/procfs file (hugetlb reservations).
///
/// pre: none (the kernel checks the value; writing needs root).
pub fn write_text(path: impl AsRef<Path>, text: &str) -> io::Result<()> {
    fs::write(path, text)
}
