//! [`ServiceMemory`]: the service's segments mapped back to back as one
//! contiguous, populated range (or local memory), unmapped and released on drop.

use std::os::fd::AsFd;
use std::ptr::NonNull;
use std::sync::Arc;

use super::exchange::Conn;
use super::held::{check_on, lease_accessors, take_segments, Backing, Taken, Want};
use super::{SegmentView, Source};
use crate::{Error, Result};
use prezero::region::{PageKind, Region};
use prezero_sys as sys;

pub(super) fn from_service(
    conn: &Arc<Conn>,
    bytes: usize,
    len: usize,
    page: PageKind,
    want: Want,
) -> Result<ServiceMemory> {
    let Taken {
        held,
        spans,
        segment_size,
        node,
    } = take_segments(conn, bytes, len, page, want)?;
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
            Some(b) => {
                // SAFETY: off < len (tile), so the pointer lies in the reservation.
                let at = unsafe { b.add(off) };
                // SAFETY: [off, off+n) lies inside our PROT_NONE reservation
                // (tile: off + n <= len), which nothing else uses, and only
                // that part is replaced.
                unsafe { sys::mmap_shared_fixed(at, fd.as_fd(), n, populate) }
            }
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
    let mem = ServiceMemory {
        ptr: base,
        len,
        page,
        source: Source::Service {
            segments: spans.len(),
            segment_size,
            node,
        },
        backing: Backing::Service { spans, held },
    };
    // Where the pages are, from the kernel (dropping `mem` unmaps and releases).
    if let Some(n) = node {
        check_on(
            &prezero::numa::placement(base.as_ptr(), len, page.page_size())?,
            n,
        )?;
    }
    Ok(mem)
}

/// A `PROT_NONE` range of `len` bytes aligned to `align`, so the segments can be
/// mapped into it back to back.
fn reserve(len: usize, align: usize) -> Result<NonNull<u8>> {
    let span = len
        .checked_add(align)
        .ok_or(prezero::Error::OutOfMemory { size: len })?;
    sys::mmap_anon_aligned(len, align, libc::PROT_NONE, libc::MAP_NORESERVE)
        .map_err(|_| prezero::Error::OutOfMemory { size: span }.into())
}

/// Zeroed, populated memory from [`Client::alloc`]; unmapped and given back when
/// dropped.
///
/// [`Client::alloc`]: super::Client::alloc
pub struct ServiceMemory {
    pub(super) ptr: NonNull<u8>,
    pub(super) len: usize,
    pub(super) page: PageKind,
    pub(super) source: Source,
    pub(super) backing: Backing<Region>,
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
