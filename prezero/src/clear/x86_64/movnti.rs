//! SSE2 `movnti` 8-byte non-temporal stores: the streaming store every x86_64 CPU
//! has (the MOVNTI of Linux's ZONE_DEVICE memmap initialisation), eight per line so each line is written whole.

use core::arch::x86_64::{_mm_sfence, _mm_stream_si64};

use super::{clear_below_64, clear_edges_64, inner_lines};

/// Ends with `sfence`: the zeros are globally visible before any later store.
///
/// # Safety
/// The CPU has SSE2, and `ptr` is valid for writes of `len` bytes.
#[target_feature(enable = "sse2")]
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
    let (p, lines) = inner_lines(ptr, len);
    let mut q = p.cast::<i64>();
    // SAFETY: len >= 64 so the edge stores are in range; `q` is 64-byte aligned and
    // the `lines` lines after it lie inside [ptr, ptr+len).
    unsafe {
        clear_edges_64(ptr, len);
        for _ in 0..lines {
            _mm_stream_si64(q, 0);
            _mm_stream_si64(q.add(1), 0);
            _mm_stream_si64(q.add(2), 0);
            _mm_stream_si64(q.add(3), 0);
            _mm_stream_si64(q.add(4), 0);
            _mm_stream_si64(q.add(5), 0);
            _mm_stream_si64(q.add(6), 0);
            _mm_stream_si64(q.add(7), 0);
            q = q.add(8);
        }
    }
    _mm_sfence();
}
