//! `prezero serve` and its clients: a node-wide service that keeps hugetlb
//! memory populated and zero, hands it out as memfds over a unix socket, and
//! scrubs what comes back in the background (seed 003's scrubd, for whole
//! machines). A 64 GiB VM's memory then costs page-table set-up, not zeroing.
//!
//! * [`Client`] / [`ServiceMemory`]: ask for memory; it arrives mapped,
//!   populated and zero, or from a local fallback that says why.
//! * [`Server`]: the daemon (`prezero serve`).
//! * [`protocol`]: the wire format (`docs/PROTOCOL.md`).
//! * [`metrics`]: the counters in the Prometheus text format.

mod client;
mod ledger;
pub mod metrics;
pub mod protocol;
mod segment;
mod server;
mod worker;

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

pub use client::{AllocOptions, Client, SegmentView, ServiceMemory, Source};
pub use client::{InheritedFile, SegmentFiles};
pub use protocol::{Histogram, PoolCounters, Refusal, ServiceStats, TenantStats};
pub use server::{PoolConfig, Reuse, Server, ServerConfig, MAX_METRICS_INTERVAL};
pub use worker::Verify;

/// Where `prezero serve` listens unless told otherwise.
pub const DEFAULT_SOCKET: &str = "/run/prezero/prezero.sock";

/// The `sockaddr_un` for `path`; a path that does not fit is an error.
fn socket_address(path: &Path) -> crate::Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: an all-zero sockaddr_un is valid (and NUL-terminates the path).
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_bytes();
    if bytes.is_empty() || bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        return Err(crate::Error::invalid(format!(
            "socket path '{}' must be 1..{} bytes without NUL",
            path.display(),
            addr.sun_path.len() - 1
        )));
    }
    for (d, &s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = s as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1;
    Ok((addr, len as libc::socklen_t))
}

/// A new close-on-exec `SOCK_SEQPACKET` unix socket, with extra type `flags`.
fn seqpacket_socket(flags: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: socket() has no memory-safety preconditions.
    let raw = unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC | flags,
            0,
        )
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}
