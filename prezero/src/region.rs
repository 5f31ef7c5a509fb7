//! Anonymous memory regions of a chosen page kind, unmapped on drop.

use std::fmt;
use std::ptr::NonNull;
use std::str::FromStr;

use crate::error::{Error, Result};
use crate::mm::{self, HugetlbPool};
use crate::sys;

/// The pages backing a [`Region`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PageKind {
    /// Base pages (4 KiB on x86_64).
    Base,
    /// Base-page mapping, PMD-aligned, advised `MADV_HUGEPAGE`: the kernel backs
    /// it with transparent huge pages if THP is `always` or `madvise` and it can.
    Thp,
    /// hugetlb 2 MiB pages (`MAP_HUGETLB | MAP_HUGE_2MB`), from the reserved pool.
    Huge2M,
    /// hugetlb 1 GiB pages (`MAP_HUGETLB | MAP_HUGE_1GB`), from the reserved pool.
    Huge1G,
}

impl PageKind {
    /// Every kind.
    pub const ALL: [PageKind; 4] = [
        PageKind::Base,
        PageKind::Thp,
        PageKind::Huge2M,
        PageKind::Huge1G,
    ];

    /// The granule a region of this kind is rounded up to.
    pub fn page_size(self) -> usize {
        match self {
            PageKind::Base => crate::cpu::cpu().page_size,
            PageKind::Thp => thp_size(),
            PageKind::Huge2M => 2 << 20,
            PageKind::Huge1G => 1 << 30,
        }
    }

    /// "4KB", "thp", "2MB" or "1GB" (perf's `-p` spelling).
    pub fn name(self) -> &'static str {
        match self {
            PageKind::Base => "4KB",
            PageKind::Thp => "thp",
            PageKind::Huge2M => "2MB",
            PageKind::Huge1G => "1GB",
        }
    }

    /// Whether the pages come from the hugetlb pool.
    pub fn is_hugetlb(self) -> bool {
        matches!(self, PageKind::Huge2M | PageKind::Huge1G)
    }

    fn map_flags(self) -> libc::c_int {
        match self {
            PageKind::Base | PageKind::Thp => 0,
            PageKind::Huge2M => libc::MAP_HUGETLB | libc::MAP_HUGE_2MB,
            PageKind::Huge1G => libc::MAP_HUGETLB | libc::MAP_HUGE_1GB,
        }
    }

    /// The `memfd_create` flags of a file of this kind's pages: hugetlb and
    /// its size, or none (a plain memfd has base pages).
    pub fn memfd_flags(self) -> libc::c_uint {
        match self {
            PageKind::Base | PageKind::Thp => 0,
            PageKind::Huge2M => libc::MFD_HUGETLB | libc::MFD_HUGE_2MB,
            PageKind::Huge1G => libc::MFD_HUGETLB | libc::MFD_HUGE_1GB,
        }
    }
}

impl fmt::Display for PageKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for PageKind {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "4kb" | "4k" | "base" => Ok(PageKind::Base),
            "thp" => Ok(PageKind::Thp),
            "2mb" | "2m" => Ok(PageKind::Huge2M),
            "1gb" | "1g" => Ok(PageKind::Huge1G),
            _ => Err(Error::invalid(format!(
                "unknown page kind '{s}' (expected 4KB, thp, 2MB or 1GB)"
            ))),
        }
    }
}

fn thp_size() -> usize {
    match mm::memory().thp.pmd_size {
        0 => 2 << 20,
        n => n,
    }
}

/// An anonymous private mapping. The size is rounded up to the kind's page size
/// (THP regions: to the PMD size, and PMD-aligned, so every part can be a huge
/// page). Fresh memory reads zero. Unmapped when dropped.
pub struct Region {
    ptr: NonNull<u8>,
    len: usize,
    kind: PageKind,
}

// SAFETY: a Region owns its mapping exclusively, like a Box<[u8]>; access goes
// through &self/&mut self.
unsafe impl Send for Region {}
// SAFETY: shared references only give shared (read) access to the bytes.
unsafe impl Sync for Region {}

impl Region {
    /// Maps `size` bytes (rounded up, see the type) of `kind` pages.
    ///
    /// Errors: `size == 0` or overflowing; `HugetlbShortage` (with the command that
    /// reserves enough) when the hugetlb pool has too few free pages; `OutOfMemory`.
    pub fn new(size: usize, kind: PageKind) -> Result<Region> {
        if size == 0 {
            return Err(Error::invalid("region size must be at least 1 byte"));
        }
        let page = kind.page_size();
        let len = size
            .checked_next_multiple_of(page)
            .ok_or_else(|| Error::invalid(format!("region size {size} overflows")))?;
        if kind.is_hugetlb() {
            check_hugetlb(page, len / page)?;
        }
        let ptr = match kind {
            PageKind::Thp => map_aligned(len, page)?,
            _ => sys::mmap_anon(len, kind.map_flags()).map_err(|e| map_error(e, len, kind))?,
        };
        let region = Region { ptr, len, kind };
        if kind == PageKind::Thp {
            // EINVAL means a kernel without THP: the region still works with base pages.
            let _ = sys::madvise(ptr.as_ptr(), len, sys::Advice::HugePage);
        }
        Ok(region)
    }

    /// Length in bytes (the rounded size).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true: regions have at least one page.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The page kind.
    pub fn kind(&self) -> PageKind {
        self.kind
    }

    /// First byte.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The whole region.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the mapping is readable for `len` bytes while `self` lives.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The whole region, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: the mapping is writable for `len` bytes and `&mut self` is unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

#[cfg(test)]
impl Region {
    /// `len` bytes of base pages, mapped without asking [`cpu`](crate::cpu::cpu)
    /// the page size: for tests under Miri, which cannot run CPUID.
    pub(crate) fn base_unrounded(len: usize) -> Result<Region> {
        let ptr = sys::mmap_anon(len, 0).map_err(|e| Error::os("mmap", e))?;
        Ok(Region {
            ptr,
            len,
            kind: PageKind::Base,
        })
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: we mapped exactly this range, and `&mut self` means no borrow remains.
        let _ = unsafe { sys::munmap(self.ptr, self.len) };
    }
}

impl fmt::Debug for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Region")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .field("kind", &self.kind)
            .finish()
    }
}

/// Maps `len` bytes starting on an `align` boundary.
fn map_aligned(len: usize, align: usize) -> Result<NonNull<u8>> {
    if len.checked_add(align).is_none() {
        return Err(Error::invalid(format!("region size {len} overflows")));
    }
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    sys::mmap_anon_aligned(len, align, prot, 0).map_err(|e| map_error(e, len, PageKind::Thp))
}

fn map_error(e: std::io::Error, len: usize, kind: PageKind) -> Error {
    if e.raw_os_error() == Some(libc::ENOMEM) {
        if kind.is_hugetlb() {
            return hugetlb_shortage(kind, len);
        }
        return Error::OutOfMemory { size: len };
    }
    Error::os("mmap", e)
}

/// A mapping of `len` bytes of hugetlb `kind` pages was refused (ENOMEM): how
/// many pages it needed, how many are free, and the command that reserves enough.
pub fn hugetlb_shortage(kind: PageKind, len: usize) -> Error {
    let page = kind.page_size();
    let free = mm::hugetlb_pool(page).map_or(0, |p| p.free);
    shortage(page, len / page, free)
}

fn check_hugetlb(page: usize, needed: usize) -> Result<()> {
    match mm::hugetlb_pool(page) {
        None => Err(Error::Unsupported {
            kernel: "hugetlb",
            needs: "a kernel with hugetlb pages of this size",
        }),
        Some(p) if p.free < needed => Err(shortage(page, needed, p.free)),
        Some(_) => Ok(()),
    }
}

fn shortage(page_size: usize, needed: usize, free: usize) -> Error {
    let total = mm::hugetlb_pool(page_size).map_or(0, |p| p.total);
    Error::HugetlbShortage {
        page_size,
        needed,
        free,
        reserve_cmd: format!(
            "echo {} > {}",
            total + needed.saturating_sub(free),
            HugetlbPool::nr_path(page_size)
        ),
    }
}
