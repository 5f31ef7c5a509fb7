//! Template initialisation of large record arrays with streaming stores (seed 004).
//!
//! Build one record through your slow path, then let prezero copy it into every
//! element with non-temporal stores, refreshing the per-record fields first, and
//! drain once at the end. The reviewers of seed 004 asked for exactly this: a
//! generic streaming-copy primitive with a plain fallback, not open-coded stores.
//!
//! Two forms:
//! - [`template_fill`] / [`template_fill_grouped`]: a closure updates a working
//!   copy of the template before each record is streamed. General, but the
//!   streamed load of a just-updated record waits on its stores (store
//!   forwarding), which costs about 3x on 64-byte records.
//! - [`template_fill_words`] / [`template_fill_words_grouped`]: the varying
//!   fields are declared up front as `u64` word offsets and produced per index;
//!   the fixed part stays in registers and the words are inserted there
//!   (`words.rs`, over AVX-512, AVX2, SSE2, 8-byte words, NEON pairs), and
//!   every line is written whole, in order, so the fill runs at the speed of
//!   the streaming stores themselves.
//!
//! # Streaming or temporal
//! The free functions stream fills of at least [`stream_from`] bytes and store
//! smaller ones through the caches, with the kernels `prezero calibrate`
//! measured (the profile's `"template"` section) or the built-in choice
//! ([`TemplateProfile::builtin`]). A [`Streamer`] names one kernel instead.
//!
//! # Ordering
//! Functions without `_nodrain` end with [`drain`]: the records are globally
//! visible and ordered before any later store. Streaming stores are weakly
//! ordered until drained, so callers batching `_nodrain` copies must call
//! [`drain`] before publishing the data (e.g. before a release store).
//!
//! # Records
//! A record type implements [`Record`] (an `unsafe` promise: no padding, every
//! bit pattern valid), since its bytes are read as integers and vectors and
//! `template_fill_words` writes arbitrary `u64`s into it. For the widest
//! streaming stores, align the array to 64 bytes: a streaming unit must be
//! aligned to its size, so an array at 16 mod 64 streams 16 bytes at a time.

use std::mem::{size_of, size_of_val};

use crate::error::{Error, Result};

#[cfg(target_arch = "aarch64")]
mod aarch64;
mod choice;
mod portable;
mod words;

use choice::choice;
pub use choice::{stream_from, TemplateProfile};
#[cfg(target_arch = "x86_64")]
mod x86_64;

/// A template kernel: how records are stored. Streaming kernels bypass the
/// caches (and need a [`drain`]); temporal ones store through them, which is
/// faster while the destination fits in cache and leaves it there. Each has a
/// copy with the contract `unsafe fn(dst: *mut u8, src: *const u8, len: usize)`
/// (no overlap, any alignment and length, no drain) and a register form for
/// [`template_fill_words`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CopyKernel {
    /// AVX-512 non-temporal 64-byte stores (x86_64).
    Avx512Stream,
    /// AVX2 non-temporal 32-byte stores (x86_64).
    Avx2Stream,
    /// SSE2 `movntdq` non-temporal 16-byte stores (x86_64).
    Sse2Stream,
    /// SSE2 `movnti` 8-byte non-temporal stores (x86_64).
    Movnti,
    /// NEON `stnp` non-temporal register pairs (aarch64).
    NeonStream,
    /// AVX-512 64-byte ordinary stores (x86_64).
    Avx512,
    /// AVX2 32-byte ordinary stores (x86_64).
    Avx2,
    /// SSE2 16-byte ordinary stores (x86_64).
    Sse2,
    /// NEON `stp` register pairs (aarch64).
    Neon,
    /// Ordinary stores of 8-byte words and `ptr::copy_nonoverlapping`, everywhere.
    Portable,
}

impl CopyKernel {
    /// Every template kernel: the streaming ones widest first, then the
    /// temporal ones widest first.
    pub const ALL: [CopyKernel; 10] = [
        CopyKernel::Avx512Stream,
        CopyKernel::Avx2Stream,
        CopyKernel::Sse2Stream,
        CopyKernel::Movnti,
        CopyKernel::NeonStream,
        CopyKernel::Avx512,
        CopyKernel::Avx2,
        CopyKernel::Sse2,
        CopyKernel::Neon,
        CopyKernel::Portable,
    ];

    /// The name `calibrate`, profiles and the benchmarks use.
    pub const fn name(self) -> &'static str {
        match self {
            CopyKernel::Avx512Stream => "avx512-nt",
            CopyKernel::Avx2Stream => "avx2-nt",
            CopyKernel::Sse2Stream => "sse2-nt",
            CopyKernel::Movnti => "movnti",
            CopyKernel::NeonStream => "neon-nt",
            CopyKernel::Avx512 => "avx512",
            CopyKernel::Avx2 => "avx2",
            CopyKernel::Sse2 => "sse2",
            CopyKernel::Neon => "neon",
            CopyKernel::Portable => "portable",
        }
    }

    /// What the kernel needs, in words.
    pub const fn needs(self) -> &'static str {
        match self {
            CopyKernel::Avx512Stream | CopyKernel::Avx512 => "x86_64 avx512f",
            CopyKernel::Avx2Stream | CopyKernel::Avx2 => "x86_64 avx2",
            CopyKernel::Sse2Stream | CopyKernel::Sse2 | CopyKernel::Movnti => "x86_64 sse2",
            CopyKernel::NeonStream | CopyKernel::Neon => "aarch64",
            CopyKernel::Portable => "nothing",
        }
    }

    /// Whether its stores bypass the caches.
    pub const fn is_streaming(self) -> bool {
        matches!(
            self,
            CopyKernel::Avx512Stream
                | CopyKernel::Avx2Stream
                | CopyKernel::Sse2Stream
                | CopyKernel::Movnti
                | CopyKernel::NeonStream
        )
    }

    /// Whether this CPU (as `PREZERO_CPU` leaves it) can run it.
    pub fn is_available(self) -> bool {
        Streamer::new(self).is_ok()
    }
}

impl std::str::FromStr for CopyKernel {
    type Err = Error;

    fn from_str(s: &str) -> Result<CopyKernel> {
        CopyKernel::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                let names: Vec<_> = CopyKernel::ALL.iter().map(|k| k.name()).collect();
                Error::invalid(format!(
                    "unknown template kernel \"{s}\" (known: {})",
                    names.join(", ")
                ))
            })
    }
}

/// The store units of the register form, widest first: a fill uses the first
/// that divides the record (and, streaming, the destination's alignment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UnitKind {
    #[cfg(target_arch = "x86_64")]
    Zmm,
    #[cfg(target_arch = "x86_64")]
    Ymm,
    #[cfg(target_arch = "x86_64")]
    Xmm,
    #[cfg(target_arch = "aarch64")]
    QPair,
    #[cfg(target_arch = "aarch64")]
    XPair,
    Word,
}

impl UnitKind {
    const fn bytes(self) -> usize {
        match self {
            #[cfg(target_arch = "x86_64")]
            UnitKind::Zmm => 64,
            #[cfg(target_arch = "x86_64")]
            UnitKind::Ymm => 32,
            #[cfg(target_arch = "x86_64")]
            UnitKind::Xmm => 16,
            #[cfg(target_arch = "aarch64")]
            UnitKind::QPair => 32,
            #[cfg(target_arch = "aarch64")]
            UnitKind::XPair => 16,
            UnitKind::Word => 8,
        }
    }
}

type CopyFn = unsafe fn(*mut u8, *const u8, usize);

/// A type the template functions may fill: plain old data.
///
/// # Safety
/// The type has no padding bytes and every bit pattern of its size is a valid
/// value (no references, `bool`, `char`, enums or `NonZero` fields): its bytes
/// are read as integers, and `template_fill_words` stores arbitrary `u64`s
/// into it. A `#[repr(C)]` struct of integers whose fields leave no gap (size
/// equals the sum of the fields' sizes) qualifies.
pub unsafe trait Record: Copy + 'static {}

macro_rules! records {
    ($($t:ty)*) => {$(
        // SAFETY: integers and floats have no padding and no invalid bit patterns.
        unsafe impl Record for $t {}
    )*};
}
records!(u8 u16 u32 u64 u128 usize i8 i16 i32 i64 i128 isize f32 f64);

// SAFETY: an array of padding-free, any-bit-pattern elements is one too.
unsafe impl<T: Record, const N: usize> Record for [T; N] {}

/// A template kernel this CPU supports (the only way to get one is
/// [`Streamer::new`] or one of the `auto` constructors, which check). All
/// template operations hang off it.
#[derive(Clone, Copy)]
pub struct Streamer {
    kernel: CopyKernel,
    copy: CopyFn,
    /// The register form's units, widest first; the CPU runs each one.
    units: &'static [UnitKind],
}

impl std::fmt::Debug for Streamer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Streamer").field(&self.kernel).finish()
    }
}

impl Streamer {
    /// The streaming kernel the template functions use for large fills: the
    /// profile's choice (`prezero calibrate`) or the built-in one.
    pub fn auto() -> Streamer {
        choice().stream
    }

    /// The temporal kernel the template functions use for fills smaller than
    /// [`stream_from`].
    pub fn auto_temporal() -> Streamer {
        choice().temporal
    }

    /// The kernel the template functions use for a fill of `bytes` bytes:
    /// temporal below [`stream_from`], streaming from it.
    pub fn for_bytes(bytes: usize) -> Streamer {
        let c = choice();
        if bytes >= c.stream_from {
            c.stream
        } else {
            c.temporal
        }
    }

    /// A named kernel; an error if the CPU lacks it.
    pub fn new(kernel: CopyKernel) -> Result<Streamer> {
        Streamer::new_with(kernel, &crate::cpu::cpu().features)
    }

    /// A named kernel on a CPU with features `f`.
    fn new_with(kernel: CopyKernel, f: &crate::cpu::Features) -> Result<Streamer> {
        #[cfg(target_arch = "aarch64")]
        use UnitKind::{QPair, XPair};
        #[cfg(target_arch = "x86_64")]
        use UnitKind::{Word, Xmm, Ymm, Zmm};
        let _ = f;
        let found: Option<(CopyFn, &'static [UnitKind])> = match kernel {
            #[cfg(target_arch = "x86_64")]
            CopyKernel::Avx512Stream | CopyKernel::Avx512 if f.avx512f => {
                let copy: CopyFn = if kernel.is_streaming() {
                    x86_64::copy_avx512
                } else {
                    portable::copy
                };
                // The 32-byte unit needs AVX2 too, which a mask may hide.
                let units: &'static [UnitKind] = if f.avx2 {
                    &[Zmm, Ymm, Xmm, Word]
                } else {
                    &[Zmm, Xmm, Word]
                };
                Some((copy, units))
            }
            #[cfg(target_arch = "x86_64")]
            CopyKernel::Avx2Stream if f.avx2 => Some((x86_64::copy_avx2, &[Ymm, Xmm, Word])),
            #[cfg(target_arch = "x86_64")]
            CopyKernel::Avx2 if f.avx2 => Some((portable::copy, &[Ymm, Xmm, Word])),
            #[cfg(target_arch = "x86_64")]
            CopyKernel::Sse2Stream if f.sse2 => Some((x86_64::copy_sse2, &[Xmm, Word])),
            #[cfg(target_arch = "x86_64")]
            CopyKernel::Sse2 if f.sse2 => Some((portable::copy, &[Xmm, Word])),
            #[cfg(target_arch = "x86_64")]
            CopyKernel::Movnti if f.sse2 => Some((x86_64::copy_movnti, &[Word])),
            #[cfg(target_arch = "aarch64")]
            CopyKernel::NeonStream => Some((aarch64::copy_stnp, &[QPair, XPair])),
            #[cfg(target_arch = "aarch64")]
            CopyKernel::Neon => Some((portable::copy, &[QPair, XPair, UnitKind::Word])),
            CopyKernel::Portable => Some((portable::copy, &[UnitKind::Word])),
            _ => None,
        };
        let (copy, units) = found.ok_or(Error::Unsupported {
            kernel: kernel.name(),
            needs: kernel.needs(),
        })?;
        Ok(Streamer {
            kernel,
            copy,
            units,
        })
    }

    /// The kernel behind this streamer.
    pub fn kernel(&self) -> CopyKernel {
        self.kernel
    }

    /// Whether the stores bypass the caches (and so need a [`drain`]).
    fn streams(&self) -> bool {
        self.kernel.is_streaming()
    }

    /// Copies `src` into `dst` (same length, else an error) with streaming
    /// stores, then drains.
    pub fn copy(&self, dst: &mut [u8], src: &[u8]) -> Result<()> {
        self.copy_nodrain(dst, src)?;
        drain();
        Ok(())
    }

    /// As [`Streamer::copy`] without the final drain; call [`drain`] before
    /// publishing the data.
    pub fn copy_nodrain(&self, dst: &mut [u8], src: &[u8]) -> Result<()> {
        if dst.len() != src.len() {
            return Err(Error::invalid(format!(
                "stream_copy: destination has {} bytes, source {}",
                dst.len(),
                src.len()
            )));
        }
        // SAFETY: both slices are valid for their (equal) lengths, and a `&mut`
        // cannot overlap a `&`; the CPU supports the kernel (type invariant).
        unsafe { (self.copy)(dst.as_mut_ptr(), src.as_ptr(), dst.len()) };
        Ok(())
    }

    /// Streams one record: the bytes of `rec` into `dst`.
    #[inline(always)]
    fn put<T: Record>(&self, dst: &mut T, rec: &T) {
        // SAFETY: `dst` and `rec` are valid for size_of::<T>() bytes and distinct.
        unsafe {
            (self.copy)(
                (dst as *mut T).cast(),
                (rec as *const T).cast(),
                size_of::<T>(),
            )
        }
    }

    /// See [`template_fill`].
    pub fn fill<T: Record>(
        &self,
        dst: &mut [T],
        template: &T,
        mut update: impl FnMut(usize, &mut T),
    ) {
        let _drain = DrainOnExit(self.streams());
        let mut w = *template;
        for (i, d) in dst.iter_mut().enumerate() {
            update(i, &mut w);
            self.put(d, &w);
        }
    }

    /// See [`template_fill_grouped`].
    pub fn fill_grouped<T: Record>(
        &self,
        dst: &mut [T],
        group_len: usize,
        head: &T,
        tail: &T,
        mut update: impl FnMut(usize, bool, &mut T),
    ) -> Result<()> {
        if group_len == 0 {
            return Err(Error::invalid(
                "template_fill_grouped: group_len must be at least 1",
            ));
        }
        let _drain = DrainOnExit(self.streams());
        let (mut h, mut t) = (*head, *tail);
        for (i, d) in dst.iter_mut().enumerate() {
            let is_head = i % group_len == 0;
            let w = if is_head { &mut h } else { &mut t };
            update(i, is_head, w);
            self.put(d, w);
        }
        Ok(())
    }

    /// [`Streamer::fill_grouped`] for records whose size is known only at run
    /// time (the C ABI): `dst` holds `dst.len() / head.len()` records of
    /// `head.len()` bytes. Errors if the templates are empty, differ in length,
    /// or `dst` is not a whole number of records, or `group_len == 0`.
    pub fn fill_grouped_bytes(
        &self,
        dst: &mut [u8],
        group_len: usize,
        head: &[u8],
        tail: &[u8],
        mut update: impl FnMut(usize, bool, &mut [u8]),
    ) -> Result<()> {
        let size = head.len();
        if size == 0 || tail.len() != size || !dst.len().is_multiple_of(size) || group_len == 0 {
            return Err(Error::invalid(format!(
                "template fill: records of {size} and {} bytes into {} bytes in groups of {group_len}",
                tail.len(),
                dst.len()
            )));
        }
        let _drain = DrainOnExit(self.streams());
        let (mut h, mut t) = (head.to_vec(), tail.to_vec());
        for (i, d) in dst.chunks_exact_mut(size).enumerate() {
            let is_head = i % group_len == 0;
            let w = if is_head { &mut h } else { &mut t };
            update(i, is_head, w);
            // SAFETY: `d` and `w` are distinct buffers of `size` bytes.
            unsafe { (self.copy)(d.as_mut_ptr(), w.as_ptr(), size) };
        }
        Ok(())
    }

    /// See [`template_fill_words`].
    pub fn fill_words<T: Record, const K: usize>(
        &self,
        dst: &mut [T],
        template: &T,
        offsets: [usize; K],
        mut produce: impl FnMut(usize) -> [u64; K],
    ) -> Result<()> {
        self.fill_words_grouped(dst, usize::MAX, template, template, offsets, |i, _| {
            produce(i)
        })
    }

    /// See [`template_fill_words_grouped`].
    pub fn fill_words_grouped<T: Record, const K: usize>(
        &self,
        dst: &mut [T],
        group_len: usize,
        head: &T,
        tail: &T,
        offsets: [usize; K],
        mut produce: impl FnMut(usize, bool) -> [u64; K],
    ) -> Result<()> {
        let size = size_of::<T>();
        check_words(size, group_len, &offsets)?;
        let job = words::Job {
            dst: dst.as_mut_ptr().cast(),
            n: dst.len(),
            size,
            head: (head as *const T).cast(),
            tail: (tail as *const T).cast(),
            group_len,
            offsets: &offsets,
        };
        let _drain = DrainOnExit(self.streams());
        // SAFETY: dst holds n records of `size` bytes, the templates are
        // `size` bytes, and check_words passed.
        if unsafe { self.try_units(&job, &mut produce) } {
            return Ok(());
        }
        // Unaligned words or records: a working copy per template, streamed
        // (as bytes of T, padding included, never as a &[u8]).
        let (mut h, mut t) = (*head, *tail);
        for (i, d) in dst.iter_mut().enumerate() {
            let is_head = i % group_len == 0;
            let w = if is_head { &mut h } else { &mut t };
            for (&o, v) in offsets.iter().zip(produce(i, is_head)) {
                // SAFETY: o + 8 <= size_of::<T>() was checked; unaligned write.
                unsafe {
                    (w as *mut T)
                        .cast::<u8>()
                        .add(o)
                        .cast::<u64>()
                        .write_unaligned(v)
                };
            }
            self.put(d, w);
        }
        Ok(())
    }

    /// [`Streamer::fill_words_grouped`] for records whose size is known only at
    /// run time (the C ABI): `dst` holds `dst.len() / head.len()` records of
    /// `head.len()` bytes. Errors if the templates are empty or differ in
    /// length, `dst` is not a whole number of records, `group_len == 0`, or a
    /// word does not fit in a record.
    pub fn fill_words_grouped_bytes<const K: usize>(
        &self,
        dst: &mut [u8],
        group_len: usize,
        head: &[u8],
        tail: &[u8],
        offsets: [usize; K],
        mut produce: impl FnMut(usize, bool) -> [u64; K],
    ) -> Result<()> {
        let size = head.len();
        if size == 0 || tail.len() != size || !dst.len().is_multiple_of(size) {
            return Err(Error::invalid(format!(
                "template_fill_words: records of {size} and {} bytes into {} bytes",
                tail.len(),
                dst.len()
            )));
        }
        check_words(size, group_len, &offsets)?;
        let job = words::Job {
            dst: dst.as_mut_ptr(),
            n: dst.len() / size,
            size,
            head: head.as_ptr(),
            tail: tail.as_ptr(),
            group_len,
            offsets: &offsets,
        };
        let _drain = DrainOnExit(self.streams());
        // SAFETY: dst holds n records of `size` bytes, the templates are
        // `size` bytes, and check_words passed.
        if unsafe { self.try_units(&job, &mut produce) } {
            return Ok(());
        }
        // Unaligned words or records: a working copy per template, streamed.
        let (mut h, mut t) = (head.to_vec(), tail.to_vec());
        for (i, d) in dst.chunks_exact_mut(size).enumerate() {
            let is_head = i % group_len == 0;
            let w = if is_head { &mut h } else { &mut t };
            for (&o, v) in offsets.iter().zip(produce(i, is_head)) {
                w[o..o + 8].copy_from_slice(&v.to_ne_bytes());
            }
            // SAFETY: `d` and `w` are distinct buffers of `size` bytes.
            unsafe { (self.copy)(d.as_mut_ptr(), w.as_ptr(), size) };
        }
        Ok(())
    }
}

/// A words fill's arguments make sense: `group_len >= 1` and every word fits.
fn check_words(size: usize, group_len: usize, offsets: &[usize]) -> Result<()> {
    if group_len == 0 {
        return Err(Error::invalid(
            "template_fill_words: group_len must be at least 1",
        ));
    }
    if let Some(&bad) = offsets
        .iter()
        .find(|&&o| o.checked_add(8).is_none_or(|end| end > size))
    {
        return Err(Error::invalid(format!(
            "template_fill_words: a u64 at offset {bad} does not fit in a {size}-byte record"
        )));
    }
    Ok(())
}

impl Streamer {
    /// Runs `job` in the register form if one of this streamer's units fits
    /// it; false (nothing written) if none does.
    ///
    /// # Safety
    /// `dst` is writable for `n * size` bytes, `head` and `tail` readable for
    /// `size`, and `check_words(size, group_len, offsets)` passed.
    unsafe fn try_units<const K: usize>(
        &self,
        job: &words::Job<'_, K>,
        produce: &mut impl FnMut(usize, bool) -> [u64; K],
    ) -> bool {
        let stream = self.streams();
        let Some(&unit) = self
            .units
            .iter()
            .find(|u| words::fits(job, u.bytes(), stream))
        else {
            return false;
        };
        // SAFETY: the unit fits the job and is one of this streamer's, whose
        // construction checked the CPU runs it; the rest is the caller's.
        unsafe { self.fill_units(unit, job, produce) };
        true
    }

    /// Runs `job` in the register form with `unit`.
    ///
    /// # Safety
    /// As [`words::fill`], with `unit` one of `self.units`.
    unsafe fn fill_units<const K: usize>(
        &self,
        unit: UnitKind,
        job: &words::Job<'_, K>,
        produce: &mut impl FnMut(usize, bool) -> [u64; K],
    ) {
        macro_rules! run {
            ($($f:ident)::+) => {
                if self.streams() {
                    $($f)::+::<true, K>(job, produce)
                } else {
                    $($f)::+::<false, K>(job, produce)
                }
            };
        }
        // SAFETY: forwarded from the caller; the unit's instruction set was
        // checked when the streamer was built.
        unsafe {
            match unit {
                #[cfg(target_arch = "x86_64")]
                UnitKind::Zmm => run!(x86_64::fill_zmm),
                #[cfg(target_arch = "x86_64")]
                UnitKind::Ymm => run!(x86_64::fill_ymm),
                #[cfg(target_arch = "x86_64")]
                UnitKind::Xmm => run!(x86_64::fill_xmm),
                #[cfg(target_arch = "aarch64")]
                UnitKind::QPair => run!(aarch64::fill_qpair),
                #[cfg(target_arch = "aarch64")]
                UnitKind::XPair => run!(aarch64::fill_xpair),
                // On x86_64 `movnti` streams words; elsewhere only temporal
                // kernels list this unit.
                UnitKind::Word if self.streams() => {
                    words::fill::<portable::Word, true, K>(job, produce)
                }
                UnitKind::Word => words::fill::<portable::Word, false, K>(job, produce),
            }
        }
    }
}

/// Drains on every exit, unwinding included, so a panicking `update` leaves the
/// records already written complete and ordered.
struct DrainOnExit(bool);

impl Drop for DrainOnExit {
    fn drop(&mut self) {
        if self.0 {
            drain();
        }
    }
}

/// Orders every streaming store issued so far before any later store (`sfence`
/// on x86_64; elsewhere a release fence, `dmb ish` on aarch64, which orders
/// `stnp` like any store).
#[inline]
pub fn drain() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SFENCE has no preconditions and SSE is part of x86_64.
    unsafe {
        core::arch::x86_64::_mm_sfence()
    };
    #[cfg(not(target_arch = "x86_64"))]
    std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
}

/// Copies `src` into `dst` (equal lengths) with the best streaming stores, then
/// drains: the data is globally visible and ordered before later stores.
pub fn stream_copy(dst: &mut [u8], src: &[u8]) -> Result<()> {
    Streamer::auto().copy(dst, src)
}

/// As [`stream_copy`] without the drain: batch many, then call [`drain`].
pub fn stream_copy_nodrain(dst: &mut [u8], src: &[u8]) -> Result<()> {
    Streamer::auto().copy_nodrain(dst, src)
}

/// For each index `i` in order: `update(i, &mut working)` (the working copy
/// starts as `template` and keeps its changes), then `working` is streamed into
/// `dst[i]`; one drain at the end.
///
/// If `update` panics at index `i`, `dst[..i]` hold complete records (drained),
/// `dst[i..]` are untouched: no record is ever torn.
pub fn template_fill<T: Record>(dst: &mut [T], template: &T, update: impl FnMut(usize, &mut T)) {
    Streamer::for_bytes(size_of_val(dst)).fill(dst, template, update)
}

/// Seed 004's compound pages: records come in groups of `group_len`; the first of
/// each group from (a working copy of) `head`, the others from `tail`, each
/// refreshed by `update(i, is_head, &mut working)`. A last group shorter than
/// `group_len` is fine. `group_len == 0` is an error.
pub fn template_fill_grouped<T: Record>(
    dst: &mut [T],
    group_len: usize,
    head: &T,
    tail: &T,
    update: impl FnMut(usize, bool, &mut T),
) -> Result<()> {
    Streamer::for_bytes(size_of_val(dst)).fill_grouped(dst, group_len, head, tail, update)
}

/// The fast form: the `K` varying `u64` fields at byte `offsets` of the record
/// are produced per index by `produce(i)`; everything else comes from
/// `template`. Errors if an offset does not fit in `T`. With 8-aligned offsets
/// and records a multiple of 8 bytes (16 on aarch64), at an 8-aligned `dst`,
/// the template stays in registers, in the widest unit that divides the record
/// and (streaming) the destination's alignment; otherwise it works like
/// [`template_fill`]. Of two words at one offset, the later wins.
pub fn template_fill_words<T: Record, const K: usize>(
    dst: &mut [T],
    template: &T,
    offsets: [usize; K],
    produce: impl FnMut(usize) -> [u64; K],
) -> Result<()> {
    Streamer::for_bytes(size_of_val(dst)).fill_words(dst, template, offsets, produce)
}

/// [`template_fill_words`] with head/tail templates, as [`template_fill_grouped`].
pub fn template_fill_words_grouped<T: Record, const K: usize>(
    dst: &mut [T],
    group_len: usize,
    head: &T,
    tail: &T,
    offsets: [usize; K],
    produce: impl FnMut(usize, bool) -> [u64; K],
) -> Result<()> {
    Streamer::for_bytes(size_of_val(dst))
        .fill_words_grouped(dst, group_len, head, tail, offsets, produce)
}
