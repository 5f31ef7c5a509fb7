//! The segments of an `ALLOC` answer: asked for, checked (they tile the
//! request; each file is what the daemon promises, which the kernel, not the
//! daemon, holds it to), and held until released. And what backs an
//! allocation, the service's segments or local memory, with the accessors
//! [`ServiceMemory`] and [`SegmentFiles`] share.
//!
//! [`ServiceMemory`]: super::ServiceMemory
//! [`SegmentFiles`]: super::SegmentFiles

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use super::exchange::Conn;
use super::SegmentView;
use crate::protocol::{Reply, Request, ALLOC_NODE, ALLOC_OTHER_NODES, MAX_RELEASE_IDS};
use crate::{Error, Result};
use prezero::region::{PageKind, Region};
use prezero_sys as sys;

/// The node an `ALLOC` asks for, and whether another may serve.
#[derive(Debug, Clone, Copy)]
pub(super) struct Want {
    pub(super) node: Option<u32>,
    pub(super) other_nodes: bool,
}

/// An `ALLOC` answer, checked; nothing mapped yet.
pub(super) struct Taken {
    /// The segments, released when dropped.
    pub(super) held: Held,
    /// Where each goes in the request: (offset, bytes of it used), from `tile`.
    pub(super) spans: Vec<(usize, usize)>,
    /// Bytes per segment.
    pub(super) segment_size: usize,
    /// The node the daemon says the pages are on (asked for one only).
    pub(super) node: Option<u32>,
}

/// Asks the service for `bytes` (`len` rounded up to whole pages) on `page`
/// pages, on `want`'s node, and checks the answer: the segments tile the
/// request, each file is what the daemon promises, and the node is the one
/// asked for (or, where allowed, one the daemon names).
pub(super) fn take_segments(
    conn: &Arc<Conn>,
    bytes: usize,
    len: usize,
    page: PageKind,
    want: Want,
) -> Result<Taken> {
    let (flags, node) = match want.node {
        None => (0, 0),
        Some(n) if want.other_nodes => (ALLOC_NODE | ALLOC_OTHER_NODES, n),
        Some(n) => (ALLOC_NODE, n),
    };
    let req = Request::Alloc {
        bytes: bytes as u64,
        page_size: page.page_size() as u64,
        flags,
        node,
    };
    let (replies, fds) = conn.exchange(&req).map_err(|e| match (e, want.node) {
        (Error::Refused { errno, reason }, Some(n)) if errno == libc::EPROTO => Error::Refused {
            errno,
            reason: format!(
                "{reason} (a daemon of protocol version 1 cannot place memory on NUMA node {n}: \
                 upgrade it, or ask for any node)"
            ),
        },
        (e, _) => e,
    })?;
    let mut ids = Vec::new();
    let mut lens = Vec::new();
    let mut nodes = Vec::new();
    for r in replies {
        match r {
            Reply::Alloc { segments, node, .. } => {
                nodes.push(node);
                for s in segments {
                    ids.push(s.id);
                    lens.push(s.len);
                }
            }
            Reply::Error {
                message,
                limit: true,
                ..
            } => return Err(Error::CgroupLimit { reason: message }),
            Reply::Error { errno, message, .. } => {
                return Err(Error::Refused {
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
    // Every message of the answer names one node, the one asked for unless
    // others were allowed; an answer without one (or to a request that named
    // none, with one) is not believed. Where the pages really are is checked
    // on the mapping (`move_pages`), which the daemon cannot fake.
    let node = nodes[0];
    if nodes.iter().any(|&n| n != node) || node.is_some() != want.node.is_some() {
        return Err(Error::invalid(
            "the service's answer names no node, or several, or one not asked for",
        ));
    }
    if let (Some(got), Some(asked)) = (node, want.node) {
        if got != asked && !want.other_nodes {
            return Err(Error::invalid(format!(
                "the service sent memory of NUMA node {got}, not {asked} as asked"
            )));
        }
    }
    Ok(Taken {
        held,
        spans,
        // `tile` checked every length fits a usize.
        segment_size: lens[0] as usize,
        node,
    })
}

impl Taken {
    /// Every page of every segment file is on `node`: each file is mapped for
    /// a moment (its pages exist, so this builds page tables only) and asked.
    pub(super) fn check_files_on(&self, node: u32, page: PageKind) -> Result<()> {
        for (fd, &(_, n)) in self.held.fds.iter().zip(&self.spans) {
            let p = sys::mmap_shared_ro(fd.as_fd(), n, libc::MAP_POPULATE)
                .map_err(|e| Error::os("mmap of a service segment", e))?;
            let placed = prezero::numa::placement(p.as_ptr(), n, page.page_size());
            // SAFETY: the mapping made just above, used by nothing else.
            let _ = unsafe { sys::munmap(p, n) };
            check_on(&placed?, node)?;
        }
        Ok(())
    }
}

/// Ok if `placed` is all on `node`: the kernel's word on where a service's
/// memory is, not the daemon's.
pub(super) fn check_on(placed: &prezero::numa::Placement, node: u32) -> Result<()> {
    if placed.all_on(node) {
        return Ok(());
    }
    Err(Error::invalid(format!(
        "the service's memory said to be on NUMA node {node} is not: {:?} pages per node, {} absent",
        placed.on, placed.absent
    )))
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
///
/// [`Client::alloc_with`]: super::Client::alloc_with
/// [`Client::alloc_files`]: super::Client::alloc_files
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

/// Segments held from the service; dropping releases them.
pub(super) struct Held {
    conn: Arc<Conn>,
    pub(super) ids: Vec<u64>,
    pub(super) fds: Vec<OwnedFd>,
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
///
/// [`ServiceMemory`]: super::ServiceMemory
/// [`SegmentFiles`]: super::SegmentFiles
pub(super) enum Backing<L> {
    Service {
        /// Each segment's (offset, bytes of the request it covers), from `tile`.
        spans: Vec<(usize, usize)>,
        held: Held,
    },
    Local(L),
}

/// Local memory as [`SegmentView`]s see it: its file, if it has one.
pub(super) trait LocalBacking {
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
    pub(super) fn views(&self, len: usize) -> Vec<SegmentView<'_>> {
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
///
/// [`ServiceMemory`]: super::ServiceMemory
/// [`SegmentFiles`]: super::SegmentFiles
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

pub(super) use lease_accessors;
