//! Populating memory before it is used (what `qemu -mem-prealloc` and JVM
//! `-XX:+AlwaysPreTouch` do by hand): the kernel allocates and zeroes every page
//! now, on as many threads as asked, instead of one fault at a time later.

use std::io;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Barrier, OnceLock};

use crate::error::{Error, Result};
use crate::numa::{self, NodePart, Topology};
use crate::region::Region;
use crate::sys;

/// Populates every page of `region` for writing, split over `threads` threads on
/// page boundaries of the region's page kind. Returns the bytes populated.
///
/// Uses `MADV_POPULATE_WRITE` (Linux 5.14+). On older kernels, and where the
/// advice is accepted but does nothing (qemu-user, some sandboxes), base-page and
/// THP regions are populated by writing one byte per page (a compare-exchange of
/// the byte with itself, so contents never change); hugetlb regions are never
/// touched that way, since a touch of an unbacked hugetlb page raises SIGBUS:
/// there the error is returned.
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
/// (EFAULT/EINVAL/EPERM), one running past the end of the address space,
/// `threads == 0`, or memory exhausted. With the touch fallback
/// the range is first checked against `/proc/self/maps`, so an unmapped or read-only
/// range is an error there too, never a crash.
///
/// # Safety
/// No other thread may be relying on the pages being *absent* (e.g. `userfaultfd`
/// handlers); the contents of the range are not changed.
pub unsafe fn prefault_raw(ptr: *mut u8, len: usize, threads: usize) -> Result<usize> {
    let base = crate::cpu::cpu().page_size;
    let start = ptr as usize & !(base - 1);
    let end = (ptr as usize)
        .checked_add(len)
        .and_then(|e| e.checked_next_multiple_of(base))
        .ok_or_else(|| {
            Error::invalid("prefault: the range runs past the end of the address space")
        })?;
    let len = end - start;
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
    let granule = if len >= threads.max(1).saturating_mul(2 << 20) {
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
    let pieces: Vec<Piece> = split(ptr as usize, len, granule, threads)
        .into_iter()
        .map(|(at, len)| Piece { at, len, cpus: &[] })
        .collect();
    populate_pieces(&pieces, hugetlb)?;
    Ok(len)
}

/// Populates `region` as `nodes.len()` parts of about equal size, on
/// boundaries of its pages (a THP or hugetlb page is never shared by two
/// parts): part `i` is bound to node `nodes[i]` (`MPOL_PREFERRED`: that node,
/// another only when it is short, as local allocation falls back) and
/// populated by `threads / nodes.len()` threads (at least one) running on
/// that node's CPUs, so its pages land there and are zeroed by CPUs near it.
/// A part's policy stays on the region (pages given back and touched again
/// return to its node). A region too small for every node has fewer parts.
/// Returns the parts; [`crate::numa::placement`] says where their pages are.
///
/// Errors: as [`prefault`]; no nodes; a node that does not exist, is offline
/// or has no memory.
pub fn prefault_on_nodes(region: &Region, nodes: &[u32], threads: usize) -> Result<Vec<NodePart>> {
    if nodes.is_empty() {
        return Err(Error::invalid("prefault_on_nodes: no nodes given"));
    }
    if threads == 0 {
        return Err(Error::invalid("prefault: threads must be at least 1"));
    }
    let topology = Topology::read();
    for &n in nodes {
        topology.memory_node(n)?;
    }
    let base = region.as_ptr() as usize;
    // The region starts on a boundary of its pages, so every part does.
    let parts = node_parts(base, region.len(), region.kind().page_size(), nodes);
    let per_part = (threads / parts.len()).max(1);
    let mut pieces = Vec::new();
    let mut cpus_of = Vec::with_capacity(parts.len());
    for part in &parts {
        let at = base + part.offset;
        numa::bind(at as *mut u8, part.len, part.node, false)?;
        cpus_of.push(topology.usable_cpus(part.node));
    }
    for (part, cpus) in parts.iter().zip(&cpus_of) {
        // A node without CPUs (memory only), or none this thread may use (a
        // cpuset): placed by the policy alone.
        pieces.extend(
            split(
                base + part.offset,
                part.len,
                region.kind().page_size(),
                per_part,
            )
            .into_iter()
            .map(|(at, len)| Piece { at, len, cpus }),
        );
    }
    populate_pieces(&pieces, region.kind().is_hugetlb())?;
    Ok(parts)
}

/// `[start, start+len)` as one part per node, inner boundaries on multiples
/// of `granule`; fewer parts when there are fewer granules than nodes.
pub(crate) fn node_parts(start: usize, len: usize, granule: usize, nodes: &[u32]) -> Vec<NodePart> {
    split(start, len, granule, nodes.len())
        .into_iter()
        .zip(nodes)
        .map(|((at, len), &node)| NodePart {
            offset: at - start,
            len,
            node,
        })
        .collect()
}

/// [`prefault_raw`] from threads that run on `cpus` only (all of them when
/// empty), with `hugetlb` saying whether the range is a hugetlb mapping
/// (populated then with `MADV_POPULATE_WRITE` only, never by touching): the
/// service's worker fills a node's segment from that node.
///
/// # Safety
/// As [`prefault_raw`]; `ptr` is base-page aligned and `hugetlb` is true
/// exactly when the range is hugetlb-backed (a touch of an unbacked hugetlb
/// page raises SIGBUS).
pub unsafe fn prefault_from(
    ptr: *mut u8,
    len: usize,
    threads: usize,
    hugetlb: bool,
    cpus: &[usize],
) -> Result<usize> {
    if cpus.is_empty() {
        // SAFETY: the caller's contract.
        return unsafe { prefault_as(ptr, len, threads, hugetlb) };
    }
    if threads == 0 {
        return Err(Error::invalid("prefault: threads must be at least 1"));
    }
    if len == 0 {
        // Nothing to split: no piece, and no thread to run one.
        return Ok(0);
    }
    let granule = if len >= threads.saturating_mul(2 << 20) {
        2 << 20
    } else {
        crate::cpu::cpu().page_size
    };
    let pieces: Vec<Piece> = split(ptr as usize, len, granule, threads)
        .into_iter()
        .map(|(at, len)| Piece { at, len, cpus })
        .collect();
    populate_pieces(&pieces, hugetlb)?;
    Ok(len)
}

/// A range one thread populates, and the CPUs it runs on (any when empty).
struct Piece<'a> {
    at: usize,
    len: usize,
    cpus: &'a [usize],
}

/// Populates every piece, one thread each, all started before any populates.
fn populate_pieces(pieces: &[Piece<'_>], hugetlb: bool) -> Result<()> {
    let honoured = populate_write_honoured();
    let run = |piece: &Piece<'_>| -> Result<()> {
        // Refused (a cpuset that changed meanwhile), the piece is populated
        // from wherever: the mapping's policy still places its pages.
        if !piece.cpus.is_empty() {
            let _ = sys::set_thread_affinity(piece.cpus);
        }
        populate_one(piece.at as *mut u8, piece.len, hugetlb, honoured)
    };
    // The caller's own thread takes the first piece, unless pieces must run
    // on given CPUs: the caller's affinity is not ours to change.
    let mine = usize::from(pieces.iter().all(|p| p.cpus.is_empty()));
    let results: Vec<Result<()>> = if pieces.len() == mine {
        vec![run(&pieces[0])]
    } else {
        // A starting thread maps its signal stack, which needs mmap_lock for
        // writing; a populate in progress holds it for reading until done. So no
        // thread populates before every thread has started, or they run in turn.
        let start = Barrier::new(pieces.len() - mine + 1);
        std::thread::scope(|s| {
            let handles: Vec<_> = pieces[mine..]
                .iter()
                .map(|piece| {
                    let start = &start;
                    s.spawn(move || {
                        start.wait();
                        run(piece)
                    })
                })
                .collect();
            start.wait();
            let mut r: Vec<Result<()>> = pieces[..mine].iter().map(run).collect();
            r.extend(
                handles
                    .into_iter()
                    .map(|h| h.join().expect("prefault thread panicked")),
            );
            r
        })
    };
    results.into_iter().collect::<Result<Vec<()>>>()?;
    Ok(())
}

/// Splits `[start, start+len)` into at most `threads` parts whose inner boundaries
/// are multiples of `granule`.
pub(crate) fn split(
    start: usize,
    len: usize,
    granule: usize,
    threads: usize,
) -> Vec<(usize, usize)> {
    let end = start + len;
    let first = start & !(granule - 1);
    // No more parts than granules: a thread count from C (SIZE_MAX) must not
    // become a loop of that many turns.
    let threads = threads.min((end - first).div_ceil(granule)).max(1);
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

/// Whether a success of `MADV_POPULATE_WRITE` means the pages are there.
/// qemu-user answers 0 to advice it does not emulate and populates nothing, so
/// one fresh page is advised and looked up with `mincore`, once per process. A
/// refusal (a pre-5.14 kernel's EINVAL) is not this case: every call sees it.
fn populate_write_honoured() -> bool {
    static HONOURED: OnceLock<bool> = OnceLock::new();
    *HONOURED.get_or_init(|| {
        let page = crate::cpu::cpu().page_size;
        // Without a page to probe, trust the advice; its own errors still show.
        let Ok(p) = sys::mmap_anon(page, 0) else {
            return true;
        };
        let ignored = sys::madvise(p.as_ptr(), page, sys::Advice::PopulateWrite).is_ok()
            && sys::resident_pages(p.as_ptr(), page).is_ok_and(|n| n == 0);
        // SAFETY: the page was mapped just above and nothing borrows it.
        let _ = unsafe { sys::munmap(p, page) };
        !ignored
    })
}

fn populate_one(ptr: *mut u8, len: usize, hugetlb: bool, honoured: bool) -> Result<()> {
    // Hugetlb always asks the kernel: touching is never an option there, and an
    // emulator that ignores the advice cannot map hugetlb pages at all, so a
    // probe misled by memory pressure must not make hugetlb prefault fail.
    if honoured || hugetlb {
        match sys::madvise(ptr, len, sys::Advice::PopulateWrite) {
            Ok(()) => return Ok(()),
            // A pre-5.14 kernel does not know the advice: touch instead, below.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) && !hugetlb => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOMEM) => {
                return Err(Error::os(
                    "madvise(MADV_POPULATE_WRITE) (range not mapped, or out of memory)",
                    e,
                ))
            }
            Err(e) => return Err(Error::os("madvise(MADV_POPULATE_WRITE)", e)),
        }
    }
    // The advice is unknown (pre-5.14) or accepted and ignored (qemu-user):
    // touch, never hugetlb, and only a range mapped writable (else we would fault).
    if !sys::range_is_writable(ptr as usize, len) {
        return Err(Error::os(
            "prefault: range not mapped writable (MADV_POPULATE_WRITE is unknown or ignored here)",
            io::Error::from_raw_os_error(libc::ENOMEM),
        ));
    }
    // SAFETY: the range was just checked to be mapped read-write, and it is not
    // hugetlb (that returned above).
    unsafe { touch_pages(ptr, len) };
    Ok(())
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

    /// Public since the service moved to a crate of its own: an empty range
    /// on given CPUs split into no piece, and a thread count that went below
    /// zero panicked.
    #[test]
    fn an_empty_range_on_given_cpus_is_no_work() {
        let mut r = Region::new(4096, crate::PageKind::Base).unwrap();
        // SAFETY: the region's own mapping, base pages (not hugetlb).
        let n = unsafe { prefault_from(r.as_mut_slice().as_mut_ptr(), 0, 2, false, &[0]) };
        assert_eq!(n.unwrap(), 0);
    }

    #[test]
    fn ignored_advice_falls_back_to_touching_except_on_hugetlb() {
        let mut r = Region::new(16 * 4096, crate::PageKind::Base).unwrap();
        r.as_mut_slice()[4096 * 2 + 1] = 9;
        populate_one(r.as_ptr(), r.len(), false, false).unwrap();
        assert_eq!(sys::resident_pages(r.as_ptr(), r.len()).unwrap(), 16);
        assert_eq!(r.as_slice()[4096 * 2 + 1], 9);
        // hugetlb is never touched (SIGBUS): it always asks the kernel, which
        // here (these are base pages) populates them.
        populate_one(r.as_ptr(), r.len(), true, false).unwrap();
        // A range that is not mapped writable is refused, not touched.
        // SAFETY: r's mapping is ours and nothing borrows it here; from here on
        // it is read-only, and only populate_one (which must refuse) looks at it.
        let rc = unsafe { libc::mprotect(r.as_ptr().cast(), r.len(), libc::PROT_READ) };
        assert_eq!(rc, 0);
        let e = populate_one(r.as_ptr(), r.len(), false, false).unwrap_err();
        assert_eq!(e.errno(), libc::ENOMEM, "{e}");
        assert!(populate_one(0x1000 as *mut u8, 4096, false, false).is_err());
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
