//! AVX-512 non-temporal 64-byte stores: a whole line per store, written around
//! the caches (no read-for-ownership, no eviction of the caller's working set).

use core::arch::x86_64::{_mm512_setzero_si512, _mm512_stream_si512, _mm_sfence};

use super::{clear_below_64, clear_edges_64, inner_lines};

/// Ends with `sfence`: the zeros are globally visible before any later store.
///
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
    // SAFETY: len >= 64 so the edge stores are in range; `p` is 64-byte aligned and
    // the `lines` lines after it lie inside [ptr, ptr+len).
    unsafe {
        clear_edges_64(ptr, len);
        while lines >= 4 {
            _mm512_stream_si512(p.cast(), z);
            _mm512_stream_si512(p.add(64).cast(), z);
            _mm512_stream_si512(p.add(128).cast(), z);
            _mm512_stream_si512(p.add(192).cast(), z);
            p = p.add(256);
            lines -= 4;
        }
        while lines > 0 {
            _mm512_stream_si512(p.cast(), z);
            p = p.add(64);
            lines -= 1;
        }
    }
    _mm_sfence();
}
