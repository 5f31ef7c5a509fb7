//! x86_64 streaming copies and the store units of the register form.
//!
//! Each copy streams the whole 64-byte lines of the destination and copies the
//! partial lines at either end with ordinary stores (a streamed partial line
//! would cost a read-modify-write in memory). No kernel drains: callers do.

use core::arch::x86_64::*;
use core::ptr;

use super::words::{self, Job, Unit};

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
// Every store and pointer step here is an unsafe operation resting on the
// one range argument of the SAFETY comment below; a block for each would
// repeat it at every store of the hot loop.
#[allow(clippy::multiple_unsafe_ops_per_block)]
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
// Every store and pointer step here is an unsafe operation resting on the
// one range argument of the SAFETY comment below; a block for each would
// repeat it at every store of the hot loop.
#[allow(clippy::multiple_unsafe_ops_per_block)]
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
// Every store and pointer step here is an unsafe operation resting on the
// one range argument of the SAFETY comment below; a block for each would
// repeat it at every store of the hot loop.
#[allow(clippy::multiple_unsafe_ops_per_block)]
pub(super) unsafe fn copy_sse2(dst: *mut u8, src: *const u8, len: usize) {
    let Some((head, n, tail)) = lines(dst, len) else {
        // SAFETY: forwarded from the caller.
        return unsafe { ptr::copy_nonoverlapping(src, dst, len) };
    };
    // SAFETY: as in copy_avx512; 16-byte quarters of an aligned line are aligned.
    unsafe {
        ptr::copy_nonoverlapping(src, dst, head);
        let (mut d, mut s) = (dst.add(head), src.add(head));
        for _ in 0..n {
            for q in 0..4 {
                _mm_stream_si128(d.add(16 * q).cast(), _mm_loadu_si128(s.add(16 * q).cast()));
            }
            d = d.add(64);
            s = s.add(64);
        }
        ptr::copy_nonoverlapping(s, d, tail);
    }
}

/// # Safety
/// The CPU has SSE2; `src` readable, `dst` writable for `len` bytes; no overlap.
#[target_feature(enable = "sse2")]
// Every store and pointer step here is an unsafe operation resting on the
// one range argument of the SAFETY comment below; a block for each would
// repeat it at every store of the hot loop.
#[allow(clippy::multiple_unsafe_ops_per_block)]
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

/// A 64-byte AVX-512 vector.
#[derive(Clone, Copy)]
pub(super) struct Zmm(__m512i);

impl Unit for Zmm {
    const BYTES: usize = 64;
    const PICK: bool = false;
    type Lane = __mmask8;

    #[inline(always)]
    unsafe fn lane(lane: usize) -> __mmask8 {
        1 << lane
    }
    #[inline(always)]
    unsafe fn no_lane() -> __mmask8 {
        0
    }
    #[inline(always)]
    unsafe fn load(p: *const u8) -> Self {
        // SAFETY: the caller's pointer; the engine runs this under avx512f.
        Zmm(unsafe { _mm512_loadu_si512(p.cast()) })
    }
    #[inline(always)]
    unsafe fn clear(self, lane: __mmask8) -> Self {
        // SAFETY: register operations only, under avx512f.
        Zmm(unsafe { _mm512_maskz_mov_epi64(!lane, self.0) })
    }
    #[inline(always)]
    unsafe fn insert(self, lane: __mmask8, word: u64) -> Self {
        // SAFETY: as for load.
        Zmm(unsafe { _mm512_mask_set1_epi64(self.0, lane, word as i64) })
    }
    #[inline(always)]
    unsafe fn or_words(self, lo: u64, hi: u64) -> Self {
        unreachable!("wide units insert ({lo}, {hi})")
    }
    #[inline(always)]
    unsafe fn stream(self, p: *mut u8) {
        // SAFETY: the caller's 64-byte aligned pointer.
        unsafe { _mm512_stream_si512(p.cast(), self.0) }
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut u8) {
        // SAFETY: the caller's pointer.
        unsafe { _mm512_storeu_si512(p.cast(), self.0) }
    }
}

/// A 32-byte AVX2 vector; a lane is selected by an all-ones mask vector.
#[derive(Clone, Copy)]
pub(super) struct Ymm(__m256i);

impl Unit for Ymm {
    const BYTES: usize = 32;
    const PICK: bool = false;
    type Lane = __m256i;

    #[inline(always)]
    // Register operations composed in one expression, each unsafe only for the
    // instruction set, which the engine guarantees for them all alike.
    #[allow(clippy::multiple_unsafe_ops_per_block)]
    unsafe fn lane(lane: usize) -> __m256i {
        // SAFETY: the engine runs this under avx2.
        unsafe {
            _mm256_cmpeq_epi64(
                _mm256_set_epi64x(3, 2, 1, 0),
                _mm256_set1_epi64x(lane as i64),
            )
        }
    }
    #[inline(always)]
    unsafe fn no_lane() -> __m256i {
        // SAFETY: the engine runs this under avx2.
        unsafe { _mm256_setzero_si256() }
    }
    #[inline(always)]
    unsafe fn load(p: *const u8) -> Self {
        // SAFETY: the caller's pointer.
        Ymm(unsafe { _mm256_loadu_si256(p.cast()) })
    }
    #[inline(always)]
    unsafe fn clear(self, lane: __m256i) -> Self {
        // SAFETY: plain AVX2 register operations.
        Ymm(unsafe { _mm256_andnot_si256(lane, self.0) })
    }
    // An and and an or rather than `vpblendvb`, which Zen 3 and 4 issue at
    // one per cycle: with three words in two units the blends alone held the
    // fill to 0.8x of the store bandwidth.
    #[inline(always)]
    // Register operations composed in one expression, each unsafe only for the
    // instruction set, which the engine guarantees for them all alike.
    #[allow(clippy::multiple_unsafe_ops_per_block)]
    unsafe fn insert(self, lane: __m256i, word: u64) -> Self {
        // SAFETY: plain AVX2 register operations.
        Ymm(unsafe {
            _mm256_or_si256(
                self.0,
                _mm256_and_si256(lane, _mm256_set1_epi64x(word as i64)),
            )
        })
    }
    #[inline(always)]
    unsafe fn or_words(self, lo: u64, hi: u64) -> Self {
        unreachable!("wide units insert ({lo}, {hi})")
    }
    #[inline(always)]
    unsafe fn stream(self, p: *mut u8) {
        // SAFETY: the caller's 32-byte aligned pointer.
        unsafe { _mm256_stream_si256(p.cast(), self.0) }
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut u8) {
        // SAFETY: the caller's pointer.
        unsafe { _mm256_storeu_si256(p.cast(), self.0) }
    }
}

/// A 16-byte SSE2 vector; a lane is an all-ones mask (SSE2 has no variable
/// blend).
#[derive(Clone, Copy)]
pub(super) struct Xmm(__m128i);

impl Unit for Xmm {
    const BYTES: usize = 16;
    const PICK: bool = true;
    type Lane = __m128i;

    #[inline(always)]
    unsafe fn lane(lane: usize) -> __m128i {
        if lane == 0 {
            // SAFETY: SSE2 is part of x86_64.
            unsafe { _mm_set_epi64x(0, -1) }
        } else {
            // SAFETY: SSE2 is part of x86_64.
            unsafe { _mm_set_epi64x(-1, 0) }
        }
    }
    #[inline(always)]
    unsafe fn no_lane() -> __m128i {
        // SAFETY: SSE2 is part of x86_64.
        unsafe { _mm_setzero_si128() }
    }
    #[inline(always)]
    unsafe fn load(p: *const u8) -> Self {
        // SAFETY: the caller's pointer.
        Xmm(unsafe { _mm_loadu_si128(p.cast()) })
    }
    #[inline(always)]
    unsafe fn clear(self, lane: __m128i) -> Self {
        // SAFETY: plain SSE2 register operations.
        Xmm(unsafe { _mm_andnot_si128(lane, self.0) })
    }
    #[inline(always)]
    // Register operations composed in one expression, each unsafe only for the
    // instruction set, which the engine guarantees for them all alike.
    #[allow(clippy::multiple_unsafe_ops_per_block)]
    unsafe fn insert(self, lane: __m128i, word: u64) -> Self {
        // SAFETY: plain SSE2 register operations.
        Xmm(unsafe { _mm_or_si128(self.0, _mm_and_si128(lane, _mm_set1_epi64x(word as i64))) })
    }
    #[inline(always)]
    // Register operations composed in one expression, each unsafe only for the
    // instruction set, which the engine guarantees for them all alike.
    #[allow(clippy::multiple_unsafe_ops_per_block)]
    unsafe fn or_words(self, lo: u64, hi: u64) -> Self {
        // SAFETY: register operations only (SSE2 is part of x86_64).
        Xmm(unsafe { _mm_or_si128(self.0, _mm_set_epi64x(hi as i64, lo as i64)) })
    }
    #[inline(always)]
    unsafe fn stream(self, p: *mut u8) {
        // SAFETY: the caller's 16-byte aligned pointer.
        unsafe { _mm_stream_si128(p.cast(), self.0) }
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut u8) {
        // SAFETY: the caller's pointer.
        unsafe { _mm_storeu_si128(p.cast(), self.0) }
    }
}

macro_rules! entries {
    ($($name:ident: $unit:ty, $feature:literal;)*) => {$(
        /// The register form with this unit, compiled for the instruction
        /// set it uses (so its intrinsics inline).
        ///
        /// # Safety
        /// The CPU has that instruction set; otherwise as [`words::fill`].
        #[target_feature(enable = $feature)]
        pub(super) unsafe fn $name<const STREAM: bool, const K: usize>(
            job: &Job<'_, K>,
            produce: &mut impl FnMut(usize, bool) -> [u64; K],
        ) {
            // SAFETY: forwarded from the caller.
            unsafe { words::fill::<$unit, STREAM, K>(job, produce) }
        }
    )*};
}

entries! {
    fill_zmm: Zmm, "avx512f";
    fill_ymm: Ymm, "avx2";
    fill_xmm: Xmm, "sse2";
}
