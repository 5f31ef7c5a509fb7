//! Temporal AVX-512 stores: the fastest clear of small buffers that are in cache
//! and about to be used (no start-up cost, full-width stores, lines stay cached).

use core::arch::x86_64::{_mm512_setzero_si512, _mm512_store_si512, _mm512_storeu_si512};

use super::{clear_below_64, inner_lines};

/// # Safety
/// The CPU has AVX-512F, and `ptr` is valid for writes of `len` bytes.
#[target_feature(enable = "avx512f")]
// Every store and pointer step here is an unsafe operation resting on the
// one range argument of the SAFETY comment below; a block for each would
// repeat it at every store of the hot loop.
#[allow(clippy::multiple_unsafe_ops_per_block)]
pub(crate) unsafe fn clear(ptr: *mut u8, len: usize) {
    if len < 64 {
        // SAFETY: len < 64 and the caller vouches for the range.
        unsafe { clear_below_64(ptr, len) };
        return;
    }
    let z = _mm512_setzero_si512();
    let (mut p, mut lines) = inner_lines(ptr, len);
    // SAFETY: len >= 64, so the unaligned head and tail stores cover
    // [ptr, ptr+64) and [ptr+len-64, ptr+len); the aligned lines lie between them.
    unsafe {
        _mm512_storeu_si512(ptr.cast(), z);
        _mm512_storeu_si512(ptr.add(len - 64).cast(), z);
        while lines >= 4 {
            _mm512_store_si512(p.cast(), z);
            _mm512_store_si512(p.add(64).cast(), z);
            _mm512_store_si512(p.add(128).cast(), z);
            _mm512_store_si512(p.add(192).cast(), z);
            p = p.add(256);
            lines -= 4;
        }
        while lines > 0 {
            _mm512_store_si512(p.cast(), z);
            p = p.add(64);
            lines -= 1;
        }
    }
}
