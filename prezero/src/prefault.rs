//! Populating memory before it is used (what `qemu -mem-prealloc` and JVM
//! `-XX:+AlwaysPreTouch` do by hand): the kernel allocates and zeroes every page
//! now, on as many threads as asked, instead of one fault at a time later.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Barrier;

use crate::error::{Error, Result};
use crate::region::Region;
use crate::sys;

/// Populates every page of `region` for writing, split over `threads` threads on
/// page boundaries of the region's page kind. Returns the bytes populated.
///
/// Uses `MADV_POPULATE_WRITE` (Linux 5.14+). On older kernels, base-page and THP
/// regions are populated by writing one byte per page (an atomic add of zero, so
/// contents never change); hugetlb regions are never touched that way, since a
/// touch of an unbacked hugetlb page raises SIGBUS: there the error is returned.
pub fn prefault(region: &Region, threads: usize) -> Result<usize> {
    populate(
        region.as_ptr(),
        region.len(),
        region.kind().page_size(),
        region.kind().is_hugetlb(),
        threads,
    )
}

/// Populates `[ptr, ptr+len)` for writing with `threads` threads. The range may
/// span several mappings; it is split on 2 MiB boundaries when large enough
/// (so THP and 2 MiB hugetlb pages are never shared between threads), else on
/// base pages.
///
/// Errors: a range not entirely mapped (ENOMEM), not writable or otherwise refused
/// (EFAULT/EINVAL/EPERM), `threads == 0`, or memory exhausted. With the touch fallback
/// the range is first checked against `/proc/self/maps`, so an unmapped or read-only
/// range is an error there too, never a crash.
///
/// # Safety
/// No other thread may be relying on the pages being *absent* (e.g. `userfaultfd`
/// handlers); the contents of the range are not changed.
pub unsafe fn prefault_raw(ptr: *mut u8, len: usize, threads: usize) -> Result<usize> {
    let base = crate::cpu::cpu().page_size;
    let start = ptr as usize & !(base - 1);
    let len = (ptr as usize + len).next_multiple_of(base) - start;
    // SAFETY: the caller's contract, for the range rounded out to base pages.
    unsafe {
        prefault_as(
            start as *mut u8,
            len,
            threads,
            sys::range_is_hugetlb(start, len),
        )
    }
}

/// [`prefault_raw`] for a caller that knows whether the range is hugetlb, and
/// so spares the read of `/proc/self/maps` (a process with thousands of
/// mappings pays ~0.5 ms for it).
///
/// # Safety
/// As [`prefault_raw`]; `ptr` is base-page aligned and `hugetlb` is true
/// exactly when the range is hugetlb-backed.
pub(crate) unsafe fn prefault_as(
    ptr: *mut u8,
    len: usize,
    threads: usize,
    hugetlb: bool,
) -> Result<usize> {
    let granule = if len >= threads.max(1) * (2 << 20) {
        2 << 20
    } else {
        crate::cpu::cpu().page_size
    };
    populate(ptr, len, granule, hugetlb, threads)
}

fn populate(
    ptr: *mut u8,
    len: usize,
    granule: usize,
    hugetlb: bool,
    threads: usize,
) -> Result<usize> {
    if threads == 0 {
        return Err(Error::invalid("prefault: threads must be at least 1"));
    }
    if len == 0 {
        return Ok(0);
    }
    let parts = split(ptr as usize, len, granule, threads);
    let run = |&(p, l): &(usize, usize)| populate_one(p as *mut u8, l, hugetlb);
    let results: Vec<Result<()>> = if parts.len() == 1 {
        vec![run(&parts[0])]
    } else {
        // A starting thread maps its signal stack, which needs mmap_lock for
        // writing; a populate in progress holds it for reading until done. So no
        // thread populates before every thread has started, or they run in turn.
        let start = Barrier::new(parts.len());
        std::thread::scope(|s| {
            let handles: Vec<_> = parts[1..]
                .iter()
                .map(|part| {
                    let start = &start;
                    s.spawn(move || {
                        start.wait();
                        run(part)
                    })
                })
                .collect();
            start.wait();
            let mut r = vec![run(&parts[0])];
            r.extend(
                handles
                    .into_iter()
                    .map(|h| h.join().expect("prefault thread panicked")),
            );
            r
        })
    };
    results.into_iter().collect::<Result<Vec<()>>>()?;
    Ok(len)
}

/// Splits `[start, start+len)` into at most `threads` parts whose inner boundaries
/// are multiples of `granule`.
fn split(start: usize, len: usize, granule: usize, threads: usize) -> Vec<(usize, usize)> {
    let end = start + len;
    let first = start & !(granule - 1);
    let per = (end - first).div_ceil(granule).div_ceil(threads) * granule;
    (0..threads)
        .map(|i| {
            let lo = (first + i * per).clamp(start, end);
            let hi = (first + (i + 1) * per).clamp(start, end);
            (lo, hi - lo)
        })
        .filter(|&(_, l)| l > 0)
        .collect()
}

fn populate_one(ptr: *mut u8, len: usize, hugetlb: bool) -> Result<()> {
    match sys::madvise(ptr, len, libc::MADV_POPULATE_WRITE) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) && !hugetlb => {
            // Pre-5.14 kernels do not know the advice: touch instead, after making
            // sure every byte of the range is mapped writable (else we would fault).
            if !sys::range_is_writable(ptr as usize, len) {
                return Err(Error::os("madvise(MADV_POPULATE_WRITE)", e));
            }
            // SAFETY: the range was just checked to be mapped read-write.
            unsafe { touch_pages(ptr, len) };
            Ok(())
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOMEM) => Err(Error::os(
            "madvise(MADV_POPULATE_WRITE) (range not mapped, or out of memory)",
            e,
        )),
        Err(e) => Err(Error::os("madvise(MADV_POPULATE_WRITE)", e)),
    }
}

/// Write-faults every base page without changing its contents.
///
/// # Safety
/// `[ptr, ptr+len)` is mapped read-write, and not hugetlb (an unbacked hugetlb
/// page would SIGBUS).
pub(crate) unsafe fn touch_pages(ptr: *mut u8, len: usize) {
    let page = crate::cpu::cpu().page_size;
    let mut p = ptr as usize;
    while p < ptr as usize + len {
        // SAFETY: p is inside the writable range, and u8 has no alignment needs.
        let byte = unsafe { AtomicU8::from_ptr(p as *mut u8) };
        // A successful compare-exchange of a value with itself is a write (so the
        // page is faulted in writable) that cannot lose a concurrent store. (An
        // atomic add of zero would not do: the compiler turns it into a load.)
        let mut v = byte.load(Ordering::Relaxed);
        while let Err(now) = byte.compare_exchange_weak(v, v, Ordering::Relaxed, Ordering::Relaxed)
        {
            v = now;
        }
        p = (p & !(page - 1)) + page;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_covers_the_range_on_granule_boundaries() {
        for (start, len, g, t) in [
            (4096, 10 * 4096, 4096, 3),
            (4096 * 3, 4096, 4096, 4),
            (0, (2 << 20) * 5 + 4096, 2 << 20, 2),
            (123 * 4096, 7 * 4096, 4096, 8),
        ] {
            let parts = split(start, len, g, t);
            assert!(parts.len() <= t);
            let mut at = start;
            for &(p, l) in &parts {
                assert_eq!(p, at);
                assert!(l > 0);
                at += l;
                if at != start + len {
                    assert_eq!(at % g, 0);
                }
            }
            assert_eq!(at, start + len);
        }
    }

    #[test]
    fn touch_fallback_populates_without_changing_contents() {
        let mut r = Region::new(64 * 4096, crate::PageKind::Base).unwrap();
        r.as_mut_slice()[4096 * 3 + 5] = 42;
        // SAFETY: a Region of base pages is mapped read-write.
        unsafe { touch_pages(r.as_ptr(), r.len()) };
        assert_eq!(sys::resident_pages(r.as_ptr(), r.len()).unwrap(), 64);
        assert_eq!(r.as_slice()[4096 * 3 + 5], 42);
        assert_eq!(r.as_slice().iter().filter(|&&b| b != 0).count(), 1);
    }
}
