//! aarch64 streaming copy and the store units of the register form: NEON
//! register pairs stored with `stnp` (a non-temporal hint) or `stp`.

use core::arch::aarch64::{uint64x2_t, vandq_u64, vbicq_u64, vdupq_n_u64, vld1q_u64, vorrq_u64};
use core::arch::asm;
use core::ptr;

use super::words::{self, Job, Unit};

/// # Safety
/// `src` readable, `dst` writable for `len` bytes; no overlap.
// Every store and pointer step here is an unsafe operation resting on the
// one range argument of the SAFETY comment below; a block for each would
// repeat it at every store of the hot loop.
#[allow(clippy::multiple_unsafe_ops_per_block)]
pub(super) unsafe fn copy_stnp(dst: *mut u8, src: *const u8, len: usize) {
    let head = (dst as usize).wrapping_neg() & 63;
    if len < head + 64 {
        // SAFETY: forwarded from the caller.
        return unsafe { ptr::copy_nonoverlapping(src, dst, len) };
    }
    let n = (len - head) / 64;
    let tail = (len - head) % 64;
    // SAFETY: head + 64*n + tail == len; each line is two 32-byte pairs.
    unsafe {
        ptr::copy_nonoverlapping(src, dst, head);
        let (mut d, mut s) = (dst.add(head), src.add(head));
        for _ in 0..n {
            QPair::load(s).stream(d);
            QPair::load(s.add(32)).stream(d.add(32));
            d = d.add(64);
            s = s.add(64);
        }
        ptr::copy_nonoverlapping(s, d, tail);
    }
}

/// 32 bytes in two NEON registers; a lane is an all-ones mask per half.
#[derive(Clone, Copy)]
pub(super) struct QPair(uint64x2_t, uint64x2_t);

impl Unit for QPair {
    const BYTES: usize = 32;
    const PICK: bool = false;
    type Lane = (uint64x2_t, uint64x2_t);

    #[inline(always)]
    unsafe fn lane(lane: usize) -> Self::Lane {
        let m: [u64; 4] = core::array::from_fn(|i| if i == lane { !0 } else { 0 });
        // SAFETY: NEON is part of aarch64; m's first 16 bytes.
        let lo = unsafe { vld1q_u64(m.as_ptr()) };
        // SAFETY: NEON; m's last 16 bytes.
        let hi = unsafe { vld1q_u64(m[2..].as_ptr()) };
        (lo, hi)
    }
    #[inline(always)]
    // Register operations composed in one expression, each unsafe only for the
    // instruction set, which the engine guarantees for them all alike.
    #[allow(clippy::multiple_unsafe_ops_per_block)]
    unsafe fn no_lane() -> Self::Lane {
        // SAFETY: NEON is part of aarch64.
        unsafe { (vdupq_n_u64(0), vdupq_n_u64(0)) }
    }
    #[inline(always)]
    unsafe fn load(p: *const u8) -> Self {
        // SAFETY: the caller's pointer, readable for 32 bytes: its first 16.
        let lo = unsafe { vld1q_u64(p.cast()) };
        // SAFETY: inside those 32 bytes.
        let q = unsafe { p.add(16) };
        // SAFETY: their last 16.
        let hi = unsafe { vld1q_u64(q.cast()) };
        QPair(lo, hi)
    }
    #[inline(always)]
    // Register operations composed in one expression, each unsafe only for the
    // instruction set, which the engine guarantees for them all alike.
    #[allow(clippy::multiple_unsafe_ops_per_block)]
    unsafe fn clear(self, lane: Self::Lane) -> Self {
        // SAFETY: register operations only.
        unsafe { QPair(vbicq_u64(self.0, lane.0), vbicq_u64(self.1, lane.1)) }
    }
    #[inline(always)]
    // Register operations composed in one expression, each unsafe only for the
    // instruction set, which the engine guarantees for them all alike.
    #[allow(clippy::multiple_unsafe_ops_per_block)]
    unsafe fn insert(self, lane: Self::Lane, word: u64) -> Self {
        // SAFETY: register operations only.
        unsafe {
            let w = vdupq_n_u64(word);
            QPair(
                vorrq_u64(self.0, vandq_u64(w, lane.0)),
                vorrq_u64(self.1, vandq_u64(w, lane.1)),
            )
        }
    }
    #[inline(always)]
    unsafe fn or_words(self, lo: u64, hi: u64) -> Self {
        unreachable!("wide units insert ({lo}, {hi})")
    }
    #[inline(always)]
    unsafe fn stream(self, p: *mut u8) {
        // SAFETY: the caller's pointer, writable for 32 bytes.
        unsafe {
            asm!("stnp {a:q}, {b:q}, [{p}]", a = in(vreg) self.0, b = in(vreg) self.1,
                 p = in(reg) p, options(nostack, preserves_flags))
        }
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut u8) {
        // SAFETY: the caller's pointer, writable for 32 bytes.
        unsafe {
            asm!("stp {a:q}, {b:q}, [{p}]", a = in(vreg) self.0, b = in(vreg) self.1,
                 p = in(reg) p, options(nostack, preserves_flags))
        }
    }
}

/// 16 bytes in two general registers (`stnp x, x`), for records whose size is
/// a multiple of 16 but not of 32. A lane is an all-ones mask per word.
#[derive(Clone, Copy)]
pub(super) struct XPair(u64, u64);

impl Unit for XPair {
    const BYTES: usize = 16;
    const PICK: bool = true;
    type Lane = (u64, u64);

    #[inline(always)]
    unsafe fn lane(lane: usize) -> (u64, u64) {
        if lane == 0 {
            (!0, 0)
        } else {
            (0, !0)
        }
    }
    #[inline(always)]
    unsafe fn no_lane() -> (u64, u64) {
        (0, 0)
    }
    #[inline(always)]
    unsafe fn load(p: *const u8) -> Self {
        // SAFETY: the caller's pointer, readable for 16 bytes: its first 8.
        let lo = unsafe { p.cast::<u64>().read_unaligned() };
        // SAFETY: inside those 16 bytes.
        let q = unsafe { p.add(8) };
        // SAFETY: their last 8.
        let hi = unsafe { q.cast::<u64>().read_unaligned() };
        XPair(lo, hi)
    }
    #[inline(always)]
    unsafe fn clear(self, lane: (u64, u64)) -> Self {
        XPair(self.0 & !lane.0, self.1 & !lane.1)
    }
    #[inline(always)]
    unsafe fn insert(self, lane: (u64, u64), word: u64) -> Self {
        XPair(self.0 | (word & lane.0), self.1 | (word & lane.1))
    }
    #[inline(always)]
    unsafe fn or_words(self, lo: u64, hi: u64) -> Self {
        XPair(self.0 | lo, self.1 | hi)
    }
    #[inline(always)]
    unsafe fn stream(self, p: *mut u8) {
        // SAFETY: the caller's pointer, writable for 16 bytes.
        unsafe {
            asm!("stnp {a}, {b}, [{p}]", a = in(reg) self.0, b = in(reg) self.1,
                 p = in(reg) p, options(nostack, preserves_flags))
        }
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut u8) {
        // SAFETY: the caller's pointer, writable for 16 bytes.
        unsafe {
            asm!("stp {a}, {b}, [{p}]", a = in(reg) self.0, b = in(reg) self.1,
                 p = in(reg) p, options(nostack, preserves_flags))
        }
    }
}

/// The register-form entry points (NEON is part of aarch64: no feature to enable).
///
/// # Safety
/// As [`words::fill`].
pub(super) unsafe fn fill_qpair<const STREAM: bool, const K: usize>(
    job: &Job<'_, K>,
    produce: &mut impl FnMut(usize, bool) -> [u64; K],
) {
    // SAFETY: forwarded from the caller.
    unsafe { words::fill::<QPair, STREAM, K>(job, produce) }
}

/// See [`fill_qpair`].
///
/// # Safety
/// As [`words::fill`].
pub(super) unsafe fn fill_xpair<const STREAM: bool, const K: usize>(
    job: &Job<'_, K>,
    produce: &mut impl FnMut(usize, bool) -> [u64; K],
) {
    // SAFETY: forwarded from the caller.
    unsafe { words::fill::<XPair, STREAM, K>(job, produce) }
}
