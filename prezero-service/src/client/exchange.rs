//! The connection to `prezero serve`: connecting within a timeout, and one
//! request/answer exchange at a time, with the descriptors an answer brings.
//! A failed exchange shuts the connection down for good.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::protocol::{self, Reply, Request, MAX_MESSAGE};
use crate::{Error, Result};
use prezero_sys::{self as sys, UnixAddr};

/// How long the client waits for any one reply before giving up on the service.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// The connection, shared by the client and every allocation made through it
/// (they release over it when dropped).
pub(super) struct Conn {
    sock: OwnedFd,
    seq: AtomicU32,
    /// One request/answer exchange at a time.
    lock: Mutex<()>,
    /// Set after a failed exchange; the socket is shut down.
    broken: AtomicBool,
}

impl Conn {
    /// The connection over `sock`, just connected.
    pub(super) fn new(sock: OwnedFd) -> Conn {
        Conn {
            sock,
            seq: AtomicU32::new(1),
            lock: Mutex::new(()),
            broken: AtomicBool::new(false),
        }
    }

    /// Sends `req` and reads its answer: one message, or for `ALLOC` every
    /// message of it, with the descriptors that came along.
    ///
    /// Any failure but a refusal leaves the stream in an unknown state (half an
    /// answer read, descriptors lost to RLIMIT_NOFILE): the connection is then
    /// shut down, so the daemon takes back everything it holds (safely: it
    /// reuses nothing this process still maps), and refuses every later request.
    pub(super) fn exchange(&self, req: &Request) -> Result<(Vec<Reply>, Vec<OwnedFd>)> {
        let _g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        if self.broken.load(Ordering::Relaxed) {
            return Err(Error::Refused {
                errno: libc::ENOTCONN,
                reason: "the connection was closed after an earlier error".into(),
            });
        }
        let r = self.exchange_locked(req);
        if r.is_err() {
            self.broken.store(true, Ordering::Relaxed);
            let _ = sys::shutdown(self.sock.as_fd());
        }
        r
    }

    fn exchange_locked(&self, req: &Request) -> Result<(Vec<Reply>, Vec<OwnedFd>)> {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let mut buf = vec![0u8; MAX_MESSAGE + 1];
        if let Err(e) = protocol::send(self.sock.as_fd(), &req.encode(seq), &[]) {
            return Err(self
                .parting_words(&mut buf)
                .unwrap_or(Error::os("send to prezero serve", e)));
        }
        let mut replies = Vec::new();
        let mut fds = Vec::new();
        let mut answer = protocol::AllocAnswer::default();
        loop {
            let got = match protocol::recv(self.sock.as_fd(), &mut buf, 0) {
                Ok(got) => got,
                Err(e) => {
                    let e = Error::os("receive from prezero serve", e);
                    return Err(self.parting_words(&mut buf).unwrap_or(e));
                }
            };
            if got.len == 0 {
                return Err(Error::os(
                    "receive from prezero serve",
                    io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the service closed the connection",
                    ),
                ));
            }
            let broken = |why: &str| {
                Error::os(
                    "prezero serve reply",
                    io::Error::new(io::ErrorKind::InvalidData, why.to_owned()),
                )
            };
            if got.fds_truncated {
                return Err(broken(
                    "the reply's descriptors did not fit: raise RLIMIT_NOFILE (one descriptor per segment)",
                ));
            }
            if got.truncated {
                return Err(broken("oversized reply"));
            }
            let (rseq, reply) =
                Reply::decode(&buf[..got.len]).map_err(|protocol::Malformed(m)| broken(m))?;
            let n_fds = got.fds.len();
            fds.extend(got.fds);
            if rseq != seq && !matches!(reply, Reply::Error { .. }) {
                return Err(broken("reply to another request"));
            }
            let more = match &reply {
                Reply::Alloc {
                    total,
                    first,
                    segments,
                    ..
                } => answer
                    .add(*total, *first, segments, n_fds)
                    .map_err(|protocol::Malformed(m)| broken(m))?,
                _ => false,
            };
            replies.push(reply);
            if !more {
                return Ok((replies, fds));
            }
        }
    }
}

impl Conn {
    /// The error a daemon sent before it hung up (a refusal), if one is queued.
    /// A reset reported first (the daemon closed with our request unread) is
    /// skipped: the message is still behind it.
    fn parting_words(&self, buf: &mut [u8]) -> Option<Error> {
        for _ in 0..3 {
            if let Ok(got) = protocol::recv(self.sock.as_fd(), buf, libc::MSG_DONTWAIT) {
                if let Ok((_, Reply::Error { errno, message, .. })) = Reply::decode(&buf[..got.len])
                {
                    return Some(Error::Refused {
                        errno,
                        reason: message,
                    });
                }
                return None;
            }
        }
        None
    }
}

/// How long a client waits for the daemon to take its connection before it
/// falls back: a full listen backlog makes connect(2) block indefinitely.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Connects a `SOCK_SEQPACKET` socket to `path` within `timeout` (`TimedOut`
/// while the listen backlog stays full), with send and reply timeouts.
pub(crate) fn connect_socket(path: &Path, timeout: Duration) -> io::Result<OwnedFd> {
    let addr = UnixAddr::new(path)?;
    // Non-blocking: a unix socket's connect then fails with EAGAIN at once
    // when the backlog is full, instead of waiting for room.
    let sock = sys::seqpacket_socket(libc::SOCK_NONBLOCK)?;
    let deadline = Instant::now() + timeout;
    while let Err(e) = sys::connect(sock.as_fd(), &addr) {
        if e.raw_os_error() != Some(libc::EAGAIN) {
            return Err(e);
        }
        if Instant::now() >= deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "the daemon took no connection within {} ms (its listen backlog is full)",
                    timeout.as_millis()
                ),
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    // Back to blocking I/O, bounded by the timeouts.
    let _ = sys::set_nonblocking(sock.as_fd(), false);
    let _ = sys::set_timeouts(sock.as_fd(), REPLY_TIMEOUT);
    Ok(sock)
}
