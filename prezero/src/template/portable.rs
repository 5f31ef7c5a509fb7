//! The portable copy: ordinary stores, for every target.

/// # Safety
/// `src` is readable and `dst` writable for `len` bytes, and they do not overlap.
pub(super) unsafe fn copy(dst: *mut u8, src: *const u8, len: usize) {
    // SAFETY: forwarded from the caller.
    unsafe { core::ptr::copy_nonoverlapping(src, dst, len) }
}

/// An 8-byte word in a general register: the register form's unit on any
/// target, and on x86_64 `movnti`'s (for records whose size is a multiple of
/// 8 but not of 16, or destinations only 8-aligned). A lane is an all-ones mask.
#[derive(Clone, Copy)]
pub(super) struct Word(u64);

impl super::words::Unit for Word {
    const BYTES: usize = 8;
    const PICK: bool = true;
    type Lane = u64;

    #[inline(always)]
    unsafe fn lane(_lane: usize) -> u64 {
        !0
    }
    #[inline(always)]
    unsafe fn no_lane() -> u64 {
        0
    }
    #[inline(always)]
    unsafe fn load(p: *const u8) -> Self {
        // SAFETY: the caller's pointer, readable for 8 bytes.
        Word(unsafe { p.cast::<u64>().read_unaligned() })
    }
    #[inline(always)]
    unsafe fn clear(self, lane: u64) -> Self {
        Word(self.0 & !lane)
    }
    #[inline(always)]
    unsafe fn insert(self, lane: u64, word: u64) -> Self {
        Word(self.0 | (word & lane))
    }
    #[inline(always)]
    unsafe fn or_words(self, lo: u64, hi: u64) -> Self {
        let _ = hi;
        Word(self.0 | lo)
    }
    #[inline(always)]
    unsafe fn stream(self, p: *mut u8) {
        // SAFETY: the caller's 8-byte aligned pointer; SSE2 (`movnti`) is
        // part of x86_64. Elsewhere no streaming kernel uses this unit.
        #[cfg(target_arch = "x86_64")]
        unsafe {
            core::arch::x86_64::_mm_stream_si64(p.cast(), self.0 as i64)
        }
        // SAFETY: as for store.
        #[cfg(not(target_arch = "x86_64"))]
        unsafe {
            self.store(p)
        }
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut u8) {
        // SAFETY: the caller's pointer, writable for 8 bytes.
        unsafe { p.cast::<u64>().write_unaligned(self.0) }
    }
}
