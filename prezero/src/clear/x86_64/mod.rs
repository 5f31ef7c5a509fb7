//! x86_64 kernels: one file per instruction family, each exposing
//! `unsafe fn clear(ptr, len)`, and the head/tail stores they share. Which of
//! them this CPU may run is decided in `kernel.rs`, from `cpu().features`.

pub(crate) mod avx2;
pub(crate) mod avx2_stream;
pub(crate) mod avx512;
pub(crate) mod avx512_stream;
pub(crate) mod clzero;
pub(crate) mod movnti;
pub(crate) mod rep_stosb;

/// Clears fewer than 64 bytes with at most four overlapping unaligned stores,
/// which is faster than any loop or string instruction at these sizes.
///
/// # Safety
/// `len < 64` and `ptr` is valid for writes of `len` bytes.
#[inline(always)]
// Every store and pointer step here is an unsafe operation resting on the
// one range argument of the SAFETY comment below; a block for each would
// repeat it at every store of the hot loop.
#[allow(clippy::multiple_unsafe_ops_per_block)]
pub(crate) unsafe fn clear_below_64(ptr: *mut u8, len: usize) {
    debug_assert!(len < 64);
    // SAFETY: in every arm each store lies within [ptr, ptr+len), which the caller
    // gave as writable: each arm's offsets are bounded by its length condition.
    // Unaligned stores need no alignment.
    unsafe {
        if len >= 32 {
            ptr.cast::<u128>().write_unaligned(0);
            ptr.add(16).cast::<u128>().write_unaligned(0);
            ptr.add(len - 32).cast::<u128>().write_unaligned(0);
            ptr.add(len - 16).cast::<u128>().write_unaligned(0);
        } else if len >= 16 {
            ptr.cast::<u128>().write_unaligned(0);
            ptr.add(len - 16).cast::<u128>().write_unaligned(0);
        } else if len >= 8 {
            ptr.cast::<u64>().write_unaligned(0);
            ptr.add(len - 8).cast::<u64>().write_unaligned(0);
        } else if len >= 4 {
            ptr.cast::<u32>().write_unaligned(0);
            ptr.add(len - 4).cast::<u32>().write_unaligned(0);
        } else if len >= 2 {
            ptr.cast::<u16>().write_unaligned(0);
            ptr.add(len - 2).cast::<u16>().write_unaligned(0);
        } else if len == 1 {
            ptr.write(0);
        }
    }
}

/// Clears the first and the last 64 bytes with ordinary stores. Streaming kernels
/// use it for the partial lines around their aligned body, so that they never
/// stream a partial cache line (which would cost a read-modify-write in memory).
///
/// # Safety
/// `len >= 64` and `ptr` is valid for writes of `len` bytes.
#[inline(always)]
// Every store and pointer step here is an unsafe operation resting on the
// one range argument of the SAFETY comment below; a block for each would
// repeat it at every store of the hot loop.
#[allow(clippy::multiple_unsafe_ops_per_block)]
pub(crate) unsafe fn clear_edges_64(ptr: *mut u8, len: usize) {
    debug_assert!(len >= 64);
    // SAFETY: len >= 64, so [ptr, ptr+64) and [ptr+len-64, ptr+len) are in range.
    unsafe {
        clear_below_64(ptr, 48);
        ptr.add(48).cast::<u128>().write_unaligned(0);
        let tail = ptr.add(len - 64);
        clear_below_64(tail, 48);
        tail.add(48).cast::<u128>().write_unaligned(0);
    }
}

/// The whole 64-byte lines inside `[ptr, ptr+len)`: (first line, number of lines).
#[inline(always)]
pub(crate) fn inner_lines(ptr: *mut u8, len: usize) -> (*mut u8, usize) {
    let start = (ptr as usize).next_multiple_of(64);
    let end = (ptr as usize + len) & !63;
    let lines = end.saturating_sub(start) / 64;
    (ptr.wrapping_add(start - ptr as usize), lines)
}
