//! The local fallback, when the service cannot serve: mapped memory
//! ([`Region`] + prefault, THP when hugetlb pages are short) for
//! [`ServiceMemory`], one sealed, populated memfd for [`SegmentFiles`].

use std::os::fd::{AsFd, OwnedFd};
use std::ptr::NonNull;

use super::held::Backing;
use super::{SegmentFiles, ServiceMemory, Source};
use crate::SEALS;
use crate::{Error, Result};
use prezero::numa::Topology;
use prezero::region::{PageKind, Region};
use prezero_sys as sys;

/// The local fallback of [`Client::alloc_with`]: `bytes` mapped and
/// populated here, on `node` when one was asked for (bound to it, from its
/// CPUs), else where the caller's own policy puts it.
///
/// [`Client::alloc_with`]: super::Client::alloc_with
pub(super) fn local(
    bytes: usize,
    page: PageKind,
    threads: usize,
    why: String,
    node: Option<u32>,
) -> Result<ServiceMemory> {
    let threads = threads.max(1);
    let (mut region, mut reason) = match Region::new(bytes, page) {
        Ok(r) => (r, why),
        Err(e @ prezero::Error::HugetlbShortage { .. }) => {
            let r = thp_instead(bytes, &format!("{why}; local {page}: {e}"))?;
            (r, format!("{why}; local {page}: {e}; used THP"))
        }
        Err(e) => return Err(e.into()),
    };
    match node {
        Some(n) => {
            prezero::prefault::prefault_on_nodes(&region, &[n], threads)?;
            // The binding prefers the node: a hugetlb page comes from another
            // node's pool when this one's has none left (a 4-node guest got
            // one page from each). Misplaced memory is not handed out (the
            // daemon destroys such a segment too): THP instead, which the
            // kernel places as it would the caller's own fault.
            if region.kind().is_hugetlb() {
                let at = prezero::numa::placement(region.as_ptr(), region.len(), page.page_size())?;
                if !at.all_on(n) {
                    let short = format!(
                        "{reason}; local {page}: node {n}'s pool was short (pages on {:?})",
                        at.on
                    );
                    drop(region);
                    region = thp_instead(bytes, &short)?;
                    prezero::prefault::prefault_on_nodes(&region, &[n], threads)?;
                    reason = format!("{short}; used THP");
                }
            }
        }
        None => prezero::prefault::prefault(&region, threads).map(|_| ())?,
    }
    Ok(ServiceMemory {
        ptr: NonNull::new(region.as_ptr()).expect("regions are non-null"),
        len: region.len(),
        page: region.kind(),
        source: Source::Local { reason },
        backing: Backing::Local(region),
    })
}

/// A THP region of `bytes` where hugetlb pages could not serve (`why`):
/// transparent huge pages still give zeroed, populated memory, if the machine
/// has it (populating more than is available would end in the OOM killer,
/// not an error).
fn thp_instead(bytes: usize, why: &str) -> Result<Region> {
    let available = prezero_sys::mem_available();
    if bytes > available {
        return Err(Error::invalid(format!(
            "{why}; and {bytes} bytes is more than the {available} bytes of memory available \
             for a THP fallback"
        )));
    }
    Ok(Region::new(bytes, PageKind::Thp)?)
}

/// The local fallback of [`Client::alloc_files`]: one sealed, populated memfd
/// for `bytes`, hugetlb of `page` (whole pages) when the pool (`node`'s, when
/// one was asked for) has the pages, else a plain memfd (whole base pages),
/// and `why` the service did not serve.
///
/// [`Client::alloc_files`]: super::Client::alloc_files
pub(super) fn local_file(
    bytes: usize,
    page: PageKind,
    threads: usize,
    why: String,
    node: Option<u32>,
) -> Result<SegmentFiles> {
    let len = bytes.next_multiple_of(page.page_size());
    let pages = len / page.page_size();
    // The topology only where a node was asked for: none on one node.
    let topology = node.map(|_| Topology::read());
    let free = match (node, &topology) {
        (Some(n), Some(t)) => t
            .node(n)
            .and_then(|n| n.hugetlb.iter().find(|h| h.page_size == page.page_size()))
            .map_or(0, |h| h.free),
        _ => prezero::mm::hugetlb_pool(page.page_size()).map_or(0, |p| p.free),
    };
    let home = node.zip(topology).map(|(n, t)| (n, t.usable_cpus(n)));
    let hugetlb = if free < pages {
        Err(format!("{pages} {page} hugetlb pages needed, {free} free"))
    } else {
        populated_memfd(len, Some(page), threads, home.as_ref()).map_err(|e| e.to_string())
    };
    let (fd, len, kind, reason) = match hugetlb {
        Ok(fd) => (fd, len, page, why),
        Err(short) => {
            // Base pages need no more than the request rounded up to one.
            let len = bytes.next_multiple_of(PageKind::Base.page_size());
            // Populating more than is available would end in the OOM killer,
            // not an error.
            let available = prezero_sys::mem_available();
            if len > available {
                return Err(Error::invalid(format!(
                    "{why}; local {page} memfd: {short}; and {len} bytes is more than the \
                     {available} bytes of memory available for a plain memfd"
                )));
            }
            (
                populated_memfd(len, None, threads, home.as_ref())?,
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
/// faulted in through a temporary mapping with `threads` threads (bound to
/// `home`'s node and run on its CPUs, when given), then sealed with [`SEALS`],
/// as the daemon's segments are. Close-on-exec.
fn populated_memfd(
    len: usize,
    huge: Option<PageKind>,
    threads: usize,
    home: Option<&(u32, Vec<usize>)>,
) -> Result<OwnedFd> {
    let size_flags = huge.map_or(0, PageKind::memfd_flags);
    let fd = sys::memfd_create(c"prezero-local", libc::MFD_ALLOW_SEALING | size_flags)
        .map_err(|e| Error::os("memfd_create", e))?;
    // No other process has the memfd.
    sys::ftruncate(fd.as_fd(), len).map_err(|e| Error::os("ftruncate", e))?;
    // A shared mapping of a hugetlb file reserves its pages here: a shortage
    // is ENOMEM now, not a SIGBUS later.
    let p =
        sys::mmap_shared(fd.as_fd(), len, 0).map_err(|e| Error::os("mmap of a local memfd", e))?;
    let cpus = home.map_or(&[][..], |h| &h.1[..]);
    let bound = home.map_or(Ok(()), |&(n, _)| {
        prezero::numa::bind(p.as_ptr(), len, n, false)
    });
    // SAFETY: [p, p+len) is the mapping just made, which nothing else knows of;
    // populating does not change its contents; `huge` says whether it is hugetlb.
    let populated = bound.and_then(|()| unsafe {
        prezero::prefault::prefault_from(p.as_ptr(), len, threads.max(1), huge.is_some(), cpus)
    });
    // As in `local`: hugetlb pages from another node's pool (this one's was
    // emptied after its count) are not handed out as this node's.
    let populated = populated.and_then(|_| match (home, huge) {
        (Some(&(n, _)), Some(k)) => {
            let at = prezero::numa::placement(p.as_ptr(), len, k.page_size())?;
            if at.all_on(n) {
                Ok(())
            } else {
                Err(prezero::Error::invalid(format!(
                    "node {n}'s pool was short (pages on {:?})",
                    at.on
                )))
            }
        }
        _ => Ok(()),
    });
    // The pages stay in the file; the mapping was only the way to fault them in.
    // SAFETY: our own mapping, unused from here on.
    let _ = unsafe { sys::munmap(p, len) };
    populated?;
    sys::add_seals(fd.as_fd(), SEALS).map_err(|e| Error::os("fcntl(F_ADD_SEALS)", e))?;
    Ok(fd)
}
