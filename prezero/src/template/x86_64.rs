//! x86_64 streaming copies and the register-resident template fill.
//!
//! Each copy streams the whole 64-byte lines of the destination and copies the
//! partial lines at either end with ordinary stores (a streamed partial line
//! would cost a read-modify-write in memory). No kernel drains: callers do.

use core::arch::x86_64::{
    __m512i, __mmask8, _mm256_loadu_si256, _mm256_stream_si256, _mm512_loadu_si512,
    _mm512_mask_set1_epi64, _mm512_stream_si512, _mm_stream_si64,
};
use core::ptr;

/// Splits a copy into an ordinary head up to the destination's next 64-byte
/// boundary, whole lines, and an ordinary tail. Returns None when there is no
/// whole line (copy it all ordinarily).
#[inline(always)]
fn lines(dst: *mut u8, len: usize) -> Option<(usize, usize, usize)> {
    let head = (dst as usize).wrapping_neg() & 63;
    let rest = len.checked_sub(head)?;
    let n = rest / 64;
    (n > 0).then_some((head, n, rest % 64))
}

/// # Safety
/// The CPU has AVX-512F; `src` readable, `dst` writable for `len` bytes; no overlap.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn copy_avx512(dst: *mut u8, src: *const u8, len: usize) {
    let Some((head, n, tail)) = lines(dst, len) else {
        // SAFETY: forwarded from the caller.
        return unsafe { ptr::copy_nonoverlapping(src, dst, len) };
    };
    // SAFETY: head + 64*n + tail == len; d is 64-byte aligned after the head.
    unsafe {
        ptr::copy_nonoverlapping(src, dst, head);
        let (mut d, mut s) = (dst.add(head), src.add(head));
        for _ in 0..n {
            _mm512_stream_si512(d.cast(), _mm512_loadu_si512(s.cast()));
            d = d.add(64);
            s = s.add(64);
        }
        ptr::copy_nonoverlapping(s, d, tail);
    }
}

/// # Safety
/// The CPU has AVX2; `src` readable, `dst` writable for `len` bytes; no overlap.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn copy_avx2(dst: *mut u8, src: *const u8, len: usize) {
    let Some((head, n, tail)) = lines(dst, len) else {
        // SAFETY: forwarded from the caller.
        return unsafe { ptr::copy_nonoverlapping(src, dst, len) };
    };
    // SAFETY: as in copy_avx512; 32-byte halves of an aligned line are aligned.
    unsafe {
        ptr::copy_nonoverlapping(src, dst, head);
        let (mut d, mut s) = (dst.add(head), src.add(head));
        for _ in 0..n {
            _mm256_stream_si256(d.cast(), _mm256_loadu_si256(s.cast()));
            _mm256_stream_si256(d.add(32).cast(), _mm256_loadu_si256(s.add(32).cast()));
            d = d.add(64);
            s = s.add(64);
        }
        ptr::copy_nonoverlapping(s, d, tail);
    }
}

/// # Safety
/// The CPU has SSE2; `src` readable, `dst` writable for `len` bytes; no overlap.
#[target_feature(enable = "sse2")]
pub(super) unsafe fn copy_movnti(dst: *mut u8, src: *const u8, len: usize) {
    let Some((head, n, tail)) = lines(dst, len) else {
        // SAFETY: forwarded from the caller.
        return unsafe { ptr::copy_nonoverlapping(src, dst, len) };
    };
    // SAFETY: as in copy_avx512; 8-byte words of an aligned line are aligned.
    unsafe {
        ptr::copy_nonoverlapping(src, dst, head);
        let (mut d, mut s) = (dst.add(head).cast::<i64>(), src.add(head).cast::<i64>());
        for _ in 0..n {
            for w in 0..8 {
                _mm_stream_si64(d.add(w), s.add(w).read_unaligned());
            }
            d = d.add(8);
            s = s.add(8);
        }
        ptr::copy_nonoverlapping(s.cast::<u8>(), d.cast::<u8>(), tail);
    }
}

/// Streams `n` records of `size` bytes: record `i` is `head` if
/// `i % group_len == 0`, else `tail`, with the words of `produce(i, is_head)`
/// inserted at `offsets` in the vector registers. The templates are only ever
/// loaded (from L1) and never stored to, so no load waits on a store.
///
/// # Safety
/// The CPU has AVX-512F; `dst` is 64-byte aligned and writable for `n * size`
/// bytes; `size` is a non-zero multiple of 64; `head` and `tail` are readable for
/// `size` bytes; every offset is a multiple of 8 and `offset + 8 <= size`.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn fill_words_avx512<const K: usize>(
    dst: *mut u8,
    n: usize,
    size: usize,
    head: *const u8,
    tail: *const u8,
    group_len: usize,
    offsets: &[usize; K],
    produce: &mut impl FnMut(usize, bool) -> [u64; K],
) {
    let lines = size / 64;
    // Where each word goes, computed once: its line and its lane mask.
    let line_of: [usize; K] = core::array::from_fn(|k| offsets[k] / 64);
    let lane: [__mmask8; K] = core::array::from_fn(|k| 1 << ((offsets[k] % 64) / 8));
    let mut d = dst;
    // A countdown instead of `i % group_len`: no division per record.
    let mut left_in_group = 0;
    if lines == 1 {
        // One-line records (struct page): both templates live in registers for
        // the whole fill; a record is two or three register operations and a store.
        // SAFETY: head and tail are readable for 64 bytes.
        let (th, tt) = unsafe {
            (
                _mm512_loadu_si512(head.cast()),
                _mm512_loadu_si512(tail.cast()),
            )
        };
        for i in 0..n {
            let is_head = left_in_group == 0;
            left_in_group = if is_head {
                group_len - 1
            } else {
                left_in_group - 1
            };
            // Produced before the store of record i, so a panic leaves it untouched.
            let vals = produce(i, is_head);
            let mut v = if is_head { th } else { tt };
            for k in 0..K {
                v = _mm512_mask_set1_epi64(v, lane[k], vals[k] as i64);
            }
            // SAFETY: record i is the 64 aligned bytes at d, inside dst.
            unsafe {
                _mm512_stream_si512(d.cast(), v);
                d = d.add(64);
            }
        }
        return;
    }
    for i in 0..n {
        let is_head = left_in_group == 0;
        left_in_group = if is_head {
            group_len - 1
        } else {
            left_in_group - 1
        };
        // Produced before any store of record i, so a panic leaves it untouched.
        let vals = produce(i, is_head);
        let t = if is_head { head } else { tail };
        for l in 0..lines {
            // SAFETY: line l of the template and of record i are in range.
            unsafe {
                let mut v: __m512i = _mm512_loadu_si512(t.add(l * 64).cast());
                for k in 0..K {
                    if line_of[k] == l {
                        v = _mm512_mask_set1_epi64(v, lane[k], vals[k] as i64);
                    }
                }
                _mm512_stream_si512(d.add(l * 64).cast(), v);
            }
        }
        // SAFETY: stays within (or one past) the n * size bytes of dst.
        d = unsafe { d.add(size) };
    }
}
