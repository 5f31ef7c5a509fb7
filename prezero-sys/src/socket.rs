//! Unix sockets: addresses, `SOCK_SEQPACKET` sockets, connecting and
//! listening, datagrams with descriptors attached (`SCM_RIGHTS`), and what the
//! kernel says about the peer.

use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

use super::{check, owned};

/// A unix socket's address: a path of at most 107 bytes (`sockaddr_un`).
pub struct UnixAddr {
    addr: libc::sockaddr_un,
    len: libc::socklen_t,
}

impl UnixAddr {
    /// The address of `path`; a path that does not fit (or holds a NUL) is
    /// `InvalidInput`, as std's sockets say it.
    pub fn new(path: &Path) -> io::Result<UnixAddr> {
        // SAFETY: an all-zero sockaddr_un is valid (and NUL-terminates the path).
        let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        let bytes = path.as_os_str().as_bytes();
        if bytes.is_empty() || bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "socket path '{}' must be 1..{} bytes without NUL",
                    path.display(),
                    addr.sun_path.len() - 1
                ),
            ));
        }
        for (d, &s) in addr.sun_path.iter_mut().zip(bytes) {
            *d = s as libc::c_char;
        }
        let len = size_of::<libc::sa_family_t>() + bytes.len() + 1;
        Ok(UnixAddr {
            addr,
            len: len as libc::socklen_t,
        })
    }

    fn as_ptr(&self) -> *const libc::sockaddr {
        (&self.addr as *const libc::sockaddr_un).cast()
    }
}

/// A new close-on-exec `SOCK_SEQPACKET` unix socket, with extra type `flags`
/// (`SOCK_NONBLOCK`).
///
/// pre: none.
pub fn seqpacket_socket(flags: libc::c_int) -> io::Result<OwnedFd> {
    let kind = libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC | flags;
    // SAFETY: socket() has no memory-safety preconditions.
    owned(unsafe { libc::socket(libc::AF_UNIX, kind, 0) })
}

/// `connect(2)` to `addr` (a nonblocking socket whose listener's backlog is
/// full fails with EAGAIN at once).
///
/// pre: none.
pub fn connect(sock: BorrowedFd<'_>, addr: &UnixAddr) -> io::Result<()> {
    // SAFETY: `addr` is a valid sockaddr_un of `addr.len` bytes.
    check(unsafe { libc::connect(sock.as_raw_fd(), addr.as_ptr(), addr.len) }).map(drop)
}

/// `bind(2)` to `addr`: creates the socket file, of mode 0777 less the umask.
///
/// pre: none.
pub fn bind(sock: BorrowedFd<'_>, addr: &UnixAddr) -> io::Result<()> {
    // SAFETY: `addr` is a valid sockaddr_un of `addr.len` bytes.
    check(unsafe { libc::bind(sock.as_raw_fd(), addr.as_ptr(), addr.len) }).map(drop)
}

/// `listen(2)` with the largest backlog the system allows.
///
/// pre: none.
pub fn listen(sock: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: listen has no memory-safety preconditions.
    check(unsafe { libc::listen(sock.as_raw_fd(), libc::SOMAXCONN) }).map(drop)
}

/// Takes a waiting connection, as a nonblocking close-on-exec socket.
///
/// pre: none.
pub fn accept(listener: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    let flags = libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
    // SAFETY: with null address buffers accept4 writes nothing of ours.
    owned(unsafe {
        libc::accept4(
            listener.as_raw_fd(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            flags,
        )
    })
}

/// Shuts both directions of the connection down: the peer reads the end, and
/// so does every holder of the socket here.
///
/// pre: none.
pub fn shutdown(sock: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: shutdown has no memory-safety preconditions.
    check(unsafe { libc::shutdown(sock.as_raw_fd(), libc::SHUT_RDWR) }).map(drop)
}

/// Bounds blocking sends and receives to `d` each (`SO_SNDTIMEO`,
/// `SO_RCVTIMEO`), to whole seconds.
///
/// pre: none.
pub fn set_timeouts(sock: BorrowedFd<'_>, d: Duration) -> io::Result<()> {
    let tv = libc::timeval {
        tv_sec: d.as_secs() as libc::time_t,
        tv_usec: 0,
    };
    for opt in [libc::SO_RCVTIMEO, libc::SO_SNDTIMEO] {
        // SAFETY: setsockopt reads one timeval of the stated size.
        check(unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&tv as *const libc::timeval).cast(),
                size_of::<libc::timeval>() as libc::socklen_t,
            )
        })?;
    }
    Ok(())
}

/// `getsockopt(SOL_SOCKET, opt)` into `value`, of `len` bytes; `len` then
/// holds the bytes written (or, on ERANGE, the bytes needed).
///
/// # Safety
/// pre: `value` points at `len` writable bytes.
unsafe fn get_option(
    sock: BorrowedFd<'_>,
    opt: libc::c_int,
    value: *mut libc::c_void,
    len: &mut libc::socklen_t,
) -> io::Result<()> {
    // SAFETY: the kernel writes at most `len` bytes to `value` (the caller's
    // obligation).
    check(unsafe { libc::getsockopt(sock.as_raw_fd(), libc::SOL_SOCKET, opt, value, len) })
        .map(drop)
}

/// The peer's pid, uid and gid as of its `connect` (`SO_PEERCRED`).
///
/// pre: none.
pub fn peer_cred(sock: BorrowedFd<'_>) -> io::Result<libc::ucred> {
    // SAFETY: an all-zero ucred is valid.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` is a local of `len` bytes.
    unsafe {
        get_option(
            sock,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )?
    };
    Ok(cred)
}

/// The peer's supplementary groups as of its `connect` (`SO_PEERGROUPS`),
/// however many.
///
/// pre: none.
pub fn peer_groups(sock: BorrowedFd<'_>) -> io::Result<Vec<u32>> {
    let mut groups = vec![0u32; 64];
    loop {
        let mut len = (groups.len() * 4) as libc::socklen_t;
        // SAFETY: `groups` has room for `len` bytes.
        let got = unsafe {
            get_option(
                sock,
                libc::SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &mut len,
            )
        };
        let needed = len as usize / 4;
        match got {
            Ok(()) => {
                groups.truncate(needed);
                return Ok(groups);
            }
            // ERANGE: `len` now holds the size needed (NGROUPS_MAX is 65536).
            Err(e) if e.raw_os_error() == Some(libc::ERANGE) && needed > groups.len() => {
                groups.resize(needed, 0);
            }
            Err(e) => return Err(e),
        }
    }
}

/// A pidfd for the peer (`SO_PEERPIDFD`, Linux 6.5): the process that
/// connected, immune to pid reuse.
///
/// pre: none.
pub fn peer_pidfd(sock: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    const SO_PEERPIDFD: libc::c_int = 77;
    let mut fd: libc::c_int = -1;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `fd` is a local of `len` bytes.
    unsafe {
        get_option(
            sock,
            SO_PEERPIDFD,
            (&mut fd as *mut libc::c_int).cast(),
            &mut len,
        )?
    };
    if fd < 0 {
        return Err(io::Error::from_raw_os_error(libc::ENOPROTOOPT));
    }
    owned(fd)
}

/// The most descriptors one message may carry (`SCM_MAX_FD`).
const MAX_FDS_PER_MESSAGE: usize = 253;

/// u64 words of a control buffer holding `n` descriptors.
const fn cmsg_words(n: usize) -> usize {
    // CMSG_SPACE is not const: header (16) + data, rounded up to 8, plus slack.
    (16 + n * size_of::<RawFd>()).div_ceil(8) + 2
}

/// Sends one datagram with `fds` attached (`SCM_RIGHTS`), retrying on EINTR.
/// Never raises SIGPIPE.
///
/// pre: `fds.len() <= MAX_FDS_PER_MESSAGE` (checked).
pub fn send_with_fds(sock: BorrowedFd<'_>, msg: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    assert!(
        fds.len() <= MAX_FDS_PER_MESSAGE,
        "at most SCM_MAX_FD descriptors per message"
    );
    let mut iov = libc::iovec {
        iov_base: msg.as_ptr() as *mut libc::c_void,
        iov_len: msg.len(),
    };
    let mut control = [0u64; cmsg_words(MAX_FDS_PER_MESSAGE)];
    // SAFETY: zeroed msghdr is a valid "no name, no control" header.
    let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
    hdr.msg_iov = &mut iov;
    hdr.msg_iovlen = 1;
    if !fds.is_empty() {
        let data_len = size_of::<RawFd>() * fds.len();
        hdr.msg_control = control.as_mut_ptr().cast();
        // SAFETY: CMSG_SPACE only computes a size.
        hdr.msg_controllen = unsafe { libc::CMSG_SPACE(data_len as u32) } as _;
        // SAFETY: msg_control points at `control`, which is large enough for
        // MAX_FDS_PER_MESSAGE descriptors: its first header lies inside it.
        let c = unsafe { libc::CMSG_FIRSTHDR(&hdr) };
        // SAFETY: c lies inside `control`, which is aligned for cmsghdr (u64
        // words) and referred to by nothing else meanwhile.
        let head = unsafe { &mut *c };
        head.cmsg_level = libc::SOL_SOCKET;
        head.cmsg_type = libc::SCM_RIGHTS;
        // SAFETY: CMSG_LEN only computes a size.
        head.cmsg_len = unsafe { libc::CMSG_LEN(data_len as u32) } as _;
        // SAFETY: the header's data, inside `control` (CMSG_SPACE(data_len) of it).
        let data = unsafe { libc::CMSG_DATA(c) }.cast::<RawFd>();
        for (i, fd) in fds.iter().enumerate() {
            // SAFETY: descriptor i of the data_len bytes at data.
            let slot = unsafe { data.add(i) };
            // SAFETY: inside `control`, as above; any alignment.
            unsafe { slot.write_unaligned(fd.as_raw_fd()) };
        }
    }
    loop {
        // SAFETY: hdr points at live buffers for the duration of the call.
        let n = unsafe { libc::sendmsg(sock.as_raw_fd(), &hdr, libc::MSG_NOSIGNAL) };
        if n >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// What a receive read: one datagram's length, and the descriptors that came
/// with it.
pub struct Received {
    /// Bytes of the datagram (0 = the peer closed the connection).
    pub len: usize,
    /// The datagram was longer than the buffer (the rest is lost).
    pub truncated: bool,
    /// Descriptors that came with it, each now owned (close-on-exec) by the caller.
    pub fds: Vec<OwnedFd>,
    /// More descriptors came than fit: the kernel closed the rest.
    pub fds_truncated: bool,
}

/// Receives one datagram into `buf`, with up to `max_fds` attached
/// descriptors (the kernel closes any beyond), retrying on EINTR; `flags` as
/// recvmsg(2) takes them (`MSG_DONTWAIT`).
///
/// pre: `max_fds <= MAX_FDS_PER_MESSAGE` (checked).
pub fn recv_with_fds(
    sock: BorrowedFd<'_>,
    buf: &mut [u8],
    flags: libc::c_int,
    max_fds: usize,
) -> io::Result<Received> {
    assert!(
        max_fds <= MAX_FDS_PER_MESSAGE,
        "at most SCM_MAX_FD descriptors per message"
    );
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut control = [0u64; cmsg_words(MAX_FDS_PER_MESSAGE)];
    // SAFETY: zeroed msghdr is a valid "no name, no control" header.
    let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
    hdr.msg_iov = &mut iov;
    hdr.msg_iovlen = 1;
    hdr.msg_control = control.as_mut_ptr().cast();
    // Room for `max_fds` only: the kernel closes the rest and says so.
    hdr.msg_controllen = (cmsg_words(max_fds) * size_of::<u64>()) as _;
    let n = loop {
        // SAFETY: hdr points at live buffers of the sizes it states.
        let n =
            unsafe { libc::recvmsg(sock.as_raw_fd(), &mut hdr, flags | libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 {
            break n as usize;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    };
    let mut fds = Vec::new();
    // SAFETY: the kernel filled `control` up to msg_controllen; the CMSG
    // macros walk only within it.
    let mut c = unsafe { libc::CMSG_FIRSTHDR(&hdr) };
    while !c.is_null() {
        // SAFETY: a header the CMSG macros found inside `control`.
        let head = unsafe { &*c };
        if head.cmsg_level == libc::SOL_SOCKET && head.cmsg_type == libc::SCM_RIGHTS {
            // SAFETY: the header's data, inside `control`.
            let data = unsafe { libc::CMSG_DATA(c) }.cast::<RawFd>();
            // SAFETY: CMSG_LEN only computes a size.
            let bytes = head.cmsg_len as usize - unsafe { libc::CMSG_LEN(0) } as usize;
            for i in 0..bytes / size_of::<RawFd>() {
                // SAFETY: descriptor i of the header's data.
                let slot = unsafe { data.add(i) };
                // SAFETY: inside `control`, as above; any alignment.
                let fd = unsafe { slot.read_unaligned() };
                // SAFETY: every SCM_RIGHTS descriptor is a fresh one, now ours alone.
                fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
            }
        }
        // SAFETY: c is a header inside `control`; CMSG_NXTHDR walks only within it.
        c = unsafe { libc::CMSG_NXTHDR(&hdr, c) };
    }
    Ok(Received {
        len: n.min(buf.len()),
        truncated: hdr.msg_flags & libc::MSG_TRUNC != 0,
        fds,
        fds_truncated: hdr.msg_flags & libc::MSG_CTRUNC != 0,
    })
}
