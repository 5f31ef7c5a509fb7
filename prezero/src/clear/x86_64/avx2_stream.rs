//! AVX2 non-temporal 32-byte stores, two per line, for CPUs without AVX-512.

use core::arch::x86_64::{_mm256_setzero_si256, _mm256_stream_si256, _mm_sfence};

use super::{clear_below_64, clear_edges_64, inner_lines};

/// Ends with `sfence`: the zeros are globally visible before any later store.
///
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
    // SAFETY: len >= 64 so the edge stores are in range; `p` is 64-byte aligned and
    // the `lines` lines after it lie inside [ptr, ptr+len).
    unsafe {
        clear_edges_64(ptr, len);
        while lines >= 2 {
            _mm256_stream_si256(p.cast(), z);
            _mm256_stream_si256(p.add(32).cast(), z);
            _mm256_stream_si256(p.add(64).cast(), z);
            _mm256_stream_si256(p.add(96).cast(), z);
            p = p.add(128);
            lines -= 2;
        }
        if lines == 1 {
            _mm256_stream_si256(p.cast(), z);
            _mm256_stream_si256(p.add(32).cast(), z);
        }
    }
    _mm_sfence();
}
