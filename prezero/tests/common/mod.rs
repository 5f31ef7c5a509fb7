//! Test helpers: memory fenced by PROT_NONE pages, so a write one byte past
//! either end faults instead of passing unnoticed; and probes for what an
//! emulator (qemu-user) does not do, so only those tests skip there.
#![allow(dead_code)]

pub const DIRTY: u8 = 0xa5;

pub struct Guarded {
    base: *mut u8,
    total: usize,
    page: usize,
    len: usize,
}

impl Guarded {
    /// `len` usable bytes (rounded up to whole pages) between two PROT_NONE pages.
    pub fn new(len: usize) -> Guarded {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let len = len.next_multiple_of(page).max(page);
        let total = len + 2 * page;
        // SAFETY: fresh anonymous mapping; then the first and last page are made inaccessible.
        let base = unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                total,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED, "mmap failed");
            let p = p.cast::<u8>();
            assert_eq!(libc::mprotect(p.cast(), page, libc::PROT_NONE), 0);
            assert_eq!(
                libc::mprotect(p.add(page + len).cast(), page, libc::PROT_NONE),
                0
            );
            p
        };
        Guarded {
            base,
            total,
            page,
            len,
        }
    }

    /// The accessible bytes; the bytes just before and after them fault.
    pub fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: [base+page, base+page+len) is mapped read-write and owned by self.
        unsafe { std::slice::from_raw_parts_mut(self.base.add(self.page), self.len) }
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        // SAFETY: we mapped exactly this range.
        unsafe { libc::munmap(self.base.cast(), self.total) };
    }
}

/// Asserts `buf[range]` is zero and everything else in `buf` still holds DIRTY.
pub fn assert_cleared_exactly(buf: &[u8], start: usize, len: usize, what: &str) {
    let range = &buf[start..start + len];
    if let Some(i) = prezero::first_nonzero(range) {
        panic!("{what}: byte {i} of {len} (start {start}) left non-zero");
    }
    if let Some(i) = buf[..start].iter().rposition(|&b| b != DIRTY) {
        panic!(
            "{what}: wrote {} bytes before the range (len {len}, start {start})",
            start - i
        );
    }
    if let Some(i) = buf[start + len..].iter().position(|&b| b != DIRTY) {
        panic!(
            "{what}: wrote byte {} past the end (len {len}, start {start})",
            i + 1
        );
    }
}

/// LazyFree of this process, in bytes.
pub fn lazy_free() -> u64 {
    let text = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("LazyFree:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Whether memory marked `MADV_FREE` shows in LazyFree here (qemu-user
/// ignores the advice), tried on a mapping of the probe's own.
pub fn lazy_free_shows_madv_free() -> bool {
    const LEN: usize = 4 << 20;
    let before = lazy_free();
    let mut g = Guarded::new(LEN);
    let bytes = g.bytes();
    bytes.fill(1);
    // SAFETY: the guarded mapping's own bytes, which nothing reads after.
    unsafe { libc::madvise(bytes.as_mut_ptr().cast(), LEN, libc::MADV_FREE) };
    lazy_free() >= before + (LEN as u64) / 2
}
