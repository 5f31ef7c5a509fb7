//! The client: ask `prezero serve` for zeroed hugetlb memory, map it as one
//! contiguous populated range, give it back on drop; fall back to a local
//! [`Region`] + [`prefault`](crate::prefault) when the service cannot serve.
//! Or take the memory as files ([`SegmentFiles`], for `prezero client exec`),
//! with a sealed, populated local memfd as the fallback.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::protocol::{self, Reply, Request, ServiceStats, MAX_MESSAGE, MAX_RELEASE_IDS};
use super::{socket_address, DEFAULT_SOCKET};
use crate::error::{Error, Result};
use crate::region::{PageKind, Region};

/// How long the client waits for any one reply before giving up on the service.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// Options of [`Client::alloc_with`].
#[derive(Debug, Clone, Copy)]
pub struct AllocOptions {
    /// Map and populate local memory when the service cannot serve (default true).
    /// With false, the service's refusal is the error.
    pub fallback: bool,
    /// Threads that populate local fallback memory (default: every CPU). Service
    /// memory needs none: its pages exist, only page tables are built.
    pub populate_threads: usize,
}

impl Default for AllocOptions {
    fn default() -> Self {
        AllocOptions {
            fallback: true,
            populate_threads: crate::sys::online_cpus(),
        }
    }
}

/// Which path served an allocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Pre-zeroed segments from the service.
    Service {
        /// Segments mapped.
        segments: usize,
        /// Bytes per segment.
        segment_size: usize,
    },
    /// Local memory, mapped and populated here (the kernel zeroed it).
    Local {
        /// Why the service did not serve.
        reason: String,
    },
}

/// One segment of a service allocation, for programs that share the memory
/// further (a VMM passing guest memory to a vhost-user backend).
#[derive(Debug, Clone, Copy)]
pub struct SegmentView<'a> {
    /// The segment's memfd.
    pub fd: BorrowedFd<'a>,
    /// Where it starts in the allocation.
    pub offset: usize,
    /// Bytes of it that are mapped.
    pub len: usize,
}

/// The connection, shared by the client and every allocation made through it
/// (they release over it when dropped).
struct Conn {
    sock: OwnedFd,
    seq: AtomicU32,
    /// One request/answer exchange at a time.
    lock: Mutex<()>,
    /// Set after a failed exchange; the socket is shut down.
    broken: AtomicBool,
}

impl Conn {
    /// Sends `req` and reads its answer: one message, or for `ALLOC` every
    /// message of it, with the descriptors that came along.
    ///
    /// Any failure but a refusal leaves the stream in an unknown state (half an
    /// answer read, descriptors lost to RLIMIT_NOFILE): the connection is then
    /// shut down, so the daemon takes back everything it holds (safely: it
    /// reuses nothing this process still maps), and refuses every later request.
    fn exchange(&self, req: &Request) -> Result<(Vec<Reply>, Vec<OwnedFd>)> {
        let _g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        if self.broken.load(Ordering::Relaxed) {
            return Err(Error::Service {
                errno: libc::ENOTCONN,
                reason: "the connection was closed after an earlier error".into(),
            });
        }
        let r = self.exchange_locked(req);
        if r.is_err() {
            self.broken.store(true, Ordering::Relaxed);
            // SAFETY: shutdown on our own socket.
            unsafe { libc::shutdown(self.sock.as_raw_fd(), libc::SHUT_RDWR) };
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
                } => {
                    if segments.len() != n_fds || *first as usize != fds.len() - n_fds {
                        return Err(broken("segment records and descriptors disagree"));
                    }
                    fds.len() < *total as usize
                }
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
                    return Some(Error::Service {
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

/// A connection to `prezero serve`, or the memory of why there is none.
pub struct Client {
    conn: Option<Arc<Conn>>,
    path: PathBuf,
    /// Why there is no connection: the errno of connect(2), and a message.
    absent: Option<(i32, String)>,
}

impl Client {
    /// Connects to the service at `path`. A service that is absent (no socket,
    /// refused, not allowed) is not an error: the client then serves every
    /// allocation locally (unless told not to) and says why in [`Source::Local`].
    /// Errors are for bad input only: a path too long for a unix socket.
    pub fn connect(path: impl AsRef<Path>) -> Result<Client> {
        let path = path.as_ref().to_path_buf();
        socket_address(&path)?;
        Ok(match connect_socket(&path, CONNECT_TIMEOUT) {
            Ok(sock) => Client {
                conn: Some(Arc::new(Conn {
                    sock,
                    seq: AtomicU32::new(1),
                    lock: Mutex::new(()),
                    broken: AtomicBool::new(false),
                })),
                path,
                absent: None,
            },
            Err(e) => Client {
                conn: None,
                absent: Some((
                    e.raw_os_error().unwrap_or(match e.kind() {
                        io::ErrorKind::TimedOut => libc::ETIMEDOUT,
                        _ => libc::ENOTCONN,
                    }),
                    match e.raw_os_error() {
                        Some(libc::EACCES) => format!(
                            "cannot connect to {}: {e} (this uid may not use this service: \
                             the daemon's allow_uids or allow_gids name who may)",
                            path.display()
                        ),
                        _ => format!("cannot connect to {}: {e}", path.display()),
                    },
                )),
                path,
            },
        })
    }

    /// A client with no service: every allocation is local (or, without
    /// fallback, `ENOTCONN` with `reason`).
    pub fn local(reason: &str) -> Client {
        Client {
            conn: None,
            path: PathBuf::new(),
            absent: Some((libc::ENOTCONN, reason.to_owned())),
        }
    }

    /// Connects to `$PREZERO_SOCKET`, or `/run/prezero/prezero.sock`.
    pub fn connect_default() -> Result<Client> {
        Client::connect(std::env::var_os("PREZERO_SOCKET").unwrap_or_else(|| DEFAULT_SOCKET.into()))
    }

    /// `ENOTCONN`, with why connect(2) failed.
    fn not_connected(&self) -> Error {
        Error::Service {
            errno: libc::ENOTCONN,
            reason: self.absent.as_ref().map_or(String::new(), |a| a.1.clone()),
        }
    }

    /// The errno connect(2) gave, if no service answered (ENOENT: no socket;
    /// ECONNREFUSED: a stale socket; EACCES: no permission on its directory).
    pub fn connect_errno(&self) -> Option<i32> {
        self.absent.as_ref().map(|a| a.0)
    }

    /// Whether a service answered the connection.
    pub fn is_connected(&self) -> bool {
        self.conn.is_some()
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `bytes` of zeroed, populated memory on `page` pages (2MB or 1GB), from the
    /// service, or local memory when the service cannot serve.
    pub fn alloc(&self, bytes: usize, page: PageKind) -> Result<ServiceMemory> {
        self.alloc_with(bytes, page, AllocOptions::default())
    }

    /// [`Client::alloc`] with options (e.g. no fallback).
    pub fn alloc_with(
        &self,
        bytes: usize,
        page: PageKind,
        opts: AllocOptions,
    ) -> Result<ServiceMemory> {
        if bytes == 0 {
            return Err(Error::invalid("zero bytes requested"));
        }
        if !page.is_hugetlb() {
            return Err(Error::invalid(
                "the service serves hugetlb pages: 2MB or 1GB",
            ));
        }
        let err = match &self.conn {
            None => self.not_connected(),
            Some(conn) => match from_service(conn, bytes, page) {
                Ok(m) => return Ok(m),
                Err(e) => e,
            },
        };
        if !opts.fallback {
            return Err(err);
        }
        local(bytes, page, opts.populate_threads, err.to_string())
    }

    /// `bytes` of zeroed memory on `page` pages as **files** rather than a
    /// mapping, for a program that maps them itself (a VMM given
    /// `mem-path=/proc/self/fd/N`). The files are checked exactly as
    /// [`Client::alloc_with`] checks them (they tile the request; each is a
    /// hugetlbfs file of `page` pages sealed against shrinking). When the
    /// service cannot serve (and `opts.fallback`), one local memfd: hugetlb of
    /// `page` if the pool has the pages, else a plain memfd (base pages; the
    /// reason says so), populated with `opts.populate_threads` threads and
    /// sealed like the service's. Dropping it closes the files and releases.
    pub fn alloc_files(
        &self,
        bytes: usize,
        page: PageKind,
        opts: AllocOptions,
    ) -> Result<SegmentFiles> {
        if bytes == 0 {
            return Err(Error::invalid("zero bytes requested"));
        }
        if !page.is_hugetlb() {
            return Err(Error::invalid(
                "the service serves hugetlb pages: 2MB or 1GB",
            ));
        }
        let len = bytes.next_multiple_of(page.page_size());
        let err = match &self.conn {
            None => self.not_connected(),
            Some(conn) => match take_segments(conn, bytes, page) {
                Ok(Taken {
                    held,
                    spans,
                    segment_size,
                }) => {
                    return Ok(SegmentFiles {
                        len,
                        page,
                        source: Source::Service {
                            segments: spans.len(),
                            segment_size,
                        },
                        backing: FilesBacking::Service { spans, held },
                    })
                }
                Err(e) => e,
            },
        };
        if !opts.fallback {
            return Err(err);
        }
        local_file(len, page, opts.populate_threads, err.to_string())
    }

    /// The service's counters.
    pub fn stats(&self) -> Result<ServiceStats> {
        let conn = self.conn.as_ref().ok_or_else(|| self.not_connected())?;
        let (mut replies, _) = conn.exchange(&Request::Stats)?;
        match replies.pop() {
            Some(Reply::Stats(s)) => Ok(*s),
            Some(Reply::Error { errno, message, .. }) => Err(Error::Service {
                errno,
                reason: message,
            }),
            _ => Err(Error::invalid("unexpected reply to STATS")),
        }
    }
}

/// How long a client waits for the daemon to take its connection before it
/// falls back: a full listen backlog makes connect(2) block indefinitely.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Connects a `SOCK_SEQPACKET` socket to `path` within `timeout` (`TimedOut`
/// while the listen backlog stays full), with send and reply timeouts.
pub(crate) fn connect_socket(path: &Path, timeout: Duration) -> io::Result<OwnedFd> {
    let (addr, len) = socket_address(path)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
    // Non-blocking: a unix socket's connect then fails with EAGAIN at once
    // when the backlog is full, instead of waiting for room.
    let sock = super::seqpacket_socket(libc::SOCK_NONBLOCK)?;
    let deadline = Instant::now() + timeout;
    loop {
        // SAFETY: addr is a valid sockaddr_un of `len` bytes.
        let r = unsafe {
            libc::connect(
                sock.as_raw_fd(),
                (&addr as *const libc::sockaddr_un).cast(),
                len,
            )
        };
        if r == 0 {
            break;
        }
        let e = io::Error::last_os_error();
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
    // SAFETY: fcntl on our own descriptor: back to blocking I/O, bounded by the
    // timeouts below.
    unsafe {
        let fl = libc::fcntl(sock.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(sock.as_raw_fd(), libc::F_SETFL, fl & !libc::O_NONBLOCK);
    }
    let tv = libc::timeval {
        tv_sec: REPLY_TIMEOUT.as_secs() as libc::time_t,
        tv_usec: 0,
    };
    for opt in [libc::SO_RCVTIMEO, libc::SO_SNDTIMEO] {
        // SAFETY: setsockopt reads a timeval of the stated size.
        unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
    }
    Ok(sock)
}

/// An `ALLOC` answer, checked; nothing mapped yet.
struct Taken {
    /// The segments, released when dropped.
    held: Held,
    /// Where each goes in the request: (offset, bytes of it used), from `tile`.
    spans: Vec<(usize, usize)>,
    /// Bytes per segment.
    segment_size: usize,
}

/// Asks the service for `bytes` on `page` pages and checks the answer: the
/// segments tile the request, and each file is what the daemon promises.
fn take_segments(conn: &Arc<Conn>, bytes: usize, page: PageKind) -> Result<Taken> {
    let req = Request::Alloc {
        bytes: bytes as u64,
        page_size: page.page_size() as u64,
        flags: 0,
    };
    let (replies, fds) = conn.exchange(&req)?;
    let mut ids = Vec::new();
    let mut lens = Vec::new();
    for r in replies {
        match r {
            Reply::Alloc { segments, .. } => {
                for s in segments {
                    ids.push(s.id);
                    lens.push(s.len);
                }
            }
            Reply::Error { errno, message, .. } => {
                return Err(Error::Service {
                    errno,
                    reason: message,
                })
            }
            _ => return Err(Error::invalid("unexpected reply to ALLOC")),
        }
    }
    // From here the segments are ours to give back, whatever goes wrong.
    let held = Held {
        conn: conn.clone(),
        ids,
        fds,
    };
    let len = bytes.next_multiple_of(page.page_size());
    // The daemon is not trusted: its records must tile the request, and each
    // file must be hugetlb of the page size asked for, at least as long as
    // what is mapped of it, and sealed against shrinking, so no later access
    // can fault past its end (SIGBUS). The kernel holds the seal, not the daemon.
    let spans = tile(&lens, len, page.page_size())?;
    if held.fds.len() != spans.len() {
        return Err(Error::invalid(
            "the service sent segment records and descriptors that disagree",
        ));
    }
    for ((fd, &(_, n)), &claimed) in held.fds.iter().zip(&spans).zip(&lens) {
        check_segment_file(fd.as_fd(), claimed, n, page.page_size())?;
    }
    Ok(Taken {
        held,
        spans,
        // `tile` checked every length fits a usize.
        segment_size: lens[0] as usize,
    })
}

fn from_service(conn: &Arc<Conn>, bytes: usize, page: PageKind) -> Result<ServiceMemory> {
    let Taken {
        held,
        spans,
        segment_size,
    } = take_segments(conn, bytes, page)?;
    let len = bytes.next_multiple_of(page.page_size());
    // One segment maps anywhere (hugetlb mappings come page-aligned); several
    // go back to back into a reservation.
    let base = if spans.len() == 1 {
        None
    } else {
        Some(reserve(len, page.page_size())?)
    };
    let mut start = None;
    for (fd, &(off, n)) in held.fds.iter().zip(&spans) {
        let (hint, fixed) = match base {
            // SAFETY: off < len (tile), inside the reservation.
            Some(b) => (unsafe { b.as_ptr().add(off) }, libc::MAP_FIXED),
            None => (std::ptr::null_mut(), 0),
        };
        // SAFETY: with MAP_FIXED, [hint, hint+n) lies inside our PROT_NONE
        // reservation (tile: off + n <= len), which nothing else uses, and only
        // that part is replaced; without, the kernel picks a free range.
        let p = unsafe {
            libc::mmap(
                hint.cast(),
                n,
                libc::PROT_READ | libc::PROT_WRITE,
                // The pages exist (the daemon populated them): populating only
                // builds page tables, ~1 us per 2 MiB page, faster in one thread
                // than the start-up of a second (measured).
                libc::MAP_SHARED | libc::MAP_POPULATE | fixed,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            if let Some(b) = base {
                // SAFETY: the whole reservation (and what replaced parts of it) is ours.
                unsafe { libc::munmap(b.as_ptr().cast(), len) };
            }
            return Err(Error::os("mmap of a service segment", e));
        }
        start.get_or_insert(p.cast::<u8>());
    }
    let base =
        NonNull::new(start.expect("at least one segment")).expect("mmap does not return NULL");
    Ok(ServiceMemory {
        ptr: base,
        len,
        page,
        source: Source::Service {
            segments: spans.len(),
            segment_size,
        },
        backing: Backing::Service { spans, held },
    })
}

/// Where each segment of an `ALLOC` answer goes in a request of `len` bytes:
/// `(offset, bytes mapped)`, back to back. The segments must tile the request:
/// each a non-zero multiple of the page size, each starting before `len`, the
/// last reaching it. Anything else (too few, too many, a zero or ragged
/// length, lengths whose sum overflows) is an error: a daemon that sends it
/// is not believed.
pub(crate) fn tile(lens: &[u64], len: usize, page: usize) -> Result<Vec<(usize, usize)>> {
    let lie = |why: &str| {
        Err(Error::invalid(format!(
            "the service sent segments that {why}"
        )))
    };
    if lens.is_empty() {
        return lie("are none at all");
    }
    let mut spans = Vec::with_capacity(lens.len());
    let mut off = 0usize;
    for &l in lens {
        let Ok(l) = usize::try_from(l) else {
            return lie("are longer than the address space");
        };
        if l == 0 || !l.is_multiple_of(page) {
            return lie("are not whole pages");
        }
        if off >= len {
            return lie("are more than the request needs");
        }
        spans.push((off, l.min(len - off)));
        off = off.saturating_add(l);
    }
    if off < len {
        return lie("do not cover the request");
    }
    Ok(spans)
}

/// A segment's file as the daemon promises it: a hugetlbfs file of `page`
/// pages, of the length its record `claimed` (at least the `n` bytes mapped),
/// sealed against shrinking.
fn check_segment_file(fd: BorrowedFd<'_>, claimed: u64, n: usize, page: usize) -> Result<()> {
    let lie = |why: String| {
        Err(Error::invalid(format!(
            "the service sent a segment file {why}"
        )))
    };
    // SAFETY: an all-zero stat is valid; fstat writes into the local.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat on a descriptor we hold, into a local buffer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(Error::os(
            "fstat of a service segment",
            io::Error::last_os_error(),
        ));
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return lie("that is not a regular file".into());
    }
    if st.st_size as u64 != claimed || claimed < n as u64 {
        return lie(format!(
            "of {} bytes, its record says {claimed}",
            st.st_size
        ));
    }
    if st.st_blksize as u64 != page as u64 {
        return lie(format!("of {}-byte pages, not {page}", st.st_blksize));
    }
    // SAFETY: fcntl(F_GET_SEALS) reads the seals of a descriptor we hold.
    let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
    if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
        return lie("that is not sealed against shrinking".into());
    }
    Ok(())
}

/// A `PROT_NONE` range of `len` bytes aligned to `align`, so the segments can be
/// mapped into it back to back.
fn reserve(len: usize, align: usize) -> Result<NonNull<u8>> {
    let span = len + align;
    // SAFETY: a fresh inaccessible anonymous mapping at a kernel-chosen address.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            span,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(Error::OutOfMemory { size: span });
    }
    let start = p as usize;
    let aligned = start.next_multiple_of(align);
    // SAFETY: head and tail are parts of the reservation just made, unused.
    unsafe {
        if aligned > start {
            libc::munmap(p, aligned - start);
        }
        let end = aligned + len;
        if start + span > end {
            libc::munmap(end as *mut libc::c_void, start + span - end);
        }
    }
    Ok(NonNull::new(aligned as *mut u8).expect("mmap does not return NULL"))
}

fn local(bytes: usize, page: PageKind, threads: usize, why: String) -> Result<ServiceMemory> {
    let (region, reason) = match Region::new(bytes, page) {
        Ok(r) => (r, why),
        Err(e @ Error::HugetlbShortage { .. }) => {
            // No hugetlb pages left here either: transparent huge pages still
            // give zeroed, populated memory, if the machine has it (populating
            // more than is available would end in the OOM killer, not an error).
            let available = crate::sys::mem_available();
            if bytes > available {
                return Err(Error::invalid(format!(
                    "{why}; local {page}: {e}; and {bytes} bytes is more than the {available} \
                     bytes of memory available for a THP fallback"
                )));
            }
            (
                Region::new(bytes, PageKind::Thp)?,
                format!("{why}; local {page}: {e}; used THP"),
            )
        }
        Err(e) => return Err(e),
    };
    crate::prefault::prefault(&region, threads.max(1))?;
    Ok(ServiceMemory {
        ptr: NonNull::new(region.as_ptr()).expect("regions are non-null"),
        len: region.len(),
        page: region.kind(),
        source: Source::Local { reason },
        backing: Backing::Local { _region: region },
    })
}

/// The seals a local file carries, as the daemon's segments do: no holder can
/// truncate it, grow it, or add a seal.
const LOCAL_SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;

/// The local fallback of [`Client::alloc_files`]: one sealed, populated memfd
/// of `len` bytes, hugetlb of `page` when the pool has the pages, else a plain
/// memfd (base pages), and `why` the service did not serve.
fn local_file(len: usize, page: PageKind, threads: usize, why: String) -> Result<SegmentFiles> {
    let pages = len / page.page_size();
    let free = crate::cpu::hugetlb_pool(page.page_size()).map_or(0, |p| p.free);
    let hugetlb = if free < pages {
        Err(format!("{pages} {page} hugetlb pages needed, {free} free"))
    } else {
        populated_memfd(len, Some(page), threads).map_err(|e| e.to_string())
    };
    let (fd, kind, reason) = match hugetlb {
        Ok(fd) => (fd, page, why),
        Err(short) => {
            // Populating more than is available would end in the OOM killer,
            // not an error.
            let available = crate::sys::mem_available();
            if len > available {
                return Err(Error::invalid(format!(
                    "{why}; local {page} memfd: {short}; and {len} bytes is more than the \
                     {available} bytes of memory available for a plain memfd"
                )));
            }
            (
                populated_memfd(len, None, threads)?,
                PageKind::Base,
                format!("{why}; local {page} memfd: {short}; used a plain memfd (base pages)"),
            )
        }
    };
    Ok(SegmentFiles {
        len,
        page: kind,
        source: Source::Local { reason },
        backing: FilesBacking::Local { fd },
    })
}

/// A memfd of `len` bytes (hugetlb of `huge` pages, or plain), every page
/// faulted in through a temporary mapping with `threads` threads, then sealed
/// with [`LOCAL_SEALS`]. Close-on-exec.
fn populated_memfd(len: usize, huge: Option<PageKind>, threads: usize) -> Result<OwnedFd> {
    let size_flag = match huge {
        Some(PageKind::Huge2M) => libc::MFD_HUGETLB | libc::MFD_HUGE_2MB,
        Some(PageKind::Huge1G) => libc::MFD_HUGETLB | libc::MFD_HUGE_1GB,
        _ => 0,
    };
    // SAFETY: the name is a NUL-terminated literal; the flags are valid
    // memfd_create flags.
    let raw = unsafe {
        libc::memfd_create(
            c"prezero-local".as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING | size_flag,
        )
    };
    if raw < 0 {
        return Err(Error::os("memfd_create", io::Error::last_os_error()));
    }
    // SAFETY: raw is a fresh descriptor nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: ftruncate on our own memfd, which no other process has.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
        return Err(Error::os("ftruncate", io::Error::last_os_error()));
    }
    // A shared mapping of a hugetlb file reserves its pages here: a shortage
    // is ENOMEM now, not a SIGBUS later.
    // SAFETY: a new shared mapping of our memfd at a kernel-chosen address.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(Error::os(
            "mmap of a local memfd",
            io::Error::last_os_error(),
        ));
    }
    // SAFETY: [p, p+len) is the mapping just made, which nothing else knows of;
    // populating does not change its contents; `huge` says whether it is hugetlb.
    let populated =
        unsafe { crate::prefault::prefault_as(p.cast(), len, threads.max(1), huge.is_some()) };
    // The pages stay in the file; the mapping was only the way to fault them in.
    // SAFETY: our own mapping, unused from here on.
    unsafe { libc::munmap(p, len) };
    populated?;
    // SAFETY: fcntl(F_ADD_SEALS) on our own memfd.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, LOCAL_SEALS) } != 0 {
        return Err(Error::os("fcntl(F_ADD_SEALS)", io::Error::last_os_error()));
    }
    Ok(fd)
}

/// Segments held from the service; dropping releases them.
struct Held {
    conn: Arc<Conn>,
    ids: Vec<u64>,
    fds: Vec<OwnedFd>,
}

impl Drop for Held {
    fn drop(&mut self) {
        // Descriptors close first, so the release finds them gone.
        self.fds.clear();
        for ids in self.ids.chunks(MAX_RELEASE_IDS) {
            // A service that went away needs no release: its segments left with it.
            let _ = self.conn.exchange(&Request::Release { ids: ids.to_vec() });
        }
    }
}

enum Backing {
    Service {
        /// Each segment's (offset, bytes mapped), from `tile`.
        spans: Vec<(usize, usize)>,
        held: Held,
    },
    /// Kept for its Drop, which unmaps.
    Local { _region: Region },
}

/// Zeroed, populated memory from [`Client::alloc`]; unmapped and given back when
/// dropped.
pub struct ServiceMemory {
    ptr: NonNull<u8>,
    len: usize,
    page: PageKind,
    source: Source,
    backing: Backing,
}

// SAFETY: ServiceMemory owns its mapping exclusively; the connection inside is
// Send + Sync (a socket behind a mutex).
unsafe impl Send for ServiceMemory {}
// SAFETY: shared references only read the mapping or the immutable metadata.
unsafe impl Sync for ServiceMemory {}

impl ServiceMemory {
    /// Start of the memory (aligned to the page size).
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Bytes: the request rounded up to the page size.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true: zero-byte requests are refused.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The page size actually backing the memory (THP if a local fallback found
    /// no hugetlb pages).
    pub fn page(&self) -> PageKind {
        self.page
    }

    /// Which path served it, and why if not the service.
    pub fn source(&self) -> &Source {
        &self.source
    }

    /// The memory.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr..ptr+len is our mapping, readable, alive while self is.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The memory, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in as_slice; &mut self makes the borrow exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// The service segments behind the memory (empty for local memory).
    pub fn segments(&self) -> Vec<SegmentView<'_>> {
        match &self.backing {
            Backing::Local { .. } => Vec::new(),
            Backing::Service { spans, held } => held
                .fds
                .iter()
                .zip(spans)
                .map(|(fd, &(offset, len))| SegmentView {
                    fd: fd.as_fd(),
                    offset,
                    len,
                })
                .collect(),
        }
    }
}

impl Drop for ServiceMemory {
    fn drop(&mut self) {
        if let Backing::Service { .. } = self.backing {
            // SAFETY: the range is our reservation, now the segments' mappings;
            // nothing borrows it once self is dropped.
            unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
        }
        // Then `backing` drops: Held closes the fds and releases, Region unmaps.
    }
}

enum FilesBacking {
    Service {
        /// Each segment's (offset, bytes of the request it covers), from `tile`.
        spans: Vec<(usize, usize)>,
        held: Held,
    },
    Local {
        fd: OwnedFd,
    },
}

/// Zeroed, populated memory as files, from [`Client::alloc_files`]: the
/// service's segments (sealed hugetlb memfds), or one local memfd. Nothing is
/// mapped here. Dropped, the files close and the segments are released.
pub struct SegmentFiles {
    len: usize,
    page: PageKind,
    source: Source,
    backing: FilesBacking,
}

/// A file given up by [`SegmentFiles::into_inherited`]: open across `exec`.
#[derive(Debug)]
pub struct InheritedFile {
    /// The memfd, with `FD_CLOEXEC` cleared.
    pub fd: OwnedFd,
    /// Where it starts in the request.
    pub offset: usize,
    /// Bytes of the request it covers (map this much of it; the file may be longer).
    pub len: usize,
}

impl SegmentFiles {
    /// Bytes: the request rounded up to the page size.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true: zero-byte requests are refused.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The page size behind the files (`Base` for a plain local memfd).
    pub fn page(&self) -> PageKind {
        self.page
    }

    /// Which path served it, and why if not the service.
    pub fn source(&self) -> &Source {
        &self.source
    }

    /// The files in order, each with its offset in the request and the bytes
    /// of it that belong to the request.
    pub fn segments(&self) -> Vec<SegmentView<'_>> {
        match &self.backing {
            FilesBacking::Local { fd } => vec![SegmentView {
                fd: fd.as_fd(),
                offset: 0,
                len: self.len,
            }],
            FilesBacking::Service { spans, held } => held
                .fds
                .iter()
                .zip(spans)
                .map(|(fd, &(offset, len))| SegmentView {
                    fd: fd.as_fd(),
                    offset,
                    len,
                })
                .collect(),
        }
    }

    /// Gives the files up for `exec`: `FD_CLOEXEC` is cleared on each, and the
    /// release is forgotten. The segments stay counted to the client's
    /// connection until it closes; the client's socket is close-on-exec, so an
    /// `exec` closes it, and the daemon then quarantines them for as long as
    /// any process holds one of the files or a mapping of it (its lease check
    /// sees every open file description), and scrubs them once none is left.
    pub fn into_inherited(mut self) -> Result<Vec<InheritedFile>> {
        for s in self.segments() {
            // SAFETY: fcntl(F_SETFD) on a descriptor we hold.
            if unsafe { libc::fcntl(s.fd.as_raw_fd(), libc::F_SETFD, 0) } != 0 {
                return Err(Error::os("fcntl(F_SETFD)", io::Error::last_os_error()));
            }
        }
        let spans = match &mut self.backing {
            FilesBacking::Local { .. } => vec![(0, self.len)],
            FilesBacking::Service { spans, held } => {
                // No RELEASE when `held` drops: the connection's close does it.
                held.ids.clear();
                spans.clone()
            }
        };
        let fds = match self.backing {
            FilesBacking::Local { fd } => vec![fd],
            FilesBacking::Service { mut held, .. } => std::mem::take(&mut held.fds),
        };
        Ok(fds
            .into_iter()
            .zip(spans)
            .map(|(fd, (offset, len))| InheritedFile { fd, offset, len })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: u64 = 2 << 20;

    #[test]
    fn a_local_file_is_sealed_populated_zero_and_can_be_inherited() {
        let len = 8 << 20;
        let f = local_file(len - 4096, PageKind::Huge2M, 2, "no service".into()).unwrap();
        assert_eq!(f.len(), len - 4096, "the caller rounds up");
        let s = f.segments();
        assert_eq!((s.len(), s[0].offset, s[0].len), (1, 0, len - 4096));
        let fd = s[0].fd.as_raw_fd();
        // SAFETY: an all-zero stat is valid; fstat writes into the local.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat on a descriptor `f` holds.
        assert_eq!(unsafe { libc::fstat(fd, &mut st) }, 0);
        let Source::Local { reason } = f.source() else {
            panic!("{:?}", f.source())
        };
        // Hugetlb when the pool has the pages, else a plain memfd that says so.
        if f.page() == PageKind::Huge2M {
            assert_eq!(st.st_blksize, 2 << 20);
            assert_eq!(reason, "no service");
        } else {
            assert_eq!(f.page(), PageKind::Base);
            assert!(
                reason.starts_with("no service; local 2MB memfd: "),
                "{reason}"
            );
            assert!(
                reason.ends_with("used a plain memfd (base pages)"),
                "{reason}"
            );
        }
        // SAFETY: fcntl and ftruncate on a descriptor `f` holds.
        unsafe {
            assert_eq!(libc::fcntl(fd, libc::F_GET_SEALS), LOCAL_SEALS);
            assert_eq!(libc::fcntl(fd, libc::F_GETFD), libc::FD_CLOEXEC);
            assert_ne!(libc::ftruncate(fd, 0), 0, "sealed against shrinking");
        }
        let mut buf = vec![0xa5u8; len - 4096];
        // SAFETY: pread into a local buffer of its length.
        let n = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
        assert_eq!(n, buf.len() as isize);
        assert!(crate::is_zero(&buf));
        let files = f.into_inherited().unwrap();
        assert_eq!((files.len(), files[0].offset), (1, 0));
        // SAFETY: fcntl on the descriptor we now own.
        assert_eq!(
            unsafe { libc::fcntl(files[0].fd.as_raw_fd(), libc::F_GETFD) },
            0
        );
    }

    #[test]
    fn segments_must_tile_the_request() {
        let m = M as usize;
        assert_eq!(tile(&[M], m, m).unwrap(), vec![(0, m)]);
        assert_eq!(tile(&[4 * M], 3 * m, m).unwrap(), vec![(0, 3 * m)]);
        assert_eq!(
            tile(&[M, M, 4 * M], 4 * m, m).unwrap(),
            vec![(0, m), (m, m), (2 * m, 2 * m)]
        );
        for (lens, len, why) in [
            (&[][..], m, "none"),
            (&[M][..], 2 * m, "cover"),
            (&[M, M, M][..], 2 * m, "more than"),
            (&[4 * M, M][..], 2 * m, "more than"),
            (&[0, M][..], m, "whole pages"),
            (&[M + 4096][..], m, "whole pages"),
            (&[u64::MAX][..], m, "whole pages"),
            (&[M, u64::MAX][..], 2 * m, "whole pages"),
        ] {
            let e = tile(lens, len, m).unwrap_err().to_string();
            assert!(e.contains(why), "{lens:?} for {len}: {e}");
        }
        // Lengths whose sum overflows never wrap into a "cover".
        let huge = (usize::MAX / m * m) as u64;
        assert!(tile(&[huge, huge], m, m).is_err());
    }
}
