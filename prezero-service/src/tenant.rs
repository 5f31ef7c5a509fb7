//! Who a connected peer is: the uid it counts as a tenant (its own, or the
//! owner of the unprivileged user namespace it runs in), and a pidfd that
//! tells when it exits.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use prezero_sys as sys;

/// The uid a peer is a tenant as: its own, unless it runs in a user namespace
/// that an unprivileged user made (`unshare -U`, a rootless container), where
/// it may take any of that user's subordinate uids: then that user's, so they
/// share one cap, one connection limit and one scrubbed-reuse tag. Namespaces
/// root made (container runtimes giving each container its own range) keep
/// their peers' uids. Without a way to see the namespace, the peer's uid.
pub(super) fn tenant_uid(pidfd: Option<&OwnedFd>, pid: i32, uid: u32) -> u32 {
    let Some(mine) = std::fs::metadata("/proc/self/ns/user").ok() else {
        return uid;
    };
    let ns = pidfd
        .and_then(|p| sys::pidfd_user_namespace(p.as_fd()).ok())
        .map(std::fs::File::from)
        .or_else(|| std::fs::File::open(format!("/proc/{pid}/ns/user")).ok());
    let Some(mut ns) = ns else { return uid };
    let mut owner = None;
    use std::os::unix::fs::MetadataExt;
    // Up to the daemon's namespace, remembering the last owner met; nesting
    // is at most 32 deep.
    for _ in 0..33 {
        let Ok(md) = ns.metadata() else { break };
        if (md.dev(), md.ino()) == (mine.dev(), mine.ino()) {
            break;
        }
        let Ok(o) = sys::namespace_owner(ns.as_fd()) else {
            break;
        };
        owner = Some(o);
        match sys::namespace_parent(ns.as_fd()) {
            Ok(parent) => ns = parent.into(),
            Err(_) => break,
        }
    }
    match owner {
        Some(o) if o != 0 => o,
        _ => uid,
    }
}

/// A pidfd for the peer: `SO_PEERPIDFD` (Linux 6.5, immune to pid reuse), else
/// `pidfd_open` on the pid from `SO_PEERCRED`.
pub(super) fn peer_pidfd(sock: BorrowedFd<'_>, pid: i32) -> Option<OwnedFd> {
    sys::peer_pidfd(sock).or_else(|_| sys::pidfd_open(pid)).ok()
}
