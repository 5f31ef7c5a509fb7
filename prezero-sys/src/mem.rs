//! Mappings: `mmap`, `munmap`, `madvise`, `mincore`, and this process's
//! mappings as `/proc/self/smaps` lists them.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::ptr::NonNull;

use super::{page_size, read_text};

/// `mmap(2)` of `len` bytes at offset 0 of `fd` (-1 for anonymous memory), at
/// `addr` (null: where the kernel picks).
///
/// # Safety
/// pre: with `MAP_FIXED` in `flags`, `[addr, addr+len)` is the caller's and
/// nothing uses it any more (the new mapping replaces whatever is there).
unsafe fn mmap(
    addr: *mut u8,
    len: usize,
    prot: libc::c_int,
    flags: libc::c_int,
    fd: RawFd,
) -> io::Result<NonNull<u8>> {
    // SAFETY: without MAP_FIXED the kernel picks a free range, which aliases
    // nothing; with it, the caller's obligation above. A bad descriptor or
    // length is an error.
    let p = unsafe { libc::mmap(addr.cast(), len, prot, flags, fd, 0) };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    NonNull::new(p.cast()).ok_or_else(|| io::Error::from_raw_os_error(libc::EFAULT))
}

/// `mmap(2)` where the kernel picks: a fresh range, which aliases nothing.
///
/// pre: no `MAP_FIXED` in `flags` (checked: a fixed mapping replaces what is
/// there, so only [`mmap_shared_fixed`], an `unsafe fn`, asks for one).
fn mmap_fresh(
    len: usize,
    prot: libc::c_int,
    flags: libc::c_int,
    fd: RawFd,
) -> io::Result<NonNull<u8>> {
    assert_eq!(
        flags & libc::MAP_FIXED,
        0,
        "MAP_FIXED needs mmap_shared_fixed"
    );
    // SAFETY: not fixed (checked above).
    unsafe { mmap(std::ptr::null_mut(), len, prot, flags, fd) }
}

/// The flags of private anonymous memory (no file behind it).
const ANON: libc::c_int = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;

/// Anonymous private read-write mapping of `len` bytes with extra `flags`
/// (e.g. MAP_HUGETLB).
///
/// pre: `len > 0`; for hugetlb flags, `len` is a multiple of the huge page
/// size; no `MAP_FIXED` (checked).
pub fn mmap_anon(len: usize, flags: libc::c_int) -> io::Result<NonNull<u8>> {
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    mmap_fresh(len, prot, ANON | flags, -1)
}

/// Anonymous *shared* read-write mapping of `len` bytes: the one memory a
/// forked child and its parent both see (a child's results, flags it reads).
///
/// pre: none.
pub fn mmap_shared_anon(len: usize) -> io::Result<NonNull<u8>> {
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    mmap_fresh(len, prot, libc::MAP_SHARED | libc::MAP_ANONYMOUS, -1)
}

/// Anonymous private mapping of `len` bytes that starts on an `align`
/// boundary, with protection `prot` and extra `flags`: `len + align` bytes are
/// mapped, then both ends trimmed. `len + align` past the address space is
/// ENOMEM.
///
/// pre: none (`len` of 0, or an `align` that is not a power of two and a
/// multiple of the page size, is EINVAL; `MAP_FIXED` is refused).
pub fn mmap_anon_aligned(
    len: usize,
    align: usize,
    prot: libc::c_int,
    flags: libc::c_int,
) -> io::Result<NonNull<u8>> {
    // A trim that is not page-aligned would unmap the page the result is on.
    if len == 0 || !align.is_power_of_two() || !align.is_multiple_of(page_size()) {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let span = len
        .checked_add(align)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))?;
    let raw = mmap_fresh(span, prot, ANON | flags, -1)?;
    let head = (raw.as_ptr() as usize).next_multiple_of(align) - raw.as_ptr() as usize;
    let tail = span - head - len;
    // SAFETY: `head + len <= span`, so start lies in the mapping just made.
    let start = unsafe { raw.add(head) };
    if head > 0 {
        // SAFETY: the mapping's unused head, which nobody else knows of.
        unsafe { munmap(raw, head)? };
    }
    if tail > 0 {
        // SAFETY: `head + len <= span`: inside, or at the end of, the mapping.
        let end = unsafe { start.add(len) };
        // SAFETY: the mapping's unused tail, which nobody else knows of.
        unsafe { munmap(end, tail)? };
    }
    Ok(start)
}

/// Shared read-write mapping of the first `len` bytes of `fd`, where the
/// kernel picks, with extra `flags` (MAP_POPULATE, MAP_NORESERVE). A hugetlb
/// file's pages are reserved here: a shortage is ENOMEM now, not a SIGBUS later.
///
/// pre: no `MAP_FIXED` (checked). The file may shrink under the mapping only if
/// it is not sealed against it; then an access past its end is a SIGBUS.
pub fn mmap_shared(fd: BorrowedFd<'_>, len: usize, flags: libc::c_int) -> io::Result<NonNull<u8>> {
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    mmap_fresh(len, prot, libc::MAP_SHARED | flags, fd.as_raw_fd())
}

/// A read-only shared mapping of `len` bytes of `fd`, with extra `flags`:
/// to look at a file's pages without being able to change them.
///
/// pre: none (a mapping nothing else knows of).
pub fn mmap_shared_ro(
    fd: BorrowedFd<'_>,
    len: usize,
    flags: libc::c_int,
) -> io::Result<NonNull<u8>> {
    mmap_fresh(
        len,
        libc::PROT_READ,
        libc::MAP_SHARED | flags,
        fd.as_raw_fd(),
    )
}

/// As [`mmap_shared`], but exactly at `addr` (`MAP_FIXED`), replacing what is
/// there: how several files are mapped back to back into one reservation.
///
/// # Safety
/// pre: `[addr, addr+len)` is the caller's (a part of its own reservation) and
/// nothing uses it.
pub unsafe fn mmap_shared_fixed(
    addr: NonNull<u8>,
    fd: BorrowedFd<'_>,
    len: usize,
    flags: libc::c_int,
) -> io::Result<NonNull<u8>> {
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    // SAFETY: the caller's obligation (pre).
    unsafe {
        mmap(
            addr.as_ptr(),
            len,
            prot,
            libc::MAP_SHARED | libc::MAP_FIXED | flags,
            fd.as_raw_fd(),
        )
    }
}

/// Unmaps a range.
///
/// # Safety
/// pre: `[ptr, ptr+len)` lies in mappings this crate made (all of one, or
/// part), and nothing borrows it any more.
pub unsafe fn munmap(ptr: NonNull<u8>, len: usize) -> io::Result<()> {
    // SAFETY: the caller guarantees the range is ours and unborrowed.
    if unsafe { libc::munmap(ptr.as_ptr().cast(), len) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub use crate::raw::Advice;

/// `madvise(2)` with advice that keeps contents: [`raw::madvise`](crate::raw::madvise)
/// on a pointer.
///
/// pre: none: the kernel checks the range (ENOMEM for one not mapped), and
/// no such advice changes a byte, so a wrong range is an error, never
/// undefined behaviour.
pub fn madvise(ptr: *mut u8, len: usize, advice: Advice) -> io::Result<()> {
    Ok(crate::raw::madvise(ptr as usize, len, advice)?)
}

/// `madvise(MADV_FREE)` of zeroed memory held for later: the kernel may take
/// its pages back under pressure, without swap, and a page it took reads
/// zero again; one it left keeps its zeroes, and a write to it needs no
/// fault. EINVAL for memory it does not apply to (hugetlb, shared). As
/// [`raw::free_lazily`](crate::raw::free_lazily), in steps of 2 MiB.
///
/// # Safety
/// pre: `[ptr, ptr+len)` lies in mappings this crate made, reads zero, and
/// nothing writes it while this runs (a write after it keeps the page).
pub unsafe fn free_lazily(ptr: *mut u8, len: usize) -> io::Result<()> {
    // SAFETY: the caller's zeroed range, unwritten meanwhile (pre).
    Ok(unsafe { crate::raw::free_lazily(ptr as usize, len, false) }?)
}

/// `madvise(MADV_DONTNEED)`: the range's pages go back to the kernel and
/// read zero on the next touch.
///
/// # Safety
/// pre: `[ptr, ptr+len)` lies in private anonymous mappings this crate made,
/// and nothing else reads or writes it while this runs (its contents vanish).
pub unsafe fn discard(ptr: *mut u8, len: usize) -> io::Result<()> {
    // SAFETY: the caller owns the range and nothing else uses it (pre).
    Ok(unsafe { crate::raw::discard(ptr as usize, len) }?)
}

/// Base pages of `[ptr, ptr+len)` resident in memory (`mincore(2)`).
///
/// pre: `ptr` is page-aligned. An unmapped range is an error (ENOMEM), not a crash.
pub fn resident_pages(ptr: *mut u8, len: usize) -> io::Result<usize> {
    let page = page_size();
    let mut vec = vec![0u8; len.div_ceil(page)];
    // SAFETY: `vec` has one byte per page of the range, as mincore requires; the
    // kernel validates the range itself.
    if unsafe { libc::mincore(ptr.cast(), len, vec.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(vec.iter().filter(|&&b| b & 1 != 0).count())
}

/// Ok if every page of `[start, start+len)` is mapped (ENOMEM if not),
/// without reading `/proc/self/maps`: `mincore` in steps of a stack buffer.
///
/// pre: none (the kernel validates the range).
pub fn check_mapped(start: usize, len: usize) -> io::Result<()> {
    let page = page_size();
    let start_page = start & !(page - 1);
    let end = start
        .checked_add(len)
        .ok_or(io::Error::from_raw_os_error(libc::EINVAL))?;
    let mut vec = [0u8; 4096];
    let mut at = start_page;
    while at < end {
        let step = (end - at).min(vec.len() * page);
        // SAFETY: `vec` has one byte for each of the at most 4096 pages of the
        // step, as mincore requires; the kernel validates the range itself.
        if unsafe { libc::mincore(at as *mut libc::c_void, step, vec.as_mut_ptr()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        at += step;
    }
    Ok(())
}

/// One mapping of this process, from /proc/self/smaps.
struct Vma {
    start: usize,
    end: usize,
    writable: bool,
    kernel_page_size: usize,
}

fn vmas() -> Vec<Vma> {
    let Some(text) = read_text("/proc/self/smaps") else {
        return Vec::new();
    };
    let mut out: Vec<Vma> = Vec::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let Some(first) = words.next() else { continue };
        if let Some((a, b)) = first.split_once('-') {
            if let (Ok(start), Ok(end)) =
                (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
            {
                let writable = words
                    .next()
                    .is_some_and(|p| p.as_bytes().get(1) == Some(&b'w'));
                out.push(Vma {
                    start,
                    end,
                    writable,
                    kernel_page_size: 0,
                });
                continue;
            }
        }
        if first == "KernelPageSize:" {
            if let (Some(v), Some(n)) = (
                out.last_mut(),
                words.next().and_then(|n| n.parse::<usize>().ok()),
            ) {
                v.kernel_page_size = n * 1024;
            }
        }
    }
    out
}

/// Whether every byte of `[start, start+len)` lies in writable mappings.
///
/// pre: none.
pub fn range_is_writable(start: usize, len: usize) -> bool {
    let end = start + len;
    let mut at = start;
    for v in vmas() {
        if v.start <= at && at < v.end {
            if !v.writable {
                return false;
            }
            at = v.end;
            if at >= end {
                return true;
            }
        }
    }
    len == 0
}

/// Whether any part of `[start, start+len)` is a hugetlb mapping.
///
/// pre: none.
pub fn range_is_hugetlb(start: usize, len: usize) -> bool {
    let base = page_size();
    vmas()
        .iter()
        .any(|v| v.start < start + len && start < v.end && v.kernel_page_size > base)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Public since the service moved to a crate of its own: an alignment
    /// that is not a page multiple trimmed the page the result is on.
    #[test]
    fn an_aligned_mapping_refuses_what_it_cannot_trim() {
        let rw = libc::PROT_READ | libc::PROT_WRITE;
        let page = page_size();
        for (len, align) in [(0, page), (page, 0), (page, 3 * page), (page, page / 2)] {
            let e = mmap_anon_aligned(len, align, rw, 0).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{len} {align}");
        }
        let p = mmap_anon_aligned(page, 4 * page, rw, 0).unwrap();
        assert_eq!(p.as_ptr() as usize % (4 * page), 0);
        // SAFETY: the mapping just made, which nothing else refers to.
        unsafe { munmap(p, page) }.unwrap();
    }
}
