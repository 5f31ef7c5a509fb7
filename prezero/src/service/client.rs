//! The client: ask `prezero serve` for zeroed hugetlb memory, map it as one
//! contiguous populated range, give it back on drop; fall back to a local
//! [`Region`] + [`prefault`](crate::prefault) when the service cannot serve.
//! Or take the memory as files ([`SegmentFiles`], for `prezero client exec`),
//! with a sealed, populated local memfd as the fallback.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::protocol::{self, Reply, Request, ServiceStats, MAX_MESSAGE, MAX_RELEASE_IDS};
use super::{DEFAULT_SOCKET, SEALS};
use crate::error::{Error, Result};
use crate::region::{PageKind, Region};
use crate::sys::{self, UnixAddr};

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
        UnixAddr::new(&path)?;
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
        self.serve(
            bytes,
            page,
            opts.fallback,
            |conn, len| from_service(conn, bytes, len, page),
            |why| local(bytes, page, opts.populate_threads, why),
        )
    }

    /// `bytes` of zeroed memory on `page` pages as **files** rather than a
    /// mapping, for a program that maps them itself (a VMM given
    /// `mem-path=/proc/self/fd/N`): pass them to it with
    /// [`SegmentFiles::pass_to`]. The files are checked exactly as
    /// [`Client::alloc_with`] checks them (they tile the request; each is a
    /// hugetlbfs file of `page` pages, open read-write, sealed against
    /// shrinking and not against writing). When the service cannot serve (and
    /// `opts.fallback`), one local memfd: hugetlb of `page` if the pool has the
    /// pages, else a plain memfd (base pages, the request rounded up to a base
    /// page; the reason says so), populated with `opts.populate_threads`
    /// threads and sealed like the service's. Dropping it closes the files and
    /// releases.
    pub fn alloc_files(
        &self,
        bytes: usize,
        page: PageKind,
        opts: AllocOptions,
    ) -> Result<SegmentFiles> {
        self.serve(
            bytes,
            page,
            opts.fallback,
            |conn, len| {
                let t = take_segments(conn, bytes, len, page)?;
                Ok(SegmentFiles {
                    len,
                    page,
                    source: Source::Service {
                        segments: t.spans.len(),
                        segment_size: t.segment_size,
                    },
                    backing: Backing::Service {
                        spans: t.spans,
                        held: t.held,
                    },
                })
            },
            |why| local_file(bytes, page, opts.populate_threads, why),
        )
    }

    /// What [`Client::alloc_with`] and [`Client::alloc_files`] share: the
    /// request is checked (not zero, hugetlb, its rounding up to whole pages
    /// fits a `usize`), then `service` is tried with the rounded length, then
    /// (with `fallback`) `local` with why the service did not serve.
    fn serve<T>(
        &self,
        bytes: usize,
        page: PageKind,
        fallback: bool,
        service: impl FnOnce(&Arc<Conn>, usize) -> Result<T>,
        local: impl FnOnce(String) -> Result<T>,
    ) -> Result<T> {
        if bytes == 0 {
            return Err(Error::invalid("zero bytes requested"));
        }
        if !page.is_hugetlb() {
            return Err(Error::invalid(
                "the service serves hugetlb pages: 2MB or 1GB",
            ));
        }
        let len = bytes
            .checked_next_multiple_of(page.page_size())
            .ok_or_else(|| {
                Error::invalid(format!(
                    "{bytes} bytes rounded up to whole {page} pages is more than the address space"
                ))
            })?;
        let err = match &self.conn {
            None => self.not_connected(),
            Some(conn) => match service(conn, len) {
                Ok(m) => return Ok(m),
                Err(e) => e,
            },
        };
        if !fallback {
            return Err(err);
        }
        local(err.to_string())
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
    let addr = UnixAddr::new(path)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
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

/// An `ALLOC` answer, checked; nothing mapped yet.
struct Taken {
    /// The segments, released when dropped.
    held: Held,
    /// Where each goes in the request: (offset, bytes of it used), from `tile`.
    spans: Vec<(usize, usize)>,
    /// Bytes per segment.
    segment_size: usize,
}

/// Asks the service for `bytes` (`len` rounded up to whole pages) on `page`
/// pages and checks the answer: the segments tile the request, and each file
/// is what the daemon promises.
fn take_segments(conn: &Arc<Conn>, bytes: usize, len: usize, page: PageKind) -> Result<Taken> {
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

fn from_service(
    conn: &Arc<Conn>,
    bytes: usize,
    len: usize,
    page: PageKind,
) -> Result<ServiceMemory> {
    let Taken {
        held,
        spans,
        segment_size,
    } = take_segments(conn, bytes, len, page)?;
    // One segment maps anywhere (hugetlb mappings come page-aligned); several
    // go back to back into a reservation.
    let base = if spans.len() == 1 {
        None
    } else {
        Some(reserve(len, page.page_size())?)
    };
    let mut start = None;
    // The pages exist (the daemon populated them): populating only builds page
    // tables, ~1 us per 2 MiB page, faster in one thread than the start-up of
    // a second (measured).
    let populate = libc::MAP_POPULATE;
    for (fd, &(off, n)) in held.fds.iter().zip(&spans) {
        let mapped = match base {
            // SAFETY: off < len (tile), so the pointer lies in the reservation;
            // [off, off+n) lies inside our PROT_NONE reservation (tile:
            // off + n <= len), which nothing else uses, and only that part is
            // replaced.
            Some(b) => unsafe { sys::mmap_shared_fixed(b.add(off), fd.as_fd(), n, populate) },
            None => sys::mmap_shared(fd.as_fd(), n, populate),
        };
        let p = match mapped {
            Ok(p) => p,
            Err(e) => {
                if let Some(b) = base {
                    // SAFETY: the whole reservation (and what replaced parts of it) is ours.
                    let _ = unsafe { sys::munmap(b, len) };
                }
                return Err(Error::os("mmap of a service segment", e));
            }
        };
        start.get_or_insert(p);
    }
    let base = start.expect("at least one segment");
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

/// `statfs.f_type` of hugetlbfs (linux/magic.h).
const HUGETLBFS_MAGIC: u32 = 0x9584_58f6;

/// A segment's file as the daemon promises it: a hugetlbfs file of `page`
/// pages, of the length its record `claimed` (at least the `n` bytes used),
/// open read-write, sealed against shrinking and not against writing. What
/// [`Client::alloc_with`]'s mmap would refuse is refused here too, for
/// [`Client::alloc_files`], which maps nothing.
fn check_segment_file(fd: BorrowedFd<'_>, claimed: u64, n: usize, page: usize) -> Result<()> {
    let lie = |why: String| {
        Err(Error::invalid(format!(
            "the service sent a segment file {why}"
        )))
    };
    let st = sys::fstat(fd).map_err(|e| Error::os("fstat of a service segment", e))?;
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
    // st_blksize alone is not enough: with shmem THP a plain memfd reports
    // 2 MiB.
    let fs = sys::fstatfs(fd).map_err(|e| Error::os("fstatfs of a service segment", e))?;
    if fs.f_type as u32 != HUGETLBFS_MAGIC {
        return lie(format!(
            "that is not on hugetlbfs (filesystem type {:#x}): not of {page}-byte pages",
            fs.f_type
        ));
    }
    if !sys::status_flags(fd).is_ok_and(|fl| fl & libc::O_ACCMODE == libc::O_RDWR) {
        return lie("that is not open read-write".into());
    }
    // A file whose seals cannot be read counts as unsealed.
    let seals = sys::seals(fd).unwrap_or(0);
    if seals & libc::F_SEAL_SHRINK == 0 {
        return lie("that is not sealed against shrinking".into());
    }
    if seals & (libc::F_SEAL_WRITE | libc::F_SEAL_FUTURE_WRITE) != 0 {
        return lie("that is sealed against writing".into());
    }
    Ok(())
}

/// A `PROT_NONE` range of `len` bytes aligned to `align`, so the segments can be
/// mapped into it back to back.
fn reserve(len: usize, align: usize) -> Result<NonNull<u8>> {
    let span = len
        .checked_add(align)
        .ok_or(Error::OutOfMemory { size: len })?;
    sys::mmap_anon_aligned(len, align, libc::PROT_NONE, libc::MAP_NORESERVE)
        .map_err(|_| Error::OutOfMemory { size: span })
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
        backing: Backing::Local(region),
    })
}

/// The local fallback of [`Client::alloc_files`]: one sealed, populated memfd
/// for `bytes`, hugetlb of `page` (whole pages) when the pool has the pages,
/// else a plain memfd (whole base pages), and `why` the service did not serve.
fn local_file(bytes: usize, page: PageKind, threads: usize, why: String) -> Result<SegmentFiles> {
    let len = bytes.next_multiple_of(page.page_size());
    let pages = len / page.page_size();
    let free = crate::cpu::hugetlb_pool(page.page_size()).map_or(0, |p| p.free);
    let hugetlb = if free < pages {
        Err(format!("{pages} {page} hugetlb pages needed, {free} free"))
    } else {
        populated_memfd(len, Some(page), threads).map_err(|e| e.to_string())
    };
    let (fd, len, kind, reason) = match hugetlb {
        Ok(fd) => (fd, len, page, why),
        Err(short) => {
            // Base pages need no more than the request rounded up to one.
            let len = bytes.next_multiple_of(PageKind::Base.page_size());
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
                len,
                PageKind::Base,
                format!("{why}; local {page} memfd: {short}; used a plain memfd (base pages)"),
            )
        }
    };
    Ok(SegmentFiles {
        len,
        page: kind,
        source: Source::Local { reason },
        backing: Backing::Local(fd),
    })
}

/// A memfd of `len` bytes (hugetlb of `huge` pages, or plain), every page
/// faulted in through a temporary mapping with `threads` threads, then sealed
/// with [`SEALS`], as the daemon's segments are. Close-on-exec.
fn populated_memfd(len: usize, huge: Option<PageKind>, threads: usize) -> Result<OwnedFd> {
    let size_flags = huge.map_or(0, PageKind::memfd_flags);
    let fd = sys::memfd_create(c"prezero-local", libc::MFD_ALLOW_SEALING | size_flags)
        .map_err(|e| Error::os("memfd_create", e))?;
    // No other process has the memfd.
    sys::ftruncate(fd.as_fd(), len).map_err(|e| Error::os("ftruncate", e))?;
    // A shared mapping of a hugetlb file reserves its pages here: a shortage
    // is ENOMEM now, not a SIGBUS later.
    let p =
        sys::mmap_shared(fd.as_fd(), len, 0).map_err(|e| Error::os("mmap of a local memfd", e))?;
    // SAFETY: [p, p+len) is the mapping just made, which nothing else knows of;
    // populating does not change its contents; `huge` says whether it is hugetlb.
    let populated =
        unsafe { crate::prefault::prefault_as(p.as_ptr(), len, threads.max(1), huge.is_some()) };
    // The pages stay in the file; the mapping was only the way to fault them in.
    // SAFETY: our own mapping, unused from here on.
    let _ = unsafe { sys::munmap(p, len) };
    populated?;
    sys::add_seals(fd.as_fd(), SEALS).map_err(|e| Error::os("fcntl(F_ADD_SEALS)", e))?;
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

/// What holds an allocation's memory: the service's segments, or local
/// memory `L` (a [`Region`] for [`ServiceMemory`], kept for its Drop, which
/// unmaps; a memfd for [`SegmentFiles`]).
enum Backing<L> {
    Service {
        /// Each segment's (offset, bytes of the request it covers), from `tile`.
        spans: Vec<(usize, usize)>,
        held: Held,
    },
    Local(L),
}

/// Local memory as [`SegmentView`]s see it: its file, if it has one.
trait LocalBacking {
    fn file(&self) -> Option<BorrowedFd<'_>>;
}

impl LocalBacking for Region {
    fn file(&self) -> Option<BorrowedFd<'_>> {
        None
    }
}

impl LocalBacking for OwnedFd {
    fn file(&self) -> Option<BorrowedFd<'_>> {
        Some(self.as_fd())
    }
}

impl<L: LocalBacking> Backing<L> {
    /// The files in order, `len` bytes in all.
    fn views(&self, len: usize) -> Vec<SegmentView<'_>> {
        match self {
            Backing::Local(l) => l
                .file()
                .map(|fd| SegmentView { fd, offset: 0, len })
                .into_iter()
                .collect(),
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

/// The accessors [`ServiceMemory`] and [`SegmentFiles`] share, over their
/// `len`, `page`, `source` and `backing` fields.
macro_rules! lease_accessors {
    () => {
        /// Bytes: the request rounded up to the page size ([`Self::page`]).
        pub fn len(&self) -> usize {
            self.len
        }

        /// Never true: zero-byte requests are refused.
        pub fn is_empty(&self) -> bool {
            self.len == 0
        }

        /// The page size actually backing the memory: the one asked for, unless
        /// a local fallback found no hugetlb pages (then THP for mapped memory,
        /// base pages for a plain memfd).
        pub fn page(&self) -> PageKind {
            self.page
        }

        /// Which path served it, and why if not the service.
        pub fn source(&self) -> &Source {
            &self.source
        }

        /// The files in order, each with its offset in the memory and the bytes
        /// of it that belong to the request: the service's segments, or a local
        /// memfd (local mapped memory has none).
        pub fn segments(&self) -> Vec<SegmentView<'_>> {
            self.backing.views(self.len)
        }
    };
}

/// Zeroed, populated memory from [`Client::alloc`]; unmapped and given back when
/// dropped.
pub struct ServiceMemory {
    ptr: NonNull<u8>,
    len: usize,
    page: PageKind,
    source: Source,
    backing: Backing<Region>,
}

// SAFETY: ServiceMemory owns its mapping exclusively; the connection inside is
// Send + Sync (a socket behind a mutex).
unsafe impl Send for ServiceMemory {}
// SAFETY: shared references only read the mapping or the immutable metadata.
unsafe impl Sync for ServiceMemory {}

impl ServiceMemory {
    lease_accessors!();

    /// Start of the memory (aligned to the page size).
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
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
}

impl Drop for ServiceMemory {
    fn drop(&mut self) {
        if let Backing::Service { .. } = self.backing {
            // SAFETY: the range is our reservation, now the segments' mappings;
            // nothing borrows it once self is dropped.
            let _ = unsafe { sys::munmap(self.ptr, self.len) };
        }
        // Then `backing` drops: Held closes the fds and releases, Region unmaps.
    }
}

/// Zeroed, populated memory as files, from [`Client::alloc_files`]: the
/// service's segments (sealed hugetlb memfds), or one local memfd. Nothing is
/// mapped here. Dropped, the files close and the segments are released.
pub struct SegmentFiles {
    len: usize,
    page: PageKind,
    source: Source,
    backing: Backing<OwnedFd>,
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
    lease_accessors!();

    /// Makes the child `cmd` starts inherit the files, under the descriptor
    /// numbers [`SegmentFiles::segments`] shows (name them to it by those): a
    /// `pre_exec` hook clears `FD_CLOEXEC` in the child only. Here the files
    /// stay close-on-exec, so no other thread's fork+exec inherits them.
    ///
    /// Keep `self` until the child is spawned, then drop it: the segments are
    /// released, and the daemon keeps them in quarantine for as long as the
    /// child (or anything it passes them to) holds them. With
    /// [`CommandExt::exec`](std::os::unix::process::CommandExt::exec) the
    /// hook runs in this process just before the exec; the exec then closes
    /// the client's connection (close-on-exec), which releases them.
    ///
    /// A spawn after `self` was dropped fails (`EBADF`) rather than pass on
    /// whatever file has since taken one of the numbers.
    pub fn pass_to(&self, cmd: &mut std::process::Command) -> Result<()> {
        let mut files = Vec::new();
        for s in self.segments() {
            let st = sys::fstat(s.fd).map_err(|e| Error::os("fstat", e))?;
            files.push((s.fd.as_raw_fd(), st.st_dev, st.st_ino));
        }
        // Runs between fork and exec: fstat, fcntl and a stack error only (no
        // allocation, no lock).
        let hook = move || {
            for &(fd, dev, ino) in &files {
                match sys::fstat(fd) {
                    Ok(st) if st.st_dev == dev && st.st_ino == ino => {}
                    _ => return Err(io::Error::from_raw_os_error(libc::EBADF)),
                }
                // SAFETY: `fd` was just seen to name the file it named in the
                // parent, and nothing in this child closes it before the exec.
                let fd = unsafe { BorrowedFd::borrow_raw(fd) };
                sys::set_cloexec(fd, false)?;
            }
            Ok(())
        };
        // SAFETY: the hook is async-signal-safe (above), so it may run in a
        // child forked from a multi-threaded process.
        unsafe { std::os::unix::process::CommandExt::pre_exec(cmd, hook) };
        Ok(())
    }

    /// Gives the files up for an `exec` of this process, which must be
    /// single-threaded: prefer [`SegmentFiles::pass_to`]. `FD_CLOEXEC` is
    /// cleared on each file at once, so a fork+exec on any other thread from
    /// now on hands the memory to that program too. The release is forgotten:
    /// the segments stay leased to the client's connection until it closes.
    /// The socket is close-on-exec, so an `exec` closes it, and the daemon
    /// then quarantines them for as long as any process holds one of the files
    /// or a mapping of it, and scrubs them once none is left; after a `spawn`
    /// instead they stay leased, and charged, until the [`Client`] is dropped.
    pub fn into_inherited(self) -> Result<Vec<InheritedFile>> {
        for s in self.segments() {
            sys::set_cloexec(s.fd, false).map_err(|e| Error::os("fcntl(F_SETFD)", e))?;
        }
        let (fds, spans) = match self.backing {
            Backing::Local(fd) => (vec![fd], vec![(0, self.len)]),
            Backing::Service { spans, mut held } => {
                // No RELEASE when `held` drops: the connection's close does it.
                held.ids.clear();
                (std::mem::take(&mut held.fds), spans)
            }
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

    /// The descriptor flags (`F_GETFD`): `FD_CLOEXEC` or 0.
    fn fd_flags(fd: BorrowedFd<'_>) -> libc::c_int {
        // SAFETY: fcntl(F_GETFD) takes no argument and touches no memory.
        unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFD) }
    }

    /// What every local file is: one segment of `len` bytes (the whole file),
    /// on `page` pages, sealed, populated with zeros, close-on-exec here.
    fn check_local_file(f: &SegmentFiles, len: usize, page: PageKind) {
        assert_eq!((f.len(), f.page()), (len, page));
        let s = f.segments();
        assert_eq!((s.len(), s[0].offset, s[0].len), (1, 0, len));
        let fd = s[0].fd;
        let st = sys::fstat(fd).unwrap();
        assert_eq!(st.st_size as usize, len);
        if page.is_hugetlb() {
            assert_eq!(st.st_blksize as usize, page.page_size());
        }
        assert_eq!(sys::seals(fd).unwrap(), SEALS);
        assert_eq!(fd_flags(fd), libc::FD_CLOEXEC);
        assert!(sys::ftruncate(fd, 0).is_err(), "sealed against shrinking");
        let mut buf = vec![0xa5u8; len];
        let file = std::fs::File::from(fd.try_clone_to_owned().unwrap());
        let n = std::os::unix::fs::FileExt::read_at(&file, &mut buf, 0).unwrap();
        assert_eq!(n, buf.len());
        assert!(crate::is_zero(&buf));
    }

    #[test]
    fn a_local_hugetlb_file_is_whole_pages_sealed_populated_zero_and_can_be_inherited() {
        let _pages = match crate::HugetlbReservation::ensure_free(M as usize, 4) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("skipped: the hugetlb local file (cannot reserve four 2 MiB pages: {e})");
                return;
            }
        };
        // qemu-user reserves the pages but cannot map them.
        let Ok(probe) = sys::mmap_anon(M as usize, libc::MAP_HUGETLB) else {
            eprintln!("skipped: the hugetlb local file (hugetlb pages cannot be mapped here)");
            return;
        };
        // SAFETY: the probe mapping just made, unused.
        unsafe { sys::munmap(probe, M as usize) }.unwrap();
        let len = 8 << 20;
        let f = local_file(len - 4096, PageKind::Huge2M, 2, "no service".into()).unwrap();
        assert_eq!(
            f.source(),
            &Source::Local {
                reason: "no service".into()
            }
        );
        check_local_file(&f, len, PageKind::Huge2M);
        let files = f.into_inherited().unwrap();
        assert_eq!((files.len(), files[0].offset, files[0].len), (1, 0, len));
        assert_eq!(fd_flags(files[0].fd.as_fd()), 0);
    }

    #[test]
    fn a_plain_local_file_is_whole_base_pages_not_hugetlb_pages() {
        // 1 GiB pages are rarely free: then a plain memfd of two base pages
        // serves 4097 bytes, not a 1 GiB one.
        let free = crate::cpu::hugetlb_pool(1 << 30).map_or(0, |p| p.free);
        if free > 0 {
            eprintln!("skipped: the plain local file ({free} 1 GiB pages are free)");
            return;
        }
        let f = local_file(4097, PageKind::Huge1G, 2, "no service".into()).unwrap();
        let base = PageKind::Base.page_size();
        check_local_file(&f, 4097usize.next_multiple_of(base), PageKind::Base);
        let Source::Local { reason } = f.source() else {
            panic!("{:?}", f.source())
        };
        assert!(
            reason.starts_with("no service; local 1GB memfd: 1 1GB hugetlb pages needed, 0 free")
                && reason.ends_with("used a plain memfd (base pages)"),
            "{reason}"
        );
    }

    #[test]
    fn pass_to_clears_close_on_exec_in_the_child_only_and_refuses_stale_numbers() {
        let f = local_file(4096, PageKind::Huge1G, 1, "no service".into()).unwrap();
        let fd = f.segments()[0].fd.as_raw_fd();
        let mut cmd = std::process::Command::new("sh");
        // readlink, a child of sh, inherits the descriptor too.
        cmd.args(["-c", &format!("readlink /proc/$$/fd/{fd}")]);
        f.pass_to(&mut cmd).unwrap();
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        let link = String::from_utf8_lossy(&out.stdout);
        assert!(link.starts_with("/memfd:prezero-local"), "{link}");
        assert_eq!(
            fd_flags(f.segments()[0].fd),
            libc::FD_CLOEXEC,
            "still close-on-exec here"
        );
        // Without the hook the child has no such descriptor.
        let out = std::process::Command::new("sh")
            .args(["-c", &format!("readlink /proc/$$/fd/{fd}")])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{out:?}");
        // Once the file is closed the number names nothing, or something else.
        drop(f);
        let e = cmd.output().unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EBADF), "{e}");
    }

    #[test]
    fn a_request_whose_rounding_overflows_is_an_error() {
        let client = Client::local("no service");
        for bytes in [usize::MAX, usize::MAX - (M as usize) + 2] {
            let e = client
                .alloc_files(bytes, PageKind::Huge2M, AllocOptions::default())
                .err()
                .unwrap()
                .to_string();
            assert!(
                e.contains(&format!(
                    "{bytes} bytes rounded up to whole 2MB pages is more than the address space"
                )),
                "{e}"
            );
            let e = client
                .alloc_with(bytes, PageKind::Huge1G, AllocOptions::default())
                .err()
                .unwrap()
                .to_string();
            assert!(e.contains("more than the address space"), "{e}");
        }
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
