//! Mapping and populating: `pz_region_*` (an opaque `pz_region` per mapping),
//! `pz_prefault` and `pz_prefault_nodes`, and the `PZ_PAGE_*` numbers the pool
//! and service calls share.

use std::ffi::{c_int, c_void};

use super::helpers::{free_handle, guard, handle, into_handle, inval, node_ids, not_null};
use prezero::region::{PageKind, Region};
use prezero::Result;

/// Base pages (4 KiB on x86_64).
pub const PZ_PAGE_BASE: c_int = 0;
/// Transparent huge pages (`MADV_HUGEPAGE`, PMD-aligned).
pub const PZ_PAGE_THP: c_int = 1;
/// hugetlb 2 MiB pages.
pub const PZ_PAGE_HUGE_2M: c_int = 2;
/// hugetlb 1 GiB pages.
pub const PZ_PAGE_HUGE_1G: c_int = 3;

pub(super) fn page_kind(k: c_int) -> Result<PageKind> {
    match k {
        PZ_PAGE_BASE => Ok(PageKind::Base),
        PZ_PAGE_THP => Ok(PageKind::Thp),
        PZ_PAGE_HUGE_2M => Ok(PageKind::Huge2M),
        PZ_PAGE_HUGE_1G => Ok(PageKind::Huge1G),
        _ => Err(inval("unknown page kind")),
    }
}

/// A mapping from `pz_region_map` (opaque). Thread-safe: `pz_region_ptr` and
/// `pz_region_len` may be called from any thread at once; `pz_region_unmap`
/// must be the last call on it (a second one is `-EINVAL`). Its memory is the caller's
/// to use, from any thread, until then.
pub struct PzRegion {
    region: Region,
}

/// Maps `size` bytes (rounded up to the page size) of a `PZ_PAGE_*` kind into a
/// new region, `*out` (left unchanged on failure). Fresh memory reads zero.
///
/// # Safety
/// `out` is NULL (refused) or writable for a pointer.
#[no_mangle]
pub unsafe extern "C" fn pz_region_map(size: usize, kind: c_int, out: *mut *mut PzRegion) -> c_int {
    guard(|| {
        not_null(out, "output pointer")?;
        let region = Region::new(size, page_kind(kind)?)?;
        // SAFETY: checked non-NULL; the caller gave a writable slot.
        unsafe { out.write(into_handle(PzRegion { region })) };
        Ok(())
    })
}

/// The first byte of the region's memory; NULL for a NULL region.
///
/// # Safety
/// No other thread frees `region` during the call (any pointer is checked
/// first).
#[no_mangle]
pub unsafe extern "C" fn pz_region_ptr(region: *const PzRegion) -> *mut c_void {
    // SAFETY: NULL or live (the caller's promise).
    unsafe { handle(region, "region") }.map_or(std::ptr::null_mut(), |r| r.region.as_ptr().cast())
}

/// The region's length in bytes (the rounded size); 0 for a NULL region.
///
/// # Safety
/// As `pz_region_ptr`.
#[no_mangle]
pub unsafe extern "C" fn pz_region_len(region: *const PzRegion) -> usize {
    // SAFETY: NULL or live (the caller's promise).
    unsafe { handle(region, "region") }.map_or(0, |r| r.region.len())
}

/// Unmaps a region and frees its handle. NULL is `-EINVAL`.
///
/// # Safety
/// This is the last call on `region` (no other call on it runs during or
/// after it; any pointer is checked first), and nothing touches its memory
/// afterwards.
#[no_mangle]
pub unsafe extern "C" fn pz_region_unmap(region: *mut PzRegion) -> c_int {
    // SAFETY: the caller's promise, as documented.
    guard(|| unsafe { free_handle(region, "region") })
}

/// Populates `[ptr, ptr+len)` for writing with `threads` threads (>= 1); the
/// contents are not changed. An unmapped or read-only range is an error.
///
/// # Safety
/// Nothing relies on the range's pages being absent (a `userfaultfd` handler,
/// say): they are populated.
#[no_mangle]
pub unsafe extern "C" fn pz_prefault(ptr: *mut c_void, len: usize, threads: usize) -> c_int {
    guard(|| {
        not_null(ptr, "pointer")?;
        // SAFETY: the kernel validates the range; contents are not changed.
        unsafe { prezero::prefault::prefault_raw(ptr.cast(), len, threads) }.map(drop)
    })
}

/// Populates a region as `n_nodes` parts of about equal size, on its page
/// boundaries: part `i` on NUMA node `nodes[i]`, bound there
/// (`MPOL_PREFERRED`) and populated by `threads / n_nodes` threads (at least
/// one) running on that node's CPUs. `-EINVAL`: a NULL or dead region, NULL
/// `nodes` or `n_nodes == 0`, `threads == 0`, or a node that does not exist,
/// is offline or has no memory.
///
/// # Safety
/// No other thread frees `region` during the call (any pointer is checked
/// first); `nodes` is NULL or readable for `n_nodes` ids.
#[no_mangle]
pub unsafe extern "C" fn pz_prefault_nodes(
    region: *const PzRegion,
    nodes: *const u32,
    n_nodes: usize,
    threads: usize,
) -> c_int {
    guard(|| {
        // SAFETY: handle() checks the region is live; the caller promises
        // nobody frees it meanwhile.
        let r = unsafe { handle(region, "region")? };
        // SAFETY: the caller promises that nodes holds n_nodes ids.
        let nodes = unsafe { node_ids(nodes, n_nodes)? };
        prezero::prefault::prefault_on_nodes(&r.region, nodes, threads).map(drop)
    })
}
