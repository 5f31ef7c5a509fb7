//! The calls that carry the protocol's datagrams over a `SOCK_SEQPACKET`
//! socket, with the descriptors an `ALLOC` answer passes (`SCM_RIGHTS`).

use std::io;
use std::os::fd::BorrowedFd;

use super::{Received, MAX_FDS};
use prezero_sys as sys;

/// Sends one datagram with `fds` attached (`SCM_RIGHTS`). Never raises SIGPIPE.
pub fn send(sock: BorrowedFd<'_>, msg: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    assert!(
        fds.len() <= MAX_FDS,
        "at most MAX_FDS descriptors per message"
    );
    sys::send_with_fds(sock, msg, fds)
}

/// Receives one datagram into `buf` (which should be `MAX_MESSAGE + 1` bytes so
/// that an oversized one shows as truncated), with any attached descriptors (at
/// most `MAX_FDS`: the kernel closes the rest and says so).
pub fn recv(sock: BorrowedFd<'_>, buf: &mut [u8], flags: libc::c_int) -> io::Result<Received> {
    sys::recv_with_fds(sock, buf, flags, MAX_FDS)
}
