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
//!   the fixed part never round-trips through memory (with AVX-512 it is inserted
//!   into the vector register that is streamed), so the fill runs at the speed
//!   of the streaming stores themselves.
//!
//! # Ordering
//! Functions without `_nodrain` end with [`drain`]: the records are globally
//! visible and ordered before any later store. Streaming stores are weakly
//! ordered until drained, so callers batching `_nodrain` copies must call
//! [`drain`] before publishing the data (e.g. before a release store).
//!
//! # Records
//! `T: Copy` is copied byte for byte, padding included: give records without
//! padding (or with padding you do not care about).

use std::mem::size_of;
use std::sync::OnceLock;

use crate::error::{Error, Result};

mod portable;
#[cfg(target_arch = "x86_64")]
mod x86_64;

/// A streaming-copy kernel. Each has the contract
/// `unsafe fn(dst: *mut u8, src: *const u8, len: usize)` (no overlap, any
/// alignment and length), without the drain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CopyKernel {
    /// AVX-512 non-temporal 64-byte stores (x86_64).
    Avx512Stream,
    /// AVX2 non-temporal 32-byte stores (x86_64).
    Avx2Stream,
    /// SSE2 `movnti` 8-byte non-temporal stores (x86_64).
    Movnti,
    /// `ptr::copy_nonoverlapping`: ordinary stores, everywhere.
    Portable,
}

impl CopyKernel {
    /// Every copy kernel, best first.
    pub const ALL: [CopyKernel; 4] = [
        CopyKernel::Avx512Stream,
        CopyKernel::Avx2Stream,
        CopyKernel::Movnti,
        CopyKernel::Portable,
    ];

    /// "avx512-nt", "avx2-nt", "movnti" or "portable".
    pub const fn name(self) -> &'static str {
        match self {
            CopyKernel::Avx512Stream => "avx512-nt",
            CopyKernel::Avx2Stream => "avx2-nt",
            CopyKernel::Movnti => "movnti",
            CopyKernel::Portable => "portable",
        }
    }

    /// Whether this CPU can run it.
    pub fn is_available(self) -> bool {
        Streamer::new(self).is_ok()
    }
}

type CopyFn = unsafe fn(*mut u8, *const u8, usize);

/// A copy kernel this CPU supports (the only way to get one is [`Streamer::new`]
/// or [`Streamer::auto`], which check). All template operations hang off it.
#[derive(Clone, Copy)]
pub struct Streamer {
    kernel: CopyKernel,
    copy: CopyFn,
}

impl std::fmt::Debug for Streamer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Streamer").field(&self.kernel).finish()
    }
}

impl Streamer {
    /// The best kernel this CPU has, chosen once per process.
    pub fn auto() -> Streamer {
        static AUTO: OnceLock<Streamer> = OnceLock::new();
        *AUTO.get_or_init(|| {
            CopyKernel::ALL
                .into_iter()
                .find_map(|k| Streamer::new(k).ok())
                .expect("the portable copy kernel is always available")
        })
    }

    /// A named kernel; an error if the CPU lacks it.
    pub fn new(kernel: CopyKernel) -> Result<Streamer> {
        let copy: Option<CopyFn> = match kernel {
            #[cfg(target_arch = "x86_64")]
            CopyKernel::Avx512Stream if crate::cpu::cpu().features.avx512f => {
                Some(x86_64::copy_avx512)
            }
            #[cfg(target_arch = "x86_64")]
            CopyKernel::Avx2Stream if crate::cpu::cpu().features.avx2 => Some(x86_64::copy_avx2),
            #[cfg(target_arch = "x86_64")]
            CopyKernel::Movnti if crate::cpu::cpu().features.sse2 => Some(x86_64::copy_movnti),
            CopyKernel::Portable => Some(portable::copy),
            _ => None,
        };
        let copy = copy.ok_or(Error::Unsupported {
            kernel: kernel.name(),
            needs: match kernel {
                CopyKernel::Avx512Stream => "x86_64 avx512f",
                CopyKernel::Avx2Stream => "x86_64 avx2",
                CopyKernel::Movnti => "x86_64 sse2",
                CopyKernel::Portable => "nothing",
            },
        })?;
        Ok(Streamer { kernel, copy })
    }

    /// The kernel behind this streamer.
    pub fn kernel(&self) -> CopyKernel {
        self.kernel
    }

    /// Whether the stores bypass the caches (and so need a [`drain`]).
    fn streams(&self) -> bool {
        self.kernel != CopyKernel::Portable
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
    fn put<T: Copy>(&self, dst: &mut T, rec: &T) {
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
    pub fn fill<T: Copy>(
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
    pub fn fill_grouped<T: Copy>(
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
    pub fn fill_words<T: Copy, const K: usize>(
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
    pub fn fill_words_grouped<T: Copy, const K: usize>(
        &self,
        dst: &mut [T],
        group_len: usize,
        head: &T,
        tail: &T,
        offsets: [usize; K],
        mut produce: impl FnMut(usize, bool) -> [u64; K],
    ) -> Result<()> {
        if group_len == 0 {
            return Err(Error::invalid(
                "template_fill_words: group_len must be at least 1",
            ));
        }
        let size = size_of::<T>();
        if let Some(&bad) = offsets
            .iter()
            .find(|&&o| o.checked_add(8).is_none_or(|end| end > size))
        {
            return Err(Error::invalid(format!(
                "template_fill_words: a u64 at offset {bad} does not fit in a {size}-byte record"
            )));
        }
        #[cfg(target_arch = "x86_64")]
        if self.kernel == CopyKernel::Avx512Stream
            && size > 0
            && size.is_multiple_of(64)
            && (dst.as_ptr() as usize).is_multiple_of(64)
            && offsets.iter().all(|o| o.is_multiple_of(8))
        {
            let _drain = DrainOnExit(true);
            // SAFETY: the streamer proves AVX-512F; dst is 64-byte aligned and
            // holds dst.len() records of `size` bytes, a multiple of 64; head and
            // tail are readable for `size` bytes; every offset is 8-aligned and in range.
            unsafe {
                x86_64::fill_words_avx512(
                    dst.as_mut_ptr().cast(),
                    dst.len(),
                    size,
                    (head as *const T).cast(),
                    (tail as *const T).cast(),
                    group_len,
                    &offsets,
                    &mut produce,
                )
            };
            return Ok(());
        }
        let _drain = DrainOnExit(self.streams());
        let (mut h, mut t) = (*head, *tail);
        for (i, d) in dst.iter_mut().enumerate() {
            let is_head = i % group_len == 0;
            let w = if is_head { &mut h } else { &mut t };
            let vals = produce(i, is_head);
            for (&o, v) in offsets.iter().zip(vals) {
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
/// on x86_64; a release fence elsewhere, where prezero streams nothing).
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
pub fn template_fill<T: Copy>(dst: &mut [T], template: &T, update: impl FnMut(usize, &mut T)) {
    Streamer::auto().fill(dst, template, update)
}

/// Seed 004's compound pages: records come in groups of `group_len`; the first of
/// each group from (a working copy of) `head`, the others from `tail`, each
/// refreshed by `update(i, is_head, &mut working)`. A last group shorter than
/// `group_len` is fine. `group_len == 0` is an error.
pub fn template_fill_grouped<T: Copy>(
    dst: &mut [T],
    group_len: usize,
    head: &T,
    tail: &T,
    update: impl FnMut(usize, bool, &mut T),
) -> Result<()> {
    Streamer::auto().fill_grouped(dst, group_len, head, tail, update)
}

/// The fast form: the `K` varying `u64` fields at byte `offsets` of the record
/// are produced per index by `produce(i)`; everything else comes from
/// `template`. Errors if an offset does not fit in `T`. On AVX-512 with 64-byte
/// aligned `dst`, records a multiple of 64 bytes and 8-aligned offsets, the
/// template stays in registers; otherwise it works like [`template_fill`].
pub fn template_fill_words<T: Copy, const K: usize>(
    dst: &mut [T],
    template: &T,
    offsets: [usize; K],
    produce: impl FnMut(usize) -> [u64; K],
) -> Result<()> {
    Streamer::auto().fill_words(dst, template, offsets, produce)
}

/// [`template_fill_words`] with head/tail templates, as [`template_fill_grouped`].
pub fn template_fill_words_grouped<T: Copy, const K: usize>(
    dst: &mut [T],
    group_len: usize,
    head: &T,
    tail: &T,
    offsets: [usize; K],
    produce: impl FnMut(usize, bool) -> [u64; K],
) -> Result<()> {
    Streamer::auto().fill_words_grouped(dst, group_len, head, tail, offsets, produce)
}
