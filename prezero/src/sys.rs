//! Every system call and sysfs read of the library, each with its preconditions.
//!
//! Keeping them in one place makes the crate's contact surface with the kernel
//! small enough to audit, and gives every failure the name of its call.

use std::fs;
use std::io;
use std::path::Path;
use std::ptr::NonNull;

use crate::error::{Error, Result};

/// The base page size (4 KiB on x86_64, 4/16/64 KiB on aarch64).
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if v > 0 {
        v as usize
    } else {
        4096
    }
}

/// Online logical CPUs this process may run on.
pub(crate) fn online_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// A sysfs/procfs file as trimmed text, or `None` if it is missing or unreadable.
pub(crate) fn read_text(path: impl AsRef<Path>) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_owned())
}

/// A sysfs/procfs file holding one unsigned number.
pub(crate) fn read_usize(path: impl AsRef<Path>) -> Option<usize> {
    read_text(path)?.parse().ok()
}

/// `MemAvailable` of `/proc/meminfo` in bytes (0 if unreadable).
pub(crate) fn mem_available() -> usize {
    read_text("/proc/meminfo")
        .and_then(|m| {
            let line = m.lines().find(|l| l.starts_with("MemAvailable:"))?;
            line.split_whitespace().nth(1)?.parse::<usize>().ok()
        })
        .map_or(0, |kib| kib << 10)
}

/// Anonymous private mapping of `len` bytes with extra `flags` (e.g. MAP_HUGETLB).
///
/// pre: `len > 0`; for hugetlb flags, `len` is a multiple of the huge page size.
pub(crate) fn mmap_anon(len: usize, flags: libc::c_int) -> io::Result<NonNull<u8>> {
    // SAFETY: a fresh anonymous mapping with a null hint cannot alias existing memory.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | flags,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    NonNull::new(p.cast()).ok_or_else(|| io::Error::from_raw_os_error(libc::EFAULT))
}

/// Unmaps a range this crate mapped.
///
/// pre: `[ptr, ptr+len)` is a mapping made by `mmap_anon` and nothing borrows it any more.
pub(crate) unsafe fn munmap(ptr: NonNull<u8>, len: usize) -> Result<()> {
    // SAFETY: the caller guarantees the range is ours and unborrowed.
    if unsafe { libc::munmap(ptr.as_ptr().cast(), len) } != 0 {
        return Err(Error::os("munmap", io::Error::last_os_error()));
    }
    Ok(())
}

/// `madvise(2)`. Advice that discards contents (MADV_DONTNEED) makes the range read zero.
///
/// pre: `[ptr, ptr+len)` lies in mappings of this process (the kernel checks and
/// answers ENOMEM otherwise, so a wrong range is an error, not undefined behaviour,
/// for non-destructive advice).
pub(crate) fn madvise(ptr: *mut u8, len: usize, advice: libc::c_int) -> io::Result<()> {
    // SAFETY: the kernel validates the range; the advice values used by this crate
    // either only populate or only hint, except DONTNEED whose callers own the range.
    if unsafe { libc::madvise(ptr.cast(), len, advice) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Writes a sysfs/procfs file (hugetlb reservations).
pub(crate) fn write_text(path: impl AsRef<Path>, text: &str) -> io::Result<()> {
    fs::write(path, text)
}

/// Base pages of `[ptr, ptr+len)` resident in memory (`mincore(2)`).
///
/// pre: `ptr` is page-aligned. An unmapped range is an error (ENOMEM), not a crash.
pub(crate) fn resident_pages(ptr: *mut u8, len: usize) -> Result<usize> {
    let page = page_size();
    let mut vec = vec![0u8; len.div_ceil(page)];
    // SAFETY: `vec` has one byte per page of the range, as mincore requires; the
    // kernel validates the range itself.
    if unsafe { libc::mincore(ptr.cast(), len, vec.as_mut_ptr()) } != 0 {
        return Err(Error::os("mincore", io::Error::last_os_error()));
    }
    Ok(vec.iter().filter(|&&b| b & 1 != 0).count())
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
pub(crate) fn range_is_writable(start: usize, len: usize) -> bool {
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
pub(crate) fn range_is_hugetlb(start: usize, len: usize) -> bool {
    let base = page_size();
    vmas()
        .iter()
        .any(|v| v.start < start + len && start < v.end && v.kernel_page_size > base)
}

/// The calling thread's kernel id.
pub(crate) fn gettid() -> libc::pid_t {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

/// Puts thread `tid` back under the normal policy (e.g. a `SCHED_IDLE` scrubber
/// that must finish promptly on shutdown even when every core is busy).
pub(crate) fn set_sched_normal(tid: libc::pid_t) -> io::Result<()> {
    set_policy(tid, libc::SCHED_OTHER)
}

/// Puts thread `tid` (0: the calling thread) under `SCHED_IDLE`.
pub(crate) fn set_sched_idle_of(tid: libc::pid_t) -> io::Result<()> {
    set_policy(tid, libc::SCHED_IDLE)
}

/// Sets thread `tid`'s scheduling policy (one without a static priority).
fn set_policy(tid: libc::pid_t, policy: libc::c_int) -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid sched_param; the kernel validates the tid.
    if unsafe { libc::sched_setscheduler(tid, policy, &param) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sets thread `tid`'s nice value (0: the calling thread; Linux keeps nice per
/// thread). Lowering it needs `CAP_SYS_NICE`.
pub(crate) fn set_nice_of(tid: libc::pid_t, nice: libc::c_int) -> io::Result<()> {
    let tid = if tid == 0 { gettid() } else { tid };
    // SAFETY: setpriority has no memory-safety preconditions.
    let r = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
