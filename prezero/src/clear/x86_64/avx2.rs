//! Temporal AVX2 stores: as the AVX-512 kernel, for CPUs without AVX-512.

use core::arch::x86_64::{_mm256_setzero_si256, _mm256_store_si256, _mm256_storeu_si256};

use super::{clear_below_64, inner_lines};

/// # Safety
/// The CPU has AVX2, and `ptr` is valid for writes of `len` bytes.
#[target_feature(enable = "avx2")]
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
    let z = _mm256_setzero_si256();
    let (mut p, mut lines) = inner_lines(ptr, len);
    // SAFETY: len >= 64, so the four unaligned edge stores stay in range and cover
    // the partial lines; the aligned lines lie inside the range.
    unsafe {
        _mm256_storeu_si256(ptr.cast(), z);
        _mm256_storeu_si256(ptr.add(32).cast(), z);
        _mm256_storeu_si256(ptr.add(len - 64).cast(), z);
        _mm256_storeu_si256(ptr.add(len - 32).cast(), z);
        while lines >= 2 {
            _mm256_store_si256(p.cast(), z);
            _mm256_store_si256(p.add(32).cast(), z);
            _mm256_store_si256(p.add(64).cast(), z);
            _mm256_store_si256(p.add(96).cast(), z);
            p = p.add(128);
            lines -= 2;
        }
        if lines == 1 {
            _mm256_store_si256(p.cast(), z);
            _mm256_store_si256(p.add(32).cast(), z);
        }
    }
}
