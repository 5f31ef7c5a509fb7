//! The client: ask `prezero serve` for zeroed hugetlb memory, map it as one
//! contiguous populated range, give it back on drop; fall back to a local
//! [`Region`](prezero::region::Region) + [`prefault`](prezero::prefault) when the
//! service cannot serve. Or take the memory as files ([`SegmentFiles`], for
//! `prezero client exec`), with a sealed, populated local memfd as the fallback.
//!
//! Here the [`Client`] and what it is asked; the connection and its exchanges
//! in `exchange.rs`, an `ALLOC` answer's segments checked and held in `held.rs`,
//! mapped in `mapping.rs` ([`ServiceMemory`]) or kept as files in `files.rs`
//! ([`SegmentFiles`]), the local fallback in `fallback.rs`.

mod exchange;
mod fallback;
mod files;
mod held;
mod mapping;

use std::io;
use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::protocol::{Reply, Request, ServiceStats};
use super::DEFAULT_SOCKET;
use crate::{Error, Result};
use exchange::Conn;
use fallback::{local, local_file};
use held::{take_segments, Backing, Want};
use mapping::from_service;
use prezero::numa::Topology;
use prezero::region::PageKind;
use prezero_sys::UnixAddr;

pub(crate) use exchange::{connect_socket, CONNECT_TIMEOUT};
pub use files::{InheritedFile, SegmentFiles};
#[cfg(feature = "fuzzing")]
pub(crate) use held::tile;
pub use mapping::ServiceMemory;

/// Options of [`Client::alloc_with`].
#[derive(Debug, Clone, Copy)]
pub struct AllocOptions {
    /// Map and populate local memory when the service cannot serve (default true).
    /// With false, the service's refusal is the error.
    pub fallback: bool,
    /// Threads that populate local fallback memory (default: every CPU). Service
    /// memory needs none: its pages exist, only page tables are built.
    pub populate_threads: usize,
    /// The NUMA node the memory must be on (default: the caller's).
    pub node: NodeChoice,
    /// When that node has too little ready, take another node's memory,
    /// nearest first, rather than fall back to local memory (default false:
    /// local memory on the right node beats remote memory ready now).
    pub other_nodes: bool,
}

impl Default for AllocOptions {
    fn default() -> Self {
        AllocOptions {
            fallback: true,
            populate_threads: prezero_sys::online_cpus(),
            node: NodeChoice::Caller,
            other_nodes: false,
        }
    }
}

/// Which NUMA node an allocation is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NodeChoice {
    /// The caller's: the node of its memory policy if that binds or prefers
    /// one node (`numactl --membind=N`, `--preferred=N`), else the node of
    /// every CPU it may run on (`--cpunodebind=N`, `taskset`), else any. On a
    /// machine of one node, any.
    #[default]
    Caller,
    /// Whichever node has memory ready.
    Any,
    /// This node (an error if it does not exist, is offline or has no memory).
    Node(u32),
}

impl AllocOptions {
    /// What to ask the service for: the node, if any, and whether others
    /// will do.
    fn want(&self) -> Result<Want> {
        Ok(Want {
            node: self.resolve_node()?,
            other_nodes: self.other_nodes,
        })
    }

    /// The node to ask for, if any (no system call on a machine of one node),
    /// and an error for options that contradict each other.
    fn resolve_node(&self) -> Result<Option<u32>> {
        if self.other_nodes && self.node == NodeChoice::Any {
            return Err(Error::invalid(
                "other nodes allowed, but no node asked for (any node already)",
            ));
        }
        match self.node {
            NodeChoice::Any => Ok(None),
            NodeChoice::Node(n) => Ok(Topology::read().memory_node(n).map(|_| Some(n))?),
            NodeChoice::Caller if prezero::numa::is_multi_node() => Ok(prezero::numa::home_node()),
            NodeChoice::Caller => Ok(None),
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
        /// The NUMA node every page is on, when one was asked for (checked
        /// with `move_pages` where the memory is mapped, not taken on trust).
        node: Option<u32>,
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
        UnixAddr::new(&path).map_err(|e| Error::invalid(e.to_string()))?;
        Ok(match connect_socket(&path, CONNECT_TIMEOUT) {
            Ok(sock) => Client {
                conn: Some(Arc::new(Conn::new(sock))),
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
        Error::Refused {
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
        let want = opts.want()?;
        self.serve(
            bytes,
            page,
            opts.fallback,
            |conn, len| from_service(conn, bytes, len, page, want),
            |why| local(bytes, page, opts.populate_threads, why, want.node),
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
        let want = opts.want()?;
        self.serve(
            bytes,
            page,
            opts.fallback,
            |conn, len| {
                let t = take_segments(conn, bytes, len, page, want)?;
                if let Some(n) = t.node {
                    t.check_files_on(n, page)?;
                }
                Ok(SegmentFiles {
                    len,
                    page,
                    source: Source::Service {
                        segments: t.spans.len(),
                        segment_size: t.segment_size,
                        node: t.node,
                    },
                    backing: Backing::Service {
                        spans: t.spans,
                        held: t.held,
                    },
                })
            },
            |why| local_file(bytes, page, opts.populate_threads, why, want.node),
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
        // A cgroup's limit holds for local memory too: the kernel would
        // refuse it (or its OOM killer would choose), so no fallback goes
        // around it.
        if !fallback || matches!(err, Error::CgroupLimit { .. }) {
            return Err(err);
        }
        local(err.to_string())
    }

    /// Prepares `bytes` on `page` pages for the tenant cgroup at `cgroup`
    /// (its path in the daemon's hierarchy, "/machine.slice/vm1.scope")
    /// before its tenant starts: the daemon faults them in from inside that
    /// cgroup, so the kernel charges them there, and hands them to its
    /// tenants only. 0 withdraws. Root, the daemon's uid and the owner of the
    /// cgroup's directory may. Returns the bytes kept for it (whole segments)
    /// and those placed there already.
    pub fn prepare(&self, cgroup: &[u8], bytes: u64, page: PageKind) -> Result<(u64, u64)> {
        let conn = self.conn.as_ref().ok_or_else(|| self.not_connected())?;
        let req = Request::Prepare {
            cgroup: cgroup.to_vec(),
            bytes,
            page_size: page.page_size() as u64,
        };
        let (mut replies, _) = conn.exchange(&req)?;
        match replies.pop() {
            Some(Reply::Prepared { target, placed }) => Ok((target, placed)),
            Some(Reply::Error { errno, message, .. }) => Err(Error::Refused {
                errno,
                reason: message,
            }),
            _ => Err(Error::invalid("unexpected reply to PREPARE")),
        }
    }

    /// The service's counters.
    pub fn stats(&self) -> Result<ServiceStats> {
        let conn = self.conn.as_ref().ok_or_else(|| self.not_connected())?;
        let (mut replies, _) = conn.exchange(&Request::Stats)?;
        match replies.pop() {
            Some(Reply::Stats(s)) => Ok(*s),
            Some(Reply::Error { errno, message, .. }) => Err(Error::Refused {
                errno,
                reason: message,
            }),
            _ => Err(Error::invalid("unexpected reply to STATS")),
        }
    }
}

#[cfg(test)]
mod tests;
